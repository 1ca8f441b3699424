import assert from "node:assert/strict";
import { parse } from "yaml";
import { REPO_DIR } from "./repo.ts";
import { nativePrometheusConfig, targetGroups, targetsFile } from "./prometheus_config.ts";

Deno.test("nativePrometheusConfig() swaps each job's DNS discovery for a targets file", () => {
  const source = {
    global: { scrape_interval: "2s" },
    scrape_configs: [
      { job_name: "server", dns_sd_configs: [{ names: ["server"], type: "A", port: 8000 }] },
      { job_name: "other", static_configs: [{ targets: ["x:1"] }], metrics_path: "/m" },
    ],
  };
  const before = structuredClone(source);
  const { config, jobs } = nativePrometheusConfig(source, "/state/prometheus/targets");
  assert.deepEqual(jobs, ["server", "other"]);
  assert.deepEqual(config, {
    global: { scrape_interval: "2s" },
    scrape_configs: [
      {
        job_name: "server",
        file_sd_configs: [{ files: ["/state/prometheus/targets/server.json"] }],
      },
      {
        job_name: "other",
        metrics_path: "/m",
        file_sd_configs: [{ files: ["/state/prometheus/targets/other.json"] }],
      },
    ],
  });
  assert.deepEqual(source, before, "the source was modified");
});

Deno.test("nativePrometheusConfig() keeps the jobs, intervals and rules of prometheus/prometheus.yml", async () => {
  const source = parse(await Deno.readTextFile(`${REPO_DIR}/prometheus/prometheus.yml`));
  const { config, jobs } = nativePrometheusConfig(source, "/t");
  assert.deepEqual(jobs, ["server", "server-consumer"]);
  assert.deepEqual(config.global, source.global);
  // The derived file lives in the state dir: its rules must name the repo's files.
  assert.deepEqual(config.rule_files, [`${REPO_DIR}/prometheus/alerts.yml`]);
  await Deno.stat(`${REPO_DIR}/prometheus/alerts.yml`);
});

Deno.test("nativePrometheusConfig() resolves relative rule files against the source's directory", () => {
  const source = { scrape_configs: [], rule_files: ["alerts.yml", "/abs/more.yml", "r/*.yml"] };
  const { config } = nativePrometheusConfig(source, "/t", { sourceDir: "/repo/prometheus" });
  assert.deepEqual(config.rule_files, [
    "/repo/prometheus/alerts.yml",
    "/abs/more.yml",
    "/repo/prometheus/r/*.yml",
  ]);
  assert.equal("rule_files" in nativePrometheusConfig({ scrape_configs: [] }, "/t").config, false);
});

Deno.test("nativePrometheusConfig() names what it cannot derive from", () => {
  assert.throws(() => nativePrometheusConfig({ global: {} }, "/t"), {
    name: "TypeError",
    message: /has no scrape_configs list: current value is undefined$/,
  });
  assert.throws(
    () => nativePrometheusConfig({ scrape_configs: [{ metrics_path: "/m" }] }, "/t"),
    { name: "TypeError", message: /has no job_name: current value is {"metrics_path":"\/m"}$/ },
  );
  assert.throws(
    () => nativePrometheusConfig({ scrape_configs: [], rule_files: "alerts.yml" }, "/t"),
    {
      name: "TypeError",
      message: /rule_files is not a list of paths: current value is "alerts.yml"$/,
    },
  );
});

Deno.test("targetGroups() lists the replicas' loopback addresses, or no group for none", () => {
  assert.deepEqual(targetGroups([58101, 58102]), [
    { targets: ["127.0.0.1:58101", "127.0.0.1:58102"], labels: {} },
  ]);
  assert.deepEqual(targetGroups([]), []);
  assert.equal(targetsFile("/t", "server-consumer"), "/t/server-consumer.json");
});
