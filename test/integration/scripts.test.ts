import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DoneStore } from '../../src/pipeline/done-store.ts';
import { ScriptArgumentError, ScriptUnavailableError, toScriptError } from '../../src/redis/script-errors.ts';
import {
  defineScripts,
  replyFields,
  type ScriptName,
  scriptCall,
  scriptSource,
  scripts,
  spliceIncludes,
} from '../../src/redis/scripts.ts';
import { type TestRedis, testRedis } from '../helpers/redis.ts';

describe('the script loader', () => {
  it('splices each include once, includes of includes first, and leaves other lines alone', () => {
    const includes: Record<string, string> = {
      a: 'local a = 1\n',
      b: '--- @include "a"\nlocal b = a + 1\n',
    };
    const text = 'head\n--- @include "b"\n  --- @include "a"\n-- @include "c" (not an include line)\ntail\n';
    expect(spliceIncludes(text, (name) => includes[name] as string)).toBe(
      'head\nlocal a = 1\nlocal b = a + 1\n\n-- @include "c" (not an include line)\ntail\n',
    );
  });

  it('sends every script as one self-contained text that keeps its KEYS/ARGV header', () => {
    for (const name of Object.keys(scripts) as ScriptName[]) {
      const source = scriptSource(name);
      expect(source, name).not.toMatch(/@include/);
      expect(source.startsWith('--[[\n'), name).toBe(true);
      expect(source, name).toMatch(/\n {2}KEYS/);
    }
  });
});

describe('one reply shape and one error format', () => {
  let redis: TestRedis;

  beforeAll(() => {
    redis = testRedis('scripts');
    defineScripts(redis.client);
  });

  afterAll(async () => {
    await redis.cleanup();
  });

  it('done-check answers one string of fields, empty for an event without a mark', async () => {
    const store = new DoneStore(redis.client, {
      prefix: `${redis.prefix}d`,
      ttlSeconds: 60,
      markCoalesceMs: 0,
    });
    await store.mark([{ key: 'a', outcome: 'delivered' }]);
    const reply = await scriptCall(redis.client, 'doneCheck')(2, store.key('missing'), store.key('a'));
    expect(replyFields(reply)).toEqual(['', 'delivered']);
    expect(await store.lookup(['a', 'missing'])).toEqual(new Map([['a', 'delivered']]));
  });

  const key = () => `${redis.prefix}{done}:x`;
  const bad: Array<[string, ScriptName, () => Array<string | number>, string]> = [
    ['done-mark: ttlSeconds 0', 'doneMark', () => [1, key(), 0, 'delivered'], 'ttlSeconds'],
    ['done-mark: ttlSeconds fractional', 'doneMark', () => [1, key(), 1.5, 'delivered'], 'ttlSeconds'],
    ['done-mark: no outcome', 'doneMark', () => [1, key(), 60], 'outcomes'],
    ['block: minTtlSeconds', 'block', () => [1, key(), 5, 0, 60_000, 1, 0, 1], 'minTtlSeconds'],
    ['block: maxBlockMs', 'block', () => [1, key(), 5, 60, 'inf', 1, 0, 1], 'maxBlockMs'],
  ];
  it.each(bad)(
    '%s: AQUEDUCT_ARGUMENT mapped to ScriptArgumentError, nothing written',
    async (_, name, args, argument) => {
      const error = toScriptError(
        await scriptCall(redis.client, name)(...args()).catch((e: unknown) => e),
        name,
      );
      expect(error).toBeInstanceOf(ScriptArgumentError);
      expect((error as ScriptArgumentError).argument).toBe(argument);
      expect((error as ScriptArgumentError).retriable).toBe(false);
      expect(await redis.client.exists(key())).toBe(0);
    },
  );

  it('maps any other failure to a retriable ScriptUnavailableError', () => {
    const error = toScriptError(new Error('Connection is closed.'), 'doneMark');
    expect(error).toBeInstanceOf(ScriptUnavailableError);
    expect(error.retriable).toBe(true);
  });
});
