/**
 * What a queue has not stored yet — its main list, its retry list and every processing list —
 * read in one atomic step. Reading them one by one races the consumer: a batch can move from the
 * main list into a processing list created after the processing lists were listed, and a test
 * would then see an empty queue while that batch is still being inserted (and call it lost).
 *
 * @module
 */

import type { QueueKeys } from "@users-pipeline/queue";

/**
 * The Lua script: KEYS[1] the main list, KEYS[2] the retry list, ARGV[1] the processing lists'
 * pattern; returns key, length, key, length… for the lists that hold items. KEYS is fine here:
 * these are test keyspaces of a few keys, and a script is the only way to list and count at once.
 */
export const PENDING_LISTS_SCRIPT = `
local out = {}
local keys = redis.call('KEYS', ARGV[1])
table.insert(keys, 1, KEYS[2])
table.insert(keys, 1, KEYS[1])
for _, key in ipairs(keys) do
  local n = redis.call('LLEN', key)
  if n > 0 then
    table.insert(out, key)
    table.insert(out, n)
  end
end
return out`;

/** Parses the script's flat reply into key → length. */
export function pendingFromReply(reply: readonly (string | number)[]): Map<string, number> {
  const lists = new Map<string, number>();
  for (let i = 0; i + 1 < reply.length; i += 2) lists.set(String(reply[i]), Number(reply[i + 1]));
  return lists;
}

/** The client calls {@linkcode pendingLists} needs: ioredis's `Redis` and `Cluster` both fit. */
export interface ScriptRunner {
  eval(script: string, numKeys: number, ...args: string[]): Promise<unknown>;
}

/**
 * Every shard's main, retry and non-empty processing lists with their lengths, each shard read
 * in one atomic step on the server serving its slot.
 */
export async function pendingLists(
  redis: ScriptRunner,
  shards: readonly QueueKeys[],
): Promise<Map<string, number>> {
  const all = new Map<string, number>();
  for (const shard of shards) {
    const reply = await redis.eval(
      PENDING_LISTS_SCRIPT,
      2,
      shard.queue,
      shard.retry,
      `${shard.processingPrefix}*`,
    ) as (string | number)[];
    for (const [key, length] of pendingFromReply(reply)) all.set(key, length);
  }
  return all;
}
