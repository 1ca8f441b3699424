/**
 * The documentation's shape: README.md is a front door (at most 250 lines),
 * the README and the pages in docs/ carry no history (no commit hash, no issue
 * number: that goes in CHANGELOG.md and the commit messages), and every
 * relative link in them reaches a file, and a heading when it names one.
 *
 * @module
 */

import assert from "node:assert/strict";
import { REPO_DIR } from "@users-pipeline/harness/services";

/** The README's length limit: what, picture, requirements, commands, links. */
const README_MAX_LINES = 250;

/**
 * What reads as history: a run of seven or more hex digits (a commit hash, or
 * a long number, which the docs write with separators) and `#` before digits
 * (an issue number).
 */
const HISTORY = /[0-9a-f]{7}\b|#[0-9]+/;

/** README.md and every Markdown page in docs/, as paths from the repo's root. */
function documents(): string[] {
  const pages = [...Deno.readDirSync(`${REPO_DIR}/docs`)]
    .filter((entry) => entry.isFile && entry.name.endsWith(".md"))
    .map((entry) => `docs/${entry.name}`)
    .toSorted();
  return ["README.md", ...pages];
}

function read(path: string): string {
  return Deno.readTextFileSync(`${REPO_DIR}/${path}`);
}

/** A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens. */
export function anchorOf(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-");
}

/** The anchors of a Markdown text's headings (outside code blocks). */
function anchors(text: string): Set<string> {
  const found = new Set<string>();
  let fenced = false;
  for (const line of text.split("\n")) {
    if (line.startsWith("```")) fenced = !fenced;
    const heading = fenced ? undefined : /^#{1,6} (.+)$/.exec(line)?.[1];
    if (heading !== undefined) found.add(anchorOf(heading));
  }
  return found;
}

/** The targets of a text's Markdown links and images that are neither URLs nor mail. */
function relativeLinks(text: string): string[] {
  const withoutCode = text.replace(/```[\s\S]*?```/g, "").replace(/`[^`\n]*`/g, "");
  return [...withoutCode.matchAll(/\]\(([^)\s]+)\)/g)]
    .map((match) => match[1] ?? "")
    .filter((target) => !/^[a-z]+:/.test(target));
}

function directoryOf(path: string): string {
  const slash = path.lastIndexOf("/");
  return slash < 0 ? "" : path.slice(0, slash + 1);
}

/** A path relative to the repo's root, `..` resolved. */
function normalise(path: string): string {
  const parts: string[] = [];
  for (const part of path.split("/")) {
    if (part === "..") parts.pop();
    else if (part !== "." && part !== "") parts.push(part);
  }
  return parts.join("/");
}

Deno.test("anchorOf() makes GitHub's anchor of a heading with code and punctuation", () => {
  assert.equal(
    anchorOf("Failover and `REDIS_WAIT_REPLICAS`"),
    "failover-and-redis_wait_replicas",
  );
  assert.equal(
    anchorOf("Retrying without duplicates: Idempotency-Key"),
    "retrying-without-duplicates-idempotency-key",
  );
  assert.equal(anchorOf("The rules of POST /users"), "the-rules-of-post-users");
});

Deno.test("README.md is a front door of at most 250 lines", () => {
  const lines = read("README.md").trimEnd().split("\n").length;
  assert.ok(lines <= README_MAX_LINES, `README.md has ${lines} lines, over ${README_MAX_LINES}`);
});

Deno.test("README.md and docs/ carry no commit hash and no issue number", () => {
  const found = documents().flatMap((path) =>
    read(path).split("\n").flatMap((line, index) =>
      HISTORY.test(line) ? [`${path}:${index + 1}: ${line.trim()}`] : []
    )
  );
  assert.deepEqual(found, []);
});

Deno.test("every relative link in README.md and docs/ reaches its file and heading", () => {
  const broken: string[] = [];
  for (const path of documents()) {
    for (const target of relativeLinks(read(path))) {
      const [file = "", anchor] = target.split("#", 2);
      const resolved = file === "" ? path : normalise(directoryOf(path) + file);
      let exists = true;
      try {
        Deno.statSync(`${REPO_DIR}/${resolved}`);
      } catch (error) {
        if (!(error instanceof Deno.errors.NotFound)) throw error;
        exists = false;
      }
      if (!exists) broken.push(`${path}: ${target}: no such file`);
      else if (anchor !== undefined && !anchors(read(resolved)).has(anchor)) {
        broken.push(`${path}: ${target}: no such heading in ${resolved}`);
      }
    }
  }
  assert.deepEqual(broken, []);
});
