# Both product images, a target each: `server` and `server-consumer` (whose image also runs
# schema/migrate.ts, the `migrate` task). The context is the repo root (compose.yaml) because both
# need runtime/, queue/ and schema/ beside their own folder.
#
# Each CMD is its deno.json task's command, spelled out (tests/deploy/compose_config_test.ts holds
# the two equal): `deno task` resolves the whole workspace's npm packages first, so it would
# download the tooling's at every start (and fail offline). It names "deno" rather than leave it to
# the base image's entrypoint, which stays: it puts tini in front as PID 1 to pass SIGTERM on.

FROM denoland/deno:2.9.6 AS workspace

WORKDIR /app

# The workspace root and every member's manifest (a few lines of imports each, no code): with all
# of them present the one committed deno.lock verifies unchanged, so --frozen holds. The sources
# stay owned by root, so the app cannot rewrite its own code; only the Deno cache belongs to the
# runtime user.
COPY deno.json deno.lock ./
COPY runtime/deno.json runtime/
COPY queue/deno.json queue/
COPY schema/deno.json schema/
COPY server/deno.json server/
COPY server-consumer/deno.json server-consumer/
COPY tests/deno.json tests/
COPY tools/harness/deno.json tools/harness/
COPY tools/stack/deno.json tools/stack/
COPY tools/bench/deno.json tools/bench/

COPY runtime/ runtime/
COPY queue/ queue/
COPY schema/ schema/

# The base image made /deno-dir (DENO_DIR) for deno: installing as deno leaves every cached file
# owned by the user that reads it at run time.
USER deno

# PORT's default, on the compose network only: the API's for Traefik, the consumer's for /readyz.
EXPOSE 8000

# Each target caches its own entrypoints' module graphs and nothing else: deno.json turns on
# npm-lazy-caching, so only the npm packages they import land in the image, not the other
# product's or the tooling's (the chart libraries). --frozen fails the build if deno.lock does not
# match the manifests.
FROM workspace AS server
COPY server/ server/
RUN deno install --frozen --entrypoint server/main.ts
# --allow-read for the one file it reads, CLIENT_KEYS_FILE, wherever it is mounted (a secret's path).
CMD ["deno", "run", "--cached-only", "--allow-net", "--allow-env", "--allow-read", \
     "--allow-sys=hostname,osRelease,networkInterfaces", "server/main.ts"]

FROM workspace AS server-consumer
COPY server-consumer/ server-consumer/
RUN deno install --frozen --entrypoint server-consumer/main.ts schema/migrate.ts
CMD ["deno", "run", "--cached-only", "--allow-net", "--allow-env", \
     "--allow-read=schema", "--allow-sys=hostname,osRelease,networkInterfaces", \
     "server-consumer/main.ts"]
