import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LocalRedisCluster } from '../../src/services/index.ts';
import { type FaultResult, type FaultRunOptions, runFaultScenario } from '../../testkit/faults.ts';
import type { ConsumerProcess } from '../../testkit/fleet.ts';
import { throttledFaultRun } from '../helpers/faults.ts';

/**
 * `aqueduct consume` on a Redis Cluster whose slots change hands mid-burst, as on a managed cluster:
 * a master fails over to its replica, and slots move between masters. Both are routine and lose no
 * data, so they must cost a stall at most: every event one outcome, none pushed twice, no 429, no
 * crash, the restart guard quiet (the promoted replica has the data), and no done-mark given up.
 */

/** Slots of the hash tags a consumer uses (CRC16 mod 16384): on the first master of three. */
const SLOT = { fcm: 2745, d2: 4607 };

let logDir: string;
let cluster: LocalRedisCluster | undefined;
beforeAll(async () => {
  logDir = await mkdtemp(join(tmpdir(), 'aqueduct-cluster-failover-test-'));
});
afterEach(async () => {
  await cluster?.stop();
  cluster = undefined;
});

function options(name: string, nodes: string): FaultRunOptions {
  // The burst takes about 10 s past the first 100, so the fault lands mid-stream.
  return throttledFaultRun({
    name,
    redisUrl: '',
    redisClusterNodes: nodes,
    events: 1200,
    injectAfterDelivered: 150,
    logDir,
    timeoutMs: 45_000,
  });
}

function expectOneOutcomeEach(result: FaultResult, consumers: readonly ConsumerProcess[]): void {
  expect(result.notes).toEqual([]);
  expect(result.faultAtSeconds).not.toBeNull();
  expect(result.lost).toBe(0);
  expect(result.delivered + result.deadLettered + result.invalidTokens).toBe(1200);
  expect(result.duplicates).toBe(0);
  expect(result.provider429).toBe(0);
  expect(result.consumerCrashes).toBe(0);
  const said = (msg: string) => consumers.flatMap((c) => c.logs).filter((l) => l.msg === msg);
  expect(said('Redis lost its data: buckets emptied, sending resumes at the refill rate')).toEqual([]);
  expect(said('dedupe marks unavailable')).toEqual([]);
}

describe('aqueduct consume on a Redis Cluster whose slots change hands', () => {
  it('a master killed mid-burst fails over to its replica: nothing lost, nothing pushed twice, no burst', async () => {
    cluster = await LocalRedisCluster.start({ replicas: 1, nodeTimeoutMs: 2000 });
    const local = cluster;
    let consumers: readonly ConsumerProcess[] = [];
    let promotedAfterMs = 0;
    const result = await runFaultScenario({
      ...options('clusterFailover', local.nodes),
      inject: async (run) => {
        consumers = run.consumers;
        // The master of the buckets' tags and a third of the dedupe memory.
        const { master } = await local.slotOwner(SLOT.fcm);
        const killed = Date.now();
        await local.killNode(master);
        while ((await local.slotOwner(SLOT.fcm)).master === master) await sleep(100);
        promotedAfterMs = Date.now() - killed;
      },
    });
    console.log(
      `clusterFailover: replica promoted after ${promotedAfterMs} ms, ${result.delivered} delivered in ${result.seconds} s`,
    );
    expectOneOutcomeEach(result, consumers);
  }, 60_000);

  it('the slots of the buckets and of the dedupe memory move to another master mid-burst: nothing lost, nothing pushed twice', async () => {
    cluster = await LocalRedisCluster.start();
    const local = cluster;
    let consumers: readonly ConsumerProcess[] = [];
    const result = await runFaultScenario({
      ...options('clusterReshard', local.nodes),
      inject: async (run) => {
        consumers = run.consumers;
        for (const slot of [SLOT.d2, SLOT.fcm]) {
          const { master } = await local.slotOwner(slot);
          const to = local.ports.find((port) => port !== master) as number;
          // Held open 3 s: a call naming keys on both sides gets TRYAGAIN meanwhile, as while a
          // reshard moves a slot with many keys.
          await local.migrateSlot(slot, to, () => sleep(3000));
        }
      },
    });
    console.log(`clusterReshard: ${result.delivered} delivered in ${result.seconds} s`);
    expectOneOutcomeEach(result, consumers);
  }, 60_000);
});
