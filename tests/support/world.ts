/**
 * The services a test file's scenarios share: its Redis topology and one PostgreSQL, started on
 * first use, with the test's own clients of them.
 *
 * @module
 */

import postgres from "postgres";
import { migrate, startPostgres, type TestPostgres } from "@users-pipeline/harness/services";
import { postgresConnection } from "./postgres_client.ts";
import type { Topology } from "./topology.ts";

/** Test clients' application_name, so terminating "every backend" spares the test itself. */
export const TEST_APP = "fault-suite";

/** The services a test file's scenarios share, and the test's own clients of them. */
export interface World<T extends Topology = Topology> {
  readonly topology: T;
  /** The topology's client, for the checks. */
  readonly redis: T["client"];
  readonly pg: TestPostgres;
  /** A client of `pg`'s database, as application `TEST_APP`. */
  readonly sql: postgres.Sql;
}

/** A test file's world on one kind of topology, started on first use. */
export class FileWorld<T extends Topology> {
  readonly #start: () => Promise<T>;
  #world: Promise<World<T> & AsyncDisposable> | undefined;

  constructor(start: () => Promise<T>) {
    this.#start = start;
  }

  /** The world, started on the first call. */
  world(): Promise<World<T>> {
    this.#world ??= openWorld(this.#start);
    return this.#world;
  }

  /** Stops what {@linkcode world} started, if anything. */
  async close(): Promise<void> {
    await this.#world?.then((world) => world[Symbol.asyncDispose](), () => {});
  }
}

async function openWorld<T extends Topology>(
  start: () => Promise<T>,
): Promise<World<T> & AsyncDisposable> {
  await using stack = new AsyncDisposableStack();
  const [topology, pg] = await Promise.all([start(), startPostgres()]);
  stack.defer(() => topology.close());
  stack.use(pg);
  await migrate(pg.env);
  const sql = postgres({
    ...postgresConnection(pg.env),
    max: 2,
    onnotice: () => {},
    connection: { application_name: TEST_APP },
  });
  const services = stack.move();
  return {
    topology,
    redis: topology.client,
    pg,
    sql,
    [Symbol.asyncDispose]: async () => {
      await sql.end({ timeout: 1 });
      await services.disposeAsync();
    },
  };
}
