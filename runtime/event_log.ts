/**
 * The log every process of the pipeline writes (the API, the consumer and the
 * migration): one JSON object per line,
 *
 * ```json
 * {"time":"2025-01-01T00:00:00.000Z","level":"info","service":"server-consumer","replica":"consumer-1","event":"consumer_started","consumer_id":"…","batch_size":1000,"msg":"consumer … started (batch size 1000)"}
 * ```
 *
 * `replica` tells apart the replicas of one service, whose lines an operator
 * reads merged; it is the `replica` label of the process's metrics too.
 *
 * `event` is a stable snake_case name and the fields beside it are data, so
 * tests, the fault suite and operators select records by name and read values
 * instead of matching prose; `msg` is the same fact as a sentence for a human
 * reading `docker compose logs`. It lives beside the queue contract because
 * it is the other thing both sides of the queue must agree on, for whoever
 * reads them.
 *
 * `info` and `warn` go to stdout, `error` to stderr, each line written
 * synchronously, so the last record before an exit is never lost.
 *
 * @module
 */

/** How much a record matters: `warn` is degraded but coping, `error` needs a person. */
export type LogLevel = "info" | "warn" | "error";

/** The keys the log sets itself; an event's fields cannot override them. */
type ReservedKeys = "time" | "level" | "service" | "replica" | "event" | "msg";

/**
 * What an event carries: `msg`, the human sentence, plus any data fields.
 * An `Error` value is written as its message.
 */
export type EventFields =
  & { readonly msg: string }
  & { readonly [K in ReservedKeys as K extends "msg" ? never : K]?: never }
  & Readonly<Record<string, unknown>>;

/** Options of {@linkcode EventLog}. */
export interface EventLogOptions {
  /**
   * This replica's id, written after `service`.
   * @default none: records carry no `replica`
   */
  readonly replica?: string;
  /**
   * Writes one finished line (no newline).
   * @default `console.log` for info and warn, `console.error` for error
   */
  readonly write?: (line: string, level: LogLevel) => void;
  /**
   * The clock stamped on each record.
   * @default () => new Date()
   */
  readonly now?: () => Date;
}

/** Writes one process's events as JSON lines. */
export class EventLog {
  readonly service: string;
  readonly replica: string | undefined;
  readonly #write: (line: string, level: LogLevel) => void;
  readonly #now: () => Date;

  constructor(service: string, options: EventLogOptions = {}) {
    this.service = service;
    this.replica = options.replica;
    this.#write = options.write ?? writeToConsole;
    this.#now = options.now ?? (() => new Date());
  }

  /** Something that happened as it should. */
  info(event: string, fields: EventFields): void {
    this.#record({ level: "info", event }, fields);
  }

  /** A degradation the process copes with (an outage, a dead letter). */
  warn(event: string, fields: EventFields): void {
    this.#record({ level: "warn", event }, fields);
  }

  /** A failure that needs a person. */
  error(event: string, fields: EventFields): void {
    this.#record({ level: "error", event }, fields);
  }

  #record({ level, event }: { level: LogLevel; event: string }, fields: EventFields): void {
    const { msg, ...data } = fields;
    const line = JSON.stringify(
      {
        time: this.#now().toISOString(),
        level,
        service: this.service,
        // Left out when undefined, like any undefined field.
        replica: this.replica,
        event,
        ...data,
        msg,
      },
      (_key, value) => value instanceof Error ? errorText(value) : value,
    );
    this.#write(line, level);
  }
}

/**
 * An error as one short line: its message, or its code or name when the
 * message is empty (as for the `AggregateError` of a refused connection).
 */
export function errorText(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  if (error.message !== "") return error.message;
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" ? code : error.name;
}

/** The one place the product writes to the console: every process logs through an EventLog. */
function writeToConsole(line: string, level: LogLevel): void {
  // deno-lint-ignore no-console
  if (level === "error") console.error(line);
  // deno-lint-ignore no-console
  else console.log(line);
}
