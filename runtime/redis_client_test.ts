import assert from "node:assert/strict";
import { Cluster, Redis } from "ioredis";
import { EventLog } from "./event_log.ts";
import { closeRedis, createRedisClient, redisReady } from "./redis_client.ts";
import { ManualClock } from "./manual_clock.ts";

const STANDALONE = { REDIS_URL: "redis://127.0.0.1:1/3", REDIS_CLUSTER_NODES: "" };
const CLUSTER = { REDIS_URL: "redis://unused:1", REDIS_CLUSTER_NODES: "a:7000,b:7001" };

/** An EventLog whose records are kept as parsed objects. */
function capturingLog(): { log: EventLog; records: Record<string, unknown>[] } {
  const records: Record<string, unknown>[] = [];
  const log = new EventLog("test", { write: (line) => records.push(JSON.parse(line)) });
  return { log, records };
}

Deno.test("createRedisClient() makes a standalone client of REDIS_URL with the role's options", () => {
  const client = createRedisClient(STANDALONE, {
    role: { lazyConnect: true, commandTimeout: 123 },
  });
  assert.ok(client instanceof Redis);
  assert.equal(client.options.port, 1);
  assert.equal(client.options.db, 3);
  assert.equal(client.options.commandTimeout, 123);
  assert.equal(client.status, "wait");
  client.disconnect();
});

Deno.test("createRedisClient() makes a Cluster client of REDIS_CLUSTER_NODES, the role's options per node", () => {
  const client = createRedisClient(CLUSTER, {
    role: { lazyConnect: true, enableOfflineQueue: false, commandTimeout: 456 },
    unpipelined: ["queueRecover"],
  });
  assert.ok(client instanceof Cluster);
  assert.equal(client.options.lazyConnect, true, "lazyConnect is the cluster's own");
  assert.equal(client.options.enableOfflineQueue, false);
  assert.equal(client.options.redisOptions?.commandTimeout, 456);
  assert.deepEqual(client.options.autoPipeliningIgnoredCommands, ["queueRecover"]);
  assert.equal(client.status, "wait");
  client.disconnect();
});

Deno.test("createRedisClient() gives every node of a cluster the password and TLS, a standalone client too", () => {
  const ca = { path: "/ca.pem", pem: "-----BEGIN CERTIFICATE-----" };
  const cluster = createRedisClient(
    {
      ...CLUSTER,
      REDIS_CLUSTER_NODES: "rediss://a:7000",
      REDIS_PASSWORD: "pw",
      REDIS_TLS_CA_FILE: ca,
    },
    { role: { lazyConnect: true } },
  );
  assert.ok(cluster instanceof Cluster);
  assert.equal(cluster.options.redisOptions?.password, "pw");
  assert.deepEqual(cluster.options.redisOptions?.tls, { ca: ca.pem });
  assert.equal(typeof cluster.options.dnsLookup, "function");
  cluster.disconnect();
  const standalone = createRedisClient(
    { REDIS_URL: "rediss://app@127.0.0.1:1", REDIS_CLUSTER_NODES: "", REDIS_PASSWORD: "pw" },
    { role: { lazyConnect: true } },
  );
  assert.ok(standalone instanceof Redis);
  assert.deepEqual(
    [standalone.options.username, standalone.options.password, standalone.options.tls],
    ["app", "pw", {}],
  );
  standalone.disconnect();
});

Deno.test("createRedisClient() logs one redis_unavailable per outage and redis_ready as each ends", () => {
  const { log, records } = capturingLog();
  const client = createRedisClient(STANDALONE, {
    role: { lazyConnect: true },
    errors: { log, whileUnavailable: "answering 503" },
  });
  client.emit("ready");
  for (let i = 0; i < 3; i++) client.emit("error", new Error(`connect ECONNREFUSED ${i}`));
  client.emit("ready");
  client.emit("error", new Error("connect ECONNREFUSED again"));
  assert.deepEqual(
    records.map(({ level, event, msg }) => ({ level, event, msg })),
    [
      { level: "info", event: "redis_ready", msg: "redis is ready" },
      {
        level: "warn",
        event: "redis_unavailable",
        msg: "redis unavailable, answering 503: connect ECONNREFUSED 0",
      },
      { level: "info", event: "redis_ready", msg: "redis is back" },
      {
        level: "warn",
        event: "redis_unavailable",
        msg: "redis unavailable, answering 503: connect ECONNREFUSED again",
      },
    ],
  );
  client.disconnect();
});

Deno.test("createRedisClient() names the node's error that made a cluster unavailable", () => {
  const { log, records } = capturingLog();
  const client = createRedisClient(CLUSTER, {
    role: { lazyConnect: true },
    errors: { log, whileUnavailable: "answering 503" },
  });
  client.emit(
    "error",
    Object.assign(new Error("Failed to refresh slots cache."), {
      lastNodeError: new Error("NOAUTH Authentication required."),
    }),
  );
  assert.equal(
    records[0]?.msg,
    "redis unavailable, answering 503: Failed to refresh slots cache. " +
      "(NOAUTH Authentication required.)",
  );
  client.disconnect();
});

Deno.test("createRedisClient() with errors ignored takes every error without a word", () => {
  const client = createRedisClient(STANDALONE, { role: { lazyConnect: true }, errors: "ignore" });
  // Without a listener, emitting "error" would throw.
  assert.equal(client.emit("error", new Error("down")), true);
  client.disconnect();
});

Deno.test("redisReady() resolves true when the client gets ready, false at its timeout or abort", async () => {
  const client = createRedisClient(STANDALONE, { role: { lazyConnect: true } });
  const ready = redisReady(client);
  client.emit("ready");
  assert.equal(await ready, true);
  assert.equal(client.listenerCount("ready"), 0, "its listener is gone");

  const started = performance.now();
  assert.equal(await redisReady(client, { timeoutMs: 30 }), false);
  assert.ok(performance.now() - started >= 25);

  const stop = new AbortController();
  const stopped = redisReady(client, { signal: stop.signal });
  stop.abort();
  assert.equal(await stopped, false);
  assert.equal(await redisReady(client, { signal: stop.signal }), false, "already aborted");
  assert.equal(client.listenerCount("ready"), 0);
  client.disconnect();
});

Deno.test("redisReady() gives up at its timeout on the clock it is given, not before", async () => {
  const clock = new ManualClock();
  const client = createRedisClient(STANDALONE, { role: { lazyConnect: true } });
  const stop = new AbortController();
  let answer: boolean | undefined;
  const waiting = redisReady(client, { timeoutMs: 5_000, signal: stop.signal, clock })
    .then((ready) => answer = ready);
  await clock.tick(4_999);
  assert.equal(answer, undefined);
  await clock.tick(1);
  assert.equal(await waiting, false);
  assert.equal(client.listenerCount("ready"), 0);
  assert.equal(clock.pending, 0);
  client.disconnect();
});

Deno.test("closeRedis() gives up on a Redis that never answers within its bound and disconnects for good", async () => {
  // A frozen Redis: it accepts connections and never replies.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const connections: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of listener) connections.push(conn);
  })();
  const client = createRedisClient(
    { REDIS_URL: `redis://127.0.0.1:${listener.addr.port}`, REDIS_CLUSTER_NODES: "" },
    { role: { enableOfflineQueue: false, maxRetriesPerRequest: 0 }, errors: "ignore" },
  );
  try {
    await new Promise((resolve) => client.once("connect", resolve));
    const started = performance.now();
    const ended = new Promise((resolve) => client.once("end", resolve));
    await closeRedis(client, 200);
    assert.ok(performance.now() - started < 1_000, "bounded");
    // Ended for good once the socket closes: no reconnect follows.
    for (const conn of connections) conn.close();
    connections.length = 0;
    await ended;
    assert.equal(client.status, "end");
  } finally {
    listener.close();
    for (const conn of connections) conn.close();
    await accepting.catch(() => {});
  }
});
