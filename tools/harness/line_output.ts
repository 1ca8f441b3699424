/**
 * Child output, line by line, under the child's name: printed the way `docker
 * compose up` shows it (`server-1  | listening on 8000`), so the interleaved
 * output of a dozen processes stays readable, or kept in an
 * {@linkcode OutputBuffer} for a test or a measurement to show when it fails.
 *
 * @module
 */

/** Receives one line (without its line break) that the process `name` printed. */
export type LineSink = (name: string, line: string) => void;

/** Formats `line` under `name`, padded to `width` so the bars line up. */
export function prefixLine(name: string, width: number, line: string): string {
  return `${name.padEnd(width)} | ${line}`;
}

/**
 * A sink printing every line to stdout with its prefix; `width` is the
 * longest name's length.
 *
 * @default width 12
 */
export function consoleSink(width = 12): LineSink {
  return (name, line) => console.log(prefixLine(name, width, line));
}

/**
 * Reads `stream` to its end and calls `onLine` for each line, including a
 * last line without a line break. A `\r` before the break is dropped.
 */
export async function forEachLine(
  stream: ReadableStream<Uint8Array>,
  onLine: (line: string) => void,
): Promise<void> {
  let pending = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    const lines = (pending + chunk).split("\n");
    pending = lines.pop() ?? "";
    for (const line of lines) onLine(line.replace(/\r$/, ""));
  }
  if (pending !== "") onLine(pending.replace(/\r$/, ""));
}

/**
 * Keeps output lines (the last 500) instead of printing them, so passing
 * tests and measurements stay quiet and a failure can show them.
 */
export class OutputBuffer {
  readonly lines: string[] = [];
  /** Pass to a process's `output`. */
  readonly sink: LineSink = (name, line) => {
    this.lines.push(`${name} | ${line}`);
    if (this.lines.length > 500) this.lines.shift();
  };

  /** The last `count` lines, one per line. */
  tail(count = 60): string {
    return this.lines.slice(-count).join("\n");
  }
}
