import assert from "node:assert/strict";
import { EventLog } from "@users-pipeline/runtime/event_log";
import { ManualClock } from "@users-pipeline/runtime/manual_clock";
import { Readiness } from "@users-pipeline/runtime/readiness";
import {
  type GracefulServer,
  type GracefulServerOptions,
  serveGracefully,
} from "./graceful_server.ts";

const DRAIN_MS = 500;
const LINGER_MS = 400;

/** A log record as written, and when. */
interface Written {
  readonly event: string;
  readonly at: number;
  readonly record: Record<string, unknown>;
}

/** What a test sees of a server on loopback, its handler gated for `/slow`. */
interface Started {
  readonly server: GracefulServer;
  readonly port: number;
  readonly written: Written[];
  /** When `close` was called and when it finished, by `performance.now()`. */
  readonly closes: { called: number; done?: number }[];
  /** Lets the pending `/slow` requests answer. */
  release(): void;
  /** Resolves when a `/slow` request has reached the handler. */
  slowReceived: Promise<void>;
}

async function start(options: Partial<GracefulServerOptions> = {}): Promise<Started> {
  const written: Written[] = [];
  const closes: { called: number; done?: number }[] = [];
  const log = new EventLog("server", {
    write: (line) => {
      const record = JSON.parse(line);
      written.push({ event: record.event, at: performance.now(), record });
    },
  });
  const readiness = new Readiness({}, { timeoutMs: 100 });
  const gate = Promise.withResolvers<void>();
  const received = Promise.withResolvers<void>();
  const server = await serveGracefully(async (request) => {
    const path = new URL(request.url).pathname;
    if (path === "/readyz") return await readiness.response();
    if (path === "/slow") {
      received.resolve();
      await gate.promise;
      return new Response("x".repeat(100_000));
    }
    // A body that fails after its first bytes, with the error the path names.
    const failing = { "/aborted": Deno.errors.ConnectionAborted, "/broken": RangeError }[path];
    if (failing !== undefined) {
      let sent = false;
      return new Response(
        new ReadableStream({
          pull(controller) {
            if (sent) return controller.error(new failing(`failed ${path}`));
            controller.enqueue(new TextEncoder().encode("partial"));
            sent = true;
          },
        }),
      );
    }
    return new Response("hello");
  }, {
    port: 0,
    hostname: "127.0.0.1",
    readiness,
    drainMs: DRAIN_MS,
    lingerMs: LINGER_MS,
    inFlightGraceMs: 5_000,
    log,
    close: async () => {
      const entry: { called: number; done?: number } = { called: performance.now() };
      closes.push(entry);
      await new Promise((resolve) => setTimeout(resolve, 20));
      entry.done = performance.now();
    },
    ...options,
  });
  return {
    server,
    port: server.addr.port,
    written,
    closes,
    release: () => gate.resolve(),
    slowReceived: received.promise,
  };
}

/**
 * One HTTP/1.1 request on a connection of its own, as a proxy sends it: the
 * status, the head in lower case, and the body (read to its Content-Length).
 */
async function rawRequest(
  port: number,
  path: string,
): Promise<{ status: number; head: string; body: string }> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(new TextEncoder().encode(`GET ${path} HTTP/1.1\r\nHost: test\r\n\r\n`));
    const decoder = new TextDecoder();
    const buffer = new Uint8Array(65_536);
    let text = "";
    for (;;) {
      const read = await conn.read(buffer);
      if (read === null) throw new Error(`Cannot read the answer to ${path}: closed early`);
      text += decoder.decode(buffer.subarray(0, read), { stream: true });
      const end = text.indexOf("\r\n\r\n");
      if (end < 0) continue;
      const head = text.slice(0, end).toLowerCase();
      const length = Number(/\r\ncontent-length: (\d+)/.exec(head)?.[1]);
      if (Number.isNaN(length)) throw new Error(`Cannot read the answer to ${path}: no length`);
      if (text.length - end - 4 < length) continue;
      return { status: Number(head.split(" ")[1]), head, body: text.slice(end + 4) };
    }
  } finally {
    conn.close();
  }
}

/** Whether a new connection to `port` is refused. */
async function refused(port: number): Promise<boolean> {
  try {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    conn.close();
    return false;
  } catch (error) {
    if (error instanceof Deno.errors.ConnectionRefused) return true;
    // Reset: the connection was queued as the listener closed; the next one tells.
    if (error instanceof Deno.errors.ConnectionReset) return false;
    throw error;
  }
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 3_000) {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`Cannot see ${what} within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

Deno.test("serveGracefully() answers /readyz 503 during the drain and every other request with Connection: close", async () => {
  const { server, port, written, release } = await start();
  release();
  const before = await rawRequest(port, "/readyz");
  assert.equal(before.status, 200);
  assert.doesNotMatch(before.head, /\r\nconnection: close/, "kept alive before the stop");

  const stopped = server.stop("SIGTERM");
  const readyz = await rawRequest(port, "/readyz");
  assert.equal(readyz.status, 503);
  assert.match(readyz.body, /draining/);
  assert.match(readyz.head, /\r\nconnection: close/);
  const other = await rawRequest(port, "/users");
  assert.equal(other.status, 200, "served as before the stop");
  assert.equal(other.body, "hello");
  assert.match(other.head, /\r\nconnection: close/);

  const stopping = written.find((w) => w.event === "stopping");
  assert.equal(stopping?.record.signal, "SIGTERM");
  assert.equal(stopping?.record.drain_ms, DRAIN_MS);
  assert.ok(!written.some((w) => w.event === "stopped"), "still draining");
  await stopped;
});

Deno.test("serveGracefully() answers in full a request received before the listener closed, and refuses new connections after", async () => {
  const { server, port, written, closes, release, slowReceived } = await start();
  const slow = fetch(`http://127.0.0.1:${port}/slow`);
  await slowReceived;
  const stopAt = performance.now();
  const stopped = server.stop("SIGTERM");
  // After the drain the listener closes while /slow is still in flight.
  await until("the listener closed", () => refused(port));
  assert.ok(performance.now() - stopAt >= DRAIN_MS - 10, "not before the drain ended");
  assert.equal(closes.length, 0, "the clients stay open while a request is in flight");
  release();
  const response = await slow;
  assert.equal(response.status, 200);
  assert.equal((await response.text()).length, 100_000);
  await stopped;
  assert.equal(closes.length, 1);
  assert.ok(written.some((w) => w.event === "stopped"));
});

Deno.test("serveGracefully() says stopped only after lingering with its port closed", async () => {
  const { server, port, written, closes, release } = await start();
  release();
  const stopped = server.stop("SIGINT");
  let finished = false;
  const serverFinished = server.finished.then(() => finished = true);
  await until("the clients closed", () => Promise.resolve(closes[0]?.done !== undefined));
  assert.equal(await refused(port), true, "the port is closed during the linger");
  assert.ok(!written.some((w) => w.event === "stopped"), "not stopped while lingering");
  assert.equal(finished, false, "not finished while lingering");
  await stopped;
  await serverFinished;
  const stoppedAt = written.find((w) => w.event === "stopped")!.at;
  assert.ok(stoppedAt - closes[0]!.done! >= LINGER_MS - 10, "the linger follows the close");
  assert.deepEqual(written.map((w) => w.event), ["listening", "stopping", "stopped"]);
});

Deno.test("serveGracefully() runs one stop for any number of signals", async () => {
  let drains = 0;
  const { server, written, closes, release } = await start({
    readiness: { drain: () => void drains++ },
  });
  release();
  const first = server.stop("SIGTERM");
  const second = server.stop("SIGTERM");
  const third = server.stop("SIGINT");
  assert.equal(second, first);
  assert.equal(third, first);
  await first;
  assert.equal(drains, 1);
  assert.equal(closes.length, 1);
  assert.equal(written.filter((w) => w.event === "stopping").length, 1);
  assert.equal(written.filter((w) => w.event === "stopped").length, 1);
});

Deno.test("serveGracefully() listens only once listenWhen settled, rejected or not", async () => {
  for (const outcome of ["resolve", "reject"] as const) {
    const when = Promise.withResolvers<void>();
    let listening = false;
    const starting = start({ listenWhen: when.promise }).then((started) => {
      listening = true;
      return started;
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(listening, false, outcome);
    if (outcome === "resolve") when.resolve();
    else when.reject(new Error("Redis did not get ready in time"));
    const { server, port, release } = await starting;
    release();
    const response = await fetch(`http://127.0.0.1:${port}/users`);
    assert.equal(await response.text(), "hello");
    await server.stop("SIGTERM");
  }
});

Deno.test("serveGracefully() counts its drain and its linger on the clock it is given", async () => {
  const clock = new ManualClock();
  const { server, port, written, closes, release } = await start({ clock });
  release();
  const stopped = server.stop("SIGTERM");
  await clock.tick(DRAIN_MS - 1);
  assert.equal(await refused(port), false, "still draining");
  await clock.tick(1);
  await until("the clients closed", () => Promise.resolve(closes[0]?.done !== undefined));
  assert.equal(await refused(port), true);
  await clock.tick(LINGER_MS - 1);
  assert.ok(!written.some((w) => w.event === "stopped"), "still lingering");
  await clock.tick(1);
  await stopped;
  assert.deepEqual(written.map((w) => w.event), ["listening", "stopping", "stopped"]);
  assert.equal(clock.pending, 0);
});

Deno.test("serveGracefully() logs a response body that failed, but not one cut on purpose (ConnectionAborted)", async () => {
  const { server, port, written, release } = await start();
  release();
  for (const path of ["/aborted", "/broken"]) {
    const response = await fetch(`http://127.0.0.1:${port}${path}`);
    await response.text().catch(() => {});
  }
  await until("the broken body logged", () => {
    return Promise.resolve(written.some((w) => w.event === "unexpected_error"));
  });
  // The cut was sent first: had it been logged, its line would be there by now.
  assert.deepEqual(
    written.filter((w) => w.event === "unexpected_error").map((w) => w.record.msg),
    ["unexpected error: failed /broken"],
  );
  await server.stop("SIGTERM");
});
