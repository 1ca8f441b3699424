/**
 * A load generator for the fault suite that remembers every request it made.
 *
 * Each request posts a name no other request uses (or, as `POST /users/batch`,
 * a batch of them), so whatever happens to it the test can find it again: in
 * the table, in the dead letters, or nowhere. A batch's answer is one outcome
 * per user, read from the item docs/api.md says it carries, so a user sent in
 * a batch is held to the same checks as one sent alone. Every outcome is
 * classified as the client saw it:
 * - accepted: 202 with the id the API minted (it must end up stored under it);
 * - rejected: a 4xx, or a 503 with Retry-After, that carries an error code
 *   (the API's in its JSON body, Traefik's in its X-Error-Code header); the
 *   code says why, and checks branch on it (it must not be stored);
 * - indeterminate: the connection broke or the wait timed out (`timedOut`, a
 *   hang), so the user may or may not have been queued (stored at most once,
 *   or not at all);
 * - unexpected: any other answer (a 500, a 503 without Retry-After, a refusal
 *   without a code, a 2xx that is not 202 with an id), which the promise
 *   forbids outright.
 *
 * @module
 */

import { ERROR_CODE_HEADER } from "@users-pipeline/server/api_error";

/** What became of one request. */
export interface Outcome {
  /** The unique name it posted. */
  readonly name: string;
  /** The API it was sent to. */
  readonly url: string;
  readonly kind: "accepted" | "rejected" | "indeterminate" | "unexpected";
  /** The HTTP status, when an answer came. */
  readonly status?: number;
  /** The id of a 202, or the one a 503 names when its user may have been queued. */
  readonly id?: string;
  /** The Retry-After header of a 503. */
  readonly retryAfter?: string | null;
  /**
   * The error code of a rejected request: the API's `code`, or Traefik's X-Error-Code
   * (`server/api_error.ts`). What checks branch on.
   */
  readonly code?: string;
  /**
   * The error message of a rejected request (Traefik's plain text for its own), or the network
   * error of an indeterminate one: for people, never matched.
   */
  readonly detail?: string;
  /** When the request was sent (ms since the epoch). */
  readonly sentAt: number;
  /** How long the answer (or the failure) took, in ms. */
  readonly ms: number;
  /** True for an indeterminate request that got no answer within the load's `timeoutMs`: a hang. */
  readonly timedOut?: boolean;
}

/** Options of {@linkcode LoadGenerator}. */
export interface LoadOptions {
  /** The APIs' base URLs (`http://127.0.0.1:1234`); requests go round-robin. */
  readonly urls: readonly string[];
  /** Prefix of every name, so a scenario's users are recognisable. */
  readonly prefix: string;
  /** Requests in flight at once. @default 16 */
  readonly concurrency?: number;
  /** Stop after this many requests. @default Infinity */
  readonly limit?: number;
  /** Total requests per second across workers, or 0 for as fast as possible. @default 0 */
  readonly ratePerSecond?: number;
  /** Users per request: above 1, each request is one `POST /users/batch` of them. @default 1 */
  readonly batchSize?: number;
  /**
   * A request without an answer after this long counts as indeterminate; it
   * is far above any timeout of the API, so it means the API hung.
   * @default 10_000
   */
  readonly timeoutMs?: number;
}

/** One `POST /users` of `name` (with its `Idempotency-Key` when given), classified. */
export async function postUser(
  request: { url: string; name: string; key?: string; sentAt: number; timeoutMs: number },
): Promise<Outcome> {
  const { name, ...rest } = request;
  const [outcome] = await post({ ...rest, names: [name], path: "/users", body: { name } });
  return outcome!;
}

/**
 * One `POST /users/batch` of `names` (with its `Idempotency-Key` when given): an outcome per
 * user, in the request's order (see {@linkcode classifyBatch}).
 */
export function postBatch(
  request: {
    url: string;
    names: readonly string[];
    key?: string;
    sentAt: number;
    timeoutMs: number;
  },
): Promise<Outcome[]> {
  return post({
    ...request,
    path: "/users/batch",
    body: request.names.map((name) => ({ name })),
  });
}

async function post(
  request: {
    url: string;
    path: string;
    names: readonly string[];
    body: unknown;
    key?: string;
    sentAt: number;
    timeoutMs: number;
  },
): Promise<Outcome[]> {
  const { url, path, names, body, key, sentAt, timeoutMs } = request;
  // A timer of our own rather than AbortSignal.timeout, so none outlives the request.
  const abort = new AbortController();
  const timer = setTimeout(
    () => abort.abort(new DOMException(`no answer within ${timeoutMs} ms`, "TimeoutError")),
    timeoutMs,
  );
  try {
    const response = await fetch(`${url}${path}`, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        ...(key === undefined ? {} : { "Idempotency-Key": key }),
      },
      body: JSON.stringify(body),
      signal: abort.signal,
    });
    return path === "/users"
      ? [await classify(names[0]!, url, sentAt, response)]
      : await classifyBatch(names, url, sentAt, response);
  } catch (error) {
    // No answer (a refused or cut connection, a timeout): each user's push may have run.
    const detail = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    const ms = Date.now() - sentAt;
    const timedOut = abort.signal.aborted;
    return names.map((name) => ({
      name,
      url,
      kind: "indeterminate",
      detail,
      sentAt,
      ms,
      timedOut,
    }));
  } finally {
    clearTimeout(timer);
  }
}

/** Classifies an HTTP answer. */
export async function classify(
  name: string,
  url: string,
  sentAt: number,
  response: Response,
): Promise<Outcome> {
  return outcomeOf(name, await answerOf(url, sentAt, response));
}

/**
 * Classifies the answer to a `POST /users/batch` of `names` as docs/api.md says it reads: one
 * outcome per user, each from its item. A 202 lists an `{id}` per user; a 207 (with Retry-After)
 * an item per user, each `{id, status: 202}` or `{id, status: 503, code}`, and both kinds; a 503
 * from the API an `{id, status: 503, code}` per user. An item refused is a 503 with its own code
 * and id, as a single user's would be. An answer without its list of items (a 4xx, Traefik's
 * own 503, a 500) is every user's answer; a list of the wrong length, or an item of another shape
 * or status, makes every user's outcome unexpected.
 */
export async function classifyBatch(
  names: readonly string[],
  url: string,
  sentAt: number,
  response: Response,
): Promise<Outcome[]> {
  const answer = await answerOf(url, sentAt, response);
  const { status, retryAfter, text, body } = answer;
  const items = Array.isArray(body?.items) ? body.items as unknown[] : undefined;
  if (status !== 202 && status !== 207 && !(status === 503 && items !== undefined)) {
    return names.map((name) => outcomeOf(name, answer));
  }
  const base = { url, status, sentAt, ms: answer.ms, retryAfter };
  const wrong = (detail: string) =>
    names.map((name): Outcome => ({ ...base, name, kind: "unexpected", detail }));
  if (items?.length !== names.length) {
    return wrong(`${status} without an item for each of the ${names.length} users: ${text}`);
  }
  // A 202's items are all queued; a 503's all refused; a 207 has both.
  const outcomes = names.map((name, i) => itemOutcome(name, base, items[i], status === 202));
  const kinds = new Set(outcomes.map((outcome) => outcome.kind));
  const shapeHeld = status === 207
    ? kinds.size === 2 && kinds.has("accepted") && kinds.has("rejected")
    : kinds.size === 1 && kinds.has(status === 202 ? "accepted" : "rejected");
  return shapeHeld ? outcomes : wrong(
    `${status} whose items break docs/api.md (a 202 all queued, a 503 all refused, a 207 both; each ` +
      `refusal with its id, code and Retry-After): ${text}`,
  );
}

/** What a `POST` was answered: status, Retry-After, body as text and as JSON, and how long it took. */
interface Answer {
  readonly url: string;
  readonly sentAt: number;
  readonly ms: number;
  readonly status: number;
  readonly retryAfter: string | null;
  readonly errorCodeHeader: string | null;
  readonly text: string;
  readonly body: Record<string, unknown> | undefined;
}

async function answerOf(url: string, sentAt: number, response: Response): Promise<Answer> {
  const ms = Date.now() - sentAt;
  const text = await response.text().catch(() => "");
  let body: Record<string, unknown> | undefined;
  try {
    body = JSON.parse(text) ?? undefined;
  } catch {
    body = undefined;
  }
  return {
    url,
    sentAt,
    ms,
    status: response.status,
    retryAfter: response.headers.get("Retry-After"),
    errorCodeHeader: response.headers.get(ERROR_CODE_HEADER),
    text,
    body,
  };
}

/** A single user's outcome from `answer`. */
function outcomeOf(name: string, answer: Answer): Outcome {
  const { url, sentAt, ms, status, retryAfter, text, body } = answer;
  const base = { name, url, status, sentAt, ms, retryAfter };
  if (status === 202) {
    if (typeof body?.id === "string") return { ...base, kind: "accepted", id: body.id };
    return { ...base, kind: "unexpected", detail: `202 without an id: ${text}` };
  }
  // The API's refusals carry their code in the body; Traefik's own 503 has no JSON body for it.
  const error = typeof body?.error === "string" ? body.error : undefined;
  const code = typeof body?.code === "string" && error !== undefined
    ? body.code
    : answer.errorCodeHeader ?? undefined;
  const refusal = {
    ...base,
    kind: "rejected" as const,
    code,
    detail: error ?? text.trim(),
    ...(typeof body?.id === "string" ? { id: body.id } : {}),
  };
  if (code !== undefined && status >= 400 && status < 500) return refusal;
  if (code !== undefined && status === 503 && retryAfter !== null) return refusal;
  return { ...base, kind: "unexpected", code, detail: `${status} ${text}` };
}

/**
 * One user's outcome from its `item` of a batch's answer: queued (`{id}` in a 202, else
 * `{id, status: 202}`) or refused (`{id, status: 503, code}`, the answer with Retry-After).
 */
function itemOutcome(
  name: string,
  base: Omit<Outcome, "name" | "kind">,
  item: unknown,
  allQueued: boolean,
): Outcome {
  const { id, status, code } = (item ?? {}) as { id?: unknown; status?: unknown; code?: unknown };
  if (typeof id === "string") {
    if (status === 202 || (allQueued && status === undefined)) {
      return { ...base, name, kind: "accepted", status: 202, id };
    }
    if (!allQueued && status === 503 && typeof code === "string" && base.retryAfter !== null) {
      return {
        ...base,
        name,
        kind: "rejected",
        status: 503,
        code,
        id,
        detail: `${base.status} item: ${code}`,
      };
    }
  }
  return { ...base, name, kind: "unexpected", detail: `item ${JSON.stringify(item)}` };
}

/** Posts users with unique names until stopped, recording every outcome. */
export class LoadGenerator {
  readonly outcomes: Outcome[] = [];
  readonly #options: Required<LoadOptions>;
  readonly #workers: Promise<void>[] = [];
  #sent = 0;
  #inFlight = new Map<number, { names: readonly string[]; url: string }>();
  #withdrawn = new Set<string>();
  #stopped = false;
  #startedAt = 0;

  constructor(options: LoadOptions) {
    this.#options = {
      concurrency: 16,
      limit: Infinity,
      ratePerSecond: 0,
      batchSize: 1,
      timeoutMs: 10_000,
      ...options,
    };
  }

  /** Starts the workers; returns at once. */
  start(): this {
    this.#startedAt = Date.now();
    for (let i = 0; i < this.#options.concurrency; i++) this.#workers.push(this.#work());
    return this;
  }

  /** Requests sent so far. */
  get sent(): number {
    return this.#sent;
  }

  /** Requests waiting for an answer now, per API URL. */
  inFlight(url?: string): number {
    let count = 0;
    for (const request of this.#inFlight.values()) {
      if (url === undefined || request.url === url) count++;
    }
    return count;
  }

  /** The names of the users whose request waits for an answer now, per API URL. */
  inFlightNames(url?: string): string[] {
    return [...this.#inFlight.values()]
      .filter((request) => url === undefined || request.url === url)
      .flatMap((request) => request.names);
  }

  /**
   * Sends nothing more to `url` until {@linkcode restore}, as a load balancer
   * does with a replica that is down; requests already sent go on.
   */
  withdraw(url: string): void {
    this.#withdrawn.add(url);
  }

  /** Sends to `url` again. */
  restore(url: string): void {
    this.#withdrawn.delete(url);
  }

  /** Outcomes of this kind so far (one per user). */
  count(kind: Outcome["kind"]): number {
    return this.outcomes.filter((outcome) => outcome.kind === kind).length;
  }

  /** Resolves once every worker finished (the limit was reached, or {@linkcode stop}). */
  async finished(): Promise<Outcome[]> {
    await Promise.all(this.#workers);
    return this.outcomes;
  }

  /** Sends no new request, waits for the ones in flight, and returns every outcome. */
  stop(): Promise<Outcome[]> {
    this.#stopped = true;
    return this.finished();
  }

  async #work(): Promise<void> {
    const { prefix, limit, ratePerSecond, batchSize, timeoutMs } = this.#options;
    while (!this.#stopped && this.#sent < limit) {
      const n = this.#sent++;
      if (ratePerSecond > 0) {
        const due = this.#startedAt + (n * 1_000) / ratePerSecond;
        const wait = due - Date.now();
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
        if (this.#stopped) break;
      }
      let url = this.#pick(n);
      while (url === undefined && !this.#stopped) {
        await new Promise((resolve) => setTimeout(resolve, 10));
        url = this.#pick(n);
      }
      if (url === undefined) break;
      const names = Array.from({ length: batchSize }, (_, i) => `${prefix}-${n * batchSize + i}`);
      const sentAt = Date.now();
      this.#inFlight.set(n, { names, url });
      this.outcomes.push(
        ...batchSize === 1
          ? [await postUser({ url, name: names[0]!, sentAt, timeoutMs })]
          : await postBatch({ url, names, sentAt, timeoutMs }),
      );
      this.#inFlight.delete(n);
    }
  }

  /** Request `n`'s API: round-robin over the ones not withdrawn; undefined when none is left. */
  #pick(n: number): string | undefined {
    const live = this.#options.urls.filter((url) => !this.#withdrawn.has(url));
    return live[n % live.length];
  }
}
