import assert from "node:assert/strict";
import {
  decodeEnvelope,
  encodeEnvelope,
  isUuid,
  NAME_MAX_LENGTH,
  nameProblem,
  PoisonMessageError,
} from "./envelope.ts";

const id = "01934d5e-7b7c-7a1e-9c3f-1a2b3c4d5e6f";

Deno.test("decodeEnvelope() reads back what encodeEnvelope() wrote", () => {
  const envelope = { id, name: "Queueing", enqueued_at: 1_732_000_000_123 };
  assert.deepEqual(decodeEnvelope(encodeEnvelope(envelope)), envelope);
});

Deno.test("nameProblem() accepts a name of exactly the maximum length in code points", () => {
  assert.equal(nameProblem("é".repeat(NAME_MAX_LENGTH)), undefined);
  // Astral characters are two UTF-16 units but one character to a user.
  assert.equal(nameProblem("😀".repeat(NAME_MAX_LENGTH)), undefined);
});

Deno.test("nameProblem() names each kind of bad name", () => {
  assert.match(nameProblem("")!, /empty/);
  assert.match(nameProblem("x".repeat(NAME_MAX_LENGTH + 1))!, /at most 200/);
  assert.match(nameProblem("a\0b")!, /NUL/);
  assert.match(nameProblem("a\ud800b")!, /lone surrogate/);
});

Deno.test("decodeEnvelope() rejects every malformed item as poison", () => {
  const bad = [
    "{not json",
    "[]",
    "null",
    JSON.stringify({ name: "x", enqueued_at: 1 }),
    JSON.stringify({ id: "nope", name: "x", enqueued_at: 1 }),
    JSON.stringify({ id, name: 7, enqueued_at: 1 }),
    JSON.stringify({ id, name: " padded ", enqueued_at: 1 }),
    JSON.stringify({ id, name: "a\0b", enqueued_at: 1 }),
    JSON.stringify({ id, name: "x", enqueued_at: "yesterday" }),
    JSON.stringify({ id, name: "x".repeat(1_000_000), enqueued_at: 1 }),
  ];
  for (const raw of bad) {
    assert.throws(() => decodeEnvelope(raw), PoisonMessageError, raw.slice(0, 40));
  }
});

Deno.test("decodeEnvelope() rejects an item with unknown fields, naming them", () => {
  const raw = JSON.stringify({ id, name: "x", enqueued_at: 1, admin: true, role: "root" });
  assert.throws(() => decodeEnvelope(raw), {
    name: "PoisonMessageError",
    message: 'item has unexpected fields "admin", "role": only "id", "name" and "enqueued_at" ' +
      "are accepted",
  });
  assert.throws(
    () => decodeEnvelope(JSON.stringify({ id, name: "x", enqueued_at: 1, __proto__x: 1 })),
    /unexpected field "__proto__x"/,
  );
});

Deno.test("isUuid() accepts only the canonical lowercase form", () => {
  assert.ok(isUuid(id));
  assert.ok(!isUuid(id.toUpperCase()));
  assert.ok(!isUuid(id.replaceAll("-", "")));
  assert.ok(!isUuid(`${id}0`));
  assert.ok(!isUuid(`{${id}}`));
});
