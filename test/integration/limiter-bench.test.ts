import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type LimiterBenchResult, runLimiterBench, smokeOptions, VARIANTS } from '../../bench/limiter.ts';
import { BENCHMARKS_PAGE, renderBenchmarkBlocks } from '../../bench/readme.ts';

// The benchmark's numbers are claims about speed and are made by `npm run bench -- limiter`; this only
// keeps the benchmark from rotting: it runs (a few hundred tokens, a private redis-server) and writes
// a result of the documented shape. No timing is asserted.
describe('npm run bench -- limiter (smoke)', () => {
  it('runs all three variants and writes sane JSON', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aqueduct-bench-'));
    try {
      const outFile = join(dir, 'limiter.json');
      await runLimiterBench(smokeOptions(outFile));
      const result = JSON.parse(await readFile(outFile, 'utf8')) as LimiterBenchResult;
      expect(Object.keys(result.variants).sort()).toEqual([...VARIANTS].sort());
      for (const name of VARIANTS) {
        const variant = result.variants[name];
        expect(variant.tokensPerSecond, name).toBeGreaterThan(0);
        expect(variant.redisCallsPerToken, name).toBeGreaterThan(0);
        expect(variant.worstWindowRatio, name).toBeGreaterThan(0);
        expect(variant.callP99Ms, name).toBeGreaterThan(0);
      }
      // One script call per token for the naive script, one per batch of 100 for the batched ones:
      // counted by Redis, so this checks the counting, not the speed.
      expect(result.variants.naive.redisCallsPerToken).toBe(1);
      expect(result.variants.aqueduct.redisCallsPerToken).toBeLessThan(0.02);
      for (const key of [
        'ratioVsNaive',
        'ratioVsRateLimiterFlexible',
        'acquireP99Ms',
        'pingP99Ms',
      ] as const) {
        expect(Number.isFinite(result[key]), key).toBe(true);
      }
      expect(result.targets.map((t) => t.metric)).toEqual([
        'ratioVsNaive',
        'ratioVsRateLimiterFlexible',
        'redisCallsPerToken',
        'worstWindowRatio',
        'acquireP99Ms',
      ]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('keeps the tables of docs/benchmarks.md what bench/readme.ts renders from bench/results/*.json', async () => {
    const page = await readFile(BENCHMARKS_PAGE, 'utf8');
    expect(page).toContain('<!-- bench:limiter -->');
    expect(await renderBenchmarkBlocks(page)).toBe(page);
  });
});
