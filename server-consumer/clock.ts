/**
 * The consumer's clock is the product's (`runtime/clock.ts`); its modules
 * import it from here.
 *
 * @module
 */

export { type Clock, systemClock } from "@users-pipeline/runtime/clock";
