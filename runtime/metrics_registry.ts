/**
 * The Prometheus registry each process of the pipeline exports on
 * `GET /metrics` (the API on its port, the consumer on its health port): every
 * series labelled with the process's `service` and `replica`, so the replicas
 * behind one load balancer stay apart, plus the default process metrics of
 * prom-client that hold under Deno. The metrics themselves are defined beside
 * what they measure (`server/metrics.ts`, `server-consumer/metrics.ts`); this
 * module is what both sides share, like the event log.
 *
 * Every name the pipeline defines starts with {@linkcode METRIC_PREFIX}.
 *
 * @module
 */

import { collectDefaultMetrics, Gauge, Registry } from "prom-client";

/** The prefix of every metric the pipeline defines (not of the process metrics). */
export const METRIC_PREFIX = "users_pipeline_";

/**
 * prom-client's default metrics that are wrong under Deno, measured with Deno
 * 2.9 and the services' permission flags; exporting them would only mislead.
 */
const WRONG_UNDER_DENO = [
  // Read from /proc/self, which Deno lets only --allow-all read: always 0 (or absent).
  "process_resident_memory_bytes",
  "process_virtual_memory_bytes",
  "process_heap_bytes",
  "process_open_fds",
  "process_max_fds",
  // perf_hooks.monitorEventLoopDelay misses blocking under Deno: a 300 ms block showed as 1 ms.
  "nodejs_eventloop_lag_seconds",
  "nodejs_eventloop_lag_min_seconds",
  "nodejs_eventloop_lag_max_seconds",
  "nodejs_eventloop_lag_mean_seconds",
  "nodejs_eventloop_lag_stddev_seconds",
  "nodejs_eventloop_lag_p50_seconds",
  "nodejs_eventloop_lag_p90_seconds",
  "nodejs_eventloop_lag_p99_seconds",
  // libuv's handles and requests, which Deno does not have: always 0.
  "nodejs_active_handles",
  "nodejs_active_handles_total",
  "nodejs_active_requests",
  "nodejs_active_requests_total",
  "nodejs_active_resources",
  "nodejs_active_resources_total",
  // Deno emits no "gc" performance entries: the histogram stays empty.
  "nodejs_gc_duration_seconds",
  // The Node.js version Deno's compatibility layer claims, not the runtime's.
  "nodejs_version_info",
];

/** Options of {@linkcode createRegistry}. */
export interface RegistryOptions {
  /** The process, as the event log names it (`server`, `server-consumer`). */
  readonly service: string;
  /** This replica's id: REPLICA_ID, else the hostname (`main.ts` decides). */
  readonly replica: string;
  /**
   * Whether to add the process metrics (CPU, heap, resident memory, start
   * time). Tests leave them out so the registry holds only what they check.
   * @default true
   */
  readonly processMetrics?: boolean;
}

/** A registry labelled with the process's service and replica. */
export function createRegistry(options: RegistryOptions): Registry {
  const { service, replica, processMetrics = true } = options;
  const registry = new Registry();
  registry.setDefaultLabels({ service, replica });
  if (processMetrics) {
    collectDefaultMetrics({ register: registry });
    for (const name of WRONG_UNDER_DENO) registry.removeSingleMetric(name);
    // The one removed that matters most (a leak shows there first), read the way Deno can.
    new Gauge({
      name: "process_resident_memory_bytes",
      help: "Resident memory size in bytes.",
      registers: [registry],
      collect() {
        this.set(Deno.memoryUsage().rss);
      },
    });
  }
  return registry;
}

/** The registry's metrics in Prometheus' text format, as `GET /metrics` answers. */
export async function metricsResponse(registry: Registry): Promise<Response> {
  return new Response(await registry.metrics(), {
    headers: { "Content-Type": registry.contentType },
  });
}
