/**
 * Fault scenarios of PostgreSQL (issue #3): stopped for 15 s, frozen, and
 * its backends terminated repeatedly, all under load. The API needs no
 * PostgreSQL to accept, so no request may be refused; the consumers must
 * notice the outage, retry, and drain once it is over. See `stage.ts`
 * for what every scenario is held to.
 *
 * @module
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import type { TaskProcess } from "@users-pipeline/harness/processes";
import { delay } from "@users-pipeline/harness/wait";
import { postgresConnection } from "../support/postgres_client.ts";
import { scenario, TEST_APP } from "../support/scenario.ts";
import { assertCleanExits, drainAndVerify, twoHoldingOneIdle } from "../support/scenario_setups.ts";
import type { Stage } from "../support/stage.ts";
import { answers, describeExits, seconds, verdict } from "../support/summary_phrases.ts";
import { numberField, serviceEvents } from "../support/service_events.ts";

scenario(
  "PostgreSQL stopped (-m immediate) for 15 s under load, then started: nothing refused or lost",
  async (stage) => {
    const { pg } = stage.world;
    const api = await stage.server();
    const consumers = [await stage.consumer(), await stage.consumer()];
    const load = stage.load([api], "pg-stop", { ratePerSecond: 1_000 });
    await delay(1_500);
    await pg.server.stop("immediate");
    const stoppedAt = Date.now();
    await delay(15_000);
    await pg.server.start();
    const startedAt = Date.now();
    const caughtUp = await stage.catchUp();
    await delay(300);
    const { drainMs, report } = await stage.settle(load);
    const noticed = postgresOutages(consumers, stage);
    await stage.stopAll();
    stage.summary(
      `PostgreSQL down ${seconds(startedAt - stoppedAt)} (-m immediate): ${answers(report)}, ` +
        `${noticed} consumers saw it begin and end, backlog of ${caughtUp.backlog} cleared ` +
        `${seconds(caughtUp.ms)} after it was up again, ${verdict(report)}, drained ` +
        `${seconds(drainMs)} after the load stopped`,
    );
  },
);

scenario("PostgreSQL frozen (SIGSTOP on all its processes) under load", async (stage) => {
  const { pg } = stage.world;
  const api = await stage.server();
  const consumers = [await stage.consumer(), await stage.consumer()];
  const load = stage.load([api], "pg-freeze", { ratePerSecond: 1_500 });
  await delay(1_000);
  // Freezes of whole multiples of STATEMENT_TIMEOUT_MS: the thaw then lands
  // as a client replaced at the deadline is opening its connection, the
  // moment that once crashed every consumer (see server-consumer/main.ts).
  const frozenMs: number[] = [];
  const catchUps: { backlog: number; ms: number }[] = [];
  for (const ms of [4_000, 2_000]) {
    pg.server.freeze();
    const frozenAt = Date.now();
    try {
      await delay(ms);
    } finally {
      pg.server.thaw();
    }
    frozenMs.push(Date.now() - frozenAt);
    catchUps.push(await stage.catchUp());
    await delay(300);
  }
  const { drainMs, report } = await stage.settle(load);
  const noticed = postgresOutages(consumers, stage);
  await stage.stopAll();
  stage.summary(
    `PostgreSQL SIGSTOP ${frozenMs.map(seconds).join(" + ")}: ${answers(report)}, ${noticed} ` +
      `consumers saw the outage begin and end, backlogs of ${
        catchUps.map((c) => c.backlog).join(" and ")
      } cleared in ${catchUps.map((c) => seconds(c.ms)).join(" and ")} after SIGCONT, ` +
      `${verdict(report)}, drained ${seconds(drainMs)} after the load stopped`,
  );
});

scenario("PostgreSQL backends terminated repeatedly under load", async (stage) => {
  const { pg } = stage.world;
  const api = await stage.server();
  const consumers = [await stage.consumer(), await stage.consumer()];
  const load = stage.load([api], "pg-terminate");
  await delay(500);
  const admin = postgres({
    ...postgresConnection(pg.env),
    max: 1,
    onnotice: () => {},
    connection: { application_name: `${TEST_APP}-admin` },
  });
  let terminated = 0;
  let rounds = 0;
  try {
    const until = Date.now() + 3_000;
    while (Date.now() < until) {
      const [row] = await admin<{ n: number }[]>`
        select count(pg_terminate_backend(pid))::int as n from pg_stat_activity
        where usename = current_user and pid <> pg_backend_pid()
          and application_name not like ${`${TEST_APP}%`}`;
      terminated += row?.n ?? 0;
      rounds++;
      await delay(150);
    }
  } finally {
    await admin.end();
  }
  await delay(300);
  const { drainMs, report } = await stage.settle(load);
  const outages = consumers
    .flatMap((c) => serviceEvents(c.output, "outage_started"))
    .filter((e) => e.dependency === "postgres").length;
  assert.ok(outages > 0, `inconclusive: no insert was cut off (${terminated} backends killed)`);
  await stage.stopAll();
  stage.summary(
    `pg_terminate_backend × ${rounds} rounds (${terminated} backends): ${answers(report)}, ` +
      `${outages} insert outages seen by consumers, ${verdict(report)}, drained in ` +
      `${seconds(drainMs)}`,
  );
});

scenario(
  "consumers SIGTERMed while PostgreSQL is frozen exit 0 within compose's 30 s and lose nothing",
  async (stage) => {
    // Two hold a batch, their inserts waiting on the frozen server; all three are stopped.
    let exits: Awaited<ReturnType<Stage["sigterm"]>>;
    let setUp: Awaited<ReturnType<typeof twoHoldingOneIdle>>;
    try {
      setUp = await twoHoldingOneIdle(stage, "sigterm-pg-frozen");
      exits = await stage.sigterm(setUp.consumers);
    } finally {
      stage.world.pg.server.thaw();
    }
    const { consumers, users, held, shutdownMs } = setUp;
    assertCleanExits(stage, exits);
    const handedBack = consumers.map((consumer) =>
      serviceEvents(consumer.output, "handed_back").reduce((n, e) => n + numberField(e, "items"), 0)
    );
    assert.deepEqual(handedBack, held, "each consumer handed back the batch it held");
    const { drainMs, report } = await drainAndVerify(stage, users);
    await stage.stopAll();
    stage.summary(
      `SIGTERM while PostgreSQL is frozen (SHUTDOWN_TIMEOUT_MS ${shutdownMs}): ${
        describeExits(exits, held)
      }; handed back ${handedBack.join(" + ")}; ${users.length} stored, ${verdict(report)}, ` +
        `drained ${seconds(drainMs)} after a fresh consumer started`,
    );
  },
);

/**
 * How many of `consumers` saw a PostgreSQL outage begin; each that did must
 * also have seen it end. Fails as inconclusive when none saw one.
 */
function postgresOutages(consumers: readonly TaskProcess[], stage: Stage): number {
  let noticed = 0;
  for (const consumer of consumers) {
    const events = serviceEvents(consumer.output).filter((e) => e.dependency === "postgres");
    const last = events.at(-1);
    if (last === undefined) continue;
    noticed++;
    assert.equal(
      last.event,
      "outage_ended",
      `${consumer.name} never saw PostgreSQL come back\n${stage.tails()}`,
    );
  }
  assert.ok(noticed > 0, `inconclusive: no consumer saw the outage\n${stage.tails()}`);
  return noticed;
}
