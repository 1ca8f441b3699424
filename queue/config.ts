/**
 * Parsing configuration from the environment: one zod schema per service,
 * parsed once at start-up into a read-only object. A bad value stops the
 * process with a message naming the variable, its value and the rule, instead
 * of failing later in a way that hides the cause.
 *
 * The pieces both services need (Redis, the queue, PostgreSQL) are defined
 * here so their names and defaults cannot drift apart.
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
    "redis://127.0.0.1:6379",
  ),
  /** The main list's key; every other key of the queue starts with it. */
  QUEUE_NAME: z.string().regex(/^[A-Za-z0-9_.:-]{1,64}$/, "must be 1-64 of A-Z a-z 0-9 _ . : -")
    .default("users"),
  /** The bound that keeps a backlog from exhausting Redis' memory. */
  QUEUE_MAX_LENGTH: intVar(1, 100_000_000).default(1_000_000),
};

/** The libpq-style variables postgres.js understands, with the course's defaults. */
export const postgresVars = {
  PGHOST: z.string().min(1).default("database"),
  PGPORT: intVar(1, 65_535).default(5432),
  PGUSER: z.string().min(1).default("username"),
  PGPASSWORD: z.string().default("password"),
  PGDATABASE: z.string().min(1).default("database"),
};

/** The PostgreSQL connection part of a parsed configuration. */
export interface PostgresConfig {
  readonly PGHOST: string;
  readonly PGPORT: number;
  readonly PGUSER: string;
  readonly PGPASSWORD: string;
  readonly PGDATABASE: string;
}

/**
 * Parses `env` with `shape`, or throws a `TypeError` listing every bad
 * variable as `Cannot start <service>: NAME <rule>: current value is "…"`.
 */
export function parseEnv<Shape extends z.ZodRawShape>(
  service: string,
  shape: Shape,
  env: Env,
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
