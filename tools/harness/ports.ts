/**
 * Free loopback ports for the processes tooling starts.
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
