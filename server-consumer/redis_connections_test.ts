import assert from "node:assert/strict";
import { consumerRedis } from "./redis_connections.ts";

/** A frozen Redis: it accepts connections and never replies. */
function frozenRedis() {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const connections: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of listener) connections.push(conn);
  })();
  return {
    config: { REDIS_URL: `redis://127.0.0.1:${listener.addr.port}`, REDIS_CLUSTER_NODES: "" },
    connections,
    async close() {
      listener.close();
      for (const conn of connections) conn.close();
      await accepting.catch(() => {});
    },
  };
}

Deno.test("consumerRedis() is ready once both connections are, and not while a stop came first", async () => {
  const redis = frozenRedis();
  const { commands, blocking, ready, close } = consumerRedis(redis.config);
  try {
    assert.notEqual(commands, blocking, "the blocking wait has a connection of its own");
    const stop = new AbortController();
    const waiting = ready(stop.signal);
    commands.emit("ready");
    stop.abort();
    assert.equal(await waiting, false, "one of two is not enough");
    const both = ready(new AbortController().signal);
    commands.emit("ready");
    blocking.emit("ready");
    assert.equal(await both, true);
  } finally {
    await close(100);
    await redis.close();
  }
});

Deno.test("consumerRedis().close() ends both connections for good within its bound on a frozen Redis", async () => {
  const redis = frozenRedis();
  const { commands, blocking, close } = consumerRedis(redis.config);
  try {
    await Promise.all(
      [commands, blocking].map((client) =>
        new Promise((resolve) => client.once("connect", resolve))
      ),
    );
    const ended = Promise.all(
      [commands, blocking].map((client) => new Promise((resolve) => client.once("end", resolve))),
    );
    const started = performance.now();
    await close(200);
    assert.ok(performance.now() - started < 1_000, "bounded");
    for (const conn of redis.connections) conn.close();
    redis.connections.length = 0;
    await ended;
    assert.deepEqual([commands.status, blocking.status], ["end", "end"]);
  } finally {
    await redis.close();
  }
});
