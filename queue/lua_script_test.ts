import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { defineScript, defineScripts, type RedisClient, reply, runScript } from "./lua_script.ts";

// Scripts run against a real Redis in tests/ (redis_queue_test.ts and the others).

const PUSH = defineScript({
  name: "testPush",
  lua: "return 1",
  keys: ["queue", "ids"],
  args: ["deadline", "mode"],
  restArgs: true,
  reply: reply<number>(),
});

const VISIT = defineScript({
  name: "testVisit",
  lua: "return {}",
  keys: ["consumers"],
  args: [],
  restKeys: true,
  restArgs: true,
  reply: reply<string[]>(),
});

/** A client that records what it was asked to define and to run. */
function recordingClient() {
  const defined: [string, { numberOfKeys?: number; lua: string }][] = [];
  const calls: [string, unknown[]][] = [];
  const client: Record<string, unknown> = {
    defineCommand(name: string, definition: { numberOfKeys?: number; lua: string }) {
      defined.push([name, definition]);
      client[name] = (...args: unknown[]) => {
        calls.push([name, args]);
        return Promise.resolve(args.length);
      };
    },
  };
  return { client: client as unknown as RedisClient, defined, calls };
}

Deno.test("runScript() sends the keys, then the arguments, in the order the script names them", async () => {
  const { client, defined, calls } = recordingClient();
  const reply: number = await runScript(client, {
    script: PUSH,
    keys: { ids: "q:ids", queue: "q" },
    args: { mode: "all", deadline: 0 },
    restArgs: ["a", "b"],
  });
  assert.equal(reply, 6);
  // A fixed number of keys: registered with it, so the first argument is the first key.
  assert.deepEqual(defined, [["testPush", { numberOfKeys: 2, lua: "return 1" }]]);
  assert.deepEqual(calls, [["testPush", ["q", "q:ids", 0, "all", "a", "b"]]]);
});

Deno.test("runScript() sends a script with variadic keys with its key count first", async () => {
  const { client, defined, calls } = recordingClient();
  await runScript(client, {
    script: VISIT,
    keys: { consumers: "c" },
    restKeys: ["p:1", "h:1"],
    restArgs: ["1"],
  });
  await runScript(client, { script: VISIT, keys: { consumers: "c" }, restKeys: [], restArgs: [] });
  assert.deepEqual(defined, [["testVisit", { lua: "return {}" }]], "registered once");
  assert.deepEqual(calls, [
    ["testVisit", [3, "c", "p:1", "h:1", "1"]],
    ["testVisit", [1, "c"]],
  ]);
});

Deno.test("runScript() refuses a key or an argument left out at run time", () => {
  const { client } = recordingClient();
  const call = { keys: { queue: "q" }, args: { deadline: 0, mode: "all" }, restArgs: [] };
  assert.throws(
    () => runScript(client, { script: PUSH, ...call } as never),
    /testPush: its key ids is missing/,
  );
});

Deno.test("runScript() queues a call on a pipeline of a client that registered the script", () => {
  const redis = new Redis({ lazyConnect: true });
  try {
    assert.throws(
      () =>
        runScript(redis.pipeline(), { script: PUSH, keys: { queue: "q", ids: "i" }, ...NO_ARGS }),
      /had not registered it/,
    );
    defineScripts(redis, PUSH);
    const pipeline = redis.pipeline();
    assert.equal(
      runScript(pipeline, { script: PUSH, keys: { queue: "q", ids: "i" }, ...NO_ARGS }),
      pipeline,
    );
    assert.equal(pipeline.length, 1);
  } finally {
    redis.disconnect();
  }
});

const NO_ARGS = { args: { deadline: 0, mode: "all" }, restArgs: [] } as const;

Deno.test("defineScript() refuses a name ioredis or another script already uses", () => {
  assert.throws(
    () => defineScript({ name: "get", lua: "", keys: [], args: [], reply: reply<null>() }),
    TypeError,
  );
  assert.throws(
    () => defineScript({ ...PUSH, lua: "return 2" }),
    /testPush: the name is already taken/,
  );
});

/** Never run: what the compiler refuses, so a call cannot drift from its script. */
function _typeErrors(client: RedisClient) {
  // @ts-expect-error: a misspelled key
  runScript(client, { script: PUSH, keys: { queue: "q", idz: "i" }, ...NO_ARGS });
  runScript(client, {
    script: PUSH,
    keys: { queue: "q", ids: "i" },
    // @ts-expect-error: a missing argument
    args: { deadline: 0 },
    restArgs: [],
  });
  runScript(client, {
    script: PUSH,
    keys: { queue: "q", ids: "i" },
    // @ts-expect-error: an argument the script does not take
    args: { deadline: 0, mode: "all", extra: 1 },
    restArgs: [],
  });
  // @ts-expect-error: variadic keys the script does not take
  runScript(client, { script: PUSH, keys: { queue: "q", ids: "i" }, ...NO_ARGS, restKeys: ["k"] });
  // @ts-expect-error: the variadic keys a script with a key count needs
  runScript(client, { script: VISIT, keys: { consumers: "c" }, restArgs: [] });
  // @ts-expect-error: the reply is declared with the script
  const _reply: Promise<string> = runScript(client, {
    script: PUSH,
    keys: { queue: "q", ids: "i" },
    ...NO_ARGS,
  });
}
