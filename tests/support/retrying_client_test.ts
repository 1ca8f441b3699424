import assert from "node:assert/strict";
import { type KeyedUser, RetryingClient, settleKeyed } from "./retrying_client.ts";

Deno.test("RetryingClient retries a key after each 503 until its 202, sending the key every time", async () => {
  const tries = new Map<string, number>();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const key = request.headers.get("Idempotency-Key") ?? "none";
    const { name } = await request.json();
    const n = (tries.get(key) ?? 0) + 1;
    tries.set(key, n);
    if (n < 3) {
      return Response.json(
        { error: "down", code: "queue_unavailable", id: `try-${n}-of-${name}` },
        {
          status: 503,
          headers: { "Retry-After": "0" },
        },
      );
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
    assert.deepEqual(
      client.answers.filter((answer) => answer.name === users[0]!.name)
        .map(({ kind, status, code, id }) => ({ kind, status, code, id })),
      [
        {
          kind: "rejected",
          status: 503,
          code: "queue_unavailable",
          id: `try-1-of-${users[0]!.name}`,
        },
        {
          kind: "rejected",
          status: 503,
          code: "queue_unavailable",
          id: `try-2-of-${users[0]!.name}`,
        },
        { kind: "accepted", status: 202, code: undefined, id: `id-of-${users[0]!.name}` },
      ],
      "every try's answer, with the id each refusal named",
    );
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

Deno.test("RetryingClient gives a key up once its time ran out, keeping every refusal's id", async () => {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const { name } = await request.json();
    return Response.json({ error: "no replica", code: "unconfirmed", id: `id-of-${name}` }, {
      status: 503,
      headers: { "Retry-After": "0.05" },
    });
  });
  try {
    const client = new RetryingClient({
      urls: [`http://127.0.0.1:${server.addr.port}`],
      prefix: "t",
      ratePerSecond: 1_000,
      giveUpMs: 300,
    }).start();
    await new Promise((resolve) => setTimeout(resolve, 5));
    const users = await client.stop();
    assert.ok(users.length >= 1);
    for (const user of users) {
      assert.equal(user.gaveUp, true);
      assert.equal(user.id, undefined);
      assert.ok(user.tries >= 2, `${user.key}: ${user.tries} tries in 300 ms`);
    }
    const [user] = users as [KeyedUser];
    const others = users.slice(1).map((u) => ({ id: `id-of-${u.name}`, name: u.name }));
    assert.deepEqual(
      client.settled([{ id: `id-of-${user.name}`, name: user.name }, ...others]),
      [],
    );
    assert.deepEqual(client.settled([{ id: "other", name: user.name }]), [
      `${user.key}: given up, stored as other, which no refusal of it named`,
    ]);
    assert.deepEqual(
      client.settled([{ id: `id-of-${user.name}`, name: user.name }, { id: "x", name: user.name }]),
      [`${user.key}: 2 rows`],
    );
  } finally {
    await server.shutdown();
  }
});

Deno.test("RetryingClient ends a key at an answer no fault explains, keeping it, and retries the others", async () => {
  const tries = new Map<string, number>();
  const hanging: (() => void)[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const key = request.headers.get("Idempotency-Key")!;
    const { name } = await request.json();
    const n = (tries.get(key) ?? 0) + 1;
    tries.set(key, n);
    switch (Number(key.split("-").at(-1)) % 4) {
      case 0:
        return new Response("boom", { status: 500 });
      case 1:
        return Response.json({ error: "down", code: "queue_unavailable" }, { status: 503 });
      case 2:
        await new Promise<void>((resolve) => hanging.push(resolve));
        return Response.json({ id: `late-${name}` }, { status: 202 });
    }
    return n === 1
      ? Response.json({ error: "down", code: "queue_unavailable" }, {
        status: 503,
        headers: { "Retry-After": "0" },
      })
      : Response.json({ id: `id-of-${name}` }, { status: 202 });
  });
  const url = `http://127.0.0.1:${server.addr.port}`;
  try {
    const client = new RetryingClient({
      urls: [url],
      prefix: "t",
      ratePerSecond: 200,
      timeoutMs: 100,
    })
      .start();
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.ok(client.inFlight(url) >= 1, "the hanging try is in flight");
    assert.equal(client.inFlight("http://127.0.0.1:1"), 0);
    const users = await client.stop();
    assert.ok(users.length >= 4, `${users.length} users in 50 ms at 200/s`);
    assert.equal(client.inFlight(), 0);
    const seen = users.map((user) => {
      const answers = client.answers.filter((answer) => answer.name === user.name);
      return {
        gaveUp: user.gaveUp,
        tries: user.tries,
        id: user.id,
        answers: answers.map((a) => `${a.kind} ${a.status ?? (a.timedOut ? "hang" : "cut")}`),
      };
    });
    const expected = users.map((user, n) =>
      [
        { gaveUp: true, tries: 1, id: undefined, answers: ["unexpected 500"] },
        { gaveUp: true, tries: 1, id: undefined, answers: ["unexpected 503"] },
        { gaveUp: true, tries: 1, id: undefined, answers: ["indeterminate hang"] },
        {
          gaveUp: false,
          tries: 2,
          id: `id-of-${user.name}`,
          answers: ["rejected 503", "accepted 202"],
        },
      ][n % 4]
    );
    assert.deepEqual(seen, expected);
  } finally {
    for (const resolve of hanging) resolve();
    await server.shutdown();
  }
});

Deno.test("settleKeyed() allows a key given up stored only where its answers say it may be", () => {
  const given = { key: "k", name: "n" };
  const refusal = (id?: string) => ({
    name: "n",
    url: "u",
    kind: "rejected" as const,
    status: 503,
    code: "unconfirmed",
    sentAt: 0,
    ms: 1,
    ...(id === undefined ? {} : { id }),
  });
  const row = [{ id: "7", name: "n" }];
  assert.deepEqual(settleKeyed([given], []), []);
  assert.deepEqual(settleKeyed([given], row), ["k: given up, stored"]);
  assert.deepEqual(settleKeyed([given], row, { answers: [refusal("3"), refusal("7")] }), []);
  assert.deepEqual(settleKeyed([given], row, { answers: [refusal("3")] }), [
    "k: given up, stored as 7, which no refusal of it named",
  ]);
  const cut = { name: "n", url: "u", kind: "indeterminate" as const, sentAt: 0, ms: 5 };
  assert.deepEqual(settleKeyed([given], row, { answers: [refusal("3"), cut] }), []);
});

Deno.test("RetryingClient with batchSize retries a keyed batch whole with its key and users until its 202", async () => {
  const tries = new Map<string, number>();
  const bodies = new Map<string, string[]>();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    assert.equal(new URL(request.url).pathname, "/users/batch");
    const key = request.headers.get("Idempotency-Key")!;
    const users: { name: string }[] = await request.json();
    const body = JSON.stringify(users);
    bodies.set(key, [...bodies.get(key) ?? [], body]);
    const n = (tries.get(key) ?? 0) + 1;
    tries.set(key, n);
    const ids = users.map(({ name }) => `id-of-${name}`);
    if (n === 1) {
      return Response.json({
        error: "down",
        code: "queue_unavailable",
        items: ids.map((id) => ({ id, status: 503, code: "queue_unavailable" })),
      }, { status: 503, headers: { "Retry-After": "0" } });
    }
    return Response.json({ items: ids.map((id) => ({ id })) }, { status: 202 });
  });
  try {
    const client = new RetryingClient({
      urls: [`http://127.0.0.1:${server.addr.port}`],
      prefix: "b",
      ratePerSecond: 100,
      batchSize: 3,
    }).start();
    await new Promise((resolve) => setTimeout(resolve, 50));
    const users = await client.stop();
    assert.ok(users.length >= 6 && users.length % 3 === 0, `${users.length} users`);
    assert.equal(client.tries, (users.length / 3) * 2, "each batch tried twice");
    for (const [key, sent] of bodies) {
      assert.equal(sent.length, 2, key);
      assert.equal(sent[0], sent[1], `${key} is retried with the same users`);
    }
    assert.deepEqual(
      users.slice(0, 3).map(({ key, name, id, tries }) => ({ key, name, id, tries })),
      [
        { key: "b-key-0", name: "b-0", id: "id-of-b-0", tries: 2 },
        { key: "b-key-0", name: "b-1", id: "id-of-b-1", tries: 2 },
        { key: "b-key-0", name: "b-2", id: "id-of-b-2", tries: 2 },
      ],
    );
    assert.equal(client.answers.length, users.length * 2, "an answer per user per try");
    const rows = users.map((user) => ({ id: user.id!, name: user.name }));
    assert.deepEqual(client.settled(rows), []);
    assert.deepEqual(client.settled([...rows, { id: "again", name: "b-1" }]), [
      "b-key-0 b-1: 2 rows",
    ]);
  } finally {
    await server.shutdown();
  }
});
