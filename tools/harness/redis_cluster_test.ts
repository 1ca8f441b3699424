// The cluster itself (formed, a failover promoting a replica) is checked on real redis-servers
// in tests/cluster/cluster_harness_test.ts; these are the parts that read what the nodes say.
import assert from "node:assert/strict";
import {
  clusterNodeConfig,
  parseClusterNodes,
  parseInfo,
  slotLayout,
  slotOwner,
} from "./redis_cluster.ts";

const A = "a".repeat(40);
const B = "b".repeat(40);
const C = "c".repeat(40);
const D = "d".repeat(40);

// As redis-server 7.0 prints it: the viewer, a master serving two ranges and a single slot, a
// replica, and a master that failed over and serves nothing, plus a slot being imported.
const NODES = [
  `${A} 127.0.0.1:40001@50001 myself,master - 0 0 1 connected 0-5460`,
  `${B} 127.0.0.1:40002@50002 master - 0 1700000000000 2 connected 5461-10921 10922 [10923-<-${A}]`,
  `${C} 127.0.0.1:40003@50003,host-c slave ${A} 0 1700000000000 1 connected`,
  `${D} 127.0.0.1:40004@50004 master,fail - 1700000000000 1700000000000 3 disconnected`,
  "",
].join("\n");

Deno.test("parseClusterNodes() reads ids, ports, roles, masters, failures and slot ranges", () => {
  assert.deepEqual(parseClusterNodes(NODES), [
    {
      id: A,
      port: 40001,
      role: "master",
      masterId: undefined,
      failing: false,
      myself: true,
      slots: [[0, 5460]],
    },
    {
      id: B,
      port: 40002,
      role: "master",
      masterId: undefined,
      failing: false,
      myself: false,
      slots: [[5461, 10921], [10922, 10922]],
    },
    { id: C, port: 40003, role: "replica", masterId: A, failing: false, myself: false, slots: [] },
    {
      id: D,
      port: 40004,
      role: "master",
      masterId: undefined,
      failing: true,
      myself: false,
      slots: [],
    },
  ]);
});

Deno.test("parseClusterNodes() counts a suspected failure (fail?) as failing", () => {
  const [node] = parseClusterNodes(`${C} 127.0.0.1:40003@50003 slave,fail? ${A} 0 0 1 connected`);
  assert.equal(node?.failing, true);
});

Deno.test("parseClusterNodes() throws a TypeError naming a line it cannot read", () => {
  assert.throws(() => parseClusterNodes("ERR This instance has cluster support disabled"), {
    name: "TypeError",
    message: /current value is ERR This instance/,
  });
});

Deno.test("parseInfo() reads field:value lines and skips headings and blanks", () => {
  const info = parseInfo(
    "# Replication\r\nrole:slave\r\nmaster_link_status:up\r\n\r\ncluster_state:ok\r\n",
  );
  assert.deepEqual([...info], [
    ["role", "slave"],
    ["master_link_status", "up"],
    ["cluster_state", "ok"],
  ]);
});

Deno.test("slotOwner() finds the master whose range holds the slot, ends included", () => {
  const view = parseClusterNodes(NODES);
  assert.equal(slotOwner(view, 0), 40001);
  assert.equal(slotOwner(view, 5460), 40001);
  assert.equal(slotOwner(view, 5461), 40002);
  assert.equal(slotOwner(view, 10922), 40002);
  assert.equal(slotOwner(view, 10923), undefined, "a slot only being imported has no owner yet");
});

Deno.test("slotLayout() is the same for two views that differ only in flags and order", () => {
  const view = parseClusterNodes(NODES);
  const reordered = parseClusterNodes(
    NODES.split("\n").reverse().join("\n").replace("myself,", ""),
  );
  assert.equal(slotLayout(view), slotLayout(reordered));
  assert.equal(slotLayout(view), "40001:0-5460 40002:5461-10921,10922-10922");
  assert.notEqual(slotLayout(view), slotLayout(view.slice(1)));
});

Deno.test("clusterNodeConfig() includes the base config first so the cluster settings win", () => {
  const config = clusterNodeConfig({
    baseConfig: "/repo/redis/redis.conf",
    busPort: 50001,
    nodeTimeoutMs: 1_000,
  });
  const lines = config.split("\n");
  assert.equal(lines[0], "include /repo/redis/redis.conf");
  for (
    const line of [
      "cluster-enabled yes",
      "cluster-config-file nodes.conf",
      "cluster-port 50001",
      "cluster-node-timeout 1000",
      "cluster-replica-validity-factor 0",
    ]
  ) assert.ok(lines.includes(line), `${line} missing from:\n${config}`);
  assert.ok(
    !clusterNodeConfig({ baseConfig: undefined, busPort: 1, nodeTimeoutMs: 1 })
      .includes("include"),
  );
});

Deno.test("clusterNodeConfig() with a password makes clients and replicas alike log in", () => {
  const lines = clusterNodeConfig({
    baseConfig: undefined,
    busPort: 1,
    nodeTimeoutMs: 1,
    password: "s3cret",
  }).split("\n");
  assert.ok(lines.includes("requirepass s3cret"));
  assert.ok(lines.includes("masterauth s3cret"));
  assert.ok(
    !clusterNodeConfig({ baseConfig: undefined, busPort: 1, nodeTimeoutMs: 1 })
      .includes("requirepass"),
  );
});

Deno.test("clusterNodeConfig() with TLS keeps the plain port and puts the bus and replication on TLS", () => {
  const lines = clusterNodeConfig({
    baseConfig: undefined,
    busPort: 1,
    nodeTimeoutMs: 1,
    tlsPort: 7001,
    tls: { certFile: "/c/server.pem", keyFile: "/c/server.key", caFile: "/c/ca.pem" },
  }).split("\n");
  for (
    const line of [
      "tls-port 7001",
      "tls-cert-file /c/server.pem",
      "tls-key-file /c/server.key",
      "tls-ca-cert-file /c/ca.pem",
      "tls-cluster yes",
      "tls-replication yes",
    ]
  ) assert.ok(lines.includes(line), line);
  assert.ok(!lines.some((line) => line.startsWith("port ")), "the plain port is the harness's");
});
