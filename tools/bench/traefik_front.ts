/**
 * A Traefik in front of servers the benchmark started itself (the HTTP
 * floor, our API replicas, the course's producer), configured exactly as
 * the native stack configures its own: the static configuration derived from
 * traefik/traefik.yml and the file-provider route with its health check on
 * `/readyz` (tools/harness/traefik_config.ts). Measuring every server behind
 * the same Traefik, and the HTTP floor behind it as Traefik's own ceiling,
 * makes the comparisons with the course and the ceiling like with like.
 *
 * @module
 */

import { parse, stringify } from "yaml";
import { OutputBuffer } from "@users-pipeline/harness/line_output";
import { freePort } from "@users-pipeline/harness/ports";
import { REPO_DIR } from "@users-pipeline/harness/repo";
import { ServiceProcess } from "@users-pipeline/harness/service_process";
import { waitForHttp } from "@users-pipeline/harness/wait";
import { nativeStaticConfig, routesConfig } from "@users-pipeline/harness/traefik_config";
import { onInterrupt } from "./interrupt.ts";

/** A running Traefik; `stop()` ends it and removes its config dir. */
export interface TraefikFront extends AsyncDisposable {
  /** `http://127.0.0.1:<port>`. */
  readonly url: string;
  readonly pid: number;
  readonly output: OutputBuffer;
  stop(): Promise<void>;
}

/**
 * Starts Traefik on a free loopback port, balancing over `servers`
 * (`http://127.0.0.1:<port>` each), and waits until a request through it
 * reaches one (`/readyz` answers 200).
 *
 * @throws {Error} with Traefik's last output when it exits or does not answer in time.
 */
export async function startTraefikFront(
  name: string,
  servers: readonly string[],
): Promise<TraefikFront> {
  const dir = await Deno.makeTempDir({ prefix: `bench-traefik-${name}-` });
  const dynamicDir = `${dir}/dynamic`;
  await Deno.mkdir(dynamicDir);
  const port = freePort();
  const source = parse(await Deno.readTextFile(`${REPO_DIR}/traefik/traefik.yml`));
  const config = nativeStaticConfig(source, { address: `127.0.0.1:${port}`, dynamicDir });
  await Deno.writeTextFile(`${dir}/traefik.yml`, stringify(config));
  await Deno.writeTextFile(`${dynamicDir}/routes.yml`, stringify(routesConfig(servers)));
  const output = new OutputBuffer();
  const process = new ServiceProcess({
    name: `traefik-${name}`,
    command: "traefik",
    args: [`--configFile=${dir}/traefik.yml`],
    cwd: dir,
    output: output.sink,
    log: output.sink.bind(null, `traefik-${name}`),
    restart: "no",
  });
  const pid = process.start();
  let stopping: Promise<void> | undefined;
  const stop = () =>
    stopping ??= (async () => {
      forget();
      await process.stop({ signal: "SIGTERM", timeoutMs: 15_000 });
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    })();
  const forget = onInterrupt(stop);
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitForHttp(`${url}/readyz`, { alive: () => process.running, timeoutMs: 30_000 });
  } catch (error) {
    await stop();
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(`Cannot start Traefik (${name}): ${reason}\n${output.tail(20)}`, {
      cause: error,
    });
  }
  return { url, pid, output, stop, [Symbol.asyncDispose]: stop };
}
