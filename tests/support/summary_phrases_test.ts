import assert from "node:assert/strict";
import type { Outcome } from "./fault_load.ts";
import {
  avg,
  batchesSummary,
  describeExits,
  keyedSummary,
  refusals,
  seconds,
} from "./summary_phrases.ts";

Deno.test("seconds() and avg() give the summary's figures", () => {
  assert.equal(seconds(1_549), "1.5 s");
  assert.equal(avg([1, 2, 6]), 3);
  assert.equal(avg([]), 0);
});

Deno.test("refusals() counts the refusals by status and reason", () => {
  const rejected = { kind: "rejected", status: 503, detail: "queue is full" } as Outcome;
  const accepted = { kind: "accepted", status: 202 } as Outcome;
  assert.equal(refusals([rejected, accepted, rejected]), "503 queue is full × 2");
  assert.equal(refusals([accepted]), "none refused");
});

Deno.test("describeExits() says what each consumer held and how it ended", () => {
  assert.equal(
    describeExits([{ name: "consumer-1", code: 0, ms: 22_300 }, {
      name: "consumer-2",
      code: undefined,
      ms: 30_000,
    }], [500, 0]),
    "consumer-1 (500 in hand) exit 0 after 22.3 s, consumer-2 (idle) exit undefined after 30.0 s",
  );
});

Deno.test("keyedSummary() counts the keys that got their 202 and the tries that met the fault", () => {
  const answer = (fields: Partial<Outcome> & Pick<Outcome, "kind">): Outcome => ({
    name: "b",
    url: "u",
    sentAt: 0,
    ms: 1,
    ...fields,
  });
  const unavailable = answer({ kind: "rejected", status: 503, code: "queue_unavailable" });
  assert.equal(
    keyedSummary({
      users: [
        { key: "k1", name: "a", id: "1", tries: 1, gaveUp: false },
        { key: "k2", name: "b", tries: 5, gaveUp: false },
      ],
      tries: 6,
      answers: [
        answer({ kind: "accepted", status: 202, name: "a" }),
        unavailable,
        answer({ kind: "indeterminate" }),
        unavailable,
        answer({ kind: "indeterminate", timedOut: true }),
        answer({ kind: "unexpected", status: 500 }),
      ],
    }),
    "keyed client: 1 of 2 keys 202 after 6 tries, 5 of them met the fault (2 × 503 " +
      "queue_unavailable, 1 × cut, 1 × no answer, 1 × 500 (no code)), each stored once under its id",
  );
  assert.equal(
    keyedSummary({
      users: [{ key: "k1", name: "a", id: "1", tries: 1, gaveUp: false }],
      tries: 1,
      answers: [answer({ kind: "accepted", status: 202, name: "a" })],
    }),
    "keyed client: 1 of 1 keys 202 after 1 tries, 0 of them met the fault, each stored once " +
      "under its id",
  );
});

Deno.test("batchesSummary() counts each answer a batch's users got, a cut and a timeout apart", () => {
  const users = [
    { kind: "accepted", status: 202 },
    { kind: "accepted", status: 202 },
    { kind: "rejected", status: 503, code: "unconfirmed" },
    { kind: "indeterminate", timedOut: false },
    { kind: "indeterminate", timedOut: true },
  ] as Outcome[];
  assert.equal(
    batchesSummary(users, "batches"),
    "batches: 5 users, 202 × 2, 503 unconfirmed × 1, cut × 1, no answer × 1",
  );
  assert.equal(batchesSummary([], "keyed batches"), "keyed batches: 0 users, none");
});
