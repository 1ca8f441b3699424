/**
 * A rate per client, shared by every API replica: RATE_LIMIT_USERS_PER_SECOND users a second
 * with bursts of up to RATE_LIMIT_BURST, counted in users (a batch of 100 costs 100). The state is
 * one key per client in Redis, moved by one script call per request (`queue/lua/rate_limit.lua`,
 * a GCRA on Redis' clock), so two replicas see the same allowance.
 *
 * Its answer's headers are those of draft-ietf-httpapi-ratelimit-headers-10: `RateLimit-Policy`
 * names the one policy, `"users"`, with its quota `q` (the burst) and window `w` (the seconds
 * the rate takes to refill a whole burst); `RateLimit` says what is left of it, `r` users now and
 * `t` seconds until the allowance is whole again.
 *
 * @module
 */

import { type RedisClient, runScript } from "@users-pipeline/queue/lua_script";
import { RATE_LIMIT } from "@users-pipeline/queue/scripts";

/** What one take of the allowance decided. */
export interface RateDecision {
  /** Whether the users were taken: false means nothing was. */
  readonly allowed: boolean;
  /** The users the client may still send now. */
  readonly remaining: number;
  /** Whole seconds until the client's allowance is whole again. */
  readonly resetSeconds: number;
  /** When refused: whole seconds (at least 1) until the same request fits; else 0. */
  readonly retryAfterSeconds: number;
}

/** What the app needs of a rate limit; {@linkcode RateLimiter} is the real one. */
export interface RateLimit {
  /** The `RateLimit-Policy` header's value. */
  readonly policy: string;
  /** Takes `cost` users from `client`'s allowance, all or none. */
  take(client: string, cost: number): Promise<RateDecision>;
}

/** Options of {@linkcode RateLimiter}. */
export interface RateLimiterOptions {
  /** Users a second each client may send, over time. */
  readonly usersPerSecond: number;
  /** Most users a client may send at once (an idle client's whole allowance). */
  readonly burst: number;
  /** What each client's key starts with: the queue's name, as every key of ours. */
  readonly prefix: string;
}

/** The name of the one policy, in both headers. */
const POLICY = '"users"';

/** The rate limit of RATE_LIMIT_USERS_PER_SECOND and RATE_LIMIT_BURST, in Redis. */
export class RateLimiter implements RateLimit {
  readonly policy: string;
  readonly #redis: RedisClient;
  readonly #intervalUs: number;
  readonly #burst: number;
  readonly #prefix: string;

  constructor(redis: RedisClient, options: RateLimiterOptions) {
    this.#redis = redis;
    this.#intervalUs = 1e6 / options.usersPerSecond;
    this.#burst = options.burst;
    this.#prefix = `${options.prefix}:rate:`;
    this.policy = `${POLICY};q=${options.burst};w=${
      Math.ceil(options.burst / options.usersPerSecond)
    }`;
  }

  async take(client: string, cost: number): Promise<RateDecision> {
    const [allowed, remaining, resetUs, retryUs] = await runScript(this.#redis, {
      script: RATE_LIMIT,
      keys: { bucket: this.#prefix + client },
      args: { intervalUs: this.#intervalUs, burst: this.#burst, cost },
    });
    return {
      allowed: allowed === 1,
      remaining,
      resetSeconds: Math.ceil(resetUs / 1e6),
      retryAfterSeconds: allowed === 1 ? 0 : Math.max(1, Math.ceil(retryUs / 1e6)),
    };
  }
}

/** The `RateLimit` header's value for `decision`. */
export function rateLimitHeader(decision: RateDecision): string {
  return `${POLICY};r=${decision.remaining};t=${decision.resetSeconds}`;
}
