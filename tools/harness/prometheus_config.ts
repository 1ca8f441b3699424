/**
 * Prometheus's configuration for the native stack, derived from the one compose
 * uses (`prometheus/prometheus.yml`) so both stacks share jobs and intervals.
 * Without Docker there is no DNS name that lists the replicas, so each job's
 * `dns_sd_configs` becomes a `file_sd_configs` on a JSON file the supervisor
 * writes with the replicas' loopback addresses: Prometheus watches the file,
 * so rewriting it is all a change of targets takes.
 *
 * The rule files (`prometheus/alerts.yml`) are named relative to the source's
 * directory, as compose mounts it; the derived file lives in the state dir,
 * so each becomes an absolute path to the file in the repo.
 *
 * @module
 */

import { isAbsolute, join } from "node:path";
import { REPO_DIR } from "./repo.ts";

type Yaml = Record<string, unknown>;

/** One entry of a `file_sd_configs` JSON file. */
export interface TargetGroup {
  /** `host:port` of each replica. */
  targets: string[];
  /** Labels added to every target of the group. */
  labels: Record<string, string>;
}

function isObject(value: unknown): value is Yaml {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The `file_sd_configs` file of one job, inside `targetsDir`. */
export function targetsFile(targetsDir: string, job: string): string {
  return `${targetsDir}/${job}.json`;
}

/** Options of {@linkcode nativePrometheusConfig}. */
export interface NativePrometheusOptions {
  /**
   * The directory of the file `config` was read from, against which its
   * relative `rule_files` are resolved.
   * @default the repo's prometheus/
   */
  readonly sourceDir?: string;
}

/**
 * The native stack's configuration: `config` (the parsed
 * prometheus/prometheus.yml) with every scrape config's service discovery
 * replaced by the file {@linkcode targetsFile} names in `targetsDir`, its rule
 * files made absolute, and the names of the jobs, whose targets the caller
 * writes there. `config` is not modified.
 *
 * @throws {TypeError} when `config` has no `scrape_configs` list, or one without a `job_name`,
 * or `rule_files` that is not a list of paths.
 */
export function nativePrometheusConfig(
  config: unknown,
  targetsDir: string,
  options: NativePrometheusOptions = {},
): { config: Yaml; jobs: string[] } {
  const { sourceDir = `${REPO_DIR}/prometheus` } = options;
  const copy: unknown = structuredClone(config);
  if (!isObject(copy) || !Array.isArray(copy.scrape_configs)) {
    throw new TypeError(
      `Cannot derive the native Prometheus configuration as prometheus/prometheus.yml has no scrape_configs list: current value is ${
        JSON.stringify(isObject(copy) ? copy.scrape_configs : copy)
      }`,
    );
  }
  const jobs: string[] = [];
  for (const scrape of copy.scrape_configs) {
    if (!isObject(scrape) || typeof scrape.job_name !== "string") {
      throw new TypeError(
        `Cannot derive the native Prometheus configuration as a scrape config has no job_name: current value is ${
          JSON.stringify(scrape)
        }`,
      );
    }
    // Any discovery of compose's (DNS, or Docker's API) finds nothing on loopback.
    for (const key of Object.keys(scrape)) {
      if (key.endsWith("_sd_configs") || key === "static_configs") delete scrape[key];
    }
    scrape.file_sd_configs = [{ files: [targetsFile(targetsDir, scrape.job_name)] }];
    jobs.push(scrape.job_name);
  }
  if (copy.rule_files !== undefined) {
    const files = copy.rule_files;
    if (!Array.isArray(files) || !files.every((file) => typeof file === "string")) {
      throw new TypeError(
        `Cannot derive the native Prometheus configuration as its rule_files is not a list of paths: current value is ${
          JSON.stringify(files)
        }`,
      );
    }
    copy.rule_files = files.map((file) => isAbsolute(file) ? file : join(sourceDir, file));
  }
  return { config: copy, jobs };
}

/**
 * The contents of a job's targets file: one group of loopback addresses, or
 * none when the job has no replica (`--consumers 0`), which Prometheus reads
 * as no targets.
 */
export function targetGroups(ports: readonly number[]): TargetGroup[] {
  if (ports.length === 0) return [];
  return [{ targets: ports.map((port) => `127.0.0.1:${port}`), labels: {} }];
}
