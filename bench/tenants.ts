import { execFileSync } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BurstResult, runBurst } from '../testkit/burst.ts';
import { AQUEDUCT, BURST_CONDITIONS, burstServices, PROVIDER } from './burst.ts';
import { machine } from './machine.ts';

/**
 * `npm run bench -- tenants`: a big tenant's burst and two small tenants' steady traffic, under one
 * global provider limit. Real Kafka, Redis, simulators (800/s, burst 2000 per provider) and three
 * `aqueduct consume` processes: tenant A publishes `BENCH_TENANTS_BURST` (20 000) events at once; B and
 * C publish 1 000 each, one at a time, evenly over the time A's burst takes at the providers' limits
 * (10 s: the burst allowance at once, the rest at the rate), from the burst's first push. In that
 * contended phase a max-min fair split gives B and C all they ask (their publish rate, far under a
 * third of the budget) and A the rest.
 *
 * Figures per variant: each tenant's delivered rate in the contended phase and p99 publish → provider
 * latency, `fairShareRatio` (the smaller of B's and C's delivered rate ÷ its max-min fair share), the
 * request envelope, 429s, lost and duplicates. The delivered rate behind `fairShareRatio` is counted per
 * second of the phase, each second's deliveries capped at the fair share: a backlog delivered in a rush
 * at the end does not make up for the seconds the tenant got nothing (its plain mean is
 * `deliveredRate`). `unfair` is first come, first served
 * (AQUEDUCT_TENANT_FAIRNESS=false); `fair` is the same run with tenant fairness on (the default), one
 * after the other on the same services.
 */

export const RESULTS_DIR = fileURLToPath(new URL('./results/', import.meta.url));
const SMALL_TENANTS = ['B', 'C'] as const;
const SMALL_EVENTS = 1000;

export interface TenantsVariant {
  fairShareRatio: number;
  provider429: number;
  lost: number;
  duplicates: number;
  requestEnvelopeRatio: number;
  /** Per provider, where the rest of the envelope went (see BurstResult.perProvider). */
  envelopeUnused: Record<'fcm' | 'apns', { whileFull: number; leftAtEnd: number }>;
  redisCallsPerPush: number;
  seconds: number;
  /** The contended phase: while B and C were publishing, in s since the consumers started. */
  contendedSeconds: { from: number; to: number } | null;
  tenants: Record<
    string,
    {
      delivered: number;
      /** Deliveries in the contended phase ÷ its seconds. */
      deliveredRate: number;
      /** The same with each second's deliveries capped at the fair share (what fairShareRatio uses). */
      fairDeliveredRate: number;
      fairShare: number;
      p99Ms: number;
    }
  >;
}

export interface TenantsBenchResult {
  scenario: 'tenants';
  command: string;
  measuredAt: string;
  machine: ReturnType<typeof machine>;
  setup: Record<string, unknown>;
  unfair: TenantsVariant;
  fair: TenantsVariant | null;
  /** The same number of events published at once without tenants, on the same services (bench burst's case). */
  burstReference?: BurstReference;
  notes: string[];
  targets: Record<string, { target: string; value: number | null; met: boolean }>;
  /** Every run so far (this one last): when, on which machine, and each variant's headline figures. */
  runs: TenantsRun[];
}

export interface BurstReference {
  events: number;
  requestEnvelopeRatio: number;
  envelopeUnused: TenantsVariant['envelopeUnused'];
  provider429: number;
  lost: number;
  duplicates: number;
}

export interface TenantsRun {
  measuredAt: string;
  /** The commit measured (with `+` when the tree had changes), or what is known of the code. */
  code?: string;
  loadAverage: number;
  /** The burst reference's envelope (runs before it existed have none). */
  burstRequestEnvelopeRatio?: number;
  unfair: Omit<TenantsVariant, 'tenants' | 'contendedSeconds'> & { p99Ms: Record<string, number> };
  fair: (Omit<TenantsVariant, 'tenants' | 'contendedSeconds'> & { p99Ms: Record<string, number> }) | null;
}

/**
 * Max-min fair shares of `capacity` among tenants asking `demands` (Infinity: as much as there is):
 * water-filling, each tenant asking less than an equal split of what is left gets what it asks.
 */
export function maxMinShares(capacity: number, demands: Record<string, number>): Record<string, number> {
  const shares: Record<string, number> = {};
  let left = capacity;
  let open = Object.entries(demands).sort(([, a], [, b]) => a - b);
  while (open.length > 0) {
    const equal = left / open.length;
    const [name, demand] = open[0] as [string, number];
    if (demand <= equal) {
      shares[name] = demand;
      left -= demand;
      open = open.slice(1);
    } else {
      for (const [rest] of open) shares[rest] = equal;
      break;
    }
  }
  return shares;
}

export async function runTenantsBench(options: {
  burstEvents: number;
  consumers: number;
  kafkaBrokers?: string[];
  log: (line: string) => void;
}): Promise<Omit<TenantsBenchResult, 'runs'>> {
  const services = await burstServices({
    kafkaBrokers: options.kafkaBrokers,
    log: options.log,
    name: 'tenants',
  });
  // B and C publish over the time A's burst takes at the providers' limits: the buckets start full, so
  // the burst allowance goes at once and the rest at the rate. The whole period is contended: A's
  // backlog (and B's and C's share of the budget) lasts past its end.
  const seconds = Math.max(1, (options.burstEvents - 2 * PROVIDER.burst) / (2 * PROVIDER.rate));
  try {
    const run = async (name: 'unfair' | 'fair'): Promise<TenantsVariant> => {
      options.log(
        `${name}: A ${options.burstEvents} at once, B and C ${SMALL_EVENTS} each over ${seconds} s, ${options.consumers} consumers`,
      );
      const result = await runBurst({
        ...BURST_CONDITIONS,
        kafkaBrokers: services.kafkaBrokers,
        redisUrl: services.redisUrl,
        events: options.burstEvents,
        partitions: 6,
        consumers: options.consumers,
        aqueduct: AQUEDUCT,
        limiter: true,
        tenants: ['A'],
        trickle: { tenants: SMALL_TENANTS, eventsPerTenant: SMALL_EVENTS, seconds },
        // The burst bench's send concurrency and acquire chunk, as the burst reference below runs with.
        env: { ...BURST_CONDITIONS.env, AQUEDUCT_TENANT_FAIRNESS: name === 'fair' ? 'true' : 'false' },
        logDir: services.logDir,
        onTick: (s) => {
          if (s.elapsedSeconds > 0)
            options.log(
              `  t=${s.elapsedSeconds.toFixed(0)}s delivered ${s.delivered} ${s.tenants.map((t) => `${t.tenant} ${Math.round(t.deliveredPerSecond)}/s`).join(' ')}`,
            );
        },
      });
      return variant(result, SMALL_EVENTS / seconds);
    };
    // Side by side in one run, on the same services: first come, first served, then fair.
    const unfair = await run('unfair');
    const fair = await run('fair');
    // The envelope a burst of as many events, all at once and without tenants, gets on the same
    // services (what `bench burst` measures): the fair run's must not be lower.
    const total = options.burstEvents + SMALL_TENANTS.length * SMALL_EVENTS;
    options.log(`burst reference: ${total} events at once, no tenants, ${options.consumers} consumers`);
    const reference = await runBurst({
      ...BURST_CONDITIONS,
      kafkaBrokers: services.kafkaBrokers,
      redisUrl: services.redisUrl,
      events: total,
      partitions: 6,
      consumers: options.consumers,
      aqueduct: AQUEDUCT,
      limiter: true,
      logDir: services.logDir,
    });
    const burstReference = {
      events: total,
      requestEnvelopeRatio: reference.requestEnvelopeRatio,
      envelopeUnused: {
        fcm: reference.perProvider.fcm.envelopeUnused,
        apns: reference.perProvider.apns.envelopeUnused,
      },
      provider429: reference.provider429,
      lost: reference.lost,
      duplicates: reference.duplicates,
    };
    const notes: string[] = [];
    return {
      scenario: 'tenants',
      command: 'npm run bench -- tenants',
      measuredAt: new Date().toISOString(),
      machine: machine(),
      setup: {
        consumers: options.consumers,
        partitions: 6,
        provider: PROVIDER,
        aqueductConfig: AQUEDUCT,
        tenants: {
          A: { events: options.burstEvents, published: 'at once, before the consumers start' },
          B: { events: SMALL_EVENTS, published: `one at a time over ${seconds} s` },
          C: { events: SMALL_EVENTS, published: `one at a time over ${seconds} s` },
        },
        deadTokenRatio: 0.01,
        provider5xxRatio: 0.01,
      },
      unfair,
      fair,
      burstReference,
      notes,
      targets: targetsOf(fair, burstReference.requestEnvelopeRatio),
    };
  } finally {
    await services.stop();
  }
}

/** The issue's targets, on the fair variant. */
function targetsOf(fair: TenantsVariant, burstEnvelope: number): TenantsBenchResult['targets'] {
  const p99 = Math.max(...SMALL_TENANTS.map((t) => fair.tenants[t]?.p99Ms ?? Number.POSITIVE_INFINITY));
  return {
    fairShareRatio: { target: '≥ 0.9 (fair)', value: fair.fairShareRatio, met: fair.fairShareRatio >= 0.9 },
    smallTenantsP99Ms: { target: '≤ 2000 (fair)', value: p99, met: p99 <= 2000 },
    provider429: { target: '= 0 (fair)', value: fair.provider429, met: fair.provider429 === 0 },
    lost: { target: '= 0 (fair)', value: fair.lost, met: fair.lost === 0 },
    duplicates: { target: '= 0 (fair)', value: fair.duplicates, met: fair.duplicates === 0 },
    requestEnvelopeRatio: {
      target: `≥ the burst reference's ${burstEnvelope} (fair)`,
      value: fair.requestEnvelopeRatio,
      met: fair.requestEnvelopeRatio >= burstEnvelope,
    },
  };
}

/** A run's figures, with each tenant's max-min fair share of both providers' rate. */
function variant(result: BurstResult, smallRate: number): TenantsVariant {
  const shares = maxMinShares(2 * PROVIDER.rate, {
    A: Number.POSITIVE_INFINITY,
    ...Object.fromEntries(SMALL_TENANTS.map((t) => [t, smallRate])),
  });
  const tenants = Object.fromEntries(
    Object.entries(result.tenants).map(([name, f]) => [
      name,
      {
        delivered: f.delivered,
        deliveredRate: f.deliveredRate,
        fairDeliveredRate: round(cappedRate(f.perSecond, shares[name] ?? 0)),
        fairShare: round(shares[name] ?? 0),
        p99Ms: f.p99Ms,
      },
    ]),
  );
  const ratios = SMALL_TENANTS.map((t) => (tenants[t]?.fairDeliveredRate ?? 0) / (shares[t] ?? 1));
  const phase = result.contendedPhase;
  return {
    fairShareRatio: round(Math.min(...ratios)),
    provider429: result.provider429,
    lost: result.lost,
    duplicates: result.duplicates,
    requestEnvelopeRatio: result.requestEnvelopeRatio,
    envelopeUnused: {
      fcm: result.perProvider.fcm.envelopeUnused,
      apns: result.perProvider.apns.envelopeUnused,
    },
    redisCallsPerPush: result.redisCallsPerPush,
    seconds: result.seconds,
    contendedSeconds: phase ? { from: round(phase.fromMs / 1000), to: round(phase.toMs / 1000) } : null,
    tenants,
  };
}

/** Mean deliveries per second, each second counted up to `cap`. */
export function cappedRate(perSecond: readonly number[], cap: number): number {
  if (perSecond.length === 0) return 0;
  return perSecond.reduce((sum, n) => sum + Math.min(n, cap), 0) / perSecond.length;
}

function round(value: number): number {
  return Math.round(value * 1000) / 1000;
}

/** The docs/benchmarks.md table: the last run's figures per variant, then every run's headline. */
export function tenantsTable(result: TenantsBenchResult): string {
  const row = (name: string, v: TenantsVariant | null) =>
    v === null
      ? `| ${name} | not built | | | | | | |`
      : `| ${name} | ${v.fairShareRatio} | ${['A', ...SMALL_TENANTS].map((t) => `${v.tenants[t]?.deliveredRate ?? '–'}/s`).join(' · ')} | ${SMALL_TENANTS.map((t) => v.tenants[t]?.p99Ms ?? '–').join(' · ')} | ${v.requestEnvelopeRatio} | ${v.provider429} | ${v.lost} | ${v.duplicates} |`;
  return [
    '| variant | fairShareRatio | delivered rate A · B · C (contended phase) | p99 ms B · C | requestEnvelopeRatio | 429s | lost | duplicates |',
    '| --- | ---: | --- | --- | ---: | ---: | ---: | ---: |',
    row('unfair (first come, first served)', result.unfair),
    row('fair', result.fair),
    ...(result.burstReference
      ? [
          `| burst reference (${result.burstReference.events} at once, no tenants) | | | | ${result.burstReference.requestEnvelopeRatio} | ${result.burstReference.provider429} | ${result.burstReference.lost} | ${result.burstReference.duplicates} |`,
        ]
      : []),
    '',
    '| run | load (1 min) | unfair: fairShareRatio · p99 ms B · C · envelope · 429s · lost · duplicates | fair: the same | burst reference envelope |',
    '| --- | ---: | --- | --- | ---: |',
    ...result.runs.map((run, i) => {
      const cell = (v: TenantsRun['unfair'] | null) =>
        v === null
          ? 'not built'
          : `${v.fairShareRatio} · ${SMALL_TENANTS.map((t) => v.p99Ms[t] ?? '–').join(' · ')} · ${v.requestEnvelopeRatio} · ${v.provider429} · ${v.lost} · ${v.duplicates}`;
      const code =
        run.code === undefined
          ? ''
          : run.code.startsWith('in development')
            ? ', in development'
            : `, ${run.code.split(' ')[0]}`;
      return `| ${i + 1} (${run.measuredAt.slice(0, 16)}${code}) | ${run.loadAverage} | ${cell(run.unfair)} | ${cell(run.fair)} | ${run.burstRequestEnvelopeRatio ?? '–'} |`;
    }),
  ].join('\n');
}

/** The commit the bench runs on, `+` when its code in the work tree differs from it; undefined outside git. */
function codeVersion(): string | undefined {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    const dirty = execFileSync(
      'git',
      // The results the bench itself keeps writing are not code.
      [
        'status',
        '--porcelain',
        '--untracked-files=no',
        '--',
        'src',
        'lua',
        'bench',
        'testkit',
        ':!bench/results',
      ],
      { encoding: 'utf8' },
    ).trim();
    return dirty ? `${commit}+` : commit;
  } catch {
    return undefined;
  }
}

export async function main(): Promise<void> {
  const burstEvents = Number(process.env.BENCH_TENANTS_BURST ?? 20_000);
  if (!(Number.isInteger(burstEvents) && burstEvents > 0))
    throw new Error(`BENCH_TENANTS_BURST must be a positive integer, got ${process.env.BENCH_TENANTS_BURST}`);
  const result = await runTenantsBench({ burstEvents, consumers: 3, log: (line) => console.error(line) });
  await mkdir(RESULTS_DIR, { recursive: true });
  const file = join(RESULTS_DIR, 'tenants.json');
  const before = await readFile(file, 'utf8')
    .then((text) => JSON.parse(text) as TenantsBenchResult)
    .catch(() => undefined);
  const headline = (v: TenantsVariant | null) => {
    if (v === null) return null;
    const { tenants, contendedSeconds: _, ...figures } = v;
    return { ...figures, p99Ms: Object.fromEntries(Object.entries(tenants).map(([t, f]) => [t, f.p99Ms])) };
  };
  const run: TenantsRun = {
    measuredAt: result.measuredAt,
    code: codeVersion(),
    loadAverage: Math.round((loadavg()[0] ?? 0) * 100) / 100,
    ...(result.burstReference
      ? { burstRequestEnvelopeRatio: result.burstReference.requestEnvelopeRatio }
      : {}),
    unfair: headline(result.unfair) as TenantsRun['unfair'],
    fair: headline(result.fair),
  };
  const written: TenantsBenchResult = { ...result, runs: [...(before?.runs ?? []), run] };
  await writeFile(file, `${JSON.stringify(written, null, 2)}\n`);
  console.log(tenantsTable(written));
  for (const note of result.notes) console.log(note);
}
