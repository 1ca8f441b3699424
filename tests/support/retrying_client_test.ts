import assert from "node:assert/strict";
import { type KeyedUser, RetryingClient } from "./retrying_client.ts";

Deno.test("RetryingClient retries a key after each 503 until its 202, sending the key every time", async () => {
  const tries = new Map<string, number>();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const key = request.headers.get("Idempotency-Key") ?? "none";
    const { name } = await request.json();
    const n = (tries.get(key) ?? 0) + 1;
    tries.set(key, n);
    if (n < 3) {
      return Response.json({ error: "down", code: "queue_unavailable" }, {
        status: 503,
        headers: { "Retry-After": "0" },
      });
    }
    return Response.json({ id: `id-of-${name}` }, { status: 202 });
  });
  try {
    const client = new RetryingClient({
      urls: [`http://127.0.0.1:${server.addr.port}`],
      prefix: "t",
      ratePerSecond: 200,
    }).start();
    await new Promise((resolve) => setTimeout(resolve, 50));
    const users = await client.stop();
    assert.ok(users.length >= 3, `${users.length} users in 50 ms at 200/s`);
    for (const user of users) {
      assert.equal(user.id, `id-of-${user.name}`);
      assert.equal(user.tries, 3);
      assert.equal(tries.get(user.key), 3);
    }
    assert.equal(client.tries, users.length * 3);
    const rows = users.map((user) => ({ id: user.id!, name: user.name }));
    assert.deepEqual(client.settled(rows), []);
    const [first, second, third] = users as [KeyedUser, KeyedUser, KeyedUser];
    const broken = [
      ...rows.filter((row) => ![first.name, second.name].includes(row.name)),
      { id: "other", name: first.name },
      { id: third.id!, name: third.name },
    ];
    assert.deepEqual(client.settled(broken), [
      `${first.key}: 202 for ${first.id}, stored as other`,
      `${second.key}: 202, no row`,
      `${third.key}: 2 rows`,
    ]);
  } finally {
    await server.shutdown();
  }
});
