/**
 * Loopback ports for the processes tooling starts: free ones to take, and
 * whether a given one is free.
 *
 * @module
 */

/**
 * `count` distinct free loopback ports. All are held open together while
 * they are picked, so no two are the same.
 */
export function freePorts(count: number): number[] {
  const listeners = Array.from(
    { length: count },
    () => Deno.listen({ hostname: "127.0.0.1", port: 0 }),
  );
  const ports = listeners.map((listener) => (listener.addr as Deno.NetAddr).port);
  for (const listener of listeners) listener.close();
  return ports;
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
