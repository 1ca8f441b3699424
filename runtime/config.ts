/**
 * Configuration from the environment: the queue's own variables (where it
 * lives, what it is called, how long it may grow), which the API and the
 * consumer must agree on, and the parsing every process uses for all of its
 * variables: one zod shape per process, parsed once at start-up into a
 * read-only object. A bad value stops the process with a message naming the
 * variable, its value and the rule, instead of failing later in a way that
 * hides the cause.
 *
 * The parsing sits beside the variables both services share rather than in a
 * module of its own: it is a few lines, and every process imports this module
 * anyway. The PostgreSQL variables live with the schema
 * (`runtime/postgres_options.ts`).
 *
 * @module
 */

import { z } from "zod";

/** An environment as `Deno.env.toObject()` returns it. */
export type Env = Readonly<Record<string, string | undefined>>;

/** A whole number within bounds, from an environment string. */
export function intVar(min: number, max: number) {
  return z.coerce.number().int().min(min).max(max);
}

/** The variables that name the queue and where it lives. */
export const queueVars = {
  /** ioredis connection URL. */
  REDIS_URL: z.string().regex(/^rediss?:\/\//, "must be a redis:// or rediss:// URL").default(
    "redis://redis:6379",
  ),
  /** The main list's key; every other key of the queue starts with it. */
  QUEUE_NAME: z.string().regex(/^[A-Za-z0-9_.:-]{1,64}$/, "must be 1-64 of A-Z a-z 0-9 _ . : -")
    .default("users"),
  /**
   * Seed nodes of a Redis Cluster, `host:port,host:port…`; empty means a
   * standalone Redis at REDIS_URL. Any reachable node will do: the client
   * asks it for the rest. (Host names and IPv4 addresses; no IPv6 literals.)
   */
  REDIS_CLUSTER_NODES: z.string().refine(
    (nodes) =>
      nodes === "" ||
      (/^[A-Za-z0-9_.-]+:[0-9]{1,5}(,[A-Za-z0-9_.-]+:[0-9]{1,5})*$/.test(nodes) &&
        clusterNodes(nodes).every(({ port }) => port >= 1 && port <= 65_535)),
    "must be comma-separated host:port pairs (ports 1-65535)",
  ).default(""),
  /**
   * How many lists the queue is spread over, each in a hash slot of its own
   * (so, in a cluster, on different masters). 1 is the one list `QUEUE_NAME`.
   */
  QUEUE_SHARDS: intVar(1, 1_024).default(1),
};

/** The variables every service reads about itself, with the same rule. */
export const processVars = {
  /**
   * This replica's id in every log record and as the `replica` label of every
   * metric; empty means the hostname (in compose, the container's id). Set it
   * where replicas share a host (the native stack: `server-1`, `consumer-2`).
   */
  REPLICA_ID: z.string().regex(/^[A-Za-z0-9_.:-]{1,64}$/, "must be 1-64 of A-Z a-z 0-9 _ . : -")
    .default(""),
  /**
   * Port of the service's HTTP listener: the API's requests (Traefik forwards
   * to it), the consumer's /healthz and /readyz. Each container has a
   * network namespace of its own, so both default to 8000.
   */
  PORT: intVar(1, 65_535).default(8000),
};

/** One node of `REDIS_CLUSTER_NODES`. */
export interface ClusterNode {
  readonly host: string;
  readonly port: number;
}

/** The nodes of a `REDIS_CLUSTER_NODES` value; none for an empty one. */
export function clusterNodes(value: string): ClusterNode[] {
  if (value === "") return [];
  return value.split(",").map((node) => {
    const colon = node.lastIndexOf(":");
    return { host: node.slice(0, colon), port: Number(node.slice(colon + 1)) };
  });
}

/** Whose environment {@linkcode parseEnv} reads. */
export interface ParseEnvOptions {
  /** The process starting, named in the error. */
  readonly service: string;
  /** The variables, as from `Deno.env.toObject()`. */
  readonly env: Env;
}

/**
 * Parses `env` with `shape`, or throws a `TypeError` listing every bad
 * variable as `Cannot start <service>: NAME <rule>: current value is "…"`.
 */
export function parseEnv<Shape extends z.ZodRawShape>(
  shape: Shape,
  { service, env }: ParseEnvOptions,
): Readonly<z.infer<z.ZodObject<Shape>>> {
  // Empty strings count as unset, as in compose's `VAR=` lines.
  const present = Object.fromEntries(
    Object.keys(shape).map((name) => [name, env[name] === "" ? undefined : env[name]]),
  );
  const result = z.object(shape).safeParse(present);
  if (result.success) return Object.freeze(result.data);
  const lines = result.error.issues.map((issue) => {
    const name = String(issue.path[0]);
    return `${name} ${issue.message.toLowerCase()}: current value is ${JSON.stringify(env[name])}`;
  });
  throw new TypeError(`Cannot start ${service}: ${lines.join("; ")}`);
}
