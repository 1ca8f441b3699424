/**
 * Cleaning up on Ctrl-C: the benchmark starts servers and services in their
 * own process groups (so a terminal's Ctrl-C does not reach them), so on
 * SIGINT or SIGTERM it must stop them itself before exiting.
 *
 * @module
 */

const cleanups = new Set<() => Promise<unknown>>();
let installed = false;

/** Runs `cleanup` if the benchmark is interrupted; the returned function unregisters it. */
export function onInterrupt(cleanup: () => Promise<unknown>): () => void {
  cleanups.add(cleanup);
  return () => cleanups.delete(cleanup);
}

/** On the first SIGINT or SIGTERM, runs every registered cleanup and exits 130. */
export function installInterruptHandler(log: (line: string) => void = console.error): void {
  if (installed) return;
  installed = true;
  let interrupted = false;
  const handler = async () => {
    if (interrupted) return;
    interrupted = true;
    log("interrupted: stopping every process the benchmark started");
    await Promise.allSettled([...cleanups].map((cleanup) => cleanup()));
    Deno.exit(130);
  };
  for (const signal of ["SIGINT", "SIGTERM"] as const) Deno.addSignalListener(signal, handler);
}
