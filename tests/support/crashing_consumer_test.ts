/**
 * The crash points of the fault suite's consumer (`crashing_consumer.ts`);
 * the crashes themselves are exercised by `pipeline_test.ts` and
 * `fault_consumer_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type Batch, encodeEnvelope } from "@users-pipeline/queue";
import { crashPoint } from "./crashing_consumer.ts";

const batch = (...names: string[]): Batch => ({
  items: names.map((name, i) =>
    encodeEnvelope({ id: `0190b6e4-9e43-7c2e-a4f4-3f6c0d2e8b1${i}`, name, enqueued_at: 0 })
  ),
  fromRetry: false,
});

Deno.test("crashPoint() crashes at the step FAULT_CRASH_AT names, of every batch", () => {
  const fetched = crashPoint({ FAULT_CRASH_AT: "fetched" });
  assert.equal(fetched("fetched", batch("Ada")), true);
  assert.equal(fetched("stored", batch("Ada")), false);
  const stored = crashPoint({ FAULT_CRASH_AT: "stored" });
  assert.equal(stored("fetched", batch("Ada")), false);
  assert.equal(stored("stored", batch("Ada")), true);
});

Deno.test("crashPoint() never crashes without a crash point", () => {
  for (
    const env of [{}, { FAULT_CRASH_AT: "none" }, { FAULT_CRASH_AT: "", FAULT_CRASH_ON_NAME: "" }]
  ) {
    const crashes = crashPoint(env);
    assert.equal(crashes("fetched", batch("Ada")), false);
    assert.equal(crashes("stored", batch("Ada")), false);
  }
});

Deno.test("crashPoint() crashes on FAULT_CRASH_ON_NAME once a batch holding that name is fetched", () => {
  const crashes = crashPoint({ FAULT_CRASH_ON_NAME: "crasher-1", FAULT_CRASH_AT: "stored" });
  assert.equal(crashes("fetched", batch("Ada", "crasher-1")), true);
  assert.equal(crashes("stored", batch("Ada", "crasher-1")), false, "the name wins over the step");
  assert.equal(crashes("fetched", batch("Ada", "crasher-10")), false, "the whole name only");
});

Deno.test("crashPoint() names a FAULT_CRASH_AT it does not know", () => {
  assert.throws(
    () => crashPoint({ FAULT_CRASH_AT: "inserted" }),
    /^TypeError: Cannot start the crashing consumer: FAULT_CRASH_AT must be one of none, fetched, stored: current value is "inserted"$/,
  );
});

Deno.test("the crashing-consumer task runs with exactly the consumer task's permissions", async () => {
  /** A task's words, its paths made absolute from the folder it runs in, its script left out. */
  const flags = async (dir: string, task: string) => {
    const url = new URL(`../../${dir}deno.json`, import.meta.url);
    const command: string = JSON.parse(await Deno.readTextFile(url)).tasks[task];
    const words = command.split(/\s+/);
    assert.match(words.at(-1)!, /\.ts$/);
    return words.slice(0, -1).map((word) => {
      const read = /^--allow-read=(.+)$/.exec(word);
      if (!read) return word;
      const paths = read[1]!.split(",").map((path) =>
        new URL(`../../${dir}${path}`, import.meta.url)
      );
      return `--allow-read=${paths.map((path) => path.pathname).join(",")}`;
    });
  };
  assert.deepEqual(await flags("tests/", "crashing-consumer"), await flags("", "consumer"));
});
