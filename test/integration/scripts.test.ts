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

  it('dedupe-check answers one string of fields: offsets per partition, an outcome byte per fingerprint', async () => {
    const store = new DoneStore(redis.client, {
      prefix: `${redis.prefix}d`,
      groupId: 'g',
      windowSeconds: 60,
      shards: 1,
      markCoalesceMs: 0,
    });
    const partition = { topic: 't', partition: 0 };
    await store.mark([{ ...partition, offset: '7', final: { key: 'a', outcome: 'delivered' } }]);
    const reading = await store.lookup(['missing', 'a'], [partition]);
    expect(reading.done).toEqual(new Map([['a', 'delivered']]));
    expect(reading.finished).toEqual(new Map([['t:0', new Set(['7'])]]));
    const reply = await scriptCall(redis.client, 'dedupeCheck')(
      1,
      store.partitionKey(partition),
      1,
      60,
      '',
      '',
      '',
    );
    expect(replyFields(reply)).toEqual(['7']);
  });

  const key = () => `${redis.prefix}{x}:x`;
  const bad: Array<[string, ScriptName, () => Array<string | number>, string]> = [
    [
      'dedupe-mark: windowSeconds 0',
      'dedupeMark',
      () => [1, key(), 0, 0, 60, '1', 'AAAAAAAAd'],
      'windowSeconds',
    ],
    [
      'dedupe-mark: windowSeconds fractional',
      'dedupeMark',
      () => [1, key(), 0, 1.5, 60, '1', 'AAAAAAAAd'],
      'windowSeconds',
    ],
    [
      'dedupe-mark: finishedTtlSeconds 0',
      'dedupeMark',
      () => [1, key(), 1, 60, 0, '', '1', '', ''],
      'finishedTtlSeconds',
    ],
    [
      'dedupe-mark: entries short of the counts',
      'dedupeMark',
      () => [1, key(), 0, 60, 60, '2', 'AAAAAAAAd'],
      'shards',
    ],
    [
      'dedupe-mark: a count per shard key',
      'dedupeMark',
      () => [1, key(), 0, 60, 60, '1,1', 'AAAAAAAAdBBBBBBBBd'],
      'shards',
    ],
    ['dedupe-check: fingerprints missing', 'dedupeCheck', () => [1, key(), 0, 60, '1', ''], 'shards'],
    ['dedupe-check: a first offset missing', 'dedupeCheck', () => [1, key(), 1, 60, '', ''], 'shards'],
    ['dedupe-check: a first offset negative', 'dedupeCheck', () => [1, key(), 1, 60, '', '', '-1'], 'from'],
    ['block: minTtlSeconds', 'block', () => [1, key(), 5, 0, 60_000, 1, 0, 1], 'minTtlSeconds'],
    ['block: maxBlockMs', 'block', () => [1, key(), 5, 60, 'inf', 1, 0, 1], 'maxBlockMs'],
    ['apns-token: a token with a space', 'apnsToken', () => [1, key(), 'a b', 1, 0, 3600, 0], 'token'],
    ['apns-token: established missing', 'apnsToken', () => [1, key(), 'a.b.c', 1, 0, 3600], 'token'],
    ['apns-token: iat fractional', 'apnsToken', () => [1, key(), 'a.b.c', 1.5, 0, 3600, 0], 'iat'],
    [
      'apns-token: replaceBelow negative',
      'apnsToken',
      () => [1, key(), 'a.b.c', 1, -1, 3600, 0],
      'replaceBelow',
    ],
    ['apns-token: ttlSeconds 0', 'apnsToken', () => [1, key(), 'a.b.c', 1, 0, 0, 0], 'ttlSeconds'],
    ['apns-token: established 2', 'apnsToken', () => [1, key(), 'a.b.c', 1, 0, 60, 2], 'established'],
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

  it('apns-token keeps a stored token until it is older than replaceBelow, and answers the one stored', async () => {
    const share = scriptCall(redis.client, 'apnsToken');
    const tokenKey = `${redis.prefix}{t}:apns-token`;
    expect(await share(1, tokenKey, 'first.jwt.x', 100, 0, 3600, 0)).toBe('100 first.jwt.x');
    expect(await share(1, tokenKey, 'second.jwt.x', 200, 100, 3600, 0)).toBe('100 first.jwt.x');
    // Established or not, a newer token never replaces a current one.
    expect(await share(1, tokenKey, 'second.jwt.x', 200, 100, 3600, 1)).toBe('100 first.jwt.x');
    expect(await share(1, tokenKey, 'third.jwt.x', 300, 101, 60, 0)).toBe('300 third.jwt.x');
    expect(await redis.client.ttl(tokenKey)).toBeLessThanOrEqual(60);
  });

  it('apns-token takes back an older token in use over a newer one, unless a renewal superseded it', async () => {
    const share = scriptCall(redis.client, 'apnsToken');
    const tokenKey = `${redis.prefix}{t}:apns-token-older`;
    // The key was lost; a process started since stored its own (floor 50); the fleet sends one of 100.
    expect(await share(1, tokenKey, 'new.jwt.x', 160, 50, 3600, 0)).toBe('160 new.jwt.x');
    expect(await share(1, tokenKey, 'fleet.jwt.x', 100, 60, 3600, 0)).toBe('160 new.jwt.x');
    expect(await share(1, tokenKey, 'fleet.jwt.x', 100, 60, 3600, 1)).toBe('100 fleet.jwt.x');
    expect(await share(1, tokenKey, 'new.jwt.x', 160, 60, 3600, 1)).toBe('100 fleet.jwt.x');
    // Signed after APNs refused the token of 100 as expired (floor 101): that one does not come back.
    expect(await share(1, tokenKey, 'renewed.jwt.x', 170, 101, 3600, 0)).toBe('170 renewed.jwt.x');
    expect(await share(1, tokenKey, 'fleet.jwt.x', 100, 60, 3600, 1)).toBe('170 renewed.jwt.x');
    // A token too old for the caller's replaceBelow does not come back either.
    expect(await share(1, tokenKey, 'old.jwt.x', 90, 95, 3600, 1)).toBe('170 renewed.jwt.x');
    // A value stored before floors existed ("<iat> <jwt>") is floored at its own iat.
    await redis.client.set(tokenKey, '200 legacy.jwt.x');
    expect(await share(1, tokenKey, 'fleet.jwt.x', 150, 60, 3600, 1)).toBe('200 legacy.jwt.x');
  });

  it('maps any other failure to a retriable ScriptUnavailableError', () => {
    const error = toScriptError(new Error('Connection is closed.'), 'dedupeMark');
    expect(error).toBeInstanceOf(ScriptUnavailableError);
    expect(error.retriable).toBe(true);
  });
});
