/**
 * The body of `POST /users/batch` as a list of items, not yet validated: a JSON array, or NDJSON
 * (`application/x-ndjson`, one JSON value a line) for clients that stream. A body that is neither
 * is a 400 with its code, naming the NDJSON line at fault; a batch over `maxItems` is a 413.
 * Each item is then validated as the single route validates its body (`app.ts`).
 *
 * NDJSON's lines end with `\n` (a `\r` before it is dropped); the last line may end with one or
 * not. A blank line is an error rather than skipped: it is most likely a user lost on the way, and
 * a line number tells the client where.
 *
 * @module
 */

import { ApiError } from "./api_error.ts";

/** The Content-Type of a batch sent as NDJSON. */
export const NDJSON = "application/x-ndjson";

/**
 * The items of a batch body `text` (`ndjson`: one a line); throws {@linkcode ApiError}
 * `invalid_json`, `invalid_batch`, `invalid_ndjson` or `too_many_items`.
 */
export function parseBatch(
  text: string,
  { ndjson, maxItems }: { readonly ndjson: boolean; readonly maxItems: number },
): unknown[] {
  if (ndjson) return parseLines(text, maxItems);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new ApiError("invalid_json", {
      message: 'body must be valid JSON such as [{"name": "Ada"}, {"name": "Grace"}]',
    });
  }
  if (!Array.isArray(value)) {
    throw new ApiError("invalid_batch", {
      message: 'body must be a JSON array of users such as [{"name": "Ada"}, {"name": "Grace"}]',
    });
  }
  checkCount(value.length, maxItems);
  return value;
}

function parseLines(text: string, maxItems: number): unknown[] {
  const lines = text.split("\n");
  if (lines.at(-1) === "") lines.pop();
  // Counted before a line is parsed: a batch far over the bound costs no parsing.
  checkCount(lines.length, maxItems);
  return lines.map((raw, i) => {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    if (line.trim() === "") {
      throw new ApiError("invalid_ndjson", {
        message: `line ${i + 1} is blank: NDJSON takes one user a line`,
        line: i + 1,
      });
    }
    try {
      return JSON.parse(line);
    } catch {
      throw new ApiError("invalid_ndjson", {
        message: `line ${i + 1} is not JSON such as {"name": "Ada"}`,
        line: i + 1,
      });
    }
  });
}

function checkCount(count: number, maxItems: number): void {
  if (count > maxItems) {
    throw new ApiError("too_many_items", {
      message: `a batch holds at most ${maxItems} users: this one holds ${count}`,
    });
  }
}
