/**
 * A body over BODY_LIMIT_BYTES sent the way Python's http.client (and many other clients) sends
 * it: the whole request written before a byte of the answer is read. Through Traefik and straight
 * to an API replica, with a Content-Length and chunked, the client must read the API's JSON 413;
 * and a body far over the API's discard bound must be cut off, not read to its end.
 *
 * The client is a raw TCP socket, so that the order is the test's own: every byte of the request
 * written before a byte of the answer is read, as such a client does.
 *
 * @module
 */

import assert from "node:assert/strict";
import { OVERSIZED_BODY_DISCARD_BYTES } from "@users-pipeline/server/app";
import { startTestStack, withStackOutput } from "@users-pipeline/harness/services";

/** A body far over BODY_LIMIT_BYTES (16 KiB) and under the API's discard bound. */
const TEN_MIB = 10 * 1024 * 1024;

/** Bytes written per chunk of a chunked body (and per write of a whole one). */
const CHUNK = 64 * 1024;

const encoder = new TextEncoder();

/** What a client that writes its whole request before reading saw. */
interface Exchange {
  /** Body bytes the socket took (all of them, unless the connection was cut first). */
  wrote: number;
  /** Why writing stopped early; undefined when the whole request went out. */
  writeError?: string;
  /** The answer's status; undefined when none could be read. */
  status?: number;
  /** The answer's body. */
  body?: string;
  /** Why reading failed; undefined when a whole answer was read. */
  readError?: string;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<number> {
  let written = 0;
  while (written < bytes.length) written += await conn.write(bytes.subarray(written));
  return written;
}

/**
 * POSTs `size` bytes of spaces to `url`/users, writing the head and the whole body (in
 * Content-Length form or chunked) before reading, then reads one answer.
 */
async function sendWholeThenRead(
  url: string,
  options: { size: number; chunked: boolean },
): Promise<Exchange> {
  const { hostname, port, host } = new URL(url);
  const conn = await Deno.connect({ hostname, port: Number(port) });
  const exchange: Exchange = { wrote: 0 };
  try {
    await writeAll(
      conn,
      encoder.encode(
        `POST /users HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\n` +
          (options.chunked
            ? "Transfer-Encoding: chunked\r\n"
            : `Content-Length: ${options.size}\r\n`) +
          "\r\n",
      ),
    );
    const piece = new Uint8Array(CHUNK).fill(0x20);
    const chunkHead = encoder.encode(`${CHUNK.toString(16)}\r\n`);
    const crlf = encoder.encode("\r\n");
    // Both forms send CHUNK bytes at a time; `size` is a multiple of it in every test.
    for (let sent = 0; sent < options.size; sent += CHUNK) {
      if (options.chunked) await writeAll(conn, chunkHead);
      exchange.wrote += await writeAll(conn, piece);
      if (options.chunked) await writeAll(conn, crlf);
    }
    if (options.chunked) await writeAll(conn, encoder.encode("0\r\n\r\n"));
  } catch (error) {
    exchange.writeError = String(error);
  }
  try {
    Object.assign(exchange, await readAnswer(conn));
  } catch (error) {
    exchange.readError = String(error);
  } finally {
    conn.close();
  }
  return exchange;
}

/** One HTTP/1.1 answer with a Content-Length, read from `conn`. */
async function readAnswer(conn: Deno.Conn): Promise<{ status: number; body: string }> {
  let received = new Uint8Array(0);
  const buffer = new Uint8Array(CHUNK);
  for (;;) {
    const text = new TextDecoder().decode(received);
    const end = text.indexOf("\r\n\r\n");
    if (end !== -1) {
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(text.slice(0, end))?.[1]);
      if (received.length >= end + 4 + length) {
        return {
          status: Number(text.slice(9, 12)),
          body: text.slice(end + 4, end + 4 + length),
        };
      }
    }
    const n = await conn.read(buffer);
    if (n === null) throw new Error(`connection closed after ${JSON.stringify(text)}`);
    const grown = new Uint8Array(received.length + n);
    grown.set(received);
    grown.set(buffer.subarray(0, n), received.length);
    received = grown;
  }
}

/** What the kernel can hold of a stream that nobody reads: the sender's and the receiver's buffers. */
async function socketBufferBytes(): Promise<number> {
  const most = async (name: string) =>
    Number((await Deno.readTextFile(`/proc/sys/net/ipv4/${name}`)).trim().split(/\s+/)[2]);
  return await most("tcp_wmem") + await most("tcp_rmem");
}

Deno.test("a body over the limit sent whole before reading gets the API's 413, through Traefik and direct; one far over the discard bound is cut off unread", async () => {
  await using test = await startTestStack({ servers: 1, consumers: 0 });
  const { stack } = test;
  const replica = `http://127.0.0.1:${stack.ports.api[0]}`;
  await withStackOutput(test, async () => {
    const problems: string[] = [];
    for (const [where, url] of [["through Traefik", stack.url], ["straight to the API", replica]]) {
      for (const chunked of [false, true]) {
        const what = `10 MiB ${chunked ? "chunked" : "with a Content-Length"} ${where}`;
        const exchange = await sendWholeThenRead(url!, { size: TEN_MIB, chunked });
        let code: unknown;
        try {
          code = JSON.parse(exchange.body ?? "").code;
        } catch {
          code = undefined;
        }
        if (
          exchange.writeError !== undefined || exchange.status !== 413 || code !== "body_too_large"
        ) {
          problems.push(`${what}: ${JSON.stringify(exchange)}`);
        }
      }
    }
    assert.deepEqual(problems, [], "every client must send its whole body and read the API's 413");

    // Far over the bound: more than the bound plus everything the kernel can buffer between the
    // client and the API, so that a whole write would prove the API read past its bound.
    const buffered = await socketBufferBytes();
    const far = Math.ceil((OVERSIZED_BODY_DISCARD_BYTES + 2 * buffered) / CHUNK) * CHUNK;
    for (const chunked of [false, true]) {
      const what = `${far} bytes ${chunked ? "chunked" : "with a Content-Length"} to the API`;
      const exchange = await sendWholeThenRead(replica, { size: far, chunked });
      assert.ok(exchange.writeError !== undefined, `${what} was read whole`);
      assert.ok(
        exchange.wrote <= OVERSIZED_BODY_DISCARD_BYTES + buffered,
        `${what}: the API took ${exchange.wrote} bytes, more than its bound ` +
          `${OVERSIZED_BODY_DISCARD_BYTES} and ${buffered} bytes of socket buffers`,
      );
      // docs/api.md: a body over the bound gets its connection closed; a 413 read before is fine.
      if (exchange.status !== undefined) assert.equal(exchange.status, 413, what);
    }

    // The replica still serves.
    const accepted = await fetch(`${stack.url}/users`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: '{"name": "after the oversized bodies"}',
    });
    assert.equal(accepted.status, 202, await accepted.text());
  });
});
