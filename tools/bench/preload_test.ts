import assert from "node:assert/strict";
import {
  decodeEnvelope,
  encodeEnvelope,
  type ShardedQueue,
  type UserEnvelope,
} from "@users-pipeline/queue";
import { benchUsers, preloadQueue } from "./preload.ts";

Deno.test("benchUsers() makes valid, distinct envelopes", () => {
  const users = benchUsers(3, 10);
  assert.deepEqual(users.map((u) => u.name), ["bench user 10", "bench user 11", "bench user 12"]);
  assert.equal(new Set(users.map((u) => u.id)).size, 3);
  for (const user of users) assert.deepEqual(decodeEnvelope(encodeEnvelope(user)), user);
});

Deno.test("preloadQueue() pushes every user once, in chunks", async () => {
  const pushes: UserEnvelope[][] = [];
  const queue = {
    shardIndexOf: () => 0,
    pushes: [{
      enqueueFitting: (users: UserEnvelope[]) => {
        pushes.push(users);
        return Promise.resolve(users.length);
      },
    }],
  } as unknown as ShardedQueue;
  await preloadQueue(queue, 2_500, { chunk: 1_000, inFlight: 2 });
  assert.deepEqual(pushes.map((p) => p.length).sort(), [1_000, 1_000, 500]);
  const names = new Set(pushes.flat().map((user) => user.name));
  assert.equal(names.size, 2_500);
});
