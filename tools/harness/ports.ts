/**
 * Loopback ports for the processes tooling starts: free ones to take, and
 * whether a given one is free.
 *
 * @module
 */

/**
 * Where {@linkcode freePorts} picks: below Linux's default ephemeral range (32768-60999), which is
 * where port 0 would land and where the kernel picks the source port of every outgoing
 * connection. A port taken from there and released until its server binds it can meanwhile become
 * a client's source port (a load generator opening connections, say), and the server's bind fails.
 */
export const PICK_RANGE = { from: 20_000, to: 32_000 } as const;

/**
 * `count` distinct free loopback ports from {@linkcode PICK_RANGE}. All are held open together
 * while they are picked, so no two are the same.
 *
 * @throws {RangeError} when the range holds fewer than `count` free ports after many tries.
 */
export function freePorts(count: number): number[] {
  const listeners: Deno.Listener[] = [];
  try {
    for (let tries = 0; listeners.length < count; tries++) {
      if (tries > 10_000) {
        throw new RangeError(
          `Cannot find ${count} free ports as ${PICK_RANGE.from}-${PICK_RANGE.to} has too few: current value is ${listeners.length}`,
        );
      }
      const port = PICK_RANGE.from +
        Math.floor(Math.random() * (PICK_RANGE.to - PICK_RANGE.from));
      try {
        listeners.push(Deno.listen({ hostname: "127.0.0.1", port }));
      } catch (error) {
        if (!(error instanceof Deno.errors.AddrInUse)) throw error;
      }
    }
    return listeners.map((listener) => (listener.addr as Deno.NetAddr).port);
  } finally {
    for (const listener of listeners) listener.close();
  }
}

/** One free loopback port. */
export function freePort(): number {
  return freePorts(1)[0] ?? 0;
}

/** Whether nothing listens on loopback `port` now (so a server of ours may take it). */
export function isPortFree(port: number): boolean {
  try {
    Deno.listen({ hostname: "127.0.0.1", port }).close();
    return true;
  } catch (error) {
    if (error instanceof Deno.errors.AddrInUse) return false;
    throw error;
  }
}
