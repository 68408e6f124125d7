import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { burstTable, runBurstBench } from '../../bench/burst.ts';
import { runOverheadBench } from '../../bench/overhead.ts';

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
});
