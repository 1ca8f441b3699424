import assert from "node:assert/strict";
import { queueShards } from "@users-pipeline/queue";
import { pendingFromReply, pendingLists } from "./pending_lists.ts";

Deno.test("pendingFromReply() pairs each list with its length", () => {
  assert.deepEqual(
    pendingFromReply(["users", 3, "users:processing:a", "2"]),
    new Map([["users", 3], ["users:processing:a", 2]]),
  );
  assert.deepEqual(pendingFromReply([]), new Map());
});

Deno.test("pendingLists() reads each shard with the script and merges what they hold", async () => {
  const [first, second] = queueShards("q", { shards: 2, cluster: true });
  const calls: string[][] = [];
  const redis = {
    eval(_script: string, _keys: number, ...args: string[]) {
      calls.push(args);
      return Promise.resolve(
        args[0] === first!.queue ? [first!.queue, 2] : [`${second!.processingPrefix}c`, "3"],
      );
    },
  };
  const lists = await pendingLists(redis, [first!, second!]);
  assert.deepEqual(calls, [
    [first!.queue, first!.retry, `${first!.processingPrefix}*`],
    [second!.queue, second!.retry, `${second!.processingPrefix}*`],
  ]);
  assert.deepEqual(lists, new Map([[first!.queue, 2], [`${second!.processingPrefix}c`, 3]]));
});
