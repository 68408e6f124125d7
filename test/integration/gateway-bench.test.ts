import { readFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { gatewayTable, runGatewayBench } from '../../bench/gateway.ts';

// A tiny run of `npm run bench -- gateway`, so that it cannot rot: it completes, every request is
// answered 202 or 429, the tenant above its limit gets no more than its bucket allows, and the JSON has
// the figures docs/benchmarks.md shows. The figures of a run this small measure nothing.
describe('gateway benchmark smoke run', () => {
  it('drives the gateway and a plain producer, counts the 429s of a tenant above its limit, writes gateway.json', async () => {
    const outDir = await mkdtemp(join(tmpdir(), 'aqueduct-smoke-gateway-'));
    const result = await runGatewayBench({
      services: { kafkaBrokers: inject('kafkaBrokers'), redisUrl: inject('redisUrl') },
      batch: 20,
      connections: 2,
      rounds: 1,
      phaseSeconds: 1,
      overLimit: { rate: 50, burst: 40, seconds: 1, connections: 2 },
      outDir,
      log: () => {},
    });
    const json = JSON.parse(readFileSync(join(outDir, 'gateway.json'), 'utf8')) as typeof result;
    expect(json).toEqual(result);
    for (const figure of [
      'requestsPerSecond',
      'eventsPerSecond',
      'p99Ms',
      'producerEventsPerSecond',
      'ratioVsProducer',
    ] as const) {
      expect(json[figure], figure).toBeGreaterThan(0);
    }
    const over = json.overLimit;
    expect(over.otherStatuses).toEqual({});
    expect(over.accepted + over.throttled).toBe(over.requests);
    // Never more than the bucket's envelope (burst + rate × the run's time, which starts before the
    // first request reaches the bucket, so the envelope is if anything generous).
    expect(over.accepted * 20).toBeLessThanOrEqual(over.envelopeEvents);
    expect(gatewayTable(json)).toContain('`ratioVsProducer` = ');
  }, 120_000);
});
