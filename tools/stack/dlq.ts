/**
 * `./stack dlq`: the dead letters of the running stack, straight from its
 * Redis through `queue/dead_letters.ts` (the functions behind the API's admin
 * routes, so no token is needed: access to Redis is the permission).
 * `./stack` runs it in a container on the compose project's network, with the
 * API replicas' REDIS_URL as the URL.
 *
 *   dlq.ts <redis url> list [--offset N] [--limit N]
 *   dlq.ts <redis url> requeue [--reason KIND] [--id ID]…   (no filter: every letter)
 *   dlq.ts <redis url> purge (--all | [--reason KIND] [--id ID]…)
 *
 * Reads env: QUEUE_NAME (default `users`, as in project.env), QUEUE_SHARDS,
 * REDIS_CLUSTER_NODES (then the URL is not used): every shard's letters; REDIS_USERNAME and
 * REDIS_PASSWORD, to log in.
 *
 * @module
 */

import { parseArgs } from "node:util";
import type { RedisOptions } from "ioredis";
import {
  DEAD_LETTER_KINDS,
  type DeadLetterFilter,
  DeadLetters,
  type QueueKeys,
  queueShards,
  type RedisClient,
  SCRIPTS_WITH_KEY_COUNT,
} from "@users-pipeline/queue";
import { type Env, parseEnv, queueVars } from "@users-pipeline/runtime/config";
import { createRedisClient } from "@users-pipeline/runtime/redis_client";

const USAGE = `usage: ./stack dlq list [--offset N] [--limit N]
       ./stack dlq requeue [--reason KIND] [--id ID]...   (no filter: every dead letter)
       ./stack dlq purge --all | [--reason KIND] [--id ID]...
KIND is one of ${DEAD_LETTER_KINDS.join(", ")}`;

/** What the command line asks for. */
export interface DlqCommand {
  readonly action: "list" | "requeue" | "purge";
  readonly offset: number;
  readonly limit: number;
  readonly filter: DeadLetterFilter;
}

/** Parses the arguments after the Redis URL, or throws a `TypeError` saying what is wrong. */
export function parseDlqArgs(args: readonly string[]): DlqCommand {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...args],
      allowPositionals: true,
      options: {
        reason: { type: "string" },
        id: { type: "string", multiple: true },
        all: { type: "boolean", default: false },
        offset: { type: "string" },
        limit: { type: "string" },
      },
    });
  } catch (error) {
    throw new TypeError(`Cannot run dlq: ${(error as Error).message}`, { cause: error });
  }
  const [action, ...extra] = parsed.positionals;
  if (action !== "list" && action !== "requeue" && action !== "purge") {
    throw new TypeError(`Cannot run dlq: the action must be list, requeue or purge: ${action}`);
  }
  if (extra.length > 0) throw new TypeError(`Cannot run dlq: unexpected ${extra.join(" ")}`);
  const { values } = parsed;
  const reason = values.reason;
  if (reason !== undefined && !DEAD_LETTER_KINDS.includes(reason)) {
    throw new TypeError(
      `Cannot run dlq: --reason must be one of ${DEAD_LETTER_KINDS.join(", ")}: ${reason}`,
    );
  }
  const ids = (values.id ?? []).map((id) => id.toLowerCase());
  const filter: DeadLetterFilter = {
    ...(reason === undefined ? {} : { reason }),
    ...(ids.length === 0 ? {} : { ids }),
  };
  if (action === "purge" && (reason === undefined && ids.length === 0) !== values.all) {
    throw new TypeError(
      "Cannot run dlq purge: give --all to purge every dead letter, or --reason / --id (not both)",
    );
  }
  const number = (text: string | undefined, fallback: number, name: string) => {
    if (text === undefined) return fallback;
    if (!/^\d+$/.test(text)) throw new TypeError(`Cannot run dlq: --${name} must be a number`);
    return Number(text);
  };
  return {
    action,
    offset: number(values.offset, 0, "offset"),
    limit: number(values.limit, 20, "limit"),
    filter,
  };
}

/**
 * A client of the queue `env` describes, read as the services read it (QUEUE_NAME, QUEUE_SHARDS,
 * REDIS_CLUSTER_NODES, REDIS_USERNAME, REDIS_PASSWORD), so it sees every shard: `url` for a standalone Redis, or the cluster of
 * REDIS_CLUSTER_NODES; `redis` adds to the client's options. Throws a `TypeError` naming a bad
 * variable.
 */
export function queueClient(
  url: string,
  { env, redis: options = {} }: { env: Env; redis?: RedisOptions },
): { redis: RedisClient; keys: readonly QueueKeys[] } {
  const { QUEUE_NAME, QUEUE_SHARDS, REDIS_CLUSTER_NODES, REDIS_USERNAME, REDIS_PASSWORD } =
    parseEnv({
      QUEUE_NAME: queueVars.QUEUE_NAME,
      QUEUE_SHARDS: queueVars.QUEUE_SHARDS,
      REDIS_CLUSTER_NODES: queueVars.REDIS_CLUSTER_NODES,
      REDIS_USERNAME: queueVars.REDIS_USERNAME,
      REDIS_PASSWORD: queueVars.REDIS_PASSWORD,
    }, { service: "dlq", env });
  const cluster = REDIS_CLUSTER_NODES !== "";
  const where = { REDIS_URL: url, REDIS_CLUSTER_NODES, REDIS_USERNAME, REDIS_PASSWORD };
  const redis = createRedisClient(where, {
    role: { maxRetriesPerRequest: 1, ...options },
    unpipelined: SCRIPTS_WITH_KEY_COUNT,
  });
  return { redis, keys: queueShards(QUEUE_NAME, { shards: QUEUE_SHARDS, cluster }) };
}

async function run(url: string, command: DlqCommand): Promise<void> {
  const { redis, keys } = queueClient(url, { env: Deno.env.toObject() });
  try {
    const letters = new DeadLetters(redis, keys);
    if (command.action === "list") {
      const page = await letters.list(command.offset, command.limit);
      console.log(`${page.total} dead letters; by reason: ${JSON.stringify(page.byReason)}`);
      for (const letter of page.letters) console.log(JSON.stringify(letter));
      return;
    }
    const verb = command.action === "requeue" ? "requeued" : "purged";
    let lastPrint = 0;
    const taken = await letters[command.action](command.filter, {
      onProgress: (taken, steps) => {
        if (performance.now() - lastPrint < 1_000) return;
        lastPrint = performance.now();
        console.log(`… ${taken} ${verb} after ${steps} steps`);
      },
    });
    console.log(`${taken} dead letters ${verb}`);
  } finally {
    redis.disconnect();
  }
}

if (import.meta.main) {
  const [url, ...args] = Deno.args;
  let command: DlqCommand;
  try {
    if (url === undefined || !/^rediss?:\/\//.test(url)) {
      throw new TypeError("Cannot run dlq: the first argument must be the Redis URL");
    }
    command = parseDlqArgs(args);
  } catch (error) {
    console.error(`${(error as Error).message}\n${USAGE}`);
    Deno.exit(2);
  }
  await run(url, command);
}
