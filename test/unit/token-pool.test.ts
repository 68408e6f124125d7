import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, vi } from 'vitest';
import { type PoolBucket, TokenPool, type TokenSource } from '../../src/limiter/token-pool.ts';

/**
 * The pool's own bookkeeping, against a counting in-memory source. (The real source, the Redis limiter,
 * is exercised with the pool by the pipeline integration tests, which count Redis round trips.)
 */
function countingSource(tokens: { left: number }, waitMs = 50) {
  const calls: Array<{ n: number; waitFor: number | undefined }> = [];
  const source: TokenSource = {
    async acquire(_buckets, n, options) {
      calls.push({ n, waitFor: options?.waitFor });
      const granted = Math.min(n, tokens.left);
      tokens.left -= granted;
      return { granted, waitMs: granted < n ? waitMs : 0 };
    },
    async blockUntil() {},
    async refund(_buckets, n) {
      tokens.left += n;
    },
  };
  return { source, calls };
}
const buckets: PoolBucket[] = [{ name: 'fcm', rate: 800, capacity: 2000 }];

describe('TokenPool', () => {
  it('coalesces the takes of one tick into one acquire for their total', async () => {
    const { source, calls } = countingSource({ left: 10_000 });
    const pool = new TokenPool(source, buckets, { chunk: 200 });
    const granted = await Promise.all([pool.take(30), pool.take(50), pool.take(20)]);
    expect(granted).toEqual([30, 50, 20]);
    // Nobody else waits: the pool asks, and would wait, for what these takes need, under a chunk.
    expect(calls).toEqual([{ n: 100, waitFor: 100 }]);
  });

  it('asks for up to two chunks while partitions wait for them, waits for one, and serves window after window from it', async () => {
    const tokens = { left: 0 };
    const { source, calls } = countingSource(tokens, 20);
    const pool = new TokenPool(source, buckets, { chunk: 200, window: 50 });
    expect(await pool.take(50)).toBe(0); // dry
    pool.whenRefilled('topic:0', 300, () => {});
    pool.whenRefilled('topic:1', 300, () => {});
    tokens.left = 1000;
    await sleep(40); // the dry spell is over
    expect(await pool.take(50)).toBe(50);
    expect(calls.at(-1)).toEqual({ n: 400, waitFor: 200 });
    pool.release(50);
    expect(await pool.take(50)).toBe(50);
    pool.release(50);
    expect(await pool.take(50)).toBe(50);
    expect(calls).toHaveLength(2); // one acquire for three windows of sends
  });

  it("counts a woken partition's need once: its own take is part of it", async () => {
    const tokens = { left: 0 };
    const { source, calls } = countingSource(tokens, 20);
    const pool = new TokenPool(source, buckets, { chunk: 200 });
    expect(await pool.take(80)).toBe(0); // dry
    tokens.left = 1000;
    const granted = await new Promise<number>((resolve) =>
      pool.whenRefilled('topic:0', 80, () => resolve(pool.take(80))),
    );
    expect(granted).toBe(80);
    // What the woken partition needs, not that plus its own take again (credit nobody would take).
    expect(calls.at(-1)).toEqual({ n: 80, waitFor: 80 });
  });

  it('asks for at most a window (two chunks by default) and shares a short grant in arrival order', async () => {
    const { source, calls } = countingSource({ left: 250 });
    const pool = new TokenPool(source, buckets, { chunk: 200 });
    const granted = await Promise.all([pool.take(300), pool.take(300)]);
    expect(calls[0]).toEqual({ n: 400, waitFor: 200 });
    expect(granted).toEqual([250, 0]);
  });

  it('makes no Redis call while dry, and wakes a waiting partition only once the wait is over', async () => {
    const tokens = { left: 0 };
    const { source, calls } = countingSource(tokens, 150);
    const pool = new TokenPool(source, buckets, { chunk: 200 });
    expect(await pool.take(10)).toBe(0);
    expect(calls).toHaveLength(1);
    expect(await pool.take(10)).toBe(0); // dry: answered without asking
    expect(calls).toHaveLength(1);
    tokens.left = 100;
    const wokenAt = await new Promise<number>((resolve) =>
      pool.whenRefilled('topic:0', 10, () => resolve(Date.now())),
    );
    expect(wokenAt).toBeGreaterThanOrEqual(pool.dryUntilMs);
    expect(await pool.take(10)).toBe(10);
    expect(calls).toHaveLength(2);
  });

  it('serves an urgent take before the others, and lets it wait for the refill of a short dry spell (not of a longer one)', async () => {
    const tokens = { left: 0 };
    const { source } = countingSource(tokens, 60);
    const pool = new TokenPool(source, buckets, { chunk: 200 });
    expect(await pool.take(10)).toBe(0); // dry for 60 ms
    expect(await pool.take(5, { urgentWithinMs: 10 })).toBe(0); // the spell outlasts its wait
    const urgent = pool.take(5, { urgentWithinMs: 200 });
    expect(await pool.take(10)).toBe(0); // dry: the others get nothing meanwhile
    tokens.left = 5;
    expect(await urgent).toBe(5);
    pool.release(5);
    // Coming together with others, an urgent take goes first.
    tokens.left = 5;
    expect(await Promise.all([pool.take(10), pool.take(5, { urgentWithinMs: 0 })])).toEqual([0, 5]);
  });

  it('with a wake lead, wakes a waiting partition that long before the refill, and its first take waits for it (a later take gets 0)', async () => {
    // Timers and Date only: the pool's drains (setImmediate) and acquires run as usual.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    try {
      const tokens = { left: 0 };
      const { source, calls } = countingSource(tokens, 300);
      const pool = new TokenPool(source, buckets, { chunk: 200, wakeLeadMs: 100 });
      expect(await pool.take(10)).toBe(0); // dry for 300 ms
      const refillAt = pool.dryUntilMs;
      let wokenAt: number | undefined;
      pool.whenRefilled('topic:0', 10, () => {
        wokenAt = Date.now();
      });
      await vi.advanceTimersByTimeAsync(refillAt - 100 - Date.now() - 1);
      expect(wokenAt).toBeUndefined();
      await vi.advanceTimersByTimeAsync(1);
      expect(wokenAt).toBe(refillAt - 100); // the lead before the refill, not at it
      // The woken partition is fetched and takes before the refill: its step's first take waits for
      // it; a take that is not a step's first gets 0, and nothing asks Redis meanwhile.
      tokens.left = 100;
      const first = pool.take(10, { first: true });
      expect(await pool.take(5)).toBe(0);
      expect(calls).toHaveLength(1);
      await vi.advanceTimersByTimeAsync(100);
      expect(await first).toBe(10);
      expect(calls).toHaveLength(2);
      await pool.close();
    } finally {
      vi.useRealTimers();
    }
  });

  it('lets a first take wait only for a refill due within the wake lead, and with no lead (the default) not at all', async () => {
    const led = new TokenPool(countingSource({ left: 0 }, 60_000).source, buckets, {
      chunk: 200,
      wakeLeadMs: 100,
    });
    const unled = new TokenPool(countingSource({ left: 0 }, 50).source, buckets, { chunk: 200 });
    expect(await led.take(10)).toBe(0); // dry for a minute
    expect(await unled.take(10)).toBe(0); // dry for 50 ms
    expect(await led.take(10, { first: true })).toBe(0);
    expect(await unled.take(10, { first: true })).toBe(0);
    await Promise.all([led.close(), unled.close()]);
  });

  it('forgets a cancelled waiter; a closed pool grants nothing', async () => {
    const tokens = { left: 0 };
    const { source } = countingSource(tokens, 30);
    const pool = new TokenPool(source, buckets, { chunk: 200 });
    await pool.take(5);
    let woken = false;
    pool.whenRefilled('topic:1', 5, () => {
      woken = true;
    });
    pool.cancel('topic:1');
    await sleep(60);
    expect(woken).toBe(false);
    await pool.close();
    expect(await pool.take(1)).toBe(0);
  });

  it('holds at most a window of unreleased tokens: a take waits for a release, then gets the room freed', async () => {
    const { source, calls } = countingSource({ left: 10_000 });
    const pool = new TokenPool(source, buckets, { chunk: 200, window: 64 });
    expect(await pool.take(100)).toBe(64); // one take never gets more than the window
    let second: number | undefined;
    const waiting = pool.take(10).then((granted) => {
      second = granted;
      return granted;
    });
    await sleep(20);
    expect(second).toBeUndefined(); // the window is full: no Redis call, no answer yet
    expect(calls).toHaveLength(1);
    pool.release(40);
    expect(await waiting).toBe(10);
    expect(calls.map((c) => c.n)).toEqual([64, 10]);
    // 24 + 10 held: 30 more fit, and a take for 50 gets just those.
    expect(await pool.take(50)).toBe(30);
    pool.release(64);
    expect(await pool.take(64)).toBe(64);
  });

  it('answers takes waiting for room with 0 once the bucket runs dry', async () => {
    const tokens = { left: 64 };
    const { source, calls } = countingSource(tokens, 100);
    const pool = new TokenPool(source, buckets, { chunk: 200, window: 64 });
    expect(await pool.take(64)).toBe(64);
    const waiting = pool.take(64);
    pool.release(64);
    expect(await waiting).toBe(0); // room again, but Redis had nothing left
    expect(calls).toHaveLength(2);
    expect(pool.dryUntilMs).toBeGreaterThan(Date.now());
  });

  it('reports what it holds with every acquire, and that it holds nothing once idle, under its own name', async () => {
    const reports: Array<{
      call: string;
      n: number;
      holder?: string | undefined;
      held?: number | undefined;
    }> = [];
    const source: TokenSource = {
      async acquire(_buckets, n, options) {
        reports.push({ call: 'acquire', n, holder: options?.holder, held: options?.held });
        return { granted: n, waitMs: 0 };
      },
      async blockUntil() {},
      async refund(_buckets, n, options) {
        reports.push({ call: 'refund', n, holder: options?.holder, held: options?.held });
      },
    };
    const pool = new TokenPool(source, buckets, { chunk: 200, window: 100, idleReportMs: 30 });
    const other = new TokenPool(source, buckets, { chunk: 200 });
    expect(pool.holder).not.toBe(other.holder);
    expect(await pool.take(40)).toBe(40);
    // Taken and not yet answered: the next acquire says so.
    expect(await pool.take(60)).toBe(60);
    expect(reports).toEqual([
      { call: 'acquire', n: 40, holder: pool.holder, held: 0 },
      { call: 'acquire', n: 60, holder: pool.holder, held: 40 },
    ]);
    pool.release(40);
    await sleep(60);
    expect(reports).toHaveLength(2); // 60 still out: not idle
    pool.release(60);
    await sleep(60);
    expect(reports[2]).toEqual({ call: 'refund', n: 0, holder: pool.holder, held: 0 });
    await sleep(60);
    expect(reports).toHaveLength(3); // once per idle spell
  });

  it('asks with its priority in every acquire (normal unless told otherwise)', async () => {
    const asked: Array<{ pool: string; priority: string | undefined }> = [];
    const sourceFor = (pool: string): TokenSource => ({
      async acquire(_buckets, n, options) {
        asked.push({ pool, priority: options?.priority });
        return { granted: Math.min(n, 10), waitMs: n > 10 ? 1 : 0 };
      },
      async blockUntil() {},
      async refund() {},
    });
    const parked = new TokenPool(sourceFor('parked'), buckets, { chunk: 20, priority: 'low' });
    const normal = new TokenPool(sourceFor('normal'), buckets, { chunk: 20 });
    expect(await parked.take(10)).toBe(10);
    expect(await parked.take(30)).toBe(10); // short: a second acquire
    expect(await normal.take(10)).toBe(10);
    expect(asked).toEqual([
      { pool: 'parked', priority: 'low' },
      { pool: 'parked', priority: 'low' },
      { pool: 'normal', priority: 'normal' },
    ]);
    await Promise.all([parked.close(), normal.close()]);
  });
});
