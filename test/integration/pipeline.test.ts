import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { roundTrips } from '../../src/harness/redis-stats.ts';
import { generateEvents } from '../../src/publish/generate.ts';
import { publishEvents } from '../../src/publish/publisher.ts';
import { type Rig, startRig, summedTotal } from '../helpers/pipeline.ts';

let rig: Rig | undefined;
afterEach(async () => {
  await rig?.close();
  rig = undefined;
});

async function publish(r: Rig, count: number, deadTokenRatio = 0): Promise<string[]> {
  const events = [...generateEvents({ count, deadTokenRatio, tenants: ['acme', 'globex'] })];
  await publishEvents(r.kafka, events, { topic: r.topic });
  return events.map((e) => e.id);
}

/** Every published id has exactly one outcome, and the providers saw each delivered id once. */
function expectExactlyOneOutcome(published: string[], ledger: Awaited<ReturnType<Rig['ledger']>>): void {
  const dead = ledger.deadLettered.map((d) => d.id);
  const all = [...ledger.delivered, ...ledger.invalidTokens, ...dead];
  expect(new Set(all).size).toBe(all.length); // no event has two outcomes
  expect(new Set(all)).toEqual(new Set(published)); // none lost, none invented
  expect(ledger.acceptedTotal).toBe(ledger.delivered.size); // no duplicate push
}

describe('the consumer pipeline (real Kafka, Redis, simulators, consumer processes)', () => {
  it('drains 2400 events through two consumers at the bucket rate: one outcome each, paused and resumed, no 429, ≤ 0.03 Redis calls per push', async () => {
    rig = await startRig({ partitions: 4, rate: 300, burst: 150, simulator: { rate: 330, burst: 200 } });
    const published = await publish(rig, 2400, 0.01);
    await rig.redis.config('RESETSTAT');
    await Promise.all([rig.startConsumer('a'), rig.startConsumer('b')]);

    const ledger = await rig.settle(published);
    const trips = await roundTrips(rig.redis);
    await Promise.all(rig.consumers.map((c) => c.stop()));

    expectExactlyOneOutcome(published, ledger);
    expect(ledger.invalidTokens.size).toBeGreaterThan(0);
    expect(ledger.throttled).toBe(0);
    expect(summedTotal(rig.consumers, 'paused')).toBeGreaterThan(0);
    expect(summedTotal(rig.consumers, 'resumed')).toBeGreaterThan(0);
    const callsPerPush = trips.total / ledger.delivered.size;
    console.log(
      `redis round trips ${trips.total} for ${ledger.delivered.size} pushes = ${callsPerPush.toFixed(4)}/push`,
      trips.byCommand,
    );
    expect(callsPerPush).toBeLessThanOrEqual(0.03);
  });
});
