/**
 * This build's consumer against an earlier build's, on the same backlog, in
 * one run: each round drains the same number of users with one and then the
 * other (the order alternating by round), and `insertUsers` from memory
 * before each pair, all on one Redis and one PostgreSQL. It prints each
 * drain, then the median of the per-round ratios: what a change to the
 * consumer bought, measured side by side on a noisy machine.
 *
 *   deno run --cached-only -A tools/bench/drain_versus.ts REF [--rounds N]
 *     [--users N] [--batch N] [--replicas N] [--single]
 *
 * REF is a git ref of this repo (`HEAD~1`, `988adf9`); its tree is prepared
 * as the full benchmark's `--baseline` is (`prepareBaseline`). `--single`
 * drains in single mode (batch of one) instead of batches.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { prepareBaseline } from "./baseline_tree.ts";
import { startBenchServices } from "./bench_services.ts";
import { type DrainRun, timeDrain, timeReferenceInsert } from "./drain.ts";
import { median } from "./ingest.ts";
import { formatCount, Progress } from "./progress.ts";

function describe(label: string, run: DrainRun): string {
  return `${label.padEnd(5)} ${formatCount(run.rowsPerSecond).padStart(8)} rows/s; cores: ` +
    `consumers ${run.consumerCores.toFixed(2)}, postgres ${run.postgresCores.toFixed(2)}, ` +
    `redis ${run.redisCores.toFixed(2)}`;
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    allowPositionals: true,
    options: {
      rounds: { type: "string", default: "3" },
      users: { type: "string" },
      batch: { type: "string", default: "1000" },
      replicas: { type: "string", default: "1" },
      single: { type: "boolean", default: false },
    },
  });
  const [ref] = positionals;
  if (ref === undefined) throw new TypeError("Cannot compare with no REF: give a git ref");
  const single = values.single;
  const rounds = Number(values.rounds);
  const users = Number(values.users ?? (single ? 5_000 : 200_000));
  const setup = {
    mode: single ? "single" as const : "batch" as const,
    batchSize: single ? 1 : Number(values.batch),
    replicas: Number(values.replicas),
    users,
  };
  const progress = new Progress();
  const workDir = await Deno.makeTempDir({ prefix: "drain-versus-" });
  try {
    const { dir, commit, subject } = await prepareBaseline(ref, workDir, progress);
    progress.phase(
      `this build's consumer against ${ref} = ${commit.slice(0, 7)} "${subject}": ` +
        `${formatCount(users)} users, ${setup.mode}` +
        `${single ? "" : ` ${setup.batchSize}`} × ${setup.replicas}, ${rounds} rounds`,
    );
    await using services = await startBenchServices();
    const ours: number[] = [];
    const theirs: number[] = [];
    const references: number[] = [];
    for (let round = 1; round <= rounds; round++) {
      const reference = await timeReferenceInsert(services, Math.min(users, 50_000));
      references.push(reference.rowsPerSecond);
      const order = round % 2 === 1 ? ["ours", "ref"] as const : ["ref", "ours"] as const;
      for (const which of order) {
        const run = await timeDrain(
          services,
          setup,
          which === "ours" ? {} : { consumerDir: dir },
        );
        (which === "ours" ? ours : theirs).push(run.rowsPerSecond);
        progress.step(`round ${round}: ${describe(which, run)}`);
      }
      progress.step(
        `round ${round}: insertUsers from memory ${
          formatCount(reference.rowsPerSecond)
        } rows/s (1000 per statement)`,
      );
    }
    // Per round, so drift on the machine between rounds cancels in each ratio.
    const ratios = ours.map((value, i) => value / theirs[i]!);
    const share = (values: readonly number[]) =>
      values.map((value, i) => `${Math.round(value / references[i]! * 100)}%`).join(", ");
    progress.phase(
      `this build ${median(ratios).toFixed(2)}× ${ref} (rounds: ${
        ratios.map((r) => r.toFixed(2)).join(", ")
      }); of insertUsers from memory: this build ${share(ours)}; ${ref} ${share(theirs)}`,
    );
  } finally {
    await Deno.remove(workDir, { recursive: true }).catch(() => {});
  }
}
