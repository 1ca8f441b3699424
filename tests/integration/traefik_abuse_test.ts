/**
 * What one client can hold at Traefik's public entry point (docs/production.md, "Abuse bounds"),
 * against the native stack's Traefik, which runs traefik/traefik.yml's entry point `web`: a request
 * trickled in is cut at `readTimeout`, a head over `maxHeaderBytes` is answered 431, and a flood of
 * connections that send nothing neither stops other clients being served nor outlives
 * `readTimeout`. traefik/traefik-production.yml repeats these settings; the first test holds the
 * two files equal but for what production changes.
 *
 * The clients are raw TCP sockets, so that what is sent, and when, is the test's own.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { parse as parseYaml } from "yaml";
import { queueKeys } from "@users-pipeline/queue";
import { REPO_DIR, startTestStack, withStackOutput } from "@users-pipeline/harness/services";
import { holdLoadTurnForFile } from "@users-pipeline/harness/load_turn";

type Yaml = Record<string, unknown>;

function readYaml(path: string): Yaml {
  return parseYaml(Deno.readTextFileSync(`${REPO_DIR}/${path}`)) as Yaml;
}

const shared = readYaml("traefik/traefik.yml");
const web = (shared.entryPoints as Yaml).web as {
  transport: { respondingTimeouts: Yaml };
  http: { maxHeaderBytes: number };
};

/** docs/production.md, "Abuse bounds": "A request must arrive whole within 10 s". */
const READ_TIMEOUT_MS = 10_000;

/** docs/production.md, "Abuse bounds": "A request head is at most 16 KiB". */
const MAX_HEADER_BYTES = 16 * 1024;

/** What Go's HTTP server takes beyond MaxHeaderBytes before it answers 431. */
const GO_HEADER_SLACK = 4096;

/**
 * How late past `readTimeout` a cut may come: Go checks the deadline on the next read, and the
 * client's read loop polls; both are milliseconds, a second covers a busy machine.
 */
const CUT_SLACK_MS = 1_000;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A user's POST head on `host` with `extra` header lines, for a body of `length` bytes. */
function postHead(host: string, length: number, extra = ""): string {
  return `POST /users HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${length}\r\nConnection: close\r\n${extra}\r\n`;
}

/**
 * Reads `conn` until the peer closes it (or resets it), and says after how many ms from `since`,
 * with everything that came.
 */
async function readToClose(conn: Deno.Conn, since: number): Promise<{ ms: number; text: string }> {
  const buffer = new Uint8Array(16 * 1024);
  let text = "";
  for (;;) {
    let n: number | null;
    try {
      n = await conn.read(buffer);
    } catch {
      n = null;
    }
    if (n === null) return { ms: performance.now() - since, text };
    text += decoder.decode(buffer.subarray(0, n));
  }
}

function statusOf(text: string): number | undefined {
  const status = /^HTTP\/1\.1 (\d{3})/.exec(text)?.[1];
  return status === undefined ? undefined : Number(status);
}

/** One request on a fresh connection, written whole; its status and how long the answer took. */
async function oneRequest(url: string, request: string): Promise<{ status?: number; ms: number }> {
  const { hostname, port } = new URL(url);
  const start = performance.now();
  const conn = await Deno.connect({ hostname, port: Number(port) });
  try {
    await conn.write(encoder.encode(request));
    const { text } = await readToClose(conn, start);
    return { status: statusOf(text), ms: performance.now() - start };
  } finally {
    try {
      conn.close();
    } catch {
      // Already closed by the peer.
    }
  }
}

/**
 * Sends `prefix` at once, then `slow` a byte every `intervalMs`, until the peer closes the
 * connection; resolves with when that was (ms from the first byte) and what it answered.
 */
async function trickle(
  url: string,
  { prefix, slow, intervalMs }: { prefix: string; slow: string; intervalMs: number },
): Promise<{ ms: number; text: string }> {
  const { hostname, port } = new URL(url);
  const conn = await Deno.connect({ hostname, port: Number(port) });
  const start = performance.now();
  const closed = readToClose(conn, start);
  let open = true;
  closed.then(() => open = false);
  try {
    if (prefix !== "") await conn.write(encoder.encode(prefix));
    for (const byte of slow) {
      if (!open) break;
      await conn.write(encoder.encode(byte));
      await new Promise((resolve) => setTimeout(resolve, intervalMs));
    }
  } catch {
    // The peer closed the connection while a byte was on its way: what `closed` reports.
  }
  const result = await closed;
  try {
    conn.close();
  } catch {
    // Already closed.
  }
  return result;
}

function percentile(values: readonly number[], p: number): number {
  const sorted = values.toSorted((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!;
}

/** The parts of a static configuration that production changes. */
interface StaticConfig {
  entryPoints: { web: { address?: string; http: { tls?: unknown } } };
  providers: { file: { directory?: string } };
}

/** `config` without what production changes: web's address and TLS, the routes' directory. */
function withoutProductionChanges(config: Yaml): Yaml {
  const copy = structuredClone(config) as Yaml & StaticConfig;
  delete copy.entryPoints.web.address;
  delete copy.entryPoints.web.http.tls;
  delete copy.providers.file.directory;
  return copy;
}

// A flood of connections, timed against a baseline: one at a time on the machine (load_turn.ts).
holdLoadTurnForFile("tests/integration/traefik_abuse_test.ts");

Deno.test("traefik.yml's entry point web holds the bounds docs/production.md gives", () => {
  assert.deepEqual(web.transport.respondingTimeouts, { readTimeout: "10s", idleTimeout: "180s" });
  assert.equal(web.http.maxHeaderBytes, MAX_HEADER_BYTES);
});

Deno.test("traefik-production.yml is traefik.yml with web on 8443 in TLS and routes from dynamic-production/", () => {
  const production = readYaml("traefik/traefik-production.yml");
  const changed = production as Yaml & StaticConfig;
  assert.equal(changed.entryPoints.web.address, ":8443");
  assert.deepEqual(changed.entryPoints.web.http.tls, {});
  assert.equal(changed.providers.file.directory, "./dynamic-production");
  assert.deepEqual(withoutProductionChanges(production), withoutProductionChanges(shared));
});

Deno.test({
  name:
    "a request trickled in, head or body, is cut at readTimeout, a head over maxHeaderBytes gets 431, and a flood of silent connections neither stops others nor outlives readTimeout",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await using test = await startTestStack({ servers: 1, consumers: 0 });
    const { stack } = test;
    const { host } = new URL(stack.url);
    const redis = new Redis(stack.env.REDIS_URL!);
    try {
      await withStackOutput(test, async () => {
        const accepted = (name: string, extra = "") => {
          const user = JSON.stringify({ name });
          return oneRequest(stack.url, postHead(host, user.length, extra) + user);
        };

        // Trickled: a byte every 400 ms, far more than fits in readTimeout: a head, and a body
        // after a whole head (padded with spaces, which JSON allows). Both at once.
        const body = '{"name": "trickled"}'.padEnd(100);
        const [head, trickledBody] = await Promise.all([
          trickle(stack.url, { prefix: "", slow: postHead(host, body.length), intervalMs: 400 }),
          trickle(stack.url, { prefix: postHead(host, body.length), slow: body, intervalMs: 400 }),
        ]);
        // The body comes after a whole head: readTimeout from the head's first byte. The head's
        // first bytes are read first to tell TLS from plain HTTP, under a readTimeout of its own,
        // so a head trickled from its first byte has up to twice as long.
        const bounds = [["head", head, 2 * READ_TIMEOUT_MS], [
          "body",
          trickledBody,
          READ_TIMEOUT_MS,
        ]];
        for (const [what, cut, bound] of bounds as [string, typeof head, number][]) {
          assert.ok(
            cut.ms >= READ_TIMEOUT_MS - CUT_SLACK_MS && cut.ms <= bound + CUT_SLACK_MS,
            `a trickled ${what} was cut after ${cut.ms.toFixed(0)} ms, not between readTimeout ` +
              `(${READ_TIMEOUT_MS} ms) and ${bound} ms: ${JSON.stringify(cut.text.slice(0, 200))}`,
          );
        }
        // A head cut short has nothing to answer: Go's server closes the connection. A body cut
        // short fails the request Traefik was forwarding: it answers 504 when the forwarding
        // fails first, 499 (its code for a client gone) when the cut request's end is seen first;
        // which comes first is a race inside Traefik (docs/production.md, "Abuse bounds").
        assert.equal(head.text, "", "the answer to a trickled head");
        const bodyStatus = statusOf(trickledBody.text);
        assert.ok(
          bodyStatus === 504 || bodyStatus === 499,
          `a trickled body: ${JSON.stringify(trickledBody.text.slice(0, 200))}`,
        );
        assert.equal(await redis.llen(queueKeys("users").queue), 0, "a trickled user was queued");

        // The head's bound: just under it is served, just over it is 431.
        const limit = MAX_HEADER_BYTES + GO_HEADER_SLACK;
        const under = await accepted(
          "under the head bound",
          `X-Pad: ${"a".repeat(limit - 1024)}\r\n`,
        );
        assert.equal(under.status, 202, `a head of ${limit - 1024} bytes`);
        const over = await accepted("over the head bound", `X-Pad: ${"a".repeat(limit + 1)}\r\n`);
        assert.equal(over.status, 431, `a head over ${limit} bytes`);
        const auth = await accepted("long key", `Authorization: Bearer ${"k".repeat(limit)}\r\n`);
        assert.equal(auth.status, 431, `an Authorization header over ${limit} bytes`);

        // Baseline: users on fresh connections, one after another, on the quiet stack.
        const baseline: number[] = [];
        for (let i = 0; i < 40; i++) {
          const answer = await accepted(`baseline ${i}`);
          assert.equal(answer.status, 202);
          baseline.push(answer.ms);
        }
        // The flood: thousands of connections opened at once, then held without a byte.
        const FLOOD = 3_000;
        const { hostname, port } = new URL(stack.url);
        const floodStart = performance.now();
        const flood = await Promise.all(
          Array.from({ length: FLOOD }, () => Deno.connect({ hostname, port: Number(port) })),
        );
        const closes = flood.map((conn) => readToClose(conn, floodStart));
        const during: number[] = [];
        const refused: string[] = [];
        for (let i = 0; i < 40; i++) {
          const answer = await accepted(`during the flood ${i}`);
          if (answer.status !== 202) refused.push(`${i}: ${answer.status}`);
          during.push(answer.ms);
        }
        const closedAt = (await Promise.all(closes)).map((c) => c.ms);
        for (const conn of flood) {
          try {
            conn.close();
          } catch {
            // Closed by Traefik.
          }
        }
        assert.deepEqual(refused, [], "every user sent during the flood must get its 202");
        // Were the flood to stall Traefik's listener, an answer would wait seconds, until
        // readTimeout closed the flood. The file does not take the machine's load turn (it loads
        // nothing but Traefik's accept loop), so the bound leaves room for a test beside it:
        // five times the baseline's p95 and 100 ms more, still a hundredth of a stall.
        const bound = 5 * percentile(baseline, 0.95) + 100;
        const slowest = Math.max(...during);
        assert.ok(
          slowest <= bound,
          `the slowest answer during the flood took ${slowest.toFixed(1)} ms, over ${
            bound.toFixed(1)
          } ms (baseline p95 ${percentile(baseline, 0.95).toFixed(1)} ms)`,
        );
        const lastClose = Math.max(...closedAt);
        assert.ok(
          lastClose <= READ_TIMEOUT_MS + CUT_SLACK_MS,
          `the last of ${FLOOD} silent connections was closed after ${lastClose.toFixed(0)} ms`,
        );
        console.log(
          `trickled head cut at ${head.ms.toFixed(0)} ms, body at ${
            trickledBody.ms.toFixed(0)
          } ms (answer: ${JSON.stringify(trickledBody.text.split("\r\n")[0])}); ` +
            `head over ${limit} bytes: 431; baseline p95 ${
              percentile(baseline, 0.95).toFixed(1)
            } ms, ` +
            `slowest of 40 during a flood of ${FLOOD}: ${
              slowest.toFixed(1)
            } ms; the flood closed ` +
            `between ${Math.min(...closedAt).toFixed(0)} and ${lastClose.toFixed(0)} ms`,
        );
      });
    } finally {
      redis.disconnect();
    }
  },
});
