import assert from "node:assert/strict";
import { parse } from "yaml";
import {
  nativeStaticConfig,
  routesConfig,
  UNAVAILABLE_ANSWER,
  unavailableConfig,
} from "./traefik_config.ts";

const COMPOSE_STYLE = `
entryPoints:
  web:
    address: ":8000"
  metrics:
    address: ":8082"
  unavailable:
    address: "127.0.0.1:8081"
ping:
  entryPoint: metrics
  manualRouting: true
providers:
  docker:
    exposedByDefault: false
  file:
    directory: ./dynamic
    watch: false
log:
  level: INFO
`;

Deno.test("nativeStaticConfig() drops the docker provider, every entry point but web and ping, and points the file provider at the state dir", () => {
  const config = nativeStaticConfig(parse(COMPOSE_STYLE), {
    address: "127.0.0.1:18000",
    dynamicDir: "/state/traefik/dynamic",
  });
  assert.deepEqual(config, {
    entryPoints: {
      web: { address: "127.0.0.1:18000" },
    },
    providers: { file: { directory: "/state/traefik/dynamic", watch: true } },
    log: { level: "INFO" },
    global: { checkNewVersion: false, sendAnonymousUsage: false },
  });
});

Deno.test("nativeStaticConfig() does not modify its input", () => {
  const input = parse(COMPOSE_STYLE);
  const before = structuredClone(input);
  nativeStaticConfig(input, { address: "127.0.0.1:1", dynamicDir: "/d" });
  assert.deepEqual(input, before);
});

Deno.test("nativeStaticConfig() adds a file provider when there are no providers", () => {
  const config = nativeStaticConfig({ entryPoints: { web: { address: ":80" } } }, {
    address: "127.0.0.1:2",
    dynamicDir: "/d",
  });
  assert.deepEqual(config.providers, { file: { directory: "/d", watch: true } });
});

Deno.test("nativeStaticConfig() throws a TypeError without a web entry point", () => {
  assert.throws(
    () => nativeStaticConfig({ entryPoints: {} }, { address: "a", dynamicDir: "d" }),
    { name: "TypeError", message: /no entryPoints.web/ },
  );
  assert.throws(() => nativeStaticConfig(null, { address: "a", dynamicDir: "d" }), TypeError);
});

Deno.test("routesConfig() balances PathPrefix(`/`) on web over every replica, retrying refused connections", () => {
  const config = routesConfig(["http://127.0.0.1:1", "http://127.0.0.1:2"]);
  assert.deepEqual(config, {
    http: {
      routers: {
        server: {
          rule: "PathPrefix(`/`)",
          entryPoints: ["web"],
          service: "server",
          middlewares: ["retry-refused"],
        },
      },
      middlewares: {
        "retry-refused": { retry: { attempts: 12, initialInterval: "150ms" } },
      },
      services: {
        server: {
          loadBalancer: {
            servers: [{ url: "http://127.0.0.1:1" }, { url: "http://127.0.0.1:2" }],
            healthCheck: { path: "/readyz", interval: "1s", timeout: "1s" },
          },
        },
      },
    },
  });
});

Deno.test("nativeStaticConfig() keeps an unavailable entry point only at the address it is given", () => {
  const config = nativeStaticConfig(parse(COMPOSE_STYLE), {
    address: "127.0.0.1:18000",
    dynamicDir: "/d",
    unavailableAddress: "127.0.0.1:40001",
  });
  assert.deepEqual(config.entryPoints, {
    web: { address: "127.0.0.1:18000" },
    unavailable: { address: "127.0.0.1:40001" },
  });
});

Deno.test("routesConfig() with a fallback makes the replicas the primary of a failover to it", () => {
  const config = routesConfig(["http://127.0.0.1:1"], { fallback: UNAVAILABLE_ANSWER });
  const http = config.http as {
    routers: Record<string, { service: string }>;
    services: Record<string, unknown>;
  };
  assert.equal(http.routers.server?.service, "api");
  assert.deepEqual(http.services.api, {
    failover: { service: "server", fallback: UNAVAILABLE_ANSWER },
  });
  assert.ok(http.services.server, "the replicas' load balancer is kept");
});

Deno.test("unavailableConfig() points traefik/dynamic/unavailable.yml's answer at the native entry point", async () => {
  const source = parse(
    await Deno.readTextFile(new URL("../../traefik/dynamic/unavailable.yml", import.meta.url)),
  );
  const before = structuredClone(source);
  const config = unavailableConfig(source, "127.0.0.1:40001");
  assert.deepEqual(source, before, "its input is not modified");
  const http = config.http as {
    services: Record<string, { loadBalancer: { servers: unknown[] } }>;
    routers: Record<string, { entryPoints: string[] }>;
  };
  assert.deepEqual(http.services[UNAVAILABLE_ANSWER]?.loadBalancer.servers, [
    { url: "http://127.0.0.1:40001" },
  ]);
  // The rest is compose's: the routes on `web` and `unavailable`, the headers with the code.
  assert.deepEqual(
    { ...config, http: { ...http, services: {} } },
    { ...before, http: { ...before.http, services: {} } },
  );
  assert.throws(
    () => unavailableConfig({ http: { services: {} } }, "127.0.0.1:1"),
    { name: "TypeError", message: /no service no-replica-ready-answer/ },
  );
});
