/**
 * How every service process starts: its configuration, parsed once, or a
 * `config_invalid` record and exit 1, since a process with a bad setting must
 * not start; then its replica id and its event log.
 *
 * @module
 */

import { errorText, EventLog, type EventLogOptions } from "./event_log.ts";

/** What a service starts with. */
export interface ServiceStart<Config> {
  readonly config: Config;
  /** REPLICA_ID, else the hostname. */
  readonly replica: string;
  /** The service's log, each record naming the replica. */
  readonly log: EventLog;
}

/** Options of {@linkcode startService}. */
export interface StartServiceOptions {
  /** @default Deno.hostname */
  readonly hostname?: () => string;
  /** Ends the process. @default Deno.exit */
  readonly exit?: (code: number) => never;
  /** Writes each log line. @default the EventLog's own */
  readonly write?: EventLogOptions["write"];
}

/**
 * Parses the configuration with `load` (which throws a `TypeError` naming a
 * bad variable) and names the replica; on a bad variable, logs
 * `config_invalid` and exits 1.
 */
export function startService<Config extends { readonly REPLICA_ID: string }>(
  service: string,
  load: () => Config,
  options: StartServiceOptions = {},
): ServiceStart<Config> {
  const { hostname = Deno.hostname, exit = Deno.exit, write } = options;
  let config: Config;
  try {
    config = load();
  } catch (error) {
    // REPLICA_ID may be the bad variable: the hostname says which replica failed.
    new EventLog(service, { replica: hostname(), write })
      .error("config_invalid", { error, msg: errorText(error) });
    return exit(1);
  }
  // In compose each container's hostname is its id; replicas sharing a host need REPLICA_ID.
  const replica = config.REPLICA_ID || hostname();
  return { config, replica, log: new EventLog(service, { replica, write }) };
}
