/**
 * A Lua script as the queue calls it: defined once with the names of its keys
 * and arguments, in order, and the type of its reply; called with objects, so
 * a key or an argument left out or misspelled is a type error rather than a
 * shifted position that Redis would take for another value.
 *
 * ```ts
 * const PUSH = defineScript({
 *   name: "queuePush",
 *   lua: "…",
 *   keys: ["queue"],
 *   args: ["deadline"],
 *   restArgs: true,
 *   reply: reply<number>(),
 * });
 * const pushed = await runScript(redis, {
 *   script: PUSH,
 *   keys: { queue: "users" },
 *   args: { deadline: 0 },
 *   restArgs: payloads,
 * });
 * ```
 *
 * A script runs as an ioredis command registered with `defineCommand`, which
 * sends EVALSHA and falls back to EVAL when Redis answers NOSCRIPT (after a
 * restart emptied its script cache); in a pipeline, ioredis loads the script
 * first when this connection has not yet.
 *
 * What goes on the wire, in order: the keys, the variadic keys, the
 * arguments, the variadic arguments. A script without variadic keys is
 * registered with its `numberOfKeys`, so its first argument on the client is
 * its first key: ioredis' automatic pipelining in a Redis Cluster picks a
 * command's node by its first argument. A script with variadic keys is sent
 * with its key count first instead, so a cluster client must leave it out of
 * automatic pipelining (see {@linkcode LuaScript.restKeys}); sent alone, it is
 * routed by its real keys.
 *
 * @module
 */

import { type ChainableCommander, type Cluster, Pipeline, Redis } from "ioredis";

/** A client scripts run on: one standalone Redis, or a Redis Cluster. */
export type RedisClient = Redis | Cluster;

/** A value a script takes as an argument (Redis receives every one as a string). */
export type ScriptArg = string | number;

declare const replyType: unique symbol;

/** Carries a script's reply type at compile time; an empty object at run time. */
export interface Reply<R> {
  readonly [replyType]?: R;
}

/** The reply type of a script, for {@linkcode defineScript}: `reply: reply<number>()`. */
export function reply<R>(): Reply<R> {
  return {};
}

/** A script, as {@linkcode defineScript} returns it. */
export interface LuaScript<
  K extends readonly string[] = readonly string[],
  A extends readonly string[] = readonly string[],
  R = unknown,
  RK extends boolean = boolean,
  RA extends boolean = boolean,
> {
  /** The command it is registered as on a client, unique among scripts. */
  readonly name: string;
  /** Its Lua source, includes resolved (`lua_include.ts`). */
  readonly lua: string;
  /** The names of its fixed keys: KEYS[1], KEYS[2]… */
  readonly keys: K;
  /** The names of its fixed arguments: ARGV[1], ARGV[2]… */
  readonly args: A;
  /**
   * True when any number of keys follow the fixed ones; then the key count
   * goes first on the wire, and a cluster client must not auto-pipeline it.
   */
  readonly restKeys: RK;
  /** True when any number of arguments follow the fixed ones. */
  readonly restArgs: RA;
  readonly reply: Reply<R>;
}

/** What {@linkcode defineScript} takes: a {@linkcode LuaScript}, variadic parts optional. */
export interface ScriptDefinition<
  K extends readonly string[],
  A extends readonly string[],
  R,
  RK extends boolean,
  RA extends boolean,
> {
  readonly name: string;
  readonly lua: string;
  readonly keys: K;
  readonly args: A;
  /** @default false */
  readonly restKeys?: RK;
  /** @default false */
  readonly restArgs?: RA;
  readonly reply: Reply<R>;
}

/** An object with one property per name. */
type Named<N extends readonly string[], V> = { readonly [P in N[number]]: V };

/** The object a script is called with: its keys and arguments by name. */
export type ScriptCall<
  K extends readonly string[],
  A extends readonly string[],
  RK extends boolean,
  RA extends boolean,
> =
  & { readonly keys: Named<K, string> }
  & (A extends readonly [] ? { readonly args?: Named<A, ScriptArg> }
    : { readonly args: Named<A, ScriptArg> })
  & (RK extends true ? { readonly restKeys: readonly string[] } : { readonly restKeys?: never })
  & (RA extends true ? { readonly restArgs: readonly ScriptArg[] }
    : { readonly restArgs?: never });

/** The call object of script `S`. */
export type CallOf<S extends LuaScript> = S extends
  LuaScript<infer K, infer A, unknown, infer RK, infer RA> ? ScriptCall<K, A, RK, RA> : never;

/** The reply of script `S`. */
export type ReplyOf<S extends LuaScript> = S extends
  LuaScript<readonly string[], readonly string[], infer R, boolean, boolean> ? R : never;

/** Every script's source by name, so two scripts never share one. */
const defined = new Map<string, string>();

/**
 * Defines a script; throws a `TypeError` when its name is an ioredis method
 * or already names another script, either of which would make a client run
 * the wrong thing under it.
 */
export function defineScript<
  const K extends readonly string[],
  const A extends readonly string[],
  R,
  RK extends boolean = false,
  RA extends boolean = false,
>(definition: ScriptDefinition<K, A, R, RK, RA>): LuaScript<K, A, R, RK, RA> {
  const { name, lua } = definition;
  if (name in Redis.prototype || (defined.has(name) && defined.get(name) !== lua)) {
    throw new TypeError(`Cannot define the script ${name}: the name is already taken`);
  }
  defined.set(name, lua);
  return {
    ...definition,
    restKeys: definition.restKeys ?? false as RK,
    restArgs: definition.restArgs ?? false as RA,
  };
}

/**
 * Registers `scripts` as commands on `client`, each once. A pipeline knows the
 * scripts its client had when it was created, so register a script before
 * calling it on a pipeline; {@linkcode runScript} registers it on a client.
 */
export function defineScripts(client: RedisClient, ...scripts: readonly LuaScript[]): void {
  for (const script of scripts) {
    if (typeof (client as unknown as Record<string, unknown>)[script.name] === "function") continue;
    client.defineCommand(
      script.name,
      script.restKeys ? { lua: script.lua } : { numberOfKeys: script.keys.length, lua: script.lua },
    );
  }
}

/**
 * Runs `script` on `target` with the keys and arguments beside it. On a
 * client, resolves with its reply, registering the script on the client
 * first if need be. On a pipeline, only queues the call (the reply comes from
 * `exec()`) and returns the pipeline, whose client must have registered the
 * script ({@linkcode defineScripts}) before the pipeline was created.
 */
export function runScript<S extends LuaScript, T extends RedisClient | ChainableCommander>(
  target: T,
  { script, ...call }: { readonly script: S } & NoInfer<CallOf<S>>,
): T extends RedisClient ? Promise<ReplyOf<S>> : ChainableCommander {
  const wire = wireArguments(script, call as unknown as CallOf<LuaScript>);
  if (!(target instanceof Pipeline)) defineScripts(target as RedisClient, script);
  const command = (target as unknown as Record<string, unknown>)[script.name];
  if (typeof command !== "function") {
    throw new TypeError(
      `Cannot queue the script ${script.name} on a pipeline whose client had not ` +
        `registered it: call defineScripts() on the client before pipeline()`,
    );
  }
  return command.apply(target, wire);
}

/** The call as ioredis takes it: (key count,) keys, variadic keys, arguments, variadic arguments. */
function wireArguments(script: LuaScript, call: CallOf<LuaScript>): ScriptArg[] {
  const named = (
    kind: "key" | "argument",
    { names, values = {} }: { names: readonly string[]; values?: object },
  ) =>
    names.map((name) => {
      const value = (values as Record<string, ScriptArg | undefined>)[name];
      if (value === undefined) {
        throw new TypeError(`Cannot run the script ${script.name}: its ${kind} ${name} is missing`);
      }
      return value;
    });
  const keys = named("key", { names: script.keys, values: call.keys });
  const args = named("argument", { names: script.args, values: call.args });
  const restKeys = call.restKeys ?? [];
  const restArgs = call.restArgs ?? [];
  if (!script.restKeys && restKeys.length > 0 || !script.restArgs && restArgs.length > 0) {
    throw new TypeError(
      `Cannot run the script ${script.name} with variadic keys or arguments it does not take`,
    );
  }
  return script.restKeys
    ? [keys.length + restKeys.length, ...keys, ...restKeys, ...args, ...restArgs]
    : [...keys, ...args, ...restArgs];
}
