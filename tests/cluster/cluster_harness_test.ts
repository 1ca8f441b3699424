/**
 * The Redis Cluster harness (`tools/harness/redis_cluster.ts`) on real redis-servers: it forms a
 * cluster of 3 masters and 3 replicas serving every slot, a write reaches the replica of the
 * master serving its key, and a SIGKILLed master is replaced by that replica, which still holds
 * the write, but not one made after it was made to fall behind (the window the failover tests
 * hold open); the old master comes back as the new master's replica, and a planned failover
 * (`CLUSTER FAILOVER`) hands it its slots back. The other cluster tests build on exactly this.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  CLUSTER_SLOTS,
  parseInfo,
  redisCli,
  redisCliSession,
  RedisCluster,
  slotOwner,
} from "@users-pipeline/harness/redis_cluster";
import { waitFor } from "@users-pipeline/harness/wait";

Deno.test({
  name:
    "RedisCluster forms 3 masters with a replica each, and a killed master's replica takes over",
  // The cluster's processes outlive the test's own steps; close() stops them all.
  sanitizeOps: false,
  sanitizeResources: false,
}, async () => {
  await using cluster = await RedisCluster.start();
  try {
    const view = await cluster.view();
    const masters = view.filter((node) => node.role === "master");
    assert.equal(masters.length, 3);
    assert.equal(view.filter((node) => node.role === "replica").length, 3);
    for (const master of masters) {
      assert.equal(
        view.filter((node) => node.masterId === master.id).length,
        1,
        `master ${master.port} has one replica`,
      );
    }
    const served = masters.flatMap((master) => master.slots)
      .reduce((sum, [from, to]) => sum + to - from + 1, 0);
    assert.equal(served, CLUSTER_SLOTS, "every slot is served");
    const info = parseInfo(await redisCli(cluster.nodes[0]!.port, "CLUSTER", "INFO"));
    assert.equal(info.get("cluster_state"), "ok");

    const key = `harness-${Deno.pid}`;
    const master = await cluster.masterOf(key);
    assert.equal(slotOwner(view, await cluster.keySlot(key)), master.port);
    const [replica] = await cluster.replicasOf(master);
    assert.ok(replica, `${master.name} has a replica`);
    assert.deepEqual(
      (await redisCliSession(master.port, [["SET", key, "kept"], ["WAIT", "1", "5000"]]))
        .trim().split("\n"),
      ["OK", "1"],
      "the replica acknowledged the write",
    );

    // Held open on purpose: a write the master makes after its replica fell behind is lost.
    const failover = cluster.killMaster(master, { replicaLagMs: 1_000 });
    await waitFor(
      "the replica to be cut off",
      async () =>
        parseInfo(await redisCli(master.port, "INFO", "replication")).get("connected_slaves") ===
          "0",
    );
    assert.deepEqual(
      (await redisCliSession(master.port, [["SET", `{${key}}:late`, "lost"], ["WAIT", "1", "100"]]))
        .trim().split("\n"),
      ["OK", "0"],
      "no replica holds the late write",
    );
    const { promoted, ms } = await failover;
    assert.equal(promoted, replica, "the killed master's replica took its place");
    assert.equal(master.server.process.running, false);
    assert.equal((await cluster.masterOf(key)).port, promoted.port);
    assert.equal((await redisCli(promoted.port, "GET", key)).trim(), "kept");
    assert.equal(
      (await redisCli(promoted.port, "EXISTS", `{${key}}:late`)).trim(),
      "0",
      "the write made while the replica lagged is lost",
    );

    await cluster.restart(master);
    assert.deepEqual(
      await cluster.replicasOf(promoted),
      [master],
      "the old master came back as the new master's replica",
    );
    assert.equal((await cluster.masters()).length, 3);

    // A planned failover hands the slots back, the write with them.
    const handedOver = await cluster.handOver(promoted);
    assert.equal(handedOver.promoted, master);
    assert.equal((await cluster.masterOf(key)).port, master.port);
    assert.equal((await redisCli(master.port, "GET", key)).trim(), "kept");
    assert.deepEqual(await cluster.replicasOf(master), [promoted]);
    console.log(`cluster harness: failover of ${master.name} took ${(ms / 1000).toFixed(1)} s`);
  } catch (error) {
    console.error(`--- the cluster's last output ---\n${cluster.output.tail(60)}`);
    throw error;
  }
  const dir = cluster.dir;
  await cluster.close();
  assert.equal(cluster.running.length, 0, "every node stopped");
  await assert.rejects(Deno.stat(dir), Deno.errors.NotFound, "the data dir is removed");
});
