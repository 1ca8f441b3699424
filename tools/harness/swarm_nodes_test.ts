import assert from "node:assert/strict";
import { deadRunPids, pickSubnet } from "./swarm_nodes.ts";

Deno.test("pickSubnet() takes the seed's /24 when no route overlaps it", () => {
  assert.deepEqual(pickSubnet(["default", "172.17.0.0/16", "192.0.2.0/24"], 41), 42);
});

Deno.test("pickSubnet() skips /24s that routes cover, wrapping past 254", () => {
  assert.deepEqual(pickSubnet(["10.213.254.0/24", "10.213.1.0/24"], 253), 2);
  assert.deepEqual(pickSubnet(["10.213.8.0/23"], 7), 10);
  assert.deepEqual(pickSubnet(["10.213.9.17"], 8), 10);
});

Deno.test("pickSubnet() throws when a route covers all of 10.213.0.0/16", () => {
  assert.throws(() => pickSubnet(["10.0.0.0/8"], 1), RangeError);
});

Deno.test("deadRunPids() names the runs whose process is gone, from every kind of name", () => {
  const names = [
    "uplb12",
    "uplv12n1",
    "uplnodes-12-n3",
    "uplnodes-34",
    "uplv56n2",
    "uplbridge",
    "eth0",
    "uplnodes-78-n1",
  ];
  assert.deepEqual(deadRunPids(names, (pid) => pid === 78), [12, 34, 56]);
});
