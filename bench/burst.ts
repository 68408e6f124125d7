import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LocalRedis, startServices } from '../src/services/index.ts';
import { type BurstResult, runBurst } from '../testkit/burst.ts';
import { lineChart } from './chart.ts';
import { machine } from './machine.ts';

/**
 * `npm run bench -- burst`: the viral burst, twice in one run on the same broker and Redis:
 * - `aqueduct`: the real pipeline configured for the provider's limit;
 * - `fireAndForget`: the same consumers with the limiter disabled and 429s retried (every instance fires
 *   as fast as it can).
 * Both simulators enforce 800/s with a burst of 2000; 1% dead tokens, 1% provider 5xx.
 */

export const PROVIDER = { rate: 800, burst: 2000 };
/**
 * Pushes in flight per provider per consumer (AQUEDUCT_SEND_CONCURRENCY), and so the most tokens one
 * consumer holds that the provider has not seen. 128 rather than the default 64, and refills waited for in
 * chunks of 400 tokens (AQUEDUCT_ACQUIRE_CHUNK, half a second of the rate) rather than 200: each acquire
 * then serves more pushes, which keeps Redis under 0.03 calls per push; the burst below pays for it.
 */
export const SEND_CONCURRENCY = 128;
export const ACQUIRE_CHUNK = 400;
/**
 * As a user configures Aqueduct for that provider (docs/configuration.md, "Choosing the limits"): 5%
 * under its rate, and its burst less what three consumers can hold unanswered (2000 − 3 × 128 = 1616,
 * rounded down).
 */
export const AQUEDUCT = { rate: 760, burst: 1600 };

export interface BurstBenchOptions {
  /** An existing broker (the test suite's); default: the service switch (a local broker). */
  kafkaBrokers?: string[];
  events: number;
  consumers: number;
  partitions: number;
  outDir: string;
  log: (line: string) => void;
}

export interface BurstBenchResult {
  scenario: 'burst';
  command: string;
  machine: ReturnType<typeof machine>;
  setup: Record<string, unknown>;
  aqueduct: Omit<BurstResult, 'timeline'>;
  fireAndForget: Omit<BurstResult, 'timeline'>;
  targets: Record<string, { target: string; value: number; met: boolean }>;
}

export async function runBurstBench(options: BurstBenchOptions): Promise<BurstBenchResult> {
  const services = await startServices({
    env: {
      ...process.env,
      REDIS_URL: '',
      ...(options.kafkaBrokers ? { KAFKA_BROKERS: options.kafkaBrokers.join(',') } : {}),
    },
    log: options.log,
  });
  // A private redis-server, so that INFO commandstats counts this run's calls only.
  const redis = services.localRedis ?? (await LocalRedis.start());
  const logDir = await mkdtemp(join(tmpdir(), 'aqueduct-bench-burst-'));
  try {
    const common = {
      kafkaBrokers: services.kafkaBrokers,
      redisUrl: redis.url,
      events: options.events,
      partitions: options.partitions,
      consumers: options.consumers,
      provider: PROVIDER,
      deadTokenRatio: 0.01,
      faults: { error500: 0.01 },
      env: {
        AQUEDUCT_SEND_CONCURRENCY: String(SEND_CONCURRENCY),
        AQUEDUCT_ACQUIRE_CHUNK: String(ACQUIRE_CHUNK),
      },
      logDir,
    };
    const progress =
      (name: string) => (s: { elapsedSeconds: number; delivered: number; provider429: number }) => {
        if (s.elapsedSeconds > 0)
          options.log(
            `  ${name} t=${s.elapsedSeconds.toFixed(0)}s delivered ${s.delivered} 429s ${s.provider429}`,
          );
      };
    options.log(
      `aqueduct: ${options.events} events, ${options.consumers} consumers, ${options.partitions} partitions`,
    );
    const aqueduct = await runBurst({
      ...common,
      aqueduct: AQUEDUCT,
      limiter: true,
      onTick: progress('aqueduct'),
    });
    options.log('fireAndForget: the same, limiter disabled');
    const fireAndForget = await runBurst({
      ...common,
      aqueduct: PROVIDER,
      limiter: false,
      onTick: progress('fireAndForget'),
    });

    const { timeline: aqueductTimeline, ...aqueductFigures } = aqueduct;
    const { timeline: naiveTimeline, ...naiveFigures } = fireAndForget;
    const result: BurstBenchResult = {
      scenario: 'burst',
      command: 'npm run bench -- burst',
      machine: machine(),
      setup: {
        events: options.events,
        consumers: options.consumers,
        partitions: options.partitions,
        provider: PROVIDER,
        aqueductConfig: AQUEDUCT,
        sendConcurrency: SEND_CONCURRENCY,
        acquireChunk: ACQUIRE_CHUNK,
        deadTokenRatio: 0.01,
        provider5xxRatio: 0.01,
      },
      aqueduct: aqueductFigures,
      fireAndForget: naiveFigures,
      targets: {
        provider429: target('= 0', aqueduct.provider429, aqueduct.provider429 === 0),
        lost: target('= 0', aqueduct.lost, aqueduct.lost === 0),
        duplicates: target('= 0', aqueduct.duplicates, aqueduct.duplicates === 0),
        envelopeRatio: target('≥ 0.98', aqueduct.envelopeRatio, aqueduct.envelopeRatio >= 0.98),
        redisCallsPerPush: target('≤ 0.03', aqueduct.redisCallsPerPush, aqueduct.redisCallsPerPush <= 0.03),
      },
    };
    await mkdir(options.outDir, { recursive: true });
    await writeFile(join(options.outDir, 'burst.json'), `${JSON.stringify(result, null, 2)}\n`);
    await writeFile(
      join(options.outDir, 'burst.svg'),
      lineChart({
        title: `Viral burst: ${options.events} events, ${options.consumers} consumers, providers at ${PROVIDER.rate}/s each`,
        yLabel: 'pushes per second (both providers)',
        limit: {
          value: PROVIDER.rate * 2,
          label: `allowed: ${PROVIDER.rate * 2}/s (+ burst ${PROVIDER.burst} each)`,
        },
        series: [
          {
            name: 'aqueduct',
            color: '#1f77b4',
            points: aqueductTimeline.map((t) => [t.second, t.delivered]),
            throttled: aqueductTimeline.map((t) => [t.second, t.provider429]),
          },
          {
            name: 'fireAndForget',
            color: '#ff7f0e',
            points: naiveTimeline.map((t) => [t.second, t.delivered]),
            throttled: naiveTimeline.map((t) => [t.second, t.provider429]),
          },
        ],
      }),
    );
    return result;
  } finally {
    if (!services.localRedis) await redis.dispose();
    await services.stop();
  }
}

function target(text: string, value: number, met: boolean): { target: string; value: number; met: boolean } {
  return { target: text, value, met };
}

/** The table printed after a run (and rendered into docs/benchmarks.md by bench/readme.ts). */
export function burstTable(result: BurstBenchResult): string {
  const fields = [
    'published',
    'delivered',
    'deadLettered',
    'invalidTokens',
    'provider429',
    'lost',
    'duplicates',
    'seconds',
    'configuredRate',
    'achievedRate',
    'envelopeRatio',
    'requestEnvelopeRatio',
    'p50Ms',
    'p99Ms',
    'redisCallsPerPush',
  ] as const;
  const rows = fields.map((f) => `| ${f} | ${result.aqueduct[f]} | ${result.fireAndForget[f]} |`);
  return ['| figure | aqueduct | fireAndForget |', '| --- | ---: | ---: |', ...rows].join('\n');
}

export const RESULTS_DIR = fileURLToPath(new URL('./results/', import.meta.url));

export async function main(): Promise<void> {
  const events = Number(process.env.BENCH_BURST_EVENTS ?? 20_000);
  const result = await runBurstBench({
    events,
    consumers: 3,
    partitions: 6,
    outDir: RESULTS_DIR,
    log: (line) => console.error(line),
  });
  console.log(burstTable(result));
  for (const [name, t] of Object.entries(result.targets)) {
    console.log(`${t.met ? 'met    ' : 'MISSED '} ${name} ${t.target}: ${t.value}`);
  }
}

/** The docs/benchmarks.md block: setup, machine, the side-by-side table, the targets and the picture. */
export function burstMarkdown(result: BurstBenchResult): string {
  const m = result.machine;
  const s = result.setup as { events: number; consumers: number; partitions: number };
  const targets = Object.entries(result.targets).map(
    ([name, t]) => `| \`${name}\` | ${t.target} | ${t.value} | ${t.met ? 'met' : '**missed**'} |`,
  );
  return [
    `Measured with \`${result.command}\` on ${m.cores} cores, ${m.memoryGiB} GiB (${m.cpu}), Node ${m.node}, ${m.kafka ?? 'Kafka 3.9.1 (local)'}: ${s.events} events published before ${s.consumers} consumer processes start, ${s.partitions} partitions, both simulators at ${PROVIDER.rate}/s with a burst of ${PROVIDER.burst}, 1% dead tokens, 1% provider 5xx. Aqueduct is configured with rate ${AQUEDUCT.rate}/s and burst ${AQUEDUCT.burst} per provider, ${SEND_CONCURRENCY} pushes in flight per provider per consumer, refills waited for in chunks of ${ACQUIRE_CHUNK}.`,
    '',
    burstTable(result),
    '',
    '| target for `aqueduct` | wanted | measured | |',
    '| --- | --- | ---: | --- |',
    ...targets,
    '',
    '![Delivered per second against the allowed rate, with 429s, for both variants](../bench/results/burst.svg)',
  ].join('\n');
}
