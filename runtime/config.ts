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
 * Secrets never reach a message: a variable whose name says PASSWORD or
 * TOKEN is shown as `(hidden)`, and a URL's password as `***`.
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

/** A certificate, in PEM, read from a file once at start. */
export interface PemFile {
  /** The file's path, as the variable gives it. */
  readonly path: string;
  /** Its text. */
  readonly pem: string;
}

/**
 * A variable naming a PEM file of CA certificates, read when the variable is
 * parsed, so that a file missing, unreadable (the process's permissions) or
 * holding no certificate stops the start with the variable's name; unset is
 * `undefined`.
 */
export function pemFileVar() {
  return z.string().transform((path, context): PemFile => {
    let pem: string;
    try {
      pem = Deno.readTextFileSync(path);
    } catch (error) {
      context.addIssue({
        code: "custom",
        message: `cannot be read (${error instanceof Error ? error.message : error})`,
      });
      return z.NEVER;
    }
    if (!pem.includes("-----BEGIN CERTIFICATE-----")) {
      context.addIssue({ code: "custom", message: "must be a PEM file of certificates" });
      return z.NEVER;
    }
    return { path, pem };
  }).optional();
}

/** One node of `REDIS_CLUSTER_NODES`: `host:port`, or `rediss://host:port` for TLS. */
const CLUSTER_NODE = /^(rediss:\/\/)?[A-Za-z0-9_.-]+:[0-9]{1,5}$/;

/** The variables that name the queue and where it lives. */
export const queueVars = {
  /**
   * ioredis connection URL; `rediss://` for TLS. Credentials may be in it
   * (`redis://user:password@host:port`) or in REDIS_USERNAME and
   * REDIS_PASSWORD, not in both.
   */
  REDIS_URL: z.string().refine(
    (url) => /^rediss?:\/\//.test(url) && URL.canParse(url),
    "must be a redis:// or rediss:// URL",
  ).default("redis://redis:6379"),
  /** The main list's key; every other key of the queue starts with it. */
  QUEUE_NAME: z.string().regex(/^[A-Za-z0-9_.:-]{1,64}$/, "must be 1-64 of A-Z a-z 0-9 _ . : -")
    .default("users"),
  /**
   * Seed nodes of a Redis Cluster, `host:port,host:port…`, each written
   * `rediss://host:port` to reach every node over TLS (all or none); empty
   * means a standalone Redis at REDIS_URL. Any reachable node will do: the
   * client asks it for the rest. (Host names and IPv4 addresses; no IPv6
   * literals.)
   */
  REDIS_CLUSTER_NODES: z.string().refine(
    (nodes) => {
      if (nodes === "") return true;
      const each = nodes.split(",");
      return each.every((node) => CLUSTER_NODE.test(node)) &&
        new Set(each.map((node) => node.startsWith("rediss://"))).size === 1 &&
        clusterNodes(nodes).every(({ port }) => port >= 1 && port <= 65_535);
    },
    "must be comma-separated host:port pairs (ports 1-65535), all or none rediss://",
  ).default(""),
  /** The ACL user Redis (every node of a cluster) is logged in as; empty: `default`. */
  REDIS_USERNAME: z.string().default(""),
  /** Its password (`requirepass`, or the ACL user's); empty: none. */
  REDIS_PASSWORD: z.string().default(""),
  /**
   * CA certificates (PEM) a TLS connection to Redis verifies the server's
   * certificate against; unset: the runtime's trust store. Only with TLS.
   */
  REDIS_TLS_CA_FILE: pemFileVar(),
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
    const address = node.replace(/^rediss:\/\//, "");
    const colon = address.lastIndexOf(":");
    return { host: address.slice(0, colon), port: Number(address.slice(colon + 1)) };
  });
}

/** Whether the queue's Redis is reached over TLS: a `rediss://` URL or cluster nodes. */
export function redisTls(config: { REDIS_URL: string; REDIS_CLUSTER_NODES: string }): boolean {
  return config.REDIS_CLUSTER_NODES === ""
    ? config.REDIS_URL.startsWith("rediss://")
    : config.REDIS_CLUSTER_NODES.startsWith("rediss://");
}

/**
 * What is wrong with the variables together, each as `[name, rule]`: a
 * setting that another's value contradicts or makes meaningless. Checked for
 * the variables a shape reads.
 */
function conflicts(vars: Readonly<Record<string, unknown>>): [string, string][] {
  const found: [string, string][] = [];
  const { REDIS_URL, REDIS_CLUSTER_NODES } = vars;
  if (typeof REDIS_URL === "string" && typeof REDIS_CLUSTER_NODES === "string") {
    const url = URL.parse(REDIS_URL);
    for (
      const [name, inUrl] of [["REDIS_USERNAME", url?.username], ["REDIS_PASSWORD", url?.password]]
    ) {
      if (vars[name!] && inUrl) {
        found.push([name!, "conflicts with the one in REDIS_URL: give it in one place"]);
      }
    }
    if (vars.REDIS_TLS_CA_FILE !== undefined && !redisTls({ REDIS_URL, REDIS_CLUSTER_NODES })) {
      found.push([
        "REDIS_TLS_CA_FILE",
        "needs TLS: a rediss:// REDIS_URL, or rediss:// REDIS_CLUSTER_NODES",
      ]);
    }
  }
  if (
    vars.PGSSLROOTCERT !== undefined && vars.PGSSLMODE !== "verify-ca" &&
    vars.PGSSLMODE !== "verify-full"
  ) {
    found.push(["PGSSLROOTCERT", "is only used with PGSSLMODE verify-ca or verify-full"]);
  }
  return found;
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
  const result = z.object(shape).superRefine((vars, context) => {
    for (const [name, message] of conflicts(vars)) {
      context.addIssue({ code: "custom", path: [name], message });
    }
  }).safeParse(present);
  if (result.success) return Object.freeze(result.data);
  const lines = result.error.issues.map((issue) => {
    const name = String(issue.path[0]);
    // zod's own messages start with a capital ("Too big: …"); ours name variables in capitals.
    const rule = issue.message.charAt(0).toLowerCase() + issue.message.slice(1);
    return `${name} ${rule}: current value is ${shown(name, env[name])}`;
  });
  throw new TypeError(`Cannot start ${service}: ${lines.join("; ")}`);
}

/** A variable's value as a message may show it: see the module doc. */
function shown(name: string, value: string | undefined): string {
  if (value !== undefined && /PASSWORD|TOKEN/.test(name)) return "(hidden)";
  return JSON.stringify(value?.replace(/^([a-z]+:\/\/[^/@:]*:)[^/@]*@/i, "$1***@"));
}
