/**
 * The users table: its migrations (`migrations/`, applied by
 * {@linkcode migrate}), the idempotent insert the consumer stores with, and
 * the reads the API's status lookup makes.
 *
 * @module
 */

export * from "./users_table.ts";
export { ForeignUsersTableError, migrate, type MigrateOptions, type Migration } from "./migrate.ts";
