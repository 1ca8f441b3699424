/**
 * Assembles a Lua script from its file and the fragments it includes. A line
 * `-- @include "includes/take.lua"` is replaced by that file's text, itself
 * assembled the same way; paths are relative to `queue/lua/`. Redis takes
 * one script body per EVAL, so the fragments the scripts share are put in
 * place before the body is registered, once, when the scripts' module loads.
 *
 * @module
 */

/** An include directive: the whole line, the path in double quotes. */
const DIRECTIVE = /^-- @include "([^"]+)"$/;

/**
 * The script at `path` among `files` (path → text) with every include
 * directive replaced by the text it names. Throws a `RangeError` for a path
 * that is not among `files`, a directive not written as one, or a file that
 * includes itself, directly or not, so a script never reaches Redis with a
 * directive left in it.
 */
export function resolveIncludes(path: string, files: Readonly<Record<string, string>>): string {
  return resolve(files, { path, including: [] });
}

/** `path` resolved, `including` being the files whose directives led to it, outermost first. */
function resolve(
  files: Readonly<Record<string, string>>,
  { path, including }: { path: string; including: readonly string[] },
): string {
  const source = Object.hasOwn(files, path) ? files[path] : undefined;
  if (source === undefined) {
    const from = including.length === 0 ? "" : ` (included by ${including.at(-1)})`;
    throw new RangeError(
      `Cannot assemble the Lua script ${path}${from}: there is no such file among ` +
        Object.keys(files).join(", "),
    );
  }
  if (including.includes(path)) {
    throw new RangeError(
      `Cannot assemble the Lua script ${including[0]}: ${path} includes itself through ` +
        [...including.slice(including.indexOf(path) + 1), path].join(" → "),
    );
  }
  return source.split("\n").map((line) => {
    if (!line.startsWith("-- @include")) return line;
    const match = DIRECTIVE.exec(line.trimEnd());
    if (match === null) {
      throw new RangeError(
        `Cannot assemble the Lua script ${path}: the directive ${JSON.stringify(line)} ` +
          `is not written as -- @include "includes/<file>.lua"`,
      );
    }
    return resolve(files, { path: match[1]!, including: [...including, path] }).replace(/\n$/, "");
  }).join("\n");
}
