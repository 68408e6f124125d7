import { readFileSync } from 'node:fs';
import type { Redis } from 'ioredis';

/**
 * A script call: `numkeys, ...keys, ...argv` in, the script's reply out (see each script's header).
 * Arguments may come in nested arrays: ioredis flattens them (one level) into the command.
 */
export type ScriptCall = (...numkeysKeysAndArgv: ScriptArgument[]) => Promise<unknown>;

/** One argument of a script call, or an array of them. */
export type ScriptArgument = string | number | readonly string[];

/**
 * The limiter's Lua scripts (in `lua/`, each documented by its header) and the ioredis command each is
 * defined as. `defineCommand` sends EVALSHA, and ioredis 6 handles the script cache itself: the first call
 * on each connection (a new socket after a reconnect included) goes out as EVAL, which loads the script,
 * and a NOSCRIPT reply (after SCRIPT FLUSH) makes it resend that call as EVAL. NOSCRIPT means the script
 * did not run, so the resend cannot take tokens twice.
 */
export const limiterScripts = {
  acquire: { command: 'aqueductLimiterAcquire', file: 'acquire.lua' },
  refund: { command: 'aqueductLimiterRefund', file: 'refund.lua' },
  block: { command: 'aqueductLimiterBlock', file: 'block.lua' },
  inspect: { command: 'aqueductLimiterInspect', file: 'inspect.lua', readOnly: true },
} as const;

export type LimiterScriptName = keyof typeof limiterScripts;

const sources = new Map<LimiterScriptName, string>();

/** The Lua text of one script, read once from `lua/`. */
export function scriptSource(name: LimiterScriptName): string {
  let source = sources.get(name);
  if (source === undefined) {
    source = readFileSync(new URL(`../../lua/${limiterScripts[name].file}`, import.meta.url), 'utf8');
    sources.set(name, source);
  }
  return source;
}

/** Defines the limiter's scripts as commands on a client (idempotent; pipelines made later inherit them). */
export function defineLimiterScripts(redis: Redis): void {
  for (const name of Object.keys(limiterScripts) as LimiterScriptName[]) {
    const script = limiterScripts[name];
    redis.defineCommand(script.command, {
      lua: scriptSource(name),
      ...('readOnly' in script ? { readOnly: script.readOnly } : {}),
    });
  }
}

/** The defined command of one script on a client, bound to it. */
export function scriptCall(redis: Redis, name: LimiterScriptName): ScriptCall {
  const call = (redis as unknown as Record<string, ScriptCall | undefined>)[limiterScripts[name].command];
  if (typeof call !== 'function') throw new Error(`limiter script ${name} is not defined on this client`);
  return call.bind(redis);
}

/** A pipeline that carries the limiter's script commands (ioredis copies defined commands onto pipelines). */
export interface ScriptPipeline {
  exec(): Promise<Array<[Error | null, unknown]> | null>;
}

/** Queues one script call on a pipeline. */
export function queueScript(
  pipeline: ScriptPipeline,
  name: LimiterScriptName,
  args: readonly ScriptArgument[],
): void {
  const queue = (pipeline as unknown as Record<string, (...a: ScriptArgument[]) => unknown>)[
    limiterScripts[name].command
  ];
  if (typeof queue !== 'function') throw new Error(`limiter script ${name} is not defined on this pipeline`);
  queue.apply(pipeline, args as ScriptArgument[]);
}
