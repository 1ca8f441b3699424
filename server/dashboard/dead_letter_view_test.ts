import assert from "node:assert/strict";
import { ITEM_CHARS, letterRow, namedFilter, pageOffset } from "./dead_letter_view.js";

Deno.test("letterRow() shows a letter's kind, reason with its SQLSTATE, time and item", () => {
  const payload = '{"id":"0193a5e0-0000-7000-8000-000000000001","name":"x","enqueued_at":1}';
  assert.deepEqual(
    letterRow({
      payload,
      reason: "value too long for type character varying(200)",
      kind: "database_refused",
      id: "0193a5e0-0000-7000-8000-000000000001",
      sqlstate: "22001",
      dead_at: "2026-11-26T05:30:01.123Z",
    }),
    {
      id: "0193a5e0-0000-7000-8000-000000000001",
      name: { field: "ids", value: "0193a5e0-0000-7000-8000-000000000001" },
      kind: "database_refused",
      reason: "value too long for type character varying(200) (SQLSTATE 22001)",
      when: "2026-11-26 05:30:01",
      deadAt: "2026-11-26T05:30:01.123Z",
      item: payload,
      fullItem: payload,
    },
  );
});

Deno.test("letterRow() names a letter without an id by the record the listing gives", () => {
  const record = '{"payload":"poison","reason":"not JSON","kind":"invalid_item","dead_at":"x"}';
  const row = letterRow({
    payload: "poison",
    reason: "not JSON",
    kind: "invalid_item",
    dead_at: "x",
    record,
  });
  assert.equal(row.id, undefined);
  assert.deepEqual(row.name, { field: "records", value: record });
  assert.equal(letterRow({ payload: "p", reason: "r" }).name, undefined, "nothing to name it by");
  assert.equal(row.when, "", "an unreadable time is left blank");
  assert.equal(letterRow({ payload: "p", reason: "r", id: "" }).id, undefined);
  assert.equal(letterRow({ payload: "p", reason: "r" }).kind, "unknown");
});

Deno.test("letterRow() shows a record that is no letter as its text, and cuts a long item", () => {
  assert.deepEqual(letterRow({ raw: "pushed by hand" }), {
    id: undefined,
    name: { field: "records", value: "pushed by hand" },
    kind: "unknown",
    reason: "not a dead-letter record",
    when: "",
    deadAt: "",
    item: "pushed by hand",
    fullItem: "pushed by hand",
  });
  const long = "y".repeat(ITEM_CHARS + 1);
  const row = letterRow({ payload: long, reason: "r", kind: "invalid_item", dead_at: "" });
  assert.equal(row.item.length, ITEM_CHARS);
  assert.ok(row.item.endsWith("…"));
  assert.equal(row.fullItem, long);
  assert.equal(letterRow({ payload: "y".repeat(ITEM_CHARS), reason: "r" }).item.length, ITEM_CHARS);
});

Deno.test("pageOffset() keeps the page while it has letters, else steps back to the last one", () => {
  assert.equal(pageOffset(20, 20, 41), 20);
  assert.equal(pageOffset(40, 20, 41), 40);
  assert.equal(pageOffset(40, 20, 40), 20);
  assert.equal(pageOffset(40, 20, 3), 0);
  assert.equal(pageOffset(20, 20, 0), 0);
  assert.equal(pageOffset(0, 20, 0), 0);
});

Deno.test("namedFilter() sends ids and records in their own fields, and nothing else", () => {
  assert.deepEqual(
    namedFilter([
      { field: "ids", value: "a" },
      { field: "records", value: "r" },
      { field: "ids", value: "b" },
    ]),
    { ids: ["a", "b"], records: ["r"] },
  );
  assert.deepEqual(namedFilter([{ field: "records", value: "r" }]), { records: ["r"] });
  assert.deepEqual(namedFilter([]), {});
});
