/**
 * Fault scenarios of bad input (issue #3): poison mixed into the queue is
 * buried with its reason while every good item is stored, and malformed
 * requests each get a precise 4xx while nothing is queued. See
 * `stage.ts` for what every scenario is held to.
 *
 * @module
 */

import assert from "node:assert/strict";
import { v7 as uuidv7 } from "uuid";
import { encodeEnvelope } from "@users-pipeline/queue";
import type { ErrorCode } from "@users-pipeline/server/api_error";
import { scenario } from "../support/scenario.ts";
import { envelopes } from "../support/scenario_setups.ts";
import { seconds, verdict } from "../support/summary_phrases.ts";
import { serviceEvents } from "../support/service_events.ts";

scenario("poison mixed into 20k good items is buried, every good item stored", async (stage) => {
  const { redis, sql } = stage.world;
  const good = envelopes(20_000, "poison-neighbour");
  const id = () => uuidv7();
  const now = Date.now();
  const envelope = (fields: Record<string, unknown>) =>
    JSON.stringify({ id: id(), name: "poison", enqueued_at: now, ...fields });
  const twinId = id();
  const twins = [
    encodeEnvelope({ id: twinId, name: "twin-a", enqueued_at: now }),
    encodeEnvelope({ id: twinId, name: "twin-b", enqueued_at: now }),
  ];
  const poison = [
    "not json {",
    "",
    "[1, 2, 3]",
    '"just a string"',
    "null",
    "42",
    envelope({ name: 5 }),
    envelope({ name: null }),
    JSON.stringify({ name: "no id", enqueued_at: now }),
    envelope({ id: "NOT-A-UUID" }),
    envelope({ id: id().toUpperCase() }),
    envelope({ enqueued_at: "yesterday" }),
    envelope({ enqueued_at: -1 }),
    envelope({ name: "nul\u0000byte" }),
    envelope({ name: "x".repeat(1_048_576) }),
    envelope({ name: "lone \ud800 surrogate" }),
    envelope({ name: "  untrimmed  " }),
    envelope({ name: "" }),
    // Valid to the decoder, refused by PostgreSQL (timestamp out of range,
    // SQLSTATE 22008): the writer must split its batch down to this row.
    envelope({ name: "far-future", enqueued_at: 1e300 }),
  ];
  const items = good.map(encodeEnvelope);
  for (const [i, item] of [...poison, ...twins].entries()) {
    items.splice(Math.floor(((i + 1) * items.length) / (poison.length + 3)), 0, item);
  }
  for (let i = 0; i < items.length; i += 1_000) {
    await redis.lpush(stage.keys.queue, ...items.slice(i, i + 1_000));
  }
  const startedAt = Date.now();
  const consumers = [
    await stage.consumer({ BATCH_SIZE: "1000" }),
    await stage.consumer({ BATCH_SIZE: "1000" }),
  ];
  const drainMs = await stage.drain();
  const report = await stage.verify([], {
    injected: good.map(({ id, name }) => ({ id, name })),
    deadPayloads: poison,
    maybeDead: twins,
    mayStore: ["twin-a", "twin-b"],
  });
  // Exactly one twin stored, the other buried as an id clash.
  const stored = await sql<{ name: string }[]>`select name from users where id = ${twinId}`;
  assert.equal(stored.length, 1);
  const letters = await stage.deadLetters();
  const buried = letters.filter((l) => twins.includes(l.payload));
  assert.equal(buried.length, 1, "one twin in the dead letters");
  assert.notEqual(JSON.parse(buried[0]!.payload).name, stored[0]!.name);
  assert.match(buried[0]!.reason, /different name/);
  assert.deepEqual(
    letters.filter((l) => l.reason.trim() === "").map((l) => l.payload.slice(0, 60)),
    [],
    "every dead letter says why",
  );
  const sqlstates = letters.filter((l) => l.sqlstate).map((l) => l.sqlstate);
  assert.deepEqual(sqlstates, ["22008"], "the far-future row is refused by PostgreSQL");
  const logged = consumers.flatMap((c) => serviceEvents(c.output, "dead_lettered")).length;
  assert.equal(logged, letters.length, "one dead_lettered event per dead letter");
  await stage.stopAll();
  stage.summary(
    `poison: ${good.length} good + ${poison.length} poison + 2 same-id twins, BATCH_SIZE=1000: ` +
      `${good.length + 1} stored, ${letters.length} dead-lettered with their reason (and one ` +
      `event each), ${verdict(report)}, drained in ${seconds(drainMs)} ` +
      `(${seconds(Date.now() - startedAt)} incl. start)`,
  );
});

scenario(
  "the bad-input catalogue: precise 4xx, nothing queued, still serving",
  async (stage) => {
    const { redis } = stage.world;
    const api = await stage.server();
    const cases = badInputs();
    const failures: string[] = [];
    for (const c of cases) {
      const response = await fetch(`${api.url}${c.path ?? "/users"}`, {
        method: c.method ?? "POST",
        headers: c.contentType === null
          ? {}
          : { "Content-Type": c.contentType ?? "application/json" },
        body: c.body,
      });
      const text = await response.text();
      let body: { error?: unknown; code?: unknown } | undefined;
      try {
        body = JSON.parse(text);
      } catch {
        body = undefined;
      }
      // Nothing queued: neither an item in the list nor a user in the status index.
      const [queued, indexed] = await Promise.all([
        redis.llen(stage.keys.queue),
        redis.scard(stage.keys.queuedIds),
      ]);
      if (
        response.status !== c.status || body?.code !== c.code ||
        typeof body?.error !== "string" || queued !== 0 || indexed !== 0
      ) {
        failures.push(
          `${c.what}: expected ${c.status} ${c.code}, got ${response.status} ` +
            `${text.slice(0, 100)} (queue length ${queued}, status index ${indexed})`,
        );
      }
    }
    assert.deepEqual(failures, []);
    const after = await stage.load([api], "after-bad-input", { limit: 5, concurrency: 1 })
      .finished();
    stage.assertAnswers(after);
    assert.equal(after.filter((o) => o.kind === "accepted").length, 5, "still answers 202");
    assert.equal(await redis.llen(stage.keys.queue), 5);
    await stage.stopAll();
    stage.summary(
      `bad input: ${cases.length} malformed requests each the expected 4xx with its code, ` +
        `nothing queued, the API then accepts 5 of 5`,
    );
  },
);

/** One malformed request and the answer it must get. */
interface BadInput {
  what: string;
  body?: BodyInit;
  /** null sends no Content-Type. @default application/json */
  contentType?: string | null;
  method?: string;
  path?: string;
  status: number;
  /** The error code the answer must carry (docs/api.md, "The rules of POST /users" and "Error codes"). */
  code: ErrorCode;
}

function badInputs(): BadInput[] {
  const json = (what: string, body: string, code: ErrorCode): BadInput => ({
    what,
    body,
    status: 400,
    code,
  });
  const contentType = (what: string, body: string, type: string): BadInput => ({
    what,
    body,
    contentType: type,
    status: 415,
    code: "unsupported_media_type",
  });
  return [
    json("truncated JSON", '{"name": ', "invalid_json"),
    json("not JSON at all", "name=Ada", "invalid_json"),
    json("empty body", "", "invalid_json"),
    json("JSON array", '["Ada"]', "invalid_body"),
    json("JSON string", '"Ada"', "invalid_body"),
    json("JSON null", "null", "invalid_body"),
    json("name is a number", '{"name": 5}', "invalid_body"),
    json("name is null", '{"name": null}', "invalid_body"),
    json("name is an array", '{"name": ["Ada"]}', "invalid_body"),
    json("name is an object", '{"name": {"first": "Ada"}}', "invalid_body"),
    json("name missing", "{}", "invalid_body"),
    json("wrong field", '{"username": "Ada"}', "invalid_body"),
    json("extra field", '{"name": "Ada", "admin": true}', "invalid_body"),
    json("empty name", '{"name": ""}', "invalid_name"),
    json("whitespace name", '{"name": " \\t\\n "}', "invalid_name"),
    json("201-character name", JSON.stringify({ name: "x".repeat(201) }), "invalid_name"),
    json("NUL in the name", '{"name": "Ada\\u0000"}', "invalid_name"),
    json("lone surrogate (escaped)", '{"name": "Ada \\ud800"}', "invalid_name"),
    {
      what: "oversized body",
      body: JSON.stringify({ name: "x".repeat(20_000) }),
      status: 413,
      code: "body_too_large",
    },
    contentType("text/html", '{"name": "Ada"}', "text/html"),
    contentType("application/xml", "<name>Ada</name>", "application/xml"),
    contentType("multipart", '{"name": "Ada"}', "multipart/form-data; boundary=x"),
    contentType("latin-1 charset", '{"name": "Ada"}', "application/json; charset=iso-8859-1"),
    {
      what: "invalid UTF-8 bytes (an encoded surrogate)",
      body: new Uint8Array([
        ...new TextEncoder().encode('{"name": "Ada '),
        0xed,
        0xa0,
        0x80,
        0x22,
        0x7d,
      ]),
      status: 400,
      code: "invalid_utf8",
    },
    {
      what: "PUT /users",
      method: "PUT",
      body: '{"name": "Ada"}',
      status: 405,
      code: "method_not_allowed",
    },
    {
      what: "GET /users/not-a-uuid",
      method: "GET",
      path: "/users/not-a-uuid",
      status: 400,
      code: "invalid_id",
    },
    {
      what: "unknown route",
      path: "/nope",
      body: '{"name": "Ada"}',
      status: 404,
      code: "not_found",
    },
  ];
}
