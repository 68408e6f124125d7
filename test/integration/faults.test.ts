import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { LocalRedis } from '../../src/services/index.ts';
import { type FaultResult, type FaultRunOptions, runFaultScenario } from '../../testkit/faults.ts';
import { FUZZ_KINDS, fuzzMessages } from '../../testkit/fuzz.ts';
import { throttledFaultRun } from '../helpers/faults.ts';

/**
 * Smoke versions of the fault bench (npm run bench -- faults) on the suite's broker: a few hundred
 * events, two consumer processes, a private redis-server (restarted by one of them; killConsumer runs
 * against the run's Redis Cluster too). The assertions are the bench's targets; no timings. Span
 * export is left to the observability tests (it slows the consumers' start); the logs are scanned for
 * tokens here.
 */

let redis: LocalRedis;
let logDir: string;
beforeAll(async () => {
  redis = await LocalRedis.start();
  logDir = await mkdtemp(join(tmpdir(), 'aqueduct-faults-test-'));
});
afterAll(async () => {
  await redis?.dispose();
});

function options(name: string): FaultRunOptions {
  // After the first 100 the 400 events take seconds, so the fault lands mid-stream.
  return throttledFaultRun({
    name,
    redisUrl: redis.url,
    events: 400,
    injectAfterDelivered: 200,
    logDir,
    timeoutMs: 50_000,
  });
}

function expectNothingLostOrLeaked(result: FaultResult): void {
  expect(result.notes).toEqual([]);
  expect(result.lost).toBe(0);
  expect(result.consumerCrashes).toBe(0);
  expect(result.tokensInLogs).toBe(0);
  expect(result.logLines).toBeGreaterThan(0);
}

describe('faults (smoke runs of npm run bench -- faults)', () => {
  it.each(['single', 'cluster'] as const)(
    'killConsumer (Redis %s): kill -9 of one of two consumers loses nothing; only what it had sent is pushed twice',
    async (redisKind) => {
      const result = await runFaultScenario({
        ...options('killConsumer'),
        ...(redisKind === 'cluster' ? { redisClusterNodes: inject('redisClusterNodes') } : {}),
        inject: async ({ consumers }) => {
          await consumers[1]?.kill();
        },
      });
      console.log(
        `killConsumer (Redis ${redisKind}): ${result.duplicates} duplicates, ${result.delivered} delivered`,
      );
      expectNothingLostOrLeaked(result);
      expect(result.faultAtSeconds).not.toBeNull();
      expect(result.delivered + result.deadLettered + result.invalidTokens).toBeGreaterThanOrEqual(400);
      expect(result.provider429).toBe(0);
      // A duplicate is an event the killed process had pushed before it died, never one pushed after.
      for (const afterFaultMs of result.duplicateFirstArrivalsAfterFaultMs)
        expect(afterFaultMs).toBeLessThan(1000);
    },
  );

  it('scaleOutAndIn: one consumer, two more added, then those two stopped (SIGTERM) mid-burst: nothing lost, nothing pushed twice, no 429', async () => {
    // What an autoscaler does to the group while a backlog drains: every change is a rebalance, and a
    // stopped replica leaves after its drain. None of it is a documented window for a duplicate.
    const result = await runFaultScenario({
      ...options('scaleOutAndIn'),
      // Half the others' rate: the backlog outlasts the two replicas' start, join and drain.
      provider: { rate: 30, burst: 50 },
      aqueduct: { rate: 30, burst: 25 },
      events: 900,
      consumers: 1,
      injectAfterDelivered: 100,
      inject: async ({ spawnConsumers, log }) => {
        const added = spawnConsumers(2);
        await Promise.all(added.map((consumer) => consumer.joined()));
        log('scaleOutAndIn: three consumers');
        await sleep(2000);
        const codes = await Promise.all(added.map((consumer) => consumer.stop()));
        log(`scaleOutAndIn: back to one (exit codes ${codes.join(', ')})`);
      },
    });
    console.log(`scaleOutAndIn: ${result.duplicates} duplicates, ${result.delivered} delivered`);
    expectNothingLostOrLeaked(result);
    expect(result.faultAtSeconds).not.toBeNull();
    expect(result.delivered + result.deadLettered + result.invalidTokens).toBeGreaterThanOrEqual(900);
    expect(result.duplicates).toBe(0);
    expect(result.provider429).toBe(0);
  });

  it('stopMidSend: a consumer stopped (SIGTERM) while slow pushes are in flight finishes them: nothing lost, nothing pushed twice', async () => {
    // Every push takes 2 s to answer: the stop lands while sends are out, and their outcomes must be
    // recorded and committed before the process leaves, or the next owner pushes them again.
    let code: number | string | undefined;
    const result = await runFaultScenario({
      ...options('stopMidSend'),
      faults: { slow: 1, slowMs: 2000 },
      inject: async ({ consumers }) => {
        code = await consumers[1]?.stop();
      },
    });
    console.log(`stopMidSend: ${result.duplicates} duplicates, ${result.delivered} delivered`);
    expectNothingLostOrLeaked(result);
    expect(code).toBe(0);
    expect(result.duplicates).toBe(0);
    expect(result.provider429).toBe(0);
  });

  it('redisRestart: Redis stopped and started again empty: nothing lost, nothing pushed twice, no 429', async () => {
    const result = await runFaultScenario({
      ...options('redisRestart'),
      inject: async () => {
        await redis.stop();
        await sleep(1000);
        await redis.restart();
      },
    });
    expectNothingLostOrLeaked(result);
    expect(result.duplicates).toBe(0);
    expect(result.provider429).toBe(0);
  });

  it('badInput: every kind of bad message is dead-lettered, the valid ones delivered, nothing leaks', async () => {
    const bad = fuzzMessages({ count: 2 * FUZZ_KINDS.length, idPrefix: 'fuzz', hugeValues: 1 });
    const result = await runFaultScenario({ ...options('badInput'), events: 300, badMessages: bad });
    expectNothingLostOrLeaked(result);
    expect(result.published).toBe(300 + bad.length);
    expect(result.deadLettered).toBe(bad.length);
    expect(result.duplicates).toBe(0);
    expect(result.provider429).toBe(0);
  });
});
