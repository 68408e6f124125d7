import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LocalRedis, startServices } from '../src/services/index.ts';
import { type BurstResult, runBurst } from '../testkit/burst.ts';
import { lineChart } from './chart.ts';
import { machine } from './machine.ts';

/**
 * `npm run bench -- burst`: the viral burst, on one broker and one Redis:
 * - `runs`: the real pipeline configured at the provider's own limits, `BENCH_BURST_RUNS` times (default
 *   5) for each consumer count of `BENCH_BURST_CONSUMERS` (default 3 and 6); every run is recorded, and
 *   the targets hold only if they hold in every run. `aqueduct` is the first run in full (its timeline is
 *   the one drawn);
 * - `fireAndForget`: the same consumers with the limiter disabled and 429s retried (every instance fires
 *   as fast as it can), once.
 * Both simulators enforce 800/s with a burst of 2000; 1% dead tokens, 1% provider 5xx.
 */

export const PROVIDER = { rate: 800, burst: 2000 };
/**
 * Pushes in flight per provider per consumer (AQUEDUCT_SEND_CONCURRENCY), and so the most tokens one
 * consumer holds that the provider has not answered. 128 rather than the default 64, and refills waited
 * for in chunks of 400 tokens (AQUEDUCT_ACQUIRE_CHUNK, half a second of the rate) rather than 200: each
 * acquire then serves more pushes, which keeps Redis under 0.03 calls per push.
 */
export const SEND_CONCURRENCY = 128;
export const ACQUIRE_CHUNK = 400;
/** As a user configures Aqueduct for that provider: its published rate and burst, as they are. */
export const AQUEDUCT = { rate: PROVIDER.rate, burst: PROVIDER.burst };

/** One run of the pipeline, as `runs` records it. */
export interface BurstRun {
  consumers: number;
  providerRate: number;
  providerBurst: number;
  aqueductRate: number;
  aqueductBurst: number;
  provider429: number;
  requestEnvelopeRatio: number;
  envelopeRatio: number;
  redisCallsPerPush: number;
  lost: number;
  duplicates: number;
  seconds: number;
  p99Ms: number;
  /**
   * Per provider: the events published for it, its ratio, and where the rest of its envelope went (see
   * BurstResult.perProvider).
   */
  perProvider: Record<
    'fcm' | 'apns',
    { published: number; requestEnvelopeRatio: number; whileFull: number; leftAtEnd: number }
  >;
  /**
   * The machine's 1-minute load average as the run ended: on a shared machine a run beside other work
   * leaves more of the envelope unused, and this tells such a run apart.
   */
  loadAverage?: number;
}

export interface BurstBenchOptions {
  /** An existing broker (the test suite's); default: the service switch (a local broker). */
  kafkaBrokers?: string[];
  events: number;
  /** Consumer processes of each series of runs (the first count's first run is `aqueduct`). */
  consumers: number[];
  /** Runs per consumer count. */
  runs: number;
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
  runs: BurstRun[];
  fireAndForget: Omit<BurstResult, 'timeline'>;
  targets: Record<string, { target: string; value: number; met: boolean }>;
}

/** The conditions of every burst-shaped run: the providers' limits, their faults, the consumers' settings. */
export const BURST_CONDITIONS = {
  provider: PROVIDER,
  deadTokenRatio: 0.01,
  faults: { error500: 0.01 },
  env: {
    AQUEDUCT_SEND_CONCURRENCY: String(SEND_CONCURRENCY),
    AQUEDUCT_ACQUIRE_CHUNK: String(ACQUIRE_CHUNK),
  },
};

/**
 * A bench's Kafka (the given brokers, or the service switch's) and a private redis-server, so that
 * INFO commandstats counts the run's calls only; plus a folder for the consumers' logs.
 */
export async function burstServices(options: {
  kafkaBrokers?: string[] | undefined;
  log: (line: string) => void;
  name: string;
}): Promise<{ kafkaBrokers: string[]; redisUrl: string; logDir: string; stop: () => Promise<void> }> {
  const services = await startServices({
    env: {
      ...process.env,
      REDIS_URL: '',
      ...(options.kafkaBrokers ? { KAFKA_BROKERS: options.kafkaBrokers.join(',') } : {}),
    },
    log: options.log,
  });
  const redis = services.localRedis ?? (await LocalRedis.start());
  const logDir = await mkdtemp(join(tmpdir(), `aqueduct-bench-${options.name}-`));
  return {
    kafkaBrokers: services.kafkaBrokers,
    redisUrl: redis.url,
    logDir,
    async stop() {
      if (!services.localRedis) await redis.dispose();
      await services.stop();
    },
  };
}

export async function runBurstBench(options: BurstBenchOptions): Promise<BurstBenchResult> {
  const services = await burstServices({
    kafkaBrokers: options.kafkaBrokers,
    log: options.log,
    name: 'burst',
  });
  try {
    const common = {
      ...BURST_CONDITIONS,
      kafkaBrokers: services.kafkaBrokers,
      redisUrl: services.redisUrl,
      events: options.events,
      partitions: options.partitions,
      logDir: services.logDir,
    };
    const progress =
      (name: string) => (s: { elapsedSeconds: number; delivered: number; provider429: number }) => {
        if (s.elapsedSeconds > 0)
          options.log(
            `  ${name} t=${s.elapsedSeconds.toFixed(0)}s delivered ${s.delivered} 429s ${s.provider429}`,
          );
      };
    const runs: BurstRun[] = [];
    let aqueduct: BurstResult | undefined;
    for (const consumers of options.consumers) {
      for (let run = 1; run <= options.runs; run++) {
        options.log(
          `aqueduct run ${run}/${options.runs}: ${options.events} events, ${consumers} consumers, ${options.partitions} partitions`,
        );
        const result = await runBurst({
          ...common,
          consumers,
          aqueduct: AQUEDUCT,
          limiter: true,
          onTick: progress('aqueduct'),
        });
        aqueduct ??= result;
        runs.push(burstRun(consumers, result));
        options.log(`  ${JSON.stringify(runs.at(-1))}`);
      }
    }
    if (!aqueduct)
      throw new Error('no run: BENCH_BURST_CONSUMERS and BENCH_BURST_RUNS must name at least one');
    options.log('fireAndForget: the same, limiter disabled');
    const fireAndForget = await runBurst({
      ...common,
      consumers: options.consumers[0] as number,
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
        runsPerConsumerCount: options.runs,
        partitions: options.partitions,
        provider: PROVIDER,
        aqueductConfig: AQUEDUCT,
        sendConcurrency: SEND_CONCURRENCY,
        acquireChunk: ACQUIRE_CHUNK,
        deadTokenRatio: 0.01,
        provider5xxRatio: 0.01,
      },
      aqueduct: aqueductFigures,
      runs,
      fireAndForget: naiveFigures,
      targets: runTargets(runs),
    };
    await mkdir(options.outDir, { recursive: true });
    await writeFile(join(options.outDir, 'burst.json'), `${JSON.stringify(result, null, 2)}\n`);
    await writeFile(
      join(options.outDir, 'burst.svg'),
      lineChart({
        title: `Viral burst: ${options.events} events, ${options.consumers[0]} consumers, providers at ${PROVIDER.rate}/s each`,
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
    await services.stop();
  }
}

function target(text: string, value: number, met: boolean): { target: string; value: number; met: boolean } {
  return { target: text, value, met };
}

function burstRun(consumers: number, result: BurstResult): BurstRun {
  return {
    consumers,
    providerRate: PROVIDER.rate,
    providerBurst: PROVIDER.burst,
    aqueductRate: AQUEDUCT.rate,
    aqueductBurst: AQUEDUCT.burst,
    provider429: result.provider429,
    requestEnvelopeRatio: result.requestEnvelopeRatio,
    envelopeRatio: result.envelopeRatio,
    redisCallsPerPush: result.redisCallsPerPush,
    lost: result.lost,
    duplicates: result.duplicates,
    seconds: result.seconds,
    p99Ms: result.p99Ms,
    perProvider: {
      fcm: providerRun(result.perProvider.fcm),
      apns: providerRun(result.perProvider.apns),
    },
    loadAverage: Math.round((loadavg()[0] ?? 0) * 100) / 100,
  };
}

function providerRun(figures: BurstResult['perProvider']['fcm']): BurstRun['perProvider']['fcm'] {
  return {
    published: figures.published,
    requestEnvelopeRatio: figures.requestEnvelopeRatio,
    ...figures.envelopeUnused,
  };
}

/** The targets over every run: each holds only if it holds in all of them (the worst run is the value). */
function runTargets(runs: readonly BurstRun[]): BurstBenchResult['targets'] {
  type Figure = Exclude<keyof BurstRun, 'perProvider' | 'loadAverage'>;
  const most = (f: Figure) => Math.max(...runs.map((run) => run[f]));
  const least = (f: Figure) => Math.min(...runs.map((run) => run[f]));
  return {
    provider429: target('= 0 in every run', most('provider429'), most('provider429') === 0),
    lost: target('= 0 in every run', most('lost'), most('lost') === 0),
    duplicates: target('= 0 in every run', most('duplicates'), most('duplicates') === 0),
    requestEnvelopeRatio: target(
      '≥ 0.97 in every run',
      least('requestEnvelopeRatio'),
      least('requestEnvelopeRatio') >= 0.97,
    ),
    redisCallsPerPush: target(
      '≤ 0.03 in every run',
      most('redisCallsPerPush'),
      most('redisCallsPerPush') <= 0.03,
    ),
  };
}

/** The per-run table of docs/benchmarks.md. */
export function burstRunsTable(result: BurstBenchResult): string {
  const fields = [
    'consumers',
    'provider429',
    'requestEnvelopeRatio',
    'envelopeRatio',
    'redisCallsPerPush',
    'lost',
    'duplicates',
    'seconds',
    'p99Ms',
  ] as const;
  return [
    `| run | ${fields.join(' | ')} | load (1 min) |`,
    `| ---: | ${fields.map(() => '---:').join(' | ')} | ---: |`,
    ...result.runs.map(
      (run, i) => `| ${i + 1} | ${fields.map((f) => run[f]).join(' | ')} | ${run.loadAverage ?? '–'} |`,
    ),
  ].join('\n');
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
  // 80 000 events: a run's first and last half second (connections warming up, the last partitions and
  // the retries of the last 5xx answers trickling in) cost the envelope the same tokens whatever the
  // size, so a longer run shows the steady limiter more than its ends (docs/benchmarks.md).
  const events = Number(process.env.BENCH_BURST_EVENTS ?? 80_000);
  const consumers = (process.env.BENCH_BURST_CONSUMERS ?? '3,6').split(',').map(Number);
  const runs = Number(process.env.BENCH_BURST_RUNS ?? 5);
  if (!consumers.every((c) => Number.isInteger(c) && c > 0) || !(Number.isInteger(runs) && runs > 0)) {
    throw new Error(
      'BENCH_BURST_CONSUMERS must be positive integers separated by commas, BENCH_BURST_RUNS one',
    );
  }
  const result = await runBurstBench({
    events,
    consumers,
    runs,
    partitions: 6,
    outDir: RESULTS_DIR,
    log: (line) => console.error(line),
  });
  console.log(burstTable(result));
  console.log(burstRunsTable(result));
  for (const [name, t] of Object.entries(result.targets)) {
    console.log(`${t.met ? 'met    ' : 'MISSED '} ${name} ${t.target}: ${t.value}`);
  }
}

/** The docs/benchmarks.md block: setup, machine, the side-by-side table, the targets and the picture. */
export function burstMarkdown(result: BurstBenchResult): string {
  const m = result.machine;
  const s = result.setup as {
    events: number;
    consumers: number[];
    runsPerConsumerCount: number;
    partitions: number;
  };
  const targets = Object.entries(result.targets).map(
    ([name, t]) => `| \`${name}\` | ${t.target} | ${t.value} | ${t.met ? 'met' : '**missed**'} |`,
  );
  return [
    `Measured with \`${result.command}\` on ${m.cores} cores, ${m.memoryGiB} GiB (${m.cpu}), Node ${m.node}, ${m.kafka ?? 'Kafka 3.9.1 (local)'}: ${s.events} events published before the consumer processes start, ${s.partitions} partitions, both simulators at ${PROVIDER.rate}/s with a burst of ${PROVIDER.burst}, 1% dead tokens, 1% provider 5xx. Aqueduct is configured at exactly the provider's limits, rate ${AQUEDUCT.rate}/s and burst ${AQUEDUCT.burst} per provider, with ${SEND_CONCURRENCY} pushes in flight per provider per consumer and refills waited for in chunks of ${ACQUIRE_CHUNK}. ${s.runsPerConsumerCount} runs with each of ${s.consumers.join(' and ')} consumers, every one recorded below; the side-by-side table shows the first run (${s.consumers[0]} consumers) against one fire-and-forget run.`,
    '',
    burstTable(result),
    '',
    burstRunsTable(result),
    '',
    '| target for `aqueduct` (worst run) | wanted | measured | |',
    '| --- | --- | ---: | --- |',
    ...targets,
    '',
    '![Delivered per second against the allowed rate, with 429s, for both variants](../bench/results/burst.svg)',
  ].join('\n');
}
