/**
 * UUIDv7 ids (RFC 9562) minted as the `uuid` package's `v7()` mints them —
 * 48 bits of milliseconds, a 32-bit counter seeded at random each new
 * millisecond (so the ids one process mints sort in minting order), then
 * random bits — but with the random bytes drawn from a pool refilled a few
 * kilobytes at a time and the text written straight from a table: an id is
 * minted on every accepted request's path, where one `getRandomValues` call
 * and one 16-byte array per id are a visible share of its CPU.
 *
 * @module
 */

/** Random bytes each id takes: 4 to seed the counter, 6 for the random tail. */
const BYTES_PER_ID = 10;

/** Random bytes fetched at a time: 409 ids per `getRandomValues`. */
const POOL_BYTES = 4096;

const HEX: readonly string[] = Array.from(
  { length: 256 },
  (_, byte) => byte.toString(16).padStart(2, "0"),
);

const pool = new Uint8Array(POOL_BYTES);
let poolUsed = POOL_BYTES;
let lastMs = -Infinity;
let counter = 0;

/** A new UUIDv7 in canonical lowercase form, ordered after every earlier one of this process. */
export function uuidV7(): string {
  if (poolUsed + BYTES_PER_ID > POOL_BYTES) {
    crypto.getRandomValues(pool);
    poolUsed = 0;
  }
  const r = poolUsed;
  poolUsed += BYTES_PER_ID;
  const now = Date.now();
  if (now > lastMs) {
    counter = ((pool[r]! & 0x7f) << 24) | (pool[r + 1]! << 16) | (pool[r + 2]! << 8) |
      pool[r + 3]!;
    lastMs = now;
  } else {
    // The counter wrapped within one millisecond: borrow the next one, as `uuid` does.
    counter = (counter + 1) | 0;
    if (counter === 0) lastMs++;
  }
  const ms = lastMs;
  return HEX[(ms / 0x10000000000) & 0xff]! + HEX[(ms / 0x100000000) & 0xff]! +
    HEX[(ms / 0x1000000) & 0xff]! + HEX[(ms / 0x10000) & 0xff]! + "-" +
    HEX[(ms / 0x100) & 0xff]! + HEX[ms & 0xff]! + "-" +
    HEX[0x70 | ((counter >>> 28) & 0x0f)]! + HEX[(counter >>> 20) & 0xff]! + "-" +
    HEX[0x80 | ((counter >>> 14) & 0x3f)]! + HEX[(counter >>> 6) & 0xff]! + "-" +
    HEX[((counter << 2) & 0xff) | (pool[r + 4]! & 0x03)]! + HEX[pool[r + 5]!]! +
    HEX[pool[r + 6]!]! + HEX[pool[r + 7]!]! + HEX[pool[r + 8]!]! + HEX[pool[r + 9]!]!;
}
