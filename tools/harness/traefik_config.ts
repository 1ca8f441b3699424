/**
 * Traefik's configuration for the native stack, derived from the one compose
 * uses (`traefik/traefik.yml`) so both stacks share entry points, logging and
 * provider settings. Without Docker there is nothing for the Docker provider
 * to discover, so the API replicas are listed in a file-provider route file
 * instead, mirroring the `traefik.*` labels of compose.yaml. While no replica
 * is ready, Traefik answers 503 itself with Retry-After and its error code, as
 * under compose: from `traefik/dynamic/unavailable.yml`, served on an
 * `unavailable` entry point of its own port ({@linkcode unavailableConfig}).
 *
 * @module
 */

/** Where the derived static configuration points Traefik. */
export interface NativeStaticOptions {
  /** The `web` entry point's address (`127.0.0.1:8000`). */
  address: string;
  /** The directory the file provider watches for the route file. */
  dynamicDir: string;
  /**
   * The loopback address of the `unavailable` entry point, where Traefik gives its own 503 answer
   * ({@linkcode unavailableConfig}). @default none: no such entry point
   */
  unavailableAddress?: string;
}

/** The service of `traefik/dynamic/unavailable.yml` that gives Traefik's own 503 answer. */
export const UNAVAILABLE_ANSWER = "no-replica-ready-answer";

type Yaml = Record<string, unknown>;

function isObject(value: unknown): value is Yaml {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * The native stack's static configuration: `config` (the parsed
 * traefik/traefik.yml) without the Docker provider, with the `web` entry point
 * on `address` and the file provider watching `dynamicDir`, and without the
 * other entry points (but `unavailable` on `unavailableAddress`, if given) nor
 * `ping`. The update check and usage
 * statistics are turned off: a local stack must not call out of the machine.
 * `config` is not modified.
 *
 * @throws {TypeError} when `config` has no `entryPoints.web`.
 */
export function nativeStaticConfig(config: unknown, options: NativeStaticOptions): Yaml {
  const copy: unknown = structuredClone(config);
  if (!isObject(copy) || !isObject(copy.entryPoints) || !isObject(copy.entryPoints.web)) {
    throw new TypeError(
      `Cannot derive the native Traefik configuration as traefik/traefik.yml has no entryPoints.web: current value is ${
        JSON.stringify(isObject(copy) ? copy.entryPoints : copy)
      }`,
    );
  }
  // The other entry points serve routes of traefik/dynamic/ (the container's health check through
  // `ping`, Traefik's own 503 answer), and on their fixed ports they would clash between two stacks
  // on one machine; that answer comes back at the address the stack picked for it.
  copy.entryPoints = {
    web: { ...copy.entryPoints.web, address: options.address },
    ...(options.unavailableAddress === undefined
      ? {}
      : { unavailable: { address: options.unavailableAddress } }),
  };
  delete copy.ping;
  const providers = isObject(copy.providers) ? copy.providers : {};
  delete providers.docker;
  const file = isObject(providers.file) ? providers.file : {};
  delete file.filename;
  providers.file = { ...file, directory: options.dynamicDir, watch: true };
  copy.providers = providers;
  const global = isObject(copy.global) ? copy.global : {};
  copy.global = { ...global, checkNewVersion: false, sendAnonymousUsage: false };
  return copy;
}

/** Options of {@linkcode routesConfig}. */
export interface RoutesOptions {
  /**
   * The service that answers while no replica is ready ({@linkcode UNAVAILABLE_ANSWER}); the
   * replicas are then the primary of a failover to it, as compose's route is.
   * @default none: Traefik's bare 503, without Retry-After or code
   */
  fallback?: string;
}

/**
 * The dynamic configuration routing every request on `web` to `servers`
 * (`http://127.0.0.1:58101`, …), the file-provider twin of the `traefik.*`
 * labels in compose.yaml. Traefik's active health check on `/readyz` every
 * second (1 s timeout) takes a replica out of the rotation while it is down,
 * restarting, cannot reach Redis, or drains before it stops: a stopping API
 * answers 503 there for SHUTDOWN_DRAIN_MS before it closes its listener, so
 * no request is sent to a closed port; one that is (sent in the second before
 * a check) is refused before anything was sent, and retried on another.
 */
export function routesConfig(servers: readonly string[], options: RoutesOptions = {}): Yaml {
  const { fallback } = options;
  return {
    http: {
      routers: {
        server: {
          rule: "PathPrefix(`/`)",
          entryPoints: ["web"],
          service: fallback === undefined ? "server" : "api",
          middlewares: ["retry-refused"],
        },
      },
      // As compose's route (traefik/dynamic/api.yml): a connection a replica refused carried
      // nothing, so it is safe to send to another (a stopping replica closes its listener).
      middlewares: {
        "retry-refused": { retry: { attempts: 12, initialInterval: "150ms" } },
      },
      services: {
        server: {
          loadBalancer: {
            servers: servers.map((url) => ({ url })),
            healthCheck: { path: "/readyz", interval: "1s", timeout: "1s" },
          },
        },
        ...(fallback === undefined ? {} : { api: { failover: { service: "server", fallback } } }),
      },
    },
  };
}

/**
 * `traefik/dynamic/unavailable.yml` (parsed) for the native stack: the same
 * answer (503, Retry-After, X-Error-Code), reached through the `unavailable`
 * entry point at `address` rather than compose's fixed port, so that two
 * stacks on one machine do not clash. `source` is not modified.
 *
 * @throws {TypeError} when `source` has no {@linkcode UNAVAILABLE_ANSWER} load balancer.
 */
export function unavailableConfig(source: unknown, address: string): Yaml {
  const copy: unknown = structuredClone(source);
  const services = isObject(copy) && isObject(copy.http) ? copy.http.services : undefined;
  const answer = isObject(services) ? services[UNAVAILABLE_ANSWER] : undefined;
  if (!isObject(answer) || !isObject(answer.loadBalancer)) {
    throw new TypeError(
      `Cannot derive the native fallback as traefik/dynamic/unavailable.yml has no service ${UNAVAILABLE_ANSWER}: current value is ${
        JSON.stringify(services)
      }`,
    );
  }
  answer.loadBalancer.servers = [{ url: `http://${address}` }];
  return copy as Yaml;
}
