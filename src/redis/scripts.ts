import { readFileSync } from 'node:fs';
import type { RedisClient } from './client.ts';

/**
 * Every Lua script of Aqueduct (in `lua/`, each documented by its KEYS/ARGV header) and the ioredis
 * command it is defined as. `defineCommand` sends EVALSHA, and ioredis 6 handles the script cache itself:
 * the first call on each connection (a new socket after a reconnect included) goes out as EVAL, which
 * loads the script, and a NOSCRIPT reply (after SCRIPT FLUSH) makes it resend that call as EVAL.
 * NOSCRIPT means the script did not run, so the resend cannot take tokens (or write marks) twice.
 */
export const scripts = {
  acquire: { command: 'aqueductLimiterAcquire', file: 'acquire.lua' },
  refund: { command: 'aqueductLimiterRefund', file: 'refund.lua' },
  block: { command: 'aqueductLimiterBlock', file: 'block.lua' },
  inspect: { command: 'aqueductLimiterInspect', file: 'inspect.lua', readOnly: true },
  dedupeCheck: { command: 'aqDedupeCheck', file: 'dedupe-check.lua' }, // deletes a set a reset made stale
  dedupeMark: { command: 'aqDedupeMark', file: 'dedupe-mark.lua' },
  dedupeForget: { command: 'aqDedupeForget', file: 'dedupe-forget.lua' },
  apnsToken: { command: 'aqApnsToken', file: 'apns-token.lua' },
} as const;

export type ScriptName = keyof typeof scripts;

/**
 * A script call: `numkeys, ...keys, ...argv` in, the script's reply out (see each script's header).
 * Arguments may come in nested arrays: ioredis flattens them (one level) into the command.
 */
export type ScriptCall = (...numkeysKeysAndArgv: ScriptArgument[]) => Promise<unknown>;

/** One argument of a script call, or an array of them. */
export type ScriptArgument = string | number | Buffer | readonly string[];

const LUA_DIRECTORY = new URL('../../lua/', import.meta.url);

/**
 * Splices shared Lua into a script, as bullmq does: every line `--- @include "<name>"` is replaced by
 * the text of `<name>` (read by `readInclude`, with its own includes spliced in turn), each name at
 * most once per script, so that what Redis gets is one self-contained text.
 */
export function spliceIncludes(
  text: string,
  readInclude: (name: string) => string,
  included: Set<string> = new Set(),
): string {
  return text.replace(/^[ \t]*--- @include "([\w-]+)"[ \t]*$/gm, (_line, name: string) => {
    if (included.has(name)) return '';
    included.add(name);
    return spliceIncludes(readInclude(name), readInclude, included).trimEnd();
  });
}

function readLua(path: string): string {
  return readFileSync(new URL(path, LUA_DIRECTORY), 'utf8');
}

const sources = new Map<ScriptName, string>();

/** The text of one script as Redis gets it: `lua/<file>` with `lua/includes/*.lua` spliced in, read once. */
export function scriptSource(name: ScriptName): string {
  let source = sources.get(name);
  if (source === undefined) {
    source = spliceIncludes(readLua(scripts[name].file), (include) => readLua(`includes/${include}.lua`));
    sources.set(name, source);
  }
  return source;
}

/** Defines every script as a command on a client (idempotent; pipelines made later inherit them). */
export function defineScripts(redis: RedisClient): void {
  for (const name of Object.keys(scripts) as ScriptName[]) {
    const script = scripts[name];
    redis.defineCommand(script.command, {
      lua: scriptSource(name),
      ...('readOnly' in script ? { readOnly: script.readOnly } : {}),
    });
  }
}

/** The defined command of one script on a client, bound to it. */
export function scriptCall(redis: RedisClient, name: ScriptName): ScriptCall {
  const call = (redis as unknown as Record<string, ScriptCall | undefined>)[scripts[name].command];
  if (typeof call !== 'function') throw new Error(`script ${name} is not defined on this client`);
  return call.bind(redis);
}

/** A pipeline that carries the script commands (ioredis copies defined commands onto pipelines). */
export interface ScriptPipeline {
  exec(): Promise<Array<[Error | null, unknown]> | null>;
}

/** Queues one script call on a pipeline. */
export function queueScript(
  pipeline: ScriptPipeline,
  name: ScriptName,
  args: readonly ScriptArgument[],
): void {
  const queue = (pipeline as unknown as Record<string, (...a: ScriptArgument[]) => unknown>)[
    scripts[name].command
  ];
  if (typeof queue !== 'function') throw new Error(`script ${name} is not defined on this pipeline`);
  queue.apply(pipeline, args as ScriptArgument[]);
}

/**
 * The fields of a script's reply. Every script that answers with several values answers with one
 * string of them separated by single spaces (an empty field is two spaces in a row): Lua numbers
 * returned to Redis would be truncated to integers, and one bulk string is cheaper to build in Lua, and
 * to decode here, than an array.
 */
export function replyFields(reply: unknown): string[] {
  if (typeof reply !== 'string')
    throw new Error(`expected a script reply of space-separated fields, got ${typeof reply}`);
  return reply.split(' ');
}
