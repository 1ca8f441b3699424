/**
 * The consumer with the fault suite's crash points: the product's consumer
 * (`server-consumer/main.ts`) that SIGKILLs itself at a chosen point of a
 * batch, so the tests can prove that a crash there loses nothing and stores
 * nothing twice. The tests run it as `deno task crashing-consumer` (this
 * folder's `deno.json`) wherever they would run `deno task consumer`.
 *
 * Reads env: FAULT_CRASH_AT (`none`, `fetched`: after the batch was moved
 * into the processing list, before the insert; `stored`: after the insert
 * committed, before the acknowledgement; default `none`), FAULT_CRASH_ON_NAME
 * (crash after fetching a batch that holds a user of this name; default
 * none), and everything the consumer reads.
 *
 * @module
 */

import type { Batch } from "@users-pipeline/queue";
import type { Step } from "@users-pipeline/consumer/consumer";
import { main } from "@users-pipeline/consumer/main";

/** The steps FAULT_CRASH_AT names, and `none`. */
const CRASH_STEPS = ["none", "fetched", "stored"] as const;

/**
 * Whether the consumer crashes at `step` of `batch`, as FAULT_CRASH_AT and
 * FAULT_CRASH_ON_NAME in `env` say: a name, when given, wins over the step.
 *
 * @throws {TypeError} when FAULT_CRASH_AT names no step.
 */
export function crashPoint(
  env: Readonly<Record<string, string | undefined>>,
): (step: Step, batch: Batch) => boolean {
  const at = env.FAULT_CRASH_AT || "none";
  const name = env.FAULT_CRASH_ON_NAME ?? "";
  if (!(CRASH_STEPS as readonly string[]).includes(at)) {
    throw new TypeError(
      `Cannot start the crashing consumer: FAULT_CRASH_AT must be one of ${
        CRASH_STEPS.join(", ")
      }: current value is "${at}"`,
    );
  }
  if (name !== "") {
    return (step, batch) =>
      step === "fetched" && batch.items.some((item) => item.includes(JSON.stringify(name)));
  }
  return (step) => step === at;
}

if (import.meta.main) {
  const crashes = crashPoint(Deno.env.toObject());
  await main({
    onStep: (step, batch) => {
      if (crashes(step, batch)) Deno.kill(Deno.pid, "SIGKILL");
    },
  });
}
