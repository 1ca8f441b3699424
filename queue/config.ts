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
 * (`schema/postgres_options.ts`).
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
  /** The bound that keeps a backlog from exhausting Redis' memory. */
  QUEUE_MAX_LENGTH: intVar(1, 100_000_000).default(1_000_000),
};

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
