import assert from "node:assert/strict";
import { checkPortsFree, serviceEnv } from "./supervisor.ts";

Deno.test("serviceEnv() overrides only the hosts and ports of project.env", () => {
  const env = serviceEnv(
    {
      PGHOST: "database",
      PGPORT: "5432",
      PGUSER: "username",
      REDIS_URL: "redis://:secret@redis:6379/2",
      QUEUE_NAME: "users",
    },
    { postgres: 55432, redis: 56379 },
  );
  assert.deepEqual(env, {
    PGHOST: "127.0.0.1",
    PGPORT: "55432",
    PGUSER: "username",
    REDIS_URL: "redis://:secret@127.0.0.1:56379/2",
    QUEUE_NAME: "users",
  });
});

Deno.test("serviceEnv() gives a REDIS_URL even when project.env has none", () => {
  assert.equal(serviceEnv({}, { postgres: 1, redis: 2 }).REDIS_URL, "redis://127.0.0.1:2");
});

Deno.test("checkPortsFree() names a port that two processes would share", () => {
  assert.throws(
    () => checkPortsFree({ http: 1, postgres: 2, redis: 3, api: [4, 2], consumers: [5] }),
    {
      name: "RangeError",
      message: /server-2 and PostgreSQL would share a port: current value is 2$/,
    },
  );
  assert.throws(
    () => checkPortsFree({ http: 1, postgres: 2, redis: 3, api: [4], consumers: [5, 4] }),
    /consumer-2 and server-1 would share a port: current value is 4$/,
  );
  assert.throws(
    () =>
      checkPortsFree({ http: 1, postgres: 2, redis: 3, api: [4], consumers: [], prometheus: 1 }),
    /Prometheus and Traefik \(http\) would share a port: current value is 1$/,
  );
});

Deno.test("checkPortsFree() names a port another program listens on", () => {
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  assert.throws(
    () => checkPortsFree({ http: port, postgres: 0, redis: 0, api: [], consumers: [] }),
    {
      name: "RangeError",
      message: new RegExp(`Traefik \\(http\\)'s port is in use .*current value is ${port}$`),
    },
  );
});
