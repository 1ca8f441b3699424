import assert from "node:assert/strict";
import {
  descendantsOf,
  initdbArgs,
  parsePasswd,
  parsePs,
  postgresArgs,
  socketDirFor,
} from "./postgres_server.ts";

Deno.test("parsePasswd() finds a user's uid and gid", () => {
  const text =
    "root:x:0:0:root:/root:/bin/bash\npostgres:x:104:109:PostgreSQL:/var/lib/pg:/bin/sh\n";
  assert.deepEqual(parsePasswd(text, "postgres"), { uid: 104, gid: 109 });
  assert.equal(parsePasswd(text, "nobody"), undefined);
});

Deno.test("parsePs() reads pid and parent pid columns and skips blank lines", () => {
  assert.deepEqual(parsePs("    1     0\n 4242  4200\n\n"), [
    { pid: 1, ppid: 0 },
    { pid: 4242, ppid: 4200 },
  ]);
});

Deno.test("descendantsOf() finds children and grandchildren but not siblings", () => {
  const processes = [
    { pid: 10, ppid: 1 },
    { pid: 11, ppid: 10 },
    { pid: 12, ppid: 10 },
    { pid: 13, ppid: 12 },
    { pid: 20, ppid: 1 },
  ];
  assert.deepEqual(descendantsOf(10, processes), [11, 12, 13]);
  assert.deepEqual(descendantsOf(20, processes), []);
});

Deno.test("postgresArgs() listens on loopback only and passes the settings", () => {
  assert.deepEqual(
    postgresArgs({ dataDir: "/s/pg", port: 55432, settings: { fsync: "off" } }),
    [
      "-D",
      "/s/pg",
      "-p",
      "55432",
      "-k",
      "/s/pg",
      "-c",
      "listen_addresses=127.0.0.1",
      "-c",
      "max_connections=200",
      "-c",
      "fsync=off",
    ],
  );
});

Deno.test("socketDirFor() gives up the unix socket when its path would be too long", () => {
  assert.equal(socketDirFor("/tmp/x", 5432), "/tmp/x");
  assert.equal(socketDirFor(`/${"d".repeat(100)}`, 5432), "");
});

Deno.test("initdbArgs() sets up password auth on TCP for the given superuser", () => {
  const args = initdbArgs({ dataDir: "/d", user: "username", pwfile: "/p" });
  assert.ok(args.includes("--auth-host=scram-sha-256"));
  assert.ok(args.includes("--pwfile=/p"));
  assert.deepEqual(args.slice(0, 4), ["--pgdata", "/d", "--username", "username"]);
});
