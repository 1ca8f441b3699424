/**
 * A client that means to create each of its users exactly once, as docs/api.md
 * tells clients to: every `POST /users` carries an `Idempotency-Key` of its
 * own, and every answer a fault may cause (a 503 with its code, a cut
 * connection) is retried with the same key, after its `Retry-After`, until a
 * 202 comes. With `batchSize`, each key is a `POST /users/batch` of that many
 * users, retried whole with its key and the same users, as docs/api.md tells a
 * keyed batch's client to, until its 202. An answer no fault explains (a 500, a 503 without its code or
 * Retry-After, a 4xx, no answer within `timeoutMs`) ends its user instead:
 * retried, it would be hidden by the 202 that follows.
 * The fault scenarios run it beside their load and then hold the pipeline to
 * its end of the bargain: one row per key that got its 202, under that 202's
 * id; at most one for a key given up, under an id one of its refusals named
 * ({@linkcode RetryingClient.settled}, checked with the scenario's rows).
 * Every try's answer is kept ({@linkcode RetryingClient.answers}), and
 * `verifyDelivery` holds the tries to the same codes, bounds and fault windows
 * as its load.
 *
 * @module
 */

import { excuseFor } from "./answer_check.ts";
import { type Outcome, postBatch, postUser } from "./fault_load.ts";

/** One user the client set out to create. */
export interface KeyedUser {
  /** Its request's key: a batch's users share it. */
  readonly key: string;
  readonly name: string;
  /** The id of the 202 it ended with; absent while it is still trying, or once it gave up. */
  id?: string;
  /** Requests sent for it (a batch's, with every user of the batch). */
  tries: number;
  /** True once it stopped without a 202: its time ran out, or an answer no fault explains came. */
  gaveUp: boolean;
}

/** Options of {@linkcode RetryingClient}. */
export interface RetryingClientOptions {
  /** The APIs' base URLs; each try goes to the next one not withdrawn. */
  readonly urls: readonly string[];
  /** Prefix of every name and key. */
  readonly prefix: string;
  /** New keys per second (each then retried until it got its 202). */
  readonly ratePerSecond: number;
  /** Users per key: above 1, each key is one `POST /users/batch` of them. @default 1 */
  readonly batchSize?: number;
  /** How long one user may be tried before the client gives it up. @default 60_000 */
  readonly giveUpMs?: number;
  /** A try without an answer after this long is a hang, which ends its user. @default 5_000 */
  readonly timeoutMs?: number;
}

/** Creates users at a rate, each once, retrying until the API says 202. */
export class RetryingClient {
  readonly users: KeyedUser[] = [];
  /**
   * Every try's answer, in the order they came, named by its user's name: a
   * 503 that may have queued carries the id it names; a try without an answer
   * is `indeterminate`.
   */
  readonly answers: Outcome[] = [];
  readonly #options: Required<RetryingClientOptions>;
  readonly #running: Promise<void>[] = [];
  readonly #withdrawn = new Set<string>();
  /** The URL and user count of each try waiting for its answer, by its number. */
  readonly #inFlight = new Map<number, { url: string; users: number }>();
  #stopped = false;
  #tries = 0;
  #starter: Promise<void> = Promise.resolve();

  constructor(options: RetryingClientOptions) {
    this.#options = {
      giveUpMs: 60_000,
      timeoutMs: 5_000,
      ...options,
      batchSize: options.batchSize ?? 1,
    };
  }

  /** Starts creating users; returns at once. */
  start(): this {
    this.#starter = this.#start();
    return this;
  }

  /** Sends no try to `url` until {@linkcode restore} (a replica that is down). */
  withdraw(url: string): void {
    this.#withdrawn.add(url);
  }

  /** Sends to `url` again. */
  restore(url: string): void {
    this.#withdrawn.delete(url);
  }

  /** Starts no new user, and resolves once every user began got its 202 or was given up. */
  async stop(): Promise<KeyedUser[]> {
    this.#stopped = true;
    await this.#starter;
    await Promise.all(this.#running);
    return this.users;
  }

  /** Users whose try waits for an answer now, to `url` or to any API. */
  inFlight(url?: string): number {
    return [...this.#inFlight.values()]
      .filter((to) => url === undefined || to.url === url)
      .reduce((sum, to) => sum + to.users, 0);
  }

  /** Every try sent, for every key: how many retries the faults cost. */
  get tries(): number {
    return this.#tries;
  }

  /**
   * The accounting against the table's `rows` of this client's users (see
   * {@linkcode settleKeyed}, given every try's answer). Lists what broke,
   * empty when all held.
   */
  settled(rows: readonly { id: string; name: string }[]): string[] {
    return settleKeyed(this.users, rows, { answers: this.answers });
  }

  async #start(): Promise<void> {
    const { prefix, ratePerSecond, batchSize } = this.#options;
    const startedAt = Date.now();
    for (let n = 0; !this.#stopped; n++) {
      const wait = startedAt + (n * 1_000) / ratePerSecond - Date.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      if (this.#stopped) break;
      const users = Array.from({ length: batchSize }, (_, i): KeyedUser => ({
        key: `${prefix}-key-${n}`,
        name: `${prefix}-${n * batchSize + i}`,
        tries: 0,
        gaveUp: false,
      }));
      this.users.push(...users);
      this.#running.push(this.#create(users));
    }
  }

  /** Sends `users` (one, or a batch) with their key until every one got its 202, or gives up. */
  async #create(users: readonly KeyedUser[]): Promise<void> {
    const { giveUpMs, timeoutMs } = this.#options;
    const { key } = users[0]!;
    const names = users.map((user) => user.name);
    const deadline = Date.now() + giveUpMs;
    while (Date.now() < deadline) {
      const n = this.#tries++;
      const url = this.#pick(n);
      for (const user of users) user.tries++;
      let pause = 100;
      if (url !== undefined) {
        this.#inFlight.set(n, { url, users: users.length });
        const sentAt = Date.now();
        const answers = users.length === 1
          ? [await postUser({ url, name: names[0]!, key, sentAt, timeoutMs })]
          : await postBatch({ url, names, key, sentAt, timeoutMs });
        this.#inFlight.delete(n);
        this.answers.push(...answers);
        if (answers.every((answer) => answer.kind === "accepted")) {
          users.forEach((user, i) => user.id = answers[i]!.id);
          return;
        }
        // No fault explains it (a 500, a 4xx, a hang): the answer stays for the checks to report,
        // where a retry's 202 would have hidden it.
        if (answers.some((answer) => answer.kind !== "accepted" && !excuseFor(answer))) break;
        const retryAfter = answers.find((answer) => answer.retryAfter)?.retryAfter;
        if (retryAfter) pause = Number(retryAfter) * 1_000;
      }
      const wait = Math.max(0, Math.min(pause, deadline - Date.now()));
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
    for (const user of users) user.gaveUp = true;
  }

  #pick(n: number): string | undefined {
    const live = this.#options.urls.filter((url) => !this.#withdrawn.has(url));
    return live.length === 0 ? undefined : live[n % live.length];
  }
}

/** Options of {@linkcode settleKeyed}. */
export interface SettleKeyedOptions {
  /**
   * Every try's answer, by the user's name ({@linkcode RetryingClient.answers}):
   * a key given up may be stored, once, under an id one of its refusals named,
   * or under any id if one of its tries got no answer (docs/delivery.md, "What
   * each answer means for the client": a 503 `queue_unavailable` or
   * `unconfirmed` may have queued the user it names; a try without an answer
   * may have queued one, with no id to ask). @default none: no key given up may
   * be stored
   */
  readonly answers?: readonly Outcome[];
}

/**
 * The accounting of keyed `users` against the table's `rows`: for every key
 * that got a 202, exactly one row, under that id; for a key given up, no row,
 * or one its answers allow (see {@linkcode SettleKeyedOptions.answers}); never
 * two rows for one name. Lists what broke, empty when all held.
 */
export function settleKeyed(
  users: readonly Pick<KeyedUser, "key" | "name" | "id">[],
  rows: readonly { id: string; name: string }[],
  options: SettleKeyedOptions = {},
): string[] {
  const mine = new Map(users.map((user) => [user.name, user]));
  const found = new Map<string, string[]>();
  for (const row of rows) {
    if (mine.has(row.name)) found.set(row.name, [...found.get(row.name) ?? [], row.id]);
  }
  const answered = new Map<string, Outcome[]>();
  for (const answer of options.answers ?? []) {
    answered.set(answer.name, [...answered.get(answer.name) ?? [], answer]);
  }
  const perKey = new Map<string, number>();
  for (const { key } of users) perKey.set(key, (perKey.get(key) ?? 0) + 1);
  const problems: string[] = [];
  for (const user of users) {
    // A batch's users share their key: its name tells them apart.
    const who = perKey.get(user.key)! > 1 ? `${user.key} ${user.name}` : user.key;
    const ids = found.get(user.name) ?? [];
    if (ids.length > 1) problems.push(`${who}: ${ids.length} rows`);
    else if (user.id !== undefined && ids.length === 0) problems.push(`${who}: 202, no row`);
    else if (user.id !== undefined && ids[0] !== user.id) {
      problems.push(`${who}: 202 for ${user.id}, stored as ${ids[0]}`);
    } else if (user.id === undefined && ids.length > 0) {
      const tries = answered.get(user.name) ?? [];
      const named = tries.some((answer) => answer.kind === "rejected" && answer.id === ids[0]);
      const unanswered = tries.some((answer) => answer.kind === "indeterminate");
      if (tries.length === 0) problems.push(`${who}: given up, stored`);
      else if (!named && !unanswered) {
        problems.push(`${who}: given up, stored as ${ids[0]}, which no refusal of it named`);
      }
    }
  }
  return problems;
}
