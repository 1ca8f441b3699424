/**
 * Bearer keys: the clients' keys of CLIENT_KEYS_FILE, read by {@linkcode parseClientKeys}, and the
 * one check of an `Authorization: Bearer <key>` header, {@linkcode bearerCheck}, that both the
 * client routes (`app.ts`) and the admin routes (ADMIN_TOKEN, `admin_routes.ts`) use.
 *
 * The file names one client a line, `<name> <key>`; a `#` at the start of a line or after a space
 * starts a comment, blank lines are skipped. A name is what metrics and log records carry, never the key, so the file is the only
 * place a key is written down besides the client's own.
 *
 * A key is compared in constant time: the presented token and every key are compared as SHA-256
 * digests (equal lengths, whatever was sent) with `timingSafeEqual`, against every key, with no
 * early exit at a match, so how long an answer takes says neither how much of a guess was right
 * nor which key it was.
 *
 * @module
 */

import { createHash, timingSafeEqual } from "node:crypto";

declare module "@hono/hono" {
  interface ContextVariableMap {
    /** Who sent a request to a client route: its key's name, or {@linkcode ANONYMOUS}. */
    client: string;
  }
}

/** The client of every request when no client keys are configured. */
export const ANONYMOUS = "anonymous";

/** One client of CLIENT_KEYS_FILE: the name it is known by, and its secret key. */
export interface ClientKey {
  readonly name: string;
  readonly key: string;
}

/** A client's name: what labels its metrics, so short and plain. */
const NAME = /^[a-z0-9][a-z0-9_.-]{0,62}$/;
/** A key: 32 or more printable ASCII characters without spaces (it travels in a header). */
const KEY = /^[\x21-\x7e]{32,}$/;
/** The longest key: one over it could never pass {@linkcode MAX_AUTHORIZATION_BYTES}. */
const MAX_KEY_LENGTH = 512;

/**
 * The longest `Authorization` header looked at; a longer one is refused (431) before any digest
 * is computed. A key is at most {@linkcode MAX_KEY_LENGTH} characters, so no valid header is near
 * it, while a client cannot make each request hash kilobytes.
 */
export const MAX_AUTHORIZATION_BYTES = 1_024;

/**
 * The clients of a CLIENT_KEYS_FILE's `text`; throws a `TypeError` naming `variable` and the line
 * of the first bad entry, never its key.
 */
export function parseClientKeys(text: string, variable = "CLIENT_KEYS_FILE"): ClientKey[] {
  const clients: ClientKey[] = [];
  const bad = (line: number, rule: string) =>
    new TypeError(`Cannot start server: ${variable} line ${line}: ${rule}`);
  text.split("\n").forEach((raw, i) => {
    // A `#` starts a comment at the start of a line or after a space; a key may hold one.
    const line = raw.replace(/(^|\s)#.*$/, "").trim();
    if (line === "") return;
    const fields = line.split(/[ \t]+/);
    if (fields.length !== 2) {
      throw bad(i + 1, "must be `<name> <key>`, separated by a space, the key without spaces");
    }
    const [name = "", key = ""] = fields;
    if (!NAME.test(name)) throw bad(i + 1, "the name must match [a-z0-9][a-z0-9_.-]{0,62}");
    if (!KEY.test(key) || key.length > MAX_KEY_LENGTH) {
      throw bad(
        i + 1,
        `the key must be 32 to ${MAX_KEY_LENGTH} printable ASCII characters without spaces`,
      );
    }
    if (clients.some((client) => client.name === name)) {
      throw bad(i + 1, `the name ${name} is given twice`);
    }
    if (clients.some((client) => client.key === key)) {
      throw bad(i + 1, "the key is another client's too");
    }
    clients.push({ name, key });
  });
  return clients;
}

/** Who a bearer header names: a client's name, or why none. */
export type Bearer =
  | { readonly client: string }
  | { readonly refused: "key_missing" | "key_invalid" | "authorization_too_large" };

function digest(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}

/**
 * The check of an `Authorization` header against `keys`: the name of the client whose key it
 * carries as `Bearer <key>`, else why not (no bearer token, a token that is no key, a header
 * longer than {@linkcode MAX_AUTHORIZATION_BYTES}).
 */
export function bearerCheck(keys: readonly ClientKey[]): (header: string | undefined) => Bearer {
  const digests = keys.map(({ key }) => digest(key));
  return (header) => {
    if (header === undefined) return { refused: "key_missing" };
    if (header.length > MAX_AUTHORIZATION_BYTES) return { refused: "authorization_too_large" };
    const match = /^Bearer +(\S+) *$/i.exec(header);
    if (match === null) return { refused: "key_missing" };
    const presented = digest(match[1]!);
    let found = -1;
    // Every key is compared, whatever matched before: no early exit.
    digests.forEach((expected, i) => {
      if (timingSafeEqual(presented, expected)) found = i;
    });
    return found === -1 ? { refused: "key_invalid" } : { client: keys[found]!.name };
  };
}
