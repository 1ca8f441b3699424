/**
 * Traefik's configuration for the native stack, derived from the one compose
 * uses (`traefik/traefik.yml`) so both stacks share entry points, logging and
 * provider settings. Without Docker there is nothing for the Docker provider
 * to discover, so the API replicas are listed in a file-provider route file
 * instead, mirroring the `traefik.*` labels of compose.yaml.
 *
 * @module
 */

/** Where the derived static configuration points Traefik. */
export interface NativeStaticOptions {
  /** The `web` entry point's address (`127.0.0.1:8000`). */
  address: string;
  /** The directory the file provider watches for the route file. */
  dynamicDir: string;
}

type Yaml = Record<string, unknown>;

function isObject(value: unknown): value is Yaml {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * The native stack's static configuration: `config` (the parsed
 * traefik/traefik.yml) without the Docker provider, with the `web` entry point
 * on `address` and the file provider watching `dynamicDir`, and without the
 * other entry points nor `ping`. The update check and usage
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
  // The other entry points (Traefik's own 503 answer, the container's health check through
  // `ping`) serve routes of traefik/dynamic/, which the native stack does not load; on their fixed
  // ports they would also clash between two stacks on one machine.
  copy.entryPoints = { web: { ...copy.entryPoints.web, address: options.address } };
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
  /** The path Traefik's health check asks each replica for. @default "/readyz" */
  healthPath?: string;
  /** How often each replica is checked. @default "1s" */
  healthInterval?: string;
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
  return {
    http: {
      routers: {
        server: {
          rule: "PathPrefix(`/`)",
          entryPoints: ["web"],
          service: "server",
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
            healthCheck: {
              path: options.healthPath ?? "/readyz",
              interval: options.healthInterval ?? "1s",
              timeout: "1s",
            },
          },
        },
      },
    },
  };
}
