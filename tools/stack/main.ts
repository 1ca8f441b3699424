/**
 * `./stack up [--servers N] [--consumers M]`: runs the whole pipeline as local
 * processes in the foreground (what compose.yaml runs in containers) until
 * Ctrl-C or SIGTERM, then stops it in dependency order and exits 0. A second
 * Ctrl-C kills everything at once.
 *
 * Reads project.env (beside this folder), and from the environment:
 * STACK_DIR (default .stack), STACK_HTTP_PORT (8000), STACK_PG_PORT (55432),
 * STACK_REDIS_PORT (56379), STACK_API_BASE_PORT (58101), STACK_CONSUMER_BASE_PORT
 * (58201), STACK_PROMETHEUS_PORT (59090) and STACK_PG_BIN_DIR
 * (default: the newest /usr/lib/postgresql/N/bin). Expects redis-server,
 * traefik, prometheus and deno on PATH, which `./stack` arranges.
 *
 * @module
 */

import { projectEnv, REPO_DIR } from "@users-pipeline/harness/repo";
import { parseStackConfig } from "./stack_config.ts";
import {
  NativeStack,
  replicaPorts,
  type StackState,
  STATE_FILE,
} from "@users-pipeline/harness/supervisor";

/** Whether a stack.json in `stateDir` belongs to a supervisor that still runs. */
async function runningSupervisor(stateDir: string): Promise<number | undefined> {
  let state: StackState;
  try {
    state = JSON.parse(await Deno.readTextFile(`${stateDir}/${STATE_FILE}`));
  } catch {
    return undefined;
  }
  if (state.pid === Deno.pid) return undefined;
  const { success } = await new Deno.Command("ps", {
    args: ["-p", String(state.pid)],
    stdout: "null",
    stderr: "null",
  }).output();
  return success ? state.pid : undefined;
}

async function main(): Promise<number> {
  let config;
  try {
    config = parseStackConfig(Deno.args, Deno.env.toObject());
  } catch (error) {
    if (!(error instanceof TypeError || error instanceof RangeError)) throw error;
    console.error(error.message);
    return 2;
  }
  await Deno.mkdir(config.stateDir, { recursive: true });
  const stateDir = await Deno.realPath(config.stateDir);
  const other = await runningSupervisor(stateDir);
  if (other !== undefined) {
    console.error(
      `Cannot start the stack as one is running already with state dir ${stateDir}: current supervisor pid is ${other}`,
    );
    return 1;
  }
  const stack = new NativeStack({
    repoDir: REPO_DIR,
    stateDir,
    projectEnv: projectEnv(),
    ports: {
      http: config.httpPort,
      postgres: config.postgresPort,
      redis: config.redisPort,
      api: replicaPorts(config.apiBasePort, config.servers),
      consumers: replicaPorts(config.consumerBasePort, config.consumers),
      prometheus: config.prometheusPort,
    },
    postgresBinDir: config.postgresBinDir,
  });

  let signals = 0;
  const onSignal = () => {
    signals++;
    if (signals === 1) {
      void stack.stop();
    } else {
      console.log("stack    | second signal: killing every process now");
      stack.kill();
      Deno.exit(1);
    }
  };
  // The children run in their own process groups and would outlive a crashed supervisor.
  globalThis.addEventListener("unhandledrejection", (event) => {
    console.error("stack    | supervisor failed; killing every process:", event.reason);
    stack.kill();
  });
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);

  try {
    await stack.start();
  } catch (error) {
    if (stack.stopping && signals > 0) {
      await stack.stop();
      return 0;
    }
    console.error(`stack    | ${error instanceof Error ? error.message : error}`);
    return 1;
  }
  await stack.stopped;
  return 0;
}

Deno.exit(await main());
