import assert from "node:assert/strict";
import { copyLine, sampleUsers } from "./insert_methods.ts";

Deno.test("copyLine() escapes what COPY's text format reserves and writes the time in UTC", () => {
  const line = copyLine({
    id: "01934d5e-7b7c-7a1e-9c3f-000000000001",
    name: "a\tb\\c\nd\re",
    enqueued_at: Date.UTC(2026, 10, 22, 8, 0, 0, 5),
  });
  assert.equal(
    line,
    "01934d5e-7b7c-7a1e-9c3f-000000000001\ta\\tb\\\\c\\nd\\re\t2026-11-22T08:00:00.005Z\n",
  );
});

Deno.test("sampleUsers() mints distinct ids and includes names COPY must escape", () => {
  const users = sampleUsers(300);
  assert.equal(new Set(users.map((u) => u.id)).size, 300);
  assert.ok(users.some((u) => u.name.includes("\t") && u.name.includes("\\")));
});
