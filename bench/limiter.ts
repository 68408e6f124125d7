import { mkdir, writeFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { dirname } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Redis, type RedisOptions } from 'ioredis';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { type BucketSpec, TokenBucketLimiter } from '../src/limiter/index.ts';
import { LocalRedis } from '../src/services/index.ts';

/**
 * `npm run bench -- limiter`: Aqueduct's limiter side by side with the naive Lua token bucket and
 * rate-limiter-flexible, against one private redis-server (so that INFO commandstats counts this run
 * only), with the same ioredis client settings for everyone. See docs/benchmarks.md.
 */

export const VARIANTS = ['naive', 'rateLimiterFlexible', 'aqueduct'] as const;
export type VariantName = (typeof VARIANTS)[number];

/** Every client of every variant gets exactly these ioredis settings. */
const CLIENT_OPTIONS: RedisOptions = { enableAutoPipelining: false, maxRetriesPerRequest: 1 };

export interface LimiterBenchOptions {
  /** Where the JSON goes. */
  outFile: string;
  /** Concurrent clients (each its own connection), each wanting batches of `batch` tokens. */
  clients: number;
  batch: number;
  throughput: {
    /** The variants take turns `rounds` times for `sliceMs` each, so that machine noise hits all alike. */
    rounds: number;
    sliceMs: number;
    warmupMs: number;
    /** A slice also ends once this many tokens were granted (the smoke test keeps runs tiny). */
    maxTokensPerSlice: number;
  };
  conformance: { rate: number; capacity: number; durationMs: number };
  latency: { samples: number; warmup: number };
  log: (line: string) => void;
}

export function fullOptions(outFile: string): LimiterBenchOptions {
  return {
    outFile,
    clients: 4,
    batch: 100,
    throughput: { rounds: 40, sliceMs: 150, warmupMs: 500, maxTokensPerSlice: Number.POSITIVE_INFINITY },
    conformance: { rate: 2000, capacity: 500, durationMs: 10_000 },
    latency: { samples: 3000, warmup: 300 },
    log: (line) => console.error(line),
  };
}

/** A few hundred tokens per phase: proves the bench runs, measures nothing worth reading. */
export function smokeOptions(outFile: string): LimiterBenchOptions {
  return {
    outFile,
    clients: 4,
    batch: 100,
    throughput: { rounds: 2, sliceMs: 150, warmupMs: 20, maxTokensPerSlice: 400 },
    conformance: { rate: 200, capacity: 50, durationMs: 600 },
    latency: { samples: 20, warmup: 5 },
    log: () => {},
  };
}

export interface VariantResult {
  /** Throughput phase: tokens granted per second with a rate far above what Redis can serve. */
  tokensPerSecond: number;
  /** The same, per round (each round runs the three variants back to back; the spread shows the noise). */
  tokensPerSecondByTurn: number[];
  /** Throughput phase: CPU time per script call, of this Node process and of redis-server, µs. */
  cpuMicrosPerCall: { node: number; redis: number };
  /** Throughput phase: top-level calls (EVAL + EVALSHA in INFO commandstats) per token granted. */
  redisCallsPerToken: number;
  /** Conformance phase: most tokens granted in any sliding 1 s window ÷ (capacity + rate × 1 s). */
  worstWindowRatio: number;
  /** p99 of one limiter call (ms), interleaved with PINGs on an idle server. */
  callP99Ms: number;
  conformance: {
    tokensPerSecond: number;
    redisCallsPerToken: number;
    worstWindowTokens: number;
    /** The same ratio over 100 ms windows, ÷ (capacity + rate × 0.1 s): how bursty the grants are. */
    worstWindowRatio100ms: number;
  };
}

export interface Target {
  metric: string;
  target: string;
  value: number;
  met: boolean;
}

export interface LimiterBenchResult {
  scenario: 'limiter';
  command: string;
  measuredAt: string;
  environment: { node: string; redis: string; cpus: number; cpuModel: string; platform: string };
  settings: {
    clients: number;
    batch: number;
    clientOptions: RedisOptions;
    throughput: { rounds: number; sliceMs: number; rate: number; capacity: number };
    conformance: { rate: number; capacity: number; durationMs: number; windowMs: number };
    latencySamples: number;
  };
  variants: Record<VariantName, VariantResult>;
  /** aqueduct's throughput ÷ naive's: the median over rounds of the ratio within each round. */
  ratioVsNaive: number;
  /** aqueduct's throughput ÷ rateLimiterFlexible's: the median over rounds of the ratio within each round. */
  ratioVsRateLimiterFlexible: number;
  /** The 25th and 75th percentiles of those per-round ratios: how much the machine's noise moved them. */
  ratioSpread: { vsNaive: [number, number]; vsRateLimiterFlexible: [number, number] };
  /** p99 of Aqueduct's acquire of one batch, ms. */
  acquireP99Ms: number;
  /** p99 of a plain PING on the same kind of connection, interleaved with those acquires, ms. */
  pingP99Ms: number;
  targets: Target[];
}

// ---------------------------------------------------------------------------------------------------
// The three limiters, each reduced to one round trip: "try to take up to `want` tokens".

interface Attempt {
  granted: number;
  /** How long the caller should wait before trying again (0: at once). */
  waitMs: number;
}

type TakeFn = (want: number) => Promise<Attempt>;

interface BucketConfig {
  rate: number;
  capacity: number;
  /** Unique per phase, so that every phase starts from a fresh (full) bucket. */
  key: string;
}

/**
 * The well-known naive token bucket (as in many blog posts and gateway filters): the caller passes its
 * clock in whole seconds, the full script text goes out with EVAL on every call, one token per call,
 * HMSET + EXPIRE. It answers only yes or no, so a throttled caller can only poll.
 */
export const NAIVE_LUA = `
local key = KEYS[1]
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local requested = tonumber(ARGV[4])
local ttl = math.floor(capacity / rate * 2)
if ttl < 1 then ttl = 1 end
local bucket = redis.call('HMGET', key, 'tokens', 'ts')
local last_tokens = tonumber(bucket[1]) or capacity
local last_refreshed = tonumber(bucket[2]) or 0
local delta = math.max(0, now - last_refreshed)
local filled = math.min(capacity, last_tokens + delta * rate)
local allowed = filled >= requested
local new_tokens = filled
if allowed then new_tokens = filled - requested end
redis.call('HMSET', key, 'tokens', new_tokens, 'ts', now)
redis.call('EXPIRE', key, ttl)
if allowed then return 1 end
return 0
`;
/** How long a naive client that was told "no" sleeps before asking again. */
const NAIVE_POLL_MS = 5;

function naiveTake(client: Redis, bucket: BucketConfig): TakeFn {
  return async () => {
    const now = Math.floor(Date.now() / 1000);
    const allowed = await client.eval(NAIVE_LUA, 1, bucket.key, bucket.rate, bucket.capacity, now, 1);
    return allowed === 1 ? { granted: 1, waitMs: 0 } : { granted: 0, waitMs: NAIVE_POLL_MS };
  };
}

/**
 * rate-limiter-flexible's RateLimiterRedis in its best mode: all of a batch's points in one consume (one
 * EVALSHA). It is a fixed-window counter, so "rate per second" is `points` per `duration: 1`; it has no
 * separate burst capacity and grants all of a consume or nothing.
 */
function rateLimiterFlexibleTake(client: Redis, bucket: BucketConfig): TakeFn {
  const limiter = new RateLimiterRedis({
    storeClient: client,
    keyPrefix: bucket.key,
    points: bucket.rate,
    duration: 1,
  });
  return async (want) => {
    try {
      await limiter.consume('bucket', want);
      return { granted: want, waitMs: 0 };
    } catch (error) {
      if (error instanceof RateLimiterRes) return { granted: 0, waitMs: Math.max(1, error.msBeforeNext) };
      throw error;
    }
  };
}

/** Aqueduct: one EVALSHA per batch, partial grants, the exact wait, the server's clock. */
function aqueductTake(client: Redis, bucket: BucketConfig): TakeFn {
  const limiter = new TokenBucketLimiter(client, { keyPrefix: bucket.key });
  const buckets: BucketSpec[] = [{ name: 'bench', rate: bucket.rate, capacity: bucket.capacity }];
  return async (want) => {
    const result = await limiter.acquire(buckets, want);
    return { granted: result.granted, waitMs: result.waitMs };
  };
}

const TAKES: Record<VariantName, (client: Redis, bucket: BucketConfig) => TakeFn> = {
  naive: naiveTake,
  rateLimiterFlexible: rateLimiterFlexibleTake,
  aqueduct: aqueductTake,
};

// ---------------------------------------------------------------------------------------------------
// Measuring

interface Grant {
  at: number;
  tokens: number;
}

interface RunOutcome {
  tokens: number;
  elapsedMs: number;
  grants: Grant[];
}

/**
 * Every client wants batches of `batch` tokens: it asks for what its batch still needs, records what it
 * got (at the moment the reply arrives, when it may send), and sleeps the advised wait when told to.
 */
async function runClients(
  takes: TakeFn[],
  batch: number,
  durationMs: number,
  maxTokens: number,
  recordGrants: boolean,
): Promise<RunOutcome> {
  const grants: Grant[] = [];
  let tokens = 0;
  const start = performance.now();
  const deadline = start + durationMs;
  await Promise.all(
    takes.map(async (take) => {
      while (performance.now() < deadline && tokens < maxTokens) {
        let need = batch;
        while (need > 0 && performance.now() < deadline) {
          const attempt = await take(need);
          if (attempt.granted > 0) {
            tokens += attempt.granted;
            need -= attempt.granted;
            if (recordGrants) grants.push({ at: performance.now(), tokens: attempt.granted });
          }
          if (need > 0 && attempt.waitMs > 0) await sleep(attempt.waitMs);
        }
      }
    }),
  );
  return { tokens, elapsedMs: performance.now() - start, grants };
}

/** Most tokens granted in any window [t, t + windowMs] (two pointers over the grants in time order). */
export function worstWindow(grants: Grant[], windowMs: number): number {
  const sorted = [...grants].sort((a, b) => a.at - b.at);
  let worst = 0;
  let sum = 0;
  let tail = 0;
  for (let head = 0; head < sorted.length; head++) {
    sum += (sorted[head] as Grant).tokens;
    while ((sorted[head] as Grant).at - (sorted[tail] as Grant).at > windowMs) {
      sum -= (sorted[tail] as Grant).tokens;
      tail += 1;
    }
    worst = Math.max(worst, sum);
  }
  return worst;
}

interface ThroughputTotals {
  tokens: number;
  ms: number;
  calls: number;
  nodeCpuUs: number;
  redisCpuUs: number;
  byTurn: number[];
}

async function redisCpuMicros(admin: Redis): Promise<number> {
  const cpu = String(await admin.info('cpu'));
  const seconds = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(cpu)?.[1] ?? 0);
  return (seconds('used_cpu_user') + seconds('used_cpu_sys')) * 1_000_000;
}

/** Top-level script calls since the last CONFIG RESETSTAT: commands run inside scripts are not counted. */
async function scriptCalls(admin: Redis): Promise<number> {
  const stats = String(await admin.info('commandstats'));
  let calls = 0;
  for (const command of ['eval', 'evalsha']) {
    const line = new RegExp(`^cmdstat_${command}:calls=(\\d+).*?rejected_calls=(\\d+)`, 'm').exec(stats);
    if (line) calls += Number(line[1]) + Number(line[2]);
  }
  return calls;
}

function percentile(samples: number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? Number.NaN;
}

const round = (value: number, digits = 4) => Number(value.toPrecision(digits));

// ---------------------------------------------------------------------------------------------------

export async function runLimiterBench(options: LimiterBenchOptions): Promise<LimiterBenchResult> {
  const { log } = options;
  const redisServer = await LocalRedis.start();
  const admin = new Redis(redisServer.url, CLIENT_OPTIONS);
  const clients = Array.from({ length: options.clients }, () => new Redis(redisServer.url, CLIENT_OPTIONS));
  let phase = 0;
  const freshBucket = (rate: number, capacity: number): BucketConfig => {
    phase += 1;
    return { rate, capacity, key: `bench${phase}` };
  };
  try {
    await Promise.all([admin.ping(), ...clients.map((client) => client.ping())]);
    const redisVersion = /redis_version:(\S+)/.exec(String(await admin.info('server')))?.[1] ?? 'unknown';
    // "Far above what Redis can serve": the bucket never runs dry during the throughput phase.
    const unlimited = { rate: 1e9, capacity: 1e9 };

    // Throughput: short turns, the three variants back to back in a rotating order, many rounds. Other
    // load on the machine swings within seconds, so each round is a paired comparison and the ratios
    // reported are medians over rounds (their spread is kept too).
    const throughput = Object.fromEntries(
      VARIANTS.map((v) => [
        v,
        { tokens: 0, ms: 0, calls: 0, nodeCpuUs: 0, redisCpuUs: 0, byTurn: [] as number[] },
      ]),
    ) as Record<VariantName, ThroughputTotals>;
    const takesOf = Object.fromEntries(
      VARIANTS.map((variant) => {
        const bucket = freshBucket(unlimited.rate, unlimited.capacity); // one bucket per variant, shared
        return [variant, clients.map((client) => TAKES[variant](client, bucket))];
      }),
    ) as Record<VariantName, TakeFn[]>;
    for (const variant of VARIANTS) {
      await runClients(
        takesOf[variant],
        options.batch,
        options.throughput.warmupMs,
        Number.POSITIVE_INFINITY,
        false,
      );
    }
    for (let r = 0; r < options.throughput.rounds; r++) {
      const order = VARIANTS.map((_, i) => VARIANTS[(i + r) % VARIANTS.length] as VariantName);
      for (const variant of order) {
        await admin.config('RESETSTAT');
        const redisCpuBefore = await redisCpuMicros(admin);
        const nodeCpuBefore = process.cpuUsage();
        const outcome = await runClients(
          takesOf[variant],
          options.batch,
          options.throughput.sliceMs,
          options.throughput.maxTokensPerSlice,
          false,
        );
        const nodeCpu = process.cpuUsage(nodeCpuBefore);
        const redisCpu = (await redisCpuMicros(admin)) - redisCpuBefore;
        const calls = await scriptCalls(admin);
        const total = throughput[variant];
        total.tokens += outcome.tokens;
        total.ms += outcome.elapsedMs;
        total.calls += calls;
        total.nodeCpuUs += nodeCpu.user + nodeCpu.system;
        total.redisCpuUs += redisCpu;
        total.byTurn.push(Math.round((outcome.tokens / outcome.elapsedMs) * 1000));
      }
      log(
        `throughput round ${r + 1}: ${VARIANTS.map((v) => `${v} ${throughput[v].byTurn.at(-1)}`).join(', ')} tokens/s`,
      );
    }
    const pairedRatios = (other: VariantName) =>
      throughput.aqueduct.byTurn.map((tps, i) => tps / (throughput[other].byTurn[i] as number));

    // Conformance: demand well above a modest rate, one continuous run per variant.
    const { rate, capacity, durationMs } = options.conformance;
    const conformance = {} as Record<VariantName, VariantResult['conformance']>;
    for (const variant of VARIANTS) {
      const bucket = freshBucket(rate, capacity);
      const takes = clients.map((client) => TAKES[variant](client, bucket));
      await admin.config('RESETSTAT');
      const outcome = await runClients(takes, options.batch, durationMs, Number.POSITIVE_INFINITY, true);
      const calls = await scriptCalls(admin);
      const worst = worstWindow(outcome.grants, 1000);
      conformance[variant] = {
        tokensPerSecond: round((outcome.tokens / outcome.elapsedMs) * 1000),
        redisCallsPerToken: round(calls / Math.max(1, outcome.tokens)),
        worstWindowTokens: worst,
        worstWindowRatio100ms: round(worstWindow(outcome.grants, 100) / (capacity + rate * 0.1)),
      };
      log(
        `conformance ${variant}: ${outcome.tokens} tokens in ${Math.round(outcome.elapsedMs)} ms, worst 1 s window ${worst} (ratio ${(worst / (capacity + rate)).toFixed(4)})`,
      );
    }

    // Latency: one client on the otherwise idle server, each call right after a PING.
    const latency = {} as Record<VariantName, { callP99Ms: number; pingP99Ms: number }>;
    for (const variant of VARIANTS) {
      const client = clients[0] as Redis;
      const take = TAKES[variant](client, freshBucket(unlimited.rate, unlimited.capacity));
      const pings: number[] = [];
      const calls: number[] = [];
      for (let i = 0; i < options.latency.warmup + options.latency.samples; i++) {
        const t0 = performance.now();
        await client.ping();
        const t1 = performance.now();
        await take(options.batch);
        const t2 = performance.now();
        if (i >= options.latency.warmup) {
          pings.push(t1 - t0);
          calls.push(t2 - t1);
        }
      }
      latency[variant] = { callP99Ms: round(percentile(calls, 99)), pingP99Ms: round(percentile(pings, 99)) };
      log(
        `latency ${variant}: call p99 ${latency[variant].callP99Ms} ms, PING p99 ${latency[variant].pingP99Ms} ms`,
      );
    }

    const variants = Object.fromEntries(
      VARIANTS.map((variant) => {
        const t = throughput[variant];
        const c = conformance[variant];
        const result: VariantResult = {
          tokensPerSecond: round((t.tokens / t.ms) * 1000),
          tokensPerSecondByTurn: t.byTurn,
          cpuMicrosPerCall: {
            node: round(t.nodeCpuUs / t.calls, 3),
            redis: round(t.redisCpuUs / t.calls, 3),
          },
          redisCallsPerToken: round(t.calls / Math.max(1, t.tokens)),
          worstWindowRatio: round(c.worstWindowTokens / (capacity + rate * 1)),
          callP99Ms: latency[variant].callP99Ms,
          conformance: c,
        };
        return [variant, result];
      }),
    ) as Record<VariantName, VariantResult>;

    const aqueduct = variants.aqueduct;
    const vsNaive = pairedRatios('naive');
    const vsRateLimiterFlexible = pairedRatios('rateLimiterFlexible');
    const ratioVsNaive = round(percentile(vsNaive, 50));
    const ratioVsRateLimiterFlexible = round(percentile(vsRateLimiterFlexible, 50));
    const acquireP99Ms = latency.aqueduct.callP99Ms;
    const pingP99Ms = latency.aqueduct.pingP99Ms;
    const target = (metric: string, text: string, value: number, met: boolean): Target => ({
      metric,
      target: text,
      value,
      met,
    });
    const result: LimiterBenchResult = {
      scenario: 'limiter',
      command: 'npm run bench -- limiter',
      measuredAt: new Date().toISOString(),
      environment: {
        node: process.version,
        redis: redisVersion,
        cpus: cpus().length,
        cpuModel: cpus()[0]?.model ?? 'unknown',
        platform: `${process.platform} ${process.arch}`,
      },
      settings: {
        clients: options.clients,
        batch: options.batch,
        clientOptions: CLIENT_OPTIONS,
        throughput: { rounds: options.throughput.rounds, sliceMs: options.throughput.sliceMs, ...unlimited },
        conformance: { rate, capacity, durationMs, windowMs: 1000 },
        latencySamples: options.latency.samples,
      },
      variants,
      ratioVsNaive,
      ratioVsRateLimiterFlexible,
      ratioSpread: {
        vsNaive: [round(percentile(vsNaive, 25)), round(percentile(vsNaive, 75))],
        vsRateLimiterFlexible: [
          round(percentile(vsRateLimiterFlexible, 25)),
          round(percentile(vsRateLimiterFlexible, 75)),
        ],
      },
      acquireP99Ms,
      pingP99Ms,
      targets: [
        target('ratioVsNaive', '>= 50', ratioVsNaive, ratioVsNaive >= 50),
        target(
          'ratioVsRateLimiterFlexible',
          '>= 1',
          ratioVsRateLimiterFlexible,
          ratioVsRateLimiterFlexible >= 1,
        ),
        target(
          'redisCallsPerToken',
          '<= 0.011',
          aqueduct.redisCallsPerToken,
          aqueduct.redisCallsPerToken <= 0.011,
        ),
        target('worstWindowRatio', '<= 1.01', aqueduct.worstWindowRatio, aqueduct.worstWindowRatio <= 1.01),
        target(
          'acquireP99Ms',
          `<= 2 × pingP99Ms (${round(2 * pingP99Ms)})`,
          acquireP99Ms,
          acquireP99Ms <= 2 * pingP99Ms,
        ),
      ],
    };
    await mkdir(dirname(options.outFile), { recursive: true });
    await writeFile(options.outFile, `${JSON.stringify(result, null, 2)}\n`);
    return result;
  } finally {
    for (const client of clients) client.disconnect();
    admin.disconnect();
    await redisServer.dispose();
  }
}

const fmt = (value: number) =>
  value >= 1000 ? Math.round(value).toLocaleString('en-US') : String(Number(value.toPrecision(3)));

/** The docs/benchmarks.md block (markdown), regenerated from the JSON by bench/readme.ts. */
export function renderLimiterMarkdown(result: LimiterBenchResult): string {
  const { settings } = result;
  const rows = VARIANTS.map((name) => {
    const v = result.variants[name];
    const c = v.conformance;
    return `| \`${name}\` | ${fmt(v.tokensPerSecond)} | ${v.redisCallsPerToken} | ${v.cpuMicrosPerCall.node} + ${v.cpuMicrosPerCall.redis} | ${v.callP99Ms} | ${v.worstWindowRatio} | ${c.worstWindowRatio100ms} | ${fmt(c.tokensPerSecond)} | ${c.redisCallsPerToken} |`;
  });
  const targets = result.targets.map(
    (t) => `| \`${t.metric}\` | ${t.target} | ${t.value} | ${t.met ? 'met' : '**missed**'} |`,
  );
  const spread = result.ratioSpread;
  return [
    `Measured ${result.measuredAt.slice(0, 10)} with \`${result.command}\` on ${result.environment.cpus} × ${result.environment.cpuModel}, Node ${result.environment.node}, Redis ${result.environment.redis} (a private redis-server); ${settings.clients} clients, each wanting batches of ${settings.batch} tokens from one shared bucket.`,
    '',
    '| variant | throughput: tokens/s | Redis calls per token | CPU µs per call: Node + Redis | p99 per call (ms) | conformance: worst 1 s window ÷ (capacity + rate·1 s) | worst 100 ms window ÷ (capacity + rate·0.1 s) | tokens/s | calls per token |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    `Throughput: bucket rate ${settings.throughput.rate.toExponential(0)}/s, ${settings.throughput.rounds} rounds of ${settings.throughput.sliceMs} ms per variant; the ratios are medians of the per-round ratios (middle half: ${spread.vsNaive[0]}–${spread.vsNaive[1]} vs naive, ${spread.vsRateLimiterFlexible[0]}–${spread.vsRateLimiterFlexible[1]} vs rateLimiterFlexible). Conformance: rate ${settings.conformance.rate}/s, capacity ${settings.conformance.capacity}, ${settings.conformance.durationMs / 1000} s per variant. p99: ${settings.latencySamples} calls, each right after a PING on the same connection (PING p99 ${result.pingP99Ms} ms).`,
    '',
    '| target for `aqueduct` | wanted | measured | |',
    '| --- | --- | ---: | --- |',
    ...targets,
  ].join('\n');
}

export function renderLimiterTable(result: LimiterBenchResult): string {
  const header = [
    'variant',
    'tokens/s',
    'calls/token',
    'cpu µs node+redis',
    'p99 ms',
    'window 1 s',
    'window 100 ms',
  ];
  const rows = VARIANTS.map((name) => {
    const v = result.variants[name];
    return [
      name,
      fmt(v.tokensPerSecond),
      String(v.redisCallsPerToken),
      `${v.cpuMicrosPerCall.node}+${v.cpuMicrosPerCall.redis}`,
      String(v.callP99Ms),
      String(v.worstWindowRatio),
      String(v.conformance.worstWindowRatio100ms),
    ];
  });
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((row) => (row[c] as string).length)));
  const line = (cells: string[]) => cells.map((cell, c) => cell.padStart(widths[c] as number)).join('  ');
  const spread = result.ratioSpread;
  return [
    line(header),
    ...rows.map(line),
    '',
    `ratioVsNaive ${result.ratioVsNaive} (middle half ${spread.vsNaive.join('–')}), ratioVsRateLimiterFlexible ${result.ratioVsRateLimiterFlexible} (middle half ${spread.vsRateLimiterFlexible.join('–')}), acquireP99Ms ${result.acquireP99Ms}, pingP99Ms ${result.pingP99Ms}`,
    ...result.targets.map(
      (t) => `${t.met ? 'met    ' : 'MISSED '} ${t.metric} ${t.value} (target ${t.target})`,
    ),
  ].join('\n');
}

export const RESULTS_FILE = fileURLToPath(new URL('./results/limiter.json', import.meta.url));

/** The `limiter` scenario of bench/run.ts. */
export async function main(): Promise<void> {
  const result = await runLimiterBench(fullOptions(RESULTS_FILE));
  console.log(renderLimiterTable(result));
  console.log(`\nwrote ${RESULTS_FILE}; run \`node bench/readme.ts\` to update docs/benchmarks.md`);
}
