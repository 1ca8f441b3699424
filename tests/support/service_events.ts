/**
 * The services' structured log events, read back from a process's output.
 *
 * Every log record of the API, the consumer and the migration is one JSON
 * object per line: `{"time", "level", "service", "event", …fields, "msg"}`.
 * Tests find readiness, consumer ids, outages and hand-backs in these events
 * and never in the prose of `msg`, which may be reworded freely. Lines that
 * are not such an object (a stack trace, the task runner's own words) are
 * skipped.
 *
 * @module
 */

/** One log record. */
export interface ServiceEvent {
  readonly event: string;
  readonly service?: string;
  readonly level?: string;
  readonly time?: string;
  readonly msg?: string;
  readonly [field: string]: unknown;
}

/** The event on one output line, or undefined when the line is not an event. */
export function parseEvent(line: string): ServiceEvent | undefined {
  const text = line.trim();
  if (!text.startsWith("{")) return undefined;
  let record: unknown;
  try {
    record = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof record !== "object" || record === null || Array.isArray(record)) return undefined;
  return typeof (record as { event?: unknown }).event === "string"
    ? record as ServiceEvent
    : undefined;
}

/** The events among `lines`, in order; only those named `name` when given. */
export function serviceEvents(lines: readonly string[], name?: string): ServiceEvent[] {
  const events: ServiceEvent[] = [];
  for (const line of lines) {
    const event = parseEvent(line);
    if (event !== undefined && (name === undefined || event.event === name)) events.push(event);
  }
  return events;
}

/** Whether `lines` hold an event named `name`. */
export function hasEvent(lines: readonly string[], name: string): boolean {
  return lines.some((line) => parseEvent(line)?.event === name);
}

/**
 * A numeric field of an event.
 *
 * @throws {TypeError} when the field is missing or not a number.
 */
export function numberField(event: ServiceEvent, field: string): number {
  const value = event[field];
  if (typeof value !== "number") {
    throw new TypeError(
      `Cannot read ${event.event}.${field} as a number: current value is ${JSON.stringify(value)}`,
    );
  }
  return value;
}

/**
 * The id a consumer process runs under now: the one it registered with
 * (`consumer_started`), or the new one after it was last fenced
 * (`consumer_fenced`); undefined before it registered.
 */
export function currentConsumerId(lines: readonly string[]): string | undefined {
  let id: string | undefined;
  for (const event of serviceEvents(lines)) {
    const field = event.event === "consumer_started"
      ? "consumer_id"
      : event.event === "consumer_fenced"
      ? "new_consumer_id"
      : undefined;
    const value = field === undefined ? undefined : event[field];
    if (typeof value === "string") id = value;
  }
  return id;
}
