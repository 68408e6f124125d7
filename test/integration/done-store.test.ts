import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DoneStore, type DoneStoreOptions } from '../../src/pipeline/done-store.ts';
import { defineScripts, replyFields, scriptCall } from '../../src/redis/scripts.ts';
import { LocalRedis } from '../../src/services/index.ts';
import { privateCluster, type TestRedis, testRedis } from '../helpers/redis.ts';
import { startSilentServer } from '../helpers/silent-server.ts';

/**
 * The dedupe memory against a real Redis: finished offsets per partition, trimmed by Kafka's commit,
 * and the idempotency window of 9-byte entries, by (tenant, id).
 */

let redis: TestRedis;
beforeAll(() => {
  redis = testRedis('done-store');
  defineScripts(redis.client);
});
afterAll(async () => {
  await redis.cleanup();
});

let stores = 0;
/** A store of its own prefix, on the run's Redis unless another client is given. */
function store(options: Partial<DoneStoreOptions> = {}, client: Redis = redis.client): DoneStore {
  return new DoneStore(client, {
    prefix: `${redis.prefix}s${stores++}`,
    groupId: 'group',
    windowSeconds: 60,
    markCoalesceMs: 0,
    coalesceMs: 0,
    ...options,
  });
}

async function keysOf(prefix: string): Promise<string[]> {
  return (await redis.client.keys(`${prefix}*`)).sort();
}

const P0 = { topic: 'notifications', partition: 0 };
const P1 = { topic: 'notifications', partition: 1 };

describe('DoneStore', () => {
  it('remembers final outcomes by (tenant, id) and finished offsets by partition, in one lookup', async () => {
    const s = store();
    await s.mark([
      { ...P0, offset: '3', final: { key: 'acme order-42', outcome: 'delivered' } },
      { ...P0, offset: '5' }, // written to the retry topic: finished, not final
      { ...P1, offset: '9', final: { key: 'acme order-7', outcome: 'invalid-token' } },
      { ...P1, offset: '10', final: { key: 'acme order-8', outcome: 'dead-lettered' } },
    ]);
    const reading = await s.lookup(
      ['acme order-42', 'globex order-42', 'acme order-7', 'acme order-8'],
      [P0, P1],
    );
    expect(reading.done).toEqual(
      new Map([
        ['acme order-42', 'delivered'],
        ['acme order-7', 'invalid-token'],
        ['acme order-8', 'dead-lettered'],
      ]),
    );
    expect(reading.finished).toEqual(
      new Map([
        ['notifications:0', new Set(['3', '5'])],
        ['notifications:1', new Set(['9', '10'])],
      ]),
    );
  });

  it("drops a partition's finished offsets below each commit: once the commit passes them, nothing is left", async () => {
    const s = store({ windowSeconds: 0 });
    await s.mark(['4', '6', '7', '12'].map((offset) => ({ ...P0, offset })));
    s.committed(P0, '7');
    await s.settled();
    expect((await s.lookup([], [P0])).finished.get('notifications:0')).toEqual(new Set(['7', '12']));
    s.committed(P0, '13');
    await s.settled();
    expect((await s.lookup([], [P0])).finished.get('notifications:0')).toEqual(new Set());
    expect(await redis.client.exists(s.partitionKey(P0))).toBe(0);
  });

  it('adds no offset the commit has passed when both come in one flush: a drained partition leaves no key', async () => {
    const s = store({ windowSeconds: 0, markCoalesceMs: 50 });
    const marked = s.mark(['4', '6', '8'].map((offset) => ({ ...P0, offset })));
    s.committed(P0, '9');
    await marked;
    await s.settled();
    expect((await s.lookup([], [P0])).finished.get('notifications:0')).toEqual(new Set());
    expect(await redis.client.exists(s.partitionKey(P0))).toBe(0);
  });

  it('drops finished offsets above a commit higher than where the reader starts: the offsets were reset, or the topic recreated', async () => {
    const s = store({ windowSeconds: 0 });
    await s.mark(['7', '9', '12'].map((offset) => ({ ...P0, offset })));
    s.committed(P0, '5');
    await s.settled();
    // A reader that starts at the commit, or above it, skips what was finished above it.
    const atCommit = await s.lookup([], [{ ...P0, from: '5' }]);
    expect(atCommit.finished.get('notifications:0')).toEqual(new Set(['7', '9', '12']));
    const aboveCommit = await s.lookup([], [{ ...P0, from: '8' }]);
    expect(aboveCommit.finished.get('notifications:0')).toEqual(new Set(['7', '9', '12']));
    // One that starts below it reads records those offsets did not name: it skips none, and the set is gone.
    const belowCommit = await s.lookup([], [{ ...P0, from: '0' }]);
    expect(belowCommit.finished.get('notifications:0')).toEqual(new Set());
    expect(await redis.client.exists(s.partitionKey(P0))).toBe(0);
    // What the new reading finishes is remembered as before.
    await s.mark([{ ...P0, offset: '3' }]);
    s.committed(P0, '1');
    await s.settled();
    expect((await s.lookup([], [{ ...P0, from: '1' }])).finished.get('notifications:0')).toEqual(
      new Set(['3']),
    );
  });

  it('never lowers the commit a set lies above: a flush sent again that lands after a later one, with a commit or without, lets no passed offset back', async () => {
    const s = store({ windowSeconds: 0 });
    const key = s.partitionKey(P0);
    const mark = scriptCall(redis.client, 'dedupeMark');
    await mark(1, key, 1, 60, 60, '9', '10,12', '', '');
    // The earlier flush, sent again once Redis took calls again: commit 5, and 7, which 9 has passed.
    await mark(1, key, 1, 60, 60, '5', '7,11', '', '');
    expect(await redis.client.zscore(key, 'commit')).toBe('9');
    // A flush of offsets alone (no commit yet in it) adds none that the recorded commit has passed.
    await mark(1, key, 1, 60, 60, '', '8,13', '', '');
    expect(await redis.client.zscore(key, '8')).toBeNull();
    expect((await s.lookup([], [{ ...P0, from: '9' }])).finished.get('notifications:0')).toEqual(
      new Set(['10', '11', '12', '13']),
    );
    // Offsets reset to 6, below the commit: the reader reads records the set does not name, and skips none.
    expect((await s.lookup([], [{ ...P0, from: '6' }])).finished.get('notifications:0')).toEqual(new Set());
  });

  it('keeps finished offsets marked before any commit, whoever reads them: nothing says where they lie', async () => {
    const s = store({ windowSeconds: 0 });
    await s.mark(['4', '6'].map((offset) => ({ ...P1, offset })));
    const reading = await s.lookup([], [{ ...P1, from: '0' }]);
    expect(reading.finished.get('notifications:1')).toEqual(new Set(['4', '6']));
  });

  it('with the window off writes nothing but finished offsets, and knows no (tenant, id)', async () => {
    const prefix = `${redis.prefix}off`;
    const s = new DoneStore(redis.client, { prefix, groupId: 'g', windowSeconds: 0, markCoalesceMs: 0 });
    await s.mark([{ ...P0, offset: '1', final: { key: 'acme a', outcome: 'delivered' } }]);
    expect(await keysOf(prefix)).toEqual([s.partitionKey(P0)]);
    expect((await s.lookup(['acme a'])).done.size).toBe(0);
    expect(s.isDoneLocally('acme a')).toBe(false);
  });

  it('remembers an event for at least one window and at most two', async () => {
    const s = store({ windowSeconds: 1 });
    await s.mark([{ ...P0, offset: '1', final: { key: 'k', outcome: 'delivered' } }]);
    expect((await s.lookup(['k'])).done.get('k')).toBe('delivered');
    await sleep(2100);
    expect((await s.lookup(['k'])).done.has('k')).toBe(false);
  });

  it('forgets dead-lettered events only, and remembers one marked again after that', async () => {
    const s = store();
    await s.mark([
      { ...P0, offset: '1', final: { key: 'dead', outcome: 'dead-lettered' } },
      { ...P0, offset: '2', final: { key: 'sent', outcome: 'delivered' } },
    ]);
    expect(await s.forgetDeadLettered(['dead', 'sent', 'unknown'])).toBe(1);
    expect((await s.lookup(['dead', 'sent'])).done).toEqual(new Map([['sent', 'delivered']]));
    await s.mark([{ ...P0, offset: '3', final: { key: 'dead', outcome: 'delivered' } }]);
    expect((await s.lookup(['dead'])).done.get('dead')).toBe('delivered');
  });

  it('tells apart thousands of events sharing few shards, with no false match', async () => {
    const s = store({ shards: 4 });
    const marked = Array.from({ length: 3000 }, (_, i) => `tenant event-${i}`);
    await s.mark(
      marked.map((key, i) => ({ ...P0, offset: String(i), final: { key, outcome: 'delivered' as const } })),
    );
    const others = Array.from({ length: 3000 }, (_, i) => `tenant other-${i}`);
    const reading = await s.lookup([...marked, ...others]);
    expect(reading.done.size).toBe(3000);
    for (const key of marked) expect(reading.done.get(key)).toBe('delivered');
  });

  it('keeps the previous generation when a mark moves a shard on, and drops the one before', async () => {
    const s = store({ windowSeconds: 1, shards: 1 });
    await sleep(1050 - (Date.now() % 1000)); // 50 ms into a second: each step below stays in its second
    await s.mark([{ ...P0, offset: '1', final: { key: 'first', outcome: 'delivered' } }]);
    await sleep(1000);
    await s.mark([{ ...P0, offset: '2', final: { key: 'second', outcome: 'invalid-token' } }]);
    expect((await s.lookup(['first', 'second'])).done).toEqual(
      new Map([
        ['first', 'delivered'],
        ['second', 'invalid-token'],
      ]),
    );
    await sleep(1000);
    expect((await s.lookup(['first', 'second'])).done).toEqual(new Map([['second', 'invalid-token']]));
  });

  it('matches a fingerprint only on an entry boundary', async () => {
    const s = store();
    const shard = s.shardKey(0);
    const mark = scriptCall(redis.client, 'dedupeMark');
    const check = scriptCall(redis.client, 'dedupeCheck');
    // Entries AAAAAAAA/d and BBBBBBBB/d: the bytes "AAAAAAAd" occur across the first entry's end.
    await mark(1, shard, 0, 60, 60, '2', Buffer.from('AAAAAAAAdBBBBBBBBd', 'latin1'));
    const reply = await check(1, shard, 0, 60, '3', Buffer.from('AAAAAAAdAAAAAAAABBBBBBBB', 'latin1'));
    expect(replyFields(reply)).toEqual(['-dd']);
  });
});

describe('DoneStore on a Redis that does not answer', () => {
  it('fails a lookup after timeoutMs, and a mark once markRetryMs has passed (sent once: never answered), rather than waiting for the connection', async () => {
    // ioredis stays connecting and holds every call.
    const silent = await startSilentServer();
    const client = new Redis({
      host: '127.0.0.1',
      port: silent.port,
      maxRetriesPerRequest: 2,
      lazyConnect: true,
    });
    client.on('error', () => {});
    try {
      const hung = store({ timeoutMs: 200, markRetryMs: 500 }, client);
      await expect(hung.lookup(['acme order-1'], [P0])).rejects.toThrow(
        'script dedupeCheck failed, Redis unavailable: no reply within 200 ms',
      );
      await expect(
        hung.mark([{ ...P0, offset: '7', final: { key: 'acme order-1', outcome: 'delivered' } }]),
      ).rejects.toThrow('script dedupeMark failed, Redis unavailable: no reply within 500 ms');
      await hung.settled();
    } finally {
      client.disconnect();
      await silent.close();
    }
  });
});

describe('DoneStore on a Redis that answers late', () => {
  it('never sends a mark again while the call is unanswered: the late call lands once', async () => {
    // A private server: its writers are paused, which would hold every other test's calls too.
    const server = await LocalRedis.start();
    const client = new Redis(server.url);
    const admin = new Redis(server.url);
    try {
      const late = store({ timeoutMs: 200, markRetryMs: 5000 }, client);
      // Script calls Redis ran (an EVALSHA refused with NOSCRIPT is counted apart, as a failed call).
      const calls = async () => {
        const stats = await admin.info('commandstats');
        return [...stats.matchAll(/^cmdstat_eval(?:sha)?:calls=(\d+),.*failed_calls=(\d+)/gm)].reduce(
          (sum, [, ran, failed]) => sum + Number(ran) - Number(failed),
          0,
        );
      };
      const before = await calls();
      // Redis holds every call that may write (a script) for 1.5 s, answering none: the call waits
      // past timeoutMs, and any copy sent meanwhile would run too once the pause ends.
      await admin.client('PAUSE', 1500, 'WRITE');
      await late.mark([{ ...P0, offset: '7', final: { key: 'acme order-1', outcome: 'delivered' } }]);
      expect(await calls()).toBe(before + 1);
      expect((await late.lookup(['acme order-1'], [P0])).done).toEqual(
        new Map([['acme order-1', 'delivered']]),
      );
    } finally {
      client.disconnect();
      admin.disconnect();
      await server.dispose();
    }
  });
});

describe('DoneStore on a Redis Cluster', () => {
  it('sends marks again while their slot moves to another master (TRYAGAIN) rather than dropping them', async () => {
    const { local, client, stop } = await privateCluster(1);
    try {
      // With 6 shards, shards 0 (order-3) and 3 (order-8) are in {d0}, as is partition 0's finished set.
      const s = new DoneStore(client, {
        prefix: 'moving',
        groupId: 'group',
        windowSeconds: 60,
        shards: 6,
        markCoalesceMs: 0,
        coalesceMs: 0,
      });
      await s.mark([{ ...P0, offset: '1', final: { key: 'acme order-3', outcome: 'delivered' } }]);
      const slot = Number(await client.cluster('KEYSLOT', s.partitionKey(P0)));
      const from = (await local.slotOwner(slot)).master;
      let marked: Promise<void> | undefined;
      await local.migrateSlot(slot, local.ports.find((port) => port !== from) as number, async () => {
        // The call names a key the source holds and one it does not: TRYAGAIN while the slot is open,
        // longer than the Cluster client's own redirections (16 of 100 ms) last.
        marked = s.mark([{ ...P0, offset: '2', final: { key: 'acme order-8', outcome: 'delivered' } }]);
        await sleep(3000);
      });
      await marked;
      const reading = await s.lookup(['acme order-3', 'acme order-8'], [P0]);
      expect(reading.done).toEqual(
        new Map([
          ['acme order-3', 'delivered'],
          ['acme order-8', 'delivered'],
        ]),
      );
      expect(reading.finished.get('notifications:0')).toEqual(new Set(['1', '2']));
    } finally {
      await stop();
    }
  }, 60_000);
});
