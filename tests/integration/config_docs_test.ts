/**
 * The configuration as documented against the configuration as parsed: the
 * zod shapes the services read their environment with (`serverVars`,
 * `consumerVars`, and `postgresVars` for the migration) are the source;
 * project.env must list every variable they read, set to its default (which
 * compose.yaml repeats as ${VAR:-default}), and the Configuration
 * table of docs/operations.md must give each one's default and readers. So a
 * variable added, removed or re-defaulted in code fails here until both
 * documents say the same.
 *
 * @module
 */

import assert from "node:assert/strict";
import { postgresVars } from "@users-pipeline/runtime/postgres_options";
import { consumerVars } from "@users-pipeline/consumer/config";
import { serverVars } from "@users-pipeline/server/config";
import { projectEnv, REPO_DIR } from "@users-pipeline/harness/services";

/** A variable's rule; parsing `undefined` gives its default. */
interface Rule {
  parse(input: unknown): unknown;
}

/** Who reads which variables, as the table's "Read by" column names them. */
const READERS: Readonly<Record<string, Readonly<Record<string, Rule>>>> = {
  server: serverVars,
  consumer: consumerVars,
  migrate: postgresVars,
};

/**
 * The database's bootstrap account, read by the postgres image (compose) and
 * by ./stack's initdb rather than by our code: it must be the account the
 * PG* variables log in as.
 */
const BOOTSTRAP: Readonly<Record<string, string>> = {
  POSTGRES_USER: "PGUSER",
  POSTGRES_PASSWORD: "PGPASSWORD",
  POSTGRES_DB: "PGDATABASE",
};

/** One documented variable. */
interface Documented {
  /** The default, as an env file would spell it ("" for empty). */
  default: string;
  /** Who reads it, sorted. */
  readers: string[];
}

/** Every variable the services read, with its default and readers, from the shapes. */
function fromSchemas(): Map<string, Documented> {
  const variables = new Map<string, Documented>();
  for (const [reader, shape] of Object.entries(READERS)) {
    for (const [name, rule] of Object.entries(shape)) {
      let value: unknown;
      try {
        value = rule.parse(undefined);
      } catch (error) {
        throw new TypeError(`Cannot document ${name} as it has no default`, { cause: error });
      }
      const known = variables.get(name);
      if (known) known.readers.push(reader);
      else variables.set(name, { default: String(value ?? ""), readers: [reader] });
    }
  }
  for (const variable of variables.values()) variable.readers.sort();
  return variables;
}

/** The document whose Configuration table lists the variables. */
const CONFIG_DOC = "docs/operations.md";

/**
 * A documented default as an env file spells it: a number may be written with
 * thousands separators (`1,000,000`), which the docs use so that a long run of
 * digits never reads as a commit hash.
 */
function envSpelling(value: string): string {
  return /^\d{1,3}(,\d{3})+$/.test(value) ? value.replaceAll(",", "") : value;
}

/**
 * The rows of the Configuration table: one variable per row, its name and
 * default in backticks (or `empty`) and its readers comma-separated.
 */
function fromDocs(): Map<string, Documented> {
  const text = Deno.readTextFileSync(`${REPO_DIR}/${CONFIG_DOC}`);
  const section = text.split(/^## /m).find((part) => part.startsWith("Configuration\n"));
  assert.ok(section, `${CONFIG_DOC} has no Configuration section`);
  const rows = section.split("\n").filter((line) => line.startsWith("|")).slice(2);
  assert.ok(rows.length > 0, `${CONFIG_DOC}'s Configuration section has no table`);
  const documented = new Map<string, Documented>();
  for (const row of rows) {
    const [name, value, readers] = row.split("|").slice(1, 4).map((cell) => cell.trim());
    const variable = /^`([A-Z0-9_]+)`$/.exec(name ?? "")?.[1];
    assert.ok(variable, `${CONFIG_DOC}'s Configuration table names no variable in: ${row}`);
    assert.ok(!documented.has(variable), `${CONFIG_DOC} documents ${variable} twice`);
    const unquoted = value === "empty" ? "" : /^`(.*)`$/.exec(value ?? "")?.[1];
    assert.ok(
      unquoted !== undefined,
      `${CONFIG_DOC}'s default of ${variable} is not \`value\`: ${row}`,
    );
    documented.set(variable, {
      default: envSpelling(unquoted),
      readers: (readers ?? "").split(",").map((reader) => reader.trim()).toSorted(),
    });
  }
  return documented;
}

Deno.test("project.env lists every variable a service reads, and nothing else", () => {
  const expected = [...fromSchemas().keys(), ...Object.keys(BOOTSTRAP)].toSorted();
  assert.deepEqual(Object.keys(projectEnv()).toSorted(), expected);
});

Deno.test("project.env sets each variable to the default its service's schema gives", () => {
  const env = projectEnv();
  const differing = [...fromSchemas()]
    .filter(([name, { default: value }]) => env[name] !== undefined && env[name] !== value)
    .map(([name, { default: value, readers }]) =>
      `${name}: project.env says ${JSON.stringify(env[name])}, the default (${
        readers.join(", ")
      }) is ${JSON.stringify(value)}`
    );
  assert.deepEqual(differing, []);
});

Deno.test("project.env's bootstrap account is the one PGUSER, PGPASSWORD and PGDATABASE name", () => {
  const env = projectEnv();
  for (const [bootstrap, login] of Object.entries(BOOTSTRAP)) {
    assert.equal(env[bootstrap], env[login], `${bootstrap} and ${login} differ`);
  }
});

Deno.test("docs/operations.md's Configuration table gives every variable's default and readers", () => {
  const env = projectEnv();
  const expected = new Map(fromSchemas());
  for (const name of Object.keys(BOOTSTRAP)) {
    expected.set(name, { default: env[name] ?? "", readers: ["database"] });
  }
  const documented = fromDocs();
  assert.deepEqual(
    [...documented.keys()].toSorted(),
    [...expected.keys()].toSorted(),
    `${CONFIG_DOC}'s Configuration table and the services' variables differ`,
  );
  for (const [name, want] of expected) {
    assert.deepEqual(documented.get(name), want, `${CONFIG_DOC}'s row of ${name}`);
  }
});
