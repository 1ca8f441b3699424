/**
 * The alerting rules (`prometheus/alerts.yml`) through Prometheus' own tool:
 * `promtool check rules` parses every expression and template, `promtool
 * check config` finds them from `prometheus/prometheus.yml` as compose's
 * Prometheus does, and `promtool test rules` runs the unit tests of
 * `prometheus/alerts_test.yml` on Prometheus' rule engine. Each alert of the
 * file must be held there to firing at least once and to staying quiet at
 * least once: an alert that can never fire, or always does, fails here.
 *
 * @module
 */

import assert from "node:assert/strict";
import { parse } from "yaml";
import { REPO_DIR } from "@users-pipeline/harness/repo";
import { runCommand } from "@users-pipeline/harness/run_command";

/** The alerts the operator's documentation describes, one per condition to act on. */
const ALERTS = [
  "BacklogTooOld",
  "NoConsumerReady",
  "DeadLettersGrowing",
  "TooMany503s",
  "ReplicaDown",
];

const PROMETHEUS_DIR = `${REPO_DIR}/prometheus`;

async function promtool(...args: string[]): Promise<string> {
  const { code, stdout, stderr } = await runCommand("promtool", args, { cwd: PROMETHEUS_DIR });
  assert.equal(code, 0, `promtool ${args.join(" ")} exited ${code}:\n${stdout}${stderr}`);
  return stdout + stderr;
}

interface RuleTest {
  alert_rule_test?: { alertname: string; exp_alerts?: unknown[] }[];
}

Deno.test("promtool checks prometheus/alerts.yml and finds it from prometheus.yml", async () => {
  const rules = await promtool("check", "rules", "alerts.yml");
  assert.match(rules, new RegExp(`SUCCESS: ${ALERTS.length} rules found`));
  const config = await promtool("check", "config", "prometheus.yml");
  assert.match(config, new RegExp(`alerts.yml\\s+SUCCESS: ${ALERTS.length} rules found`));

  const file = parse(await Deno.readTextFile(`${PROMETHEUS_DIR}/alerts.yml`));
  const names = file.groups.flatMap((group: { rules: { alert: string }[] }) =>
    group.rules.map((rule) => rule.alert)
  );
  assert.deepEqual(names, ALERTS);
});

Deno.test("promtool test rules: every alert fires when it should and stays quiet when it should", async () => {
  const output = await promtool("test", "rules", "alerts_test.yml");
  assert.match(output, /SUCCESS/);

  const { tests } = parse(await Deno.readTextFile(`${PROMETHEUS_DIR}/alerts_test.yml`)) as {
    tests: RuleTest[];
  };
  const checks = tests.flatMap((test) => test.alert_rule_test ?? []);
  for (const alert of ALERTS) {
    const mine = checks.filter((check) => check.alertname === alert);
    assert.ok(
      mine.some((check) => (check.exp_alerts ?? []).length > 0),
      `no test expects ${alert} to fire`,
    );
    assert.ok(
      mine.some((check) => (check.exp_alerts ?? []).length === 0),
      `no test expects ${alert} to stay quiet`,
    );
  }
});
