/**
 * Parsing of compose-style env files such as `project.env`, so the native
 * stack reads the same configuration compose passes with `env_file:` instead
 * of repeating its values.
 *
 * @module
 */

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Parses `KEY=VALUE` lines the way compose reads an `env_file`: blank lines
 * and lines starting with `#` are skipped, an `export ` prefix is allowed, a
 * value in single or double quotes is taken without its quotes, and in an
 * unquoted value ` #` starts a comment.
 *
 * @throws {SyntaxError} for a line that is not `KEY=VALUE`.
 */
export function parseEnvFile(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [index, raw] of text.split(/\r?\n/).entries()) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const assignment = line.replace(/^export\s+/, "");
    const equals = assignment.indexOf("=");
    const name = equals === -1 ? "" : assignment.slice(0, equals).trim();
    if (!NAME.test(name)) {
      throw new SyntaxError(
        `Cannot parse line ${index + 1} of the env file as KEY=VALUE: current value is ${
          JSON.stringify(raw)
        }`,
      );
    }
    env[name] = parseValue(assignment.slice(equals + 1).trim());
  }
  return env;
}

function parseValue(value: string): string {
  const quote = value[0];
  if ((quote === `"` || quote === `'`) && value.length >= 2) {
    const end = value.indexOf(quote, 1);
    if (end !== -1) {
      const inner = value.slice(1, end);
      return quote === `"` ? inner.replaceAll("\\n", "\n").replaceAll(`\\"`, `"`) : inner;
    }
  }
  const comment = value.search(/\s#/);
  return (comment === -1 ? value : value.slice(0, comment)).trim();
}
