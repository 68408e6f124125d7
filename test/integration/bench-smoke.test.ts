import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { burstTable, runBurstBench } from '../../bench/burst.ts';
import { runOverheadBench } from '../../bench/overhead.ts';
import { cappedRate, maxMinShares, runTenantsBench } from '../../bench/tenants.ts';

// Tiny runs of the benchmarks, so that they cannot rot. They check that each run completes, accounts
// for every event and writes its files; the figures of a run this small measure nothing.
describe('benchmark smoke runs', () => {
  it('burst: both variants run end to end, account for every event and write JSON and SVG', async () => {
    const outDir = await mkdtemp(join(tmpdir(), 'aqueduct-smoke-burst-'));
    const result = await runBurstBench({
      kafkaBrokers: inject('kafkaBrokers'),
      events: 300,
      consumers: [2],
      runs: 1,
      partitions: 2,
      outDir,
      log: () => {},
    });
    for (const variant of [result.aqueduct, result.fireAndForget]) {
      expect(variant.published).toBe(300);
      expect(variant.lost).toBe(0);
      expect(variant.delivered + variant.deadLettered + variant.invalidTokens).toBeGreaterThanOrEqual(300);
    }
    expect(result.aqueduct.duplicates).toBe(0);
    const json = JSON.parse(readFileSync(join(outDir, 'burst.json'), 'utf8'));
    expect(Object.keys(json.aqueduct)).toEqual(
      expect.arrayContaining(['envelopeRatio', 'p99Ms', 'redisCallsPerPush']),
    );
    expect(readFileSync(join(outDir, 'burst.svg'), 'utf8')).toMatch(/^<svg[\s\S]*<\/svg>\n$/);
    expect(burstTable(result)).toContain('| envelopeRatio |');
    expect(json.runs).toHaveLength(1);
    expect(Object.keys(json.runs[0])).toEqual(
      expect.arrayContaining([
        'consumers',
        'providerRate',
        'aqueductBurst',
        'provider429',
        'requestEnvelopeRatio',
      ]),
    );
  }, 180_000);

  it('overhead: raw kafkajs and the pipeline both drain the topic and report throughput and RSS', async () => {
    const outDir = await mkdtemp(join(tmpdir(), 'aqueduct-smoke-overhead-'));
    const result = await runOverheadBench({
      services: { kafkaBrokers: inject('kafkaBrokers'), redisUrl: inject('redisUrl') },
      events: 400,
      httpEvents: 100,
      outDir,
      log: () => {},
    });
    expect(result.runs.raw.messages).toBeGreaterThanOrEqual(400);
    expect(result.runs.aqueduct.messages).toBeGreaterThanOrEqual(400);
    expect(result.runs.aqueductHttp.messages).toBeGreaterThanOrEqual(100);
    expect(result.aqueductPeakRssMiB).toBeGreaterThan(0);
    expect(existsSync(join(outDir, 'overhead.json'))).toBe(true);
  }, 180_000);

  it("tenants: a burst tenant and two trickling tenants are all delivered, with each tenant's figures", async () => {
    const result = await runTenantsBench({
      kafkaBrokers: inject('kafkaBrokers'),
      burstEvents: 400,
      consumers: 2,
      log: () => {},
    });
    for (const variant of [result.unfair, result.fair]) {
      if (!variant) throw new Error('a variant was not measured');
      expect(variant.lost).toBe(0);
      expect(variant.duplicates).toBe(0);
      expect(Object.keys(variant.tenants).sort()).toEqual(['A', 'B', 'C']);
      // 1% dead tokens: nearly all of each tenant's events are delivered.
      expect(variant.tenants.A?.delivered).toBeGreaterThan(350);
      expect(variant.tenants.B?.delivered).toBeGreaterThan(950);
      expect(variant.contendedSeconds?.to).toBeGreaterThan(variant.contendedSeconds?.from ?? 0);
    }
    expect(Object.keys(result.targets)).toContain('fairShareRatio');
  }, 240_000);

  it('max-min fair shares: who asks less than an equal split gets what it asks, the rest share what is left', () => {
    expect(maxMinShares(1600, { A: Number.POSITIVE_INFINITY, B: 80, C: 80 })).toEqual({
      A: 1440,
      B: 80,
      C: 80,
    });
    expect(maxMinShares(900, { A: Number.POSITIVE_INFINITY, B: Number.POSITIVE_INFINITY, C: 500 })).toEqual({
      A: 300,
      B: 300,
      C: 300,
    });
    expect(maxMinShares(100, { A: 10, B: 20 })).toEqual({ A: 10, B: 20 });
  });

  it('a capped rate: seconds above the fair share do not make up for seconds without', () => {
    expect(cappedRate([0, 0, 0, 240], 80)).toBe(20);
    expect(cappedRate([80, 80, 70, 90], 80)).toBe(77.5);
    expect(cappedRate([], 80)).toBe(0);
  });
});
