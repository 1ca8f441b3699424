/**
 * The native stack's own settings, parsed once from `./stack up`'s arguments
 * and the STACK_* variables, with every default in one place.
 *
 * @module
 */

import { parseArgs } from "node:util";

/** The parsed, fully defaulted settings of `./stack up`. */
export interface StackConfig {
  /** Where the data, the generated configuration and stack.json live. */
  readonly stateDir: string;
  /** How many API replicas (`--servers`). */
  readonly servers: number;
  /** How many consumers (`--consumers`). */
  readonly consumers: number;
  /** Traefik's `web` entry point: the stack's one public port. */
  readonly httpPort: number;
  /** PostgreSQL's port. */
  readonly postgresPort: number;
  /** Redis's port. */
  readonly redisPort: number;
  /** Prometheus's UI and HTTP API. */
  readonly prometheusPort: number;
  /** The first API replica's port; the others follow it. */
  readonly apiBasePort: number;
  /** The first consumer's port (its /healthz and /readyz); the others follow it. */
  readonly consumerBasePort: number;
  /** Where PostgreSQL's programs are, or undefined to look them up. */
  readonly postgresBinDir: string | undefined;
}

/** Every default, with its variable or flag. Ports sit high so they rarely collide. */
export const STACK_DEFAULTS = {
  /** STACK_DIR */
  stateDir: ".stack",
  /** --servers: compose's replica count. */
  servers: 2,
  /** --consumers: compose's replica count. */
  consumers: 2,
  /** STACK_HTTP_PORT: the port compose publishes. */
  httpPort: 8000,
  /** STACK_PG_PORT */
  postgresPort: 55432,
  /** STACK_REDIS_PORT */
  redisPort: 56379,
  /** STACK_PROMETHEUS_PORT: compose publishes 9090, which a local Prometheus often has. */
  prometheusPort: 59090,
  /** STACK_API_BASE_PORT */
  apiBasePort: 58101,
  /** STACK_CONSUMER_BASE_PORT: a hundred above the APIs', more than MAX_REPLICAS apart. */
  consumerBasePort: 58201,
} as const;

/** The most replicas of one kind: each is a Deno process of ~100 MB. */
const MAX_REPLICAS = 32;

function integer(name: string, value: string, min: number, max: number): number {
  const number = Number(value);
  if (!/^\d+$/.test(value) || number < min || number > max) {
    throw new RangeError(
      `Cannot start the stack as ${name} must be a whole number from ${min} to ${max}: current value is ${
        JSON.stringify(value)
      }`,
    );
  }
  return number;
}

/**
 * Parses `./stack up [--servers N] [--consumers M]` and the STACK_* variables.
 *
 * @throws {TypeError} for an unknown argument.
 * @throws {RangeError} for a count or port out of range.
 */
export function parseStackConfig(
  args: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
): StackConfig {
  let values: { servers?: string; consumers?: string };
  try {
    ({ values } = parseArgs({
      args: [...args],
      options: { servers: { type: "string" }, consumers: { type: "string" } },
      strict: true,
      allowPositionals: false,
    }));
  } catch (error) {
    throw new TypeError(
      `Cannot start the stack as the arguments are not [--servers N] [--consumers M]: current value is ${
        JSON.stringify(args.join(" "))
      }`,
      { cause: error },
    );
  }
  const setting = (name: string, fallback: number) => {
    const value = env[name];
    return value === undefined || value === "" ? fallback : integer(name, value, 1, 65_535);
  };
  const servers = values.servers === undefined
    ? STACK_DEFAULTS.servers
    : integer("--servers", values.servers, 1, MAX_REPLICAS);
  const consumers = values.consumers === undefined
    ? STACK_DEFAULTS.consumers
    : integer("--consumers", values.consumers, 0, MAX_REPLICAS);
  const basePort = (name: string, fallback: number, replicas: number, kind: string) => {
    const base = setting(name, fallback);
    if (base + replicas - 1 > 65_535) {
      throw new RangeError(
        `Cannot start ${replicas} ${kind} as ${name} leaves too few ports: current value is ${base}`,
      );
    }
    return base;
  };
  const apiBasePort = basePort(
    "STACK_API_BASE_PORT",
    STACK_DEFAULTS.apiBasePort,
    servers,
    "servers",
  );
  const consumerBasePort = basePort(
    "STACK_CONSUMER_BASE_PORT",
    STACK_DEFAULTS.consumerBasePort,
    consumers,
    "consumers",
  );
  return Object.freeze({
    stateDir: env.STACK_DIR || STACK_DEFAULTS.stateDir,
    servers,
    consumers,
    httpPort: setting("STACK_HTTP_PORT", STACK_DEFAULTS.httpPort),
    postgresPort: setting("STACK_PG_PORT", STACK_DEFAULTS.postgresPort),
    redisPort: setting("STACK_REDIS_PORT", STACK_DEFAULTS.redisPort),
    prometheusPort: setting("STACK_PROMETHEUS_PORT", STACK_DEFAULTS.prometheusPort),
    apiBasePort,
    consumerBasePort,
    postgresBinDir: env.STACK_PG_BIN_DIR || undefined,
  });
}
