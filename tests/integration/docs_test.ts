/**
 * The documentation's shape: README.md is a front door (at most 250 lines),
 * the README and the pages in docs/ carry no history (no commit hash, no issue
 * number: that goes in CHANGELOG.md and the commit messages), and every
 * relative link in them reaches a file, and a heading when it names one. A test
 * that cites the docs for what it allows (docs/development.md, "Where a change
 * goes") cites what they say: each page a test's comment names exists, each
 * section it names is a heading or a bold lead-in of that page, and each
 * sentence it quotes is there, in that section.
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

/** A page as a citation names it: `README` is README.md. */
const CITED_FILE = /\b(README(?:\.md)?|docs\/[\w-]+\.md)\b/g;

/** Where a test's comment points into the docs: a page, the sections it names, its quotes. */
export interface Citation {
  /** The page, as a path from the repo's root. */
  readonly file: string;
  /** The line of the comment that names the page (1-based). */
  readonly line: number;
  /** Headings or bold lead-ins named right after the page: `page, "Section"`, `page ("Section"`. */
  readonly sections: readonly string[];
  /** Every other quoted text from there to the end of the sentence or the next page named. */
  readonly quotes: readonly string[];
}

/**
 * The citations in a source file's comments. A comment names a page (`README`, or a page of docs/
 * by its path), then may name sections of it as quoted text right after a comma, a `'s` or an
 * opening parenthesis (several joined by `and`), and may quote it anywhere further in the same
 * sentence. Comment lines are joined, so a citation may wrap.
 */
export function citations(source: string): Citation[] {
  const found: Citation[] = [];
  for (const { text, lineAt } of commentBlocks(source)) {
    const pages = [...text.matchAll(CITED_FILE)];
    pages.forEach((page, i) => {
      const start = page.index + page[0].length;
      const end = pages[i + 1]?.index ?? text.length;
      const scope = sentence(text.slice(start, end));
      const named = /^(?:'s|,|\s*\()\s*("[^"]+"(?:\s*(?:,|and)\s*"[^"]+")*)/.exec(scope);
      const quoted = (part: string) => [...part.matchAll(/"([^"]+)"/g)].map((m) => m[1]!);
      const file = page[1] === "README" ? "README.md" : page[1]!;
      found.push({
        file,
        line: lineAt(page.index),
        sections: named ? quoted(named[1]!) : [],
        quotes: quoted(named ? scope.slice(named[0].length) : scope),
      });
    });
  }
  return found;
}

/** Each run of comment lines as one text, whitespace collapsed, with the line of each offset. */
function commentBlocks(source: string): { text: string; lineAt(offset: number): number }[] {
  const blocks: { text: string; lineAt(offset: number): number }[] = [];
  let parts: string[] = [];
  let starts: { offset: number; line: number }[] = [];
  let length = 0;
  const flush = () => {
    if (parts.length === 0) return;
    const lines = starts;
    blocks.push({
      text: parts.join(" "),
      lineAt: (offset) => lines.findLast((s) => s.offset <= offset)!.line,
    });
    parts = [];
    starts = [];
    length = 0;
  };
  let inBlock = false;
  source.split("\n").forEach((raw, index) => {
    const line = raw.trim();
    let comment: string | undefined;
    if (inBlock || line.startsWith("/*")) {
      inBlock = !line.includes("*/");
      comment = line.replace(/^\/\*+|\*+\/$|^\*+/g, "");
    } else if (line.startsWith("//")) comment = line.replace(/^\/\/+/, "");
    if (comment === undefined) return flush();
    const text = comment.trim();
    if (text === "") return;
    starts.push({ offset: length + (parts.length > 0 ? 1 : 0), line: index + 1 });
    length += text.length + (parts.length > 0 ? 1 : 0);
    parts.push(text);
  });
  flush();
  return blocks;
}

/** `text` to the end of its first sentence: a full stop outside quotes, then a capital or quote. */
function sentence(text: string): string {
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '"') quoted = !quoted;
    else if (!quoted && text[i] === "." && /^\s+[A-Z"]|^\s*$/.test(text.slice(i + 1, i + 3))) {
      return text.slice(0, i + 1);
    }
  }
  return text;
}

/** Markdown as it reads: code spans, emphasis and links unwrapped, whitespace collapsed. */
export function plain(markdown: string): string {
  return markdown
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/`/g, "")
    .replace(/\*\*([^*]+)\*\*/g, "$1")
    .replace(/(^|[^\w*])[*_]([^*_\s](?:[^*_]*[^*_\s])?)[*_](?=$|[^\w*])/g, "$1$2")
    .replace(/\s+/g, " ")
    .trim();
}

/**
 * A page's sections by name: each heading (to the next heading of its level or above) and each
 * paragraph or list item that opens with a bold lead-in (`- **Crashes are recovered.** …`), named
 * without its closing punctuation.
 */
function sections(markdown: string): Map<string, string> {
  const found = new Map<string, string>();
  const lines = markdown.split("\n");
  const isHeading = (line: string) => /^#{1,6} /.test(line);
  lines.forEach((line, i) => {
    const heading = /^(#{1,6}) (.+)$/.exec(line);
    const leadIn = /^(\s*(?:- )?)\*\*(.+?)\*\*/.exec(line);
    let end = i + 1;
    if (heading) {
      const level = heading[1]!.length;
      while (end < lines.length && !/^#{1,6} /.test(lines[end]!)) end++;
      while (end < lines.length && (/^(#+) /.exec(lines[end]!)?.[1]?.length ?? 0) > level) {
        end++;
        while (end < lines.length && !isHeading(lines[end]!)) end++;
      }
    } else if (leadIn) {
      const item = leadIn[1]!;
      while (
        end < lines.length && lines[end]!.trim() !== "" && !isHeading(lines[end]!) &&
        !(item.endsWith("- ") && lines[end]!.startsWith(item))
      ) end++;
    } else return;
    const name = plain((heading ?? leadIn)![2]!).replace(/[.:;,]$/, "");
    found.set(name, plain(lines.slice(i, end).join("\n")));
  });
  return found;
}

/** What is wrong with `citation`, one line each: a missing page, section or quote. */
function brokenParts(citation: Citation, readPage: (path: string) => string | undefined): string[] {
  const page = readPage(citation.file);
  if (page === undefined) return [`${citation.file}: no such file`];
  const bySection = sections(page);
  const problems: string[] = [];
  const texts: string[] = [];
  for (const name of citation.sections) {
    const text = bySection.get(plain(name).replace(/[.:;,]$/, ""));
    if (text === undefined) problems.push(`${citation.file} has no section "${name}"`);
    else texts.push(text);
  }
  const where = texts.length > 0 ? texts : [plain(page)];
  for (const quote of citation.quotes) {
    // An ellipsis stands for words left out: the parts must come in order.
    const parts = plain(quote).split(/\s*(?:…|\.\.\.)\s*/).filter((part) => part !== "");
    const found = where.some((text) => {
      let from = 0;
      return parts.every((part) => {
        const at = text.indexOf(part, from);
        from = at + part.length;
        return at >= 0;
      });
    });
    if (!found) {
      problems.push(
        `${citation.file}${
          citation.sections.length > 0 ? `, "${citation.sections.join('" and "')}"` : ""
        } does not say "${quote}"`,
      );
    }
  }
  return problems;
}

/** The files whose comments cite the docs: everything in tests/, and the tools' tests. */
function testSources(): string[] {
  const walk = (dir: string): string[] =>
    [...Deno.readDirSync(`${REPO_DIR}/${dir}`)].flatMap((entry) =>
      entry.isDirectory ? walk(`${dir}/${entry.name}`) : [`${dir}/${entry.name}`]
    );
  return [
    ...walk("tests").filter((path) => /\.(ts|js)$/.test(path)),
    ...walk("tools").filter((path) => path.endsWith("_test.ts")),
  ].toSorted();
}

Deno.test("citations() reads a page, its sections and its quotes from wrapped comments", () => {
  const source = [
    "const a = 1; // not a comment line",
    "/**",
    ' * As README, "How it works" and "Why": the API "answers 202',
    ' * promptly". Then docs/api.md: "a quote" and docs/x.md\'s "Lead-in" ("More").',
    " */",
    'const b = "docs/delivery.md, \\"not a comment\\"";',
    '// docs/delivery.md ("Crashes are recovered") names it, "this" too. "Not this."',
  ].join("\n");
  assert.deepEqual(citations(source), [
    {
      file: "README.md",
      line: 3,
      sections: ["How it works", "Why"],
      quotes: ["answers 202 promptly"],
    },
    { file: "docs/api.md", line: 4, sections: [], quotes: ["a quote"] },
    { file: "docs/x.md", line: 4, sections: ["Lead-in"], quotes: ["More"] },
    {
      file: "docs/delivery.md",
      line: 7,
      sections: ["Crashes are recovered"],
      quotes: ["this"],
    },
  ]);
});

Deno.test("plain() unwraps Markdown's code spans, emphasis and links but not identifiers", () => {
  assert.equal(
    plain("a consumer presumed dead is\n  _fenced_: see [`WAIT`](scaling.md#wait), **bold**"),
    "a consumer presumed dead is fenced: see WAIT, bold",
  );
  assert.equal(
    plain("`HEARTBEAT_TTL_MS + RECOVERY_INTERVAL_MS`"),
    "HEARTBEAT_TTL_MS + RECOVERY_INTERVAL_MS",
  );
});

Deno.test("every citation in a test's comments names a section and words its page has", () => {
  const pages = new Map<string, string | undefined>();
  const readPage = (path: string) => {
    if (!pages.has(path)) {
      try {
        pages.set(path, read(path));
      } catch (error) {
        if (!(error instanceof Deno.errors.NotFound)) throw error;
        pages.set(path, undefined);
      }
    }
    return pages.get(path);
  };
  const broken = testSources().flatMap((path) =>
    citations(read(path)).flatMap((citation) =>
      brokenParts(citation, readPage).map((problem) => `${path}:${citation.line}: ${problem}`)
    )
  );
  assert.deepEqual(broken, []);
});
