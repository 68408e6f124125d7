import type { Batch } from 'kafkajs';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { NotificationEvent, Platform } from '../events/event.ts';
import type { PoolBucket } from '../limiter/token-pool.ts';
import type { PoolAcquire, SendContext } from '../pipeline/observer.ts';
import type { PushOutcome } from '../providers/types.ts';
import type { ObserverHooks } from './observers.ts';
import { TenantLabels, type TenantLabelsOptions } from './tenant-labels.ts';

/** Options of {@link createMetrics}. */
export interface MetricsOptions {
  /** Labels added to every series of the registry (e.g. `{ component: 'gateway' }`). */
  defaultLabels?: Record<string, string>;
  /** Node.js process metrics (CPU, memory, event-loop delay, GC) as prom-client names them. Default true. */
  processMetrics?: boolean;
}

/** A process's Prometheus registry, served at `/metrics`; each component registers its own metrics in it. */
export interface Metrics {
  readonly registry: Registry;
}

/**
 * A Prometheus registry of its own (never prom-client's global one, so that tests can run several
 * components in one process) with the Node.js process metrics. The consumer adds
 * {@link PipelineMetrics}; the gateway adds its own.
 */
export function createMetrics(options: MetricsOptions = {}): Metrics {
  const registry = new Registry();
  if (options.defaultLabels) registry.setDefaultLabels(options.defaultLabels);
  if (options.processMetrics ?? true) collectDefaultMetrics({ register: registry });
  return { registry };
}

/** Options of {@link PipelineMetrics}. */
export interface PipelineMetricsOptions {
  /** The configured refill rate of each provider's bucket (pushes/s), shown next to the delivered rate. */
  rates?: Partial<Record<Platform, number>>;
  /** How the `tenant` label's values are chosen (the busiest tenants, plus `other` and `none`). */
  tenantLabels?: TenantLabelsOptions;
}

/** What the paused-partitions gauge reads when scraped. */
export interface PausedPartitionsSource {
  pausedPartitions(): number;
}

/** The `outcome` label of `aqueduct_pushes_total`. */
export type PushOutcomeLabel = 'delivered' | 'invalid_token' | 'rejected' | 'retry' | 'throttled';

/** Upper bounds (seconds) of the provider send histogram: a few ms on a LAN to the 15 s FCM timeout. */
const SEND_SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/**
 * The consumer pipeline's metrics, as a pipeline observer. What happens per push is counted as a plain
 * number and handed to prom-client when scraped; the rest (per batch, per acquire, per pause) are
 * ordinary counter increments and gauge sets.
 *
 * | metric | type | labels | what |
 * | --- | --- | --- | --- |
 * | aqueduct_pushes_total | counter | provider, outcome | provider answers: delivered, invalid_token, rejected, retry, throttled (429) |
 * | aqueduct_retries_total | counter | provider | events written to the retry topic |
 * | aqueduct_dead_letters_total | counter | reason | events written to the dead-letter topic |
 * | aqueduct_duplicates_skipped_total | counter | | redeliveries recognized as done |
 * | aqueduct_tokens_requested_total | counter | provider | tokens asked of the shared bucket |
 * | aqueduct_tokens_granted_total | counter | provider | tokens the shared bucket granted |
 * | aqueduct_bucket_acquires_total | counter | provider | acquire calls to Redis |
 * | aqueduct_bucket_tokens | gauge | provider | tokens left in the bucket after this process's last acquire |
 * | aqueduct_bucket_rate | gauge | provider | configured refill rate (pushes/s) |
 * | aqueduct_partition_pauses_total | counter | topic | partitions paused to wait for tokens or a due retry |
 * | aqueduct_throttled_seconds_total | counter | topic | partition-seconds spent paused (ongoing pauses included) |
 * | aqueduct_partitions_paused | gauge | | partitions held paused now |
 * | aqueduct_provider_send_duration_seconds | histogram | provider | one provider send call (a batch of pushes sent concurrently) |
 * | aqueduct_consumer_lag | gauge | topic, partition | messages not finished yet: end offset minus the first unfinished, as of the last fetch |
 * | aqueduct_limiter_errors_total | counter | | failed limiter calls (Redis unreachable, script errors) |
 * | aqueduct_tenant_delivered_total | counter | tenant | pushes the provider accepted, by tenant |
 * | aqueduct_tenant_deferred_total | counter | tenant | events set aside to be sent later (a throttled device's turn, or parked over the tenant's fair share), by tenant |
 *
 * `tenant` is bounded (TenantLabels): the busiest tenants by name, `other` for the rest, `none` for
 * events without a tenant.
 */
export class PipelineMetrics implements ObserverHooks {
  private readonly retries: Counter<'provider'>;
  private readonly deadLetters: Counter<'reason'>;
  private readonly duplicates: Counter;
  private readonly tokensRequested: Counter<'provider'>;
  private readonly tokensGranted: Counter<'provider'>;
  private readonly acquires: Counter<'provider'>;
  private readonly bucketTokens: Gauge<'provider'>;
  private readonly pauses: Counter<'topic'>;
  private readonly throttledSeconds: Counter<'topic'>;
  private readonly sendSeconds: Histogram<'provider'>;
  private readonly lag: Gauge<'topic' | 'partition'>;
  private readonly limiterErrors: Counter;
  /** Per provider and outcome: pushes counted as plain numbers, copied into the counter when scraped. */
  private readonly pushCounts = new Map<string, Record<PushOutcomeLabel, number>>();
  private readonly tenantLabels: TenantLabels;
  /** Per tenant label: deliveries and deferrals as plain numbers, copied into the counters when scraped. */
  private readonly tenantCounts = new Map<string, { delivered: number; deferred: number }>();
  /** Partitions paused now: their topic, and the time up to which their pause is counted. */
  private readonly pausedSince = new Map<string, { topic: string; countedUntil: number }>();
  private pausedSource: PausedPartitionsSource | undefined;

  constructor(registry: Registry, options: PipelineMetricsOptions = {}) {
    const registers = [registry];
    const pushCounts = this.pushCounts;
    this.tenantLabels = new TenantLabels(options.tenantLabels);
    const tenantCounts = this.tenantCounts;
    for (const [name, field, help] of [
      [
        'aqueduct_tenant_delivered_total',
        'delivered',
        'Pushes the provider accepted, by tenant (the busiest by name, other, none).',
      ],
      [
        'aqueduct_tenant_deferred_total',
        'deferred',
        'Events set aside to be sent later, by tenant (the busiest by name, other, none).',
      ],
    ] as const)
      new Counter({
        name,
        help,
        labelNames: ['tenant'],
        registers,
        collect() {
          this.reset();
          for (const [tenant, counts] of tenantCounts)
            if (counts[field] > 0) this.inc({ tenant }, counts[field]);
        },
      });
    new Counter({
      name: 'aqueduct_pushes_total',
      help: 'Provider answers to pushes, by provider and outcome (throttled: a 429).',
      labelNames: ['provider', 'outcome'],
      registers,
      // The per-push count is a plain increment (prom-client hashes the labels on every inc, a few
      // hundred nanoseconds); the totals are handed over when scraped.
      collect() {
        this.reset();
        for (const [provider, counts] of pushCounts) {
          for (const [outcome, count] of Object.entries(counts))
            if (count > 0) this.inc({ provider, outcome }, count);
        }
      },
    });
    this.retries = new Counter({
      name: 'aqueduct_retries_total',
      help: 'Events written to the retry topic after a transient failure.',
      labelNames: ['provider'],
      registers,
    });
    this.deadLetters = new Counter({
      name: 'aqueduct_dead_letters_total',
      help: 'Events written to the dead-letter topic, by reason.',
      labelNames: ['reason'],
      registers,
    });
    this.duplicates = new Counter({
      name: 'aqueduct_duplicates_skipped_total',
      help: 'Redelivered events recognized as already done and skipped.',
      registers,
    });
    this.tokensRequested = new Counter({
      name: 'aqueduct_tokens_requested_total',
      help: "Tokens this process asked of the provider's shared bucket.",
      labelNames: ['provider'],
      registers,
    });
    this.tokensGranted = new Counter({
      name: 'aqueduct_tokens_granted_total',
      help: "Tokens the provider's shared bucket granted this process.",
      labelNames: ['provider'],
      registers,
    });
    this.acquires = new Counter({
      name: 'aqueduct_bucket_acquires_total',
      help: 'Acquire calls this process made to the shared bucket in Redis.',
      labelNames: ['provider'],
      registers,
    });
    this.bucketTokens = new Gauge({
      name: 'aqueduct_bucket_tokens',
      help: "Tokens left in the provider's shared bucket after this process's last acquire.",
      labelNames: ['provider'],
      registers,
    });
    const rate = new Gauge({
      name: 'aqueduct_bucket_rate',
      help: "Configured refill rate of the provider's shared bucket, in pushes per second.",
      labelNames: ['provider'],
      registers,
    });
    for (const [provider, value] of Object.entries(options.rates ?? {})) {
      if (value !== undefined) rate.set({ provider }, value);
    }
    this.pauses = new Counter({
      name: 'aqueduct_partition_pauses_total',
      help: 'Partitions paused to wait for tokens (or for a retry to be due).',
      labelNames: ['topic'],
      registers,
    });
    const paused = this.pausedSince;
    this.throttledSeconds = new Counter({
      name: 'aqueduct_throttled_seconds_total',
      help: 'Partition-seconds spent paused waiting for tokens or a due retry (ongoing pauses included).',
      labelNames: ['topic'],
      registers,
      collect() {
        // Ongoing pauses count up to now, so that a long Retry-After shows as it happens.
        const now = Date.now();
        for (const pause of paused.values()) {
          this.inc({ topic: pause.topic }, (now - pause.countedUntil) / 1000);
          pause.countedUntil = now;
        }
      },
    });
    const pausedGauge = () => this.pausedSource?.pausedPartitions() ?? 0;
    new Gauge({
      name: 'aqueduct_partitions_paused',
      help: 'Partitions this process holds paused now.',
      registers,
      collect() {
        this.set(pausedGauge());
      },
    });
    this.sendSeconds = new Histogram({
      name: 'aqueduct_provider_send_duration_seconds',
      help: 'Duration of one provider send call: a batch of pushes sent concurrently, first request to last answer.',
      labelNames: ['provider'],
      buckets: SEND_SECONDS,
      registers,
    });
    this.lag = new Gauge({
      name: 'aqueduct_consumer_lag',
      help: "Messages of an assigned partition not finished yet: end offset minus the first unfinished message's, as of its last fetch.",
      labelNames: ['topic', 'partition'],
      registers,
    });
    this.limiterErrors = new Counter({
      name: 'aqueduct_limiter_errors_total',
      help: 'Failed limiter calls (Redis unreachable, script errors).',
      registers,
    });
  }

  /** Where `aqueduct_partitions_paused` reads from (the running consumer). */
  watch(source: PausedPartitionsSource): void {
    this.pausedSource = source;
  }

  async send(where: SendContext, run: () => Promise<PushOutcome[]>): Promise<PushOutcome[]> {
    const started = performance.now();
    try {
      return await run();
    } finally {
      this.sendSeconds.observe({ provider: where.platform }, (performance.now() - started) / 1000);
    }
  }

  outcome(event: NotificationEvent, outcome: PushOutcome): void {
    const label: PushOutcomeLabel =
      outcome.kind === 'invalid-token'
        ? 'invalid_token'
        : outcome.kind === 'retry' && outcome.throttled
          ? 'throttled'
          : outcome.kind;
    let counts = this.pushCounts.get(event.platform);
    if (!counts) {
      counts = { delivered: 0, invalid_token: 0, rejected: 0, retry: 0, throttled: 0 };
      this.pushCounts.set(event.platform, counts);
    }
    counts[label]++;
    if (label === 'delivered') this.tenantCount(event).delivered++;
  }

  deferred(event: NotificationEvent): void {
    this.tenantCount(event).deferred++;
  }

  parked(event: NotificationEvent): void {
    this.tenantCount(event).deferred++;
  }

  retried(_outcome: PushOutcome, event: NotificationEvent): void {
    this.retries.inc({ provider: event.platform });
  }

  deadLettered(reasonKind: string): void {
    this.deadLetters.inc({ reason: reasonKind });
  }

  duplicateSkipped(): void {
    this.duplicates.inc();
  }

  poolAcquired(buckets: readonly PoolBucket[], acquire: PoolAcquire): void {
    const provider = buckets[0]?.name ?? 'unknown';
    this.acquires.inc({ provider });
    this.tokensRequested.inc({ provider }, acquire.requested);
    this.tokensGranted.inc({ provider }, acquire.granted);
    if (acquire.tokensLeft !== undefined && Number.isFinite(acquire.tokensLeft)) {
      this.bucketTokens.set({ provider }, acquire.tokensLeft);
    }
  }

  paused(topic: string, partition: number): void {
    this.pauses.inc({ topic });
    this.pausedSince.set(`${topic}:${partition}`, { topic, countedUntil: Date.now() });
  }

  resumed(topic: string, partition: number): void {
    this.endPause(`${topic}:${partition}`);
  }

  batchDone(batch: Batch, unfinished: number): void {
    this.lag.set(
      { topic: batch.topic, partition: String(batch.partition) },
      Number(batch.offsetLag()) + unfinished,
    );
  }

  released(topic: string, partition: number): void {
    this.endPause(`${topic}:${partition}`);
    // No longer ours: its lag is another member's to report.
    this.lag.remove({ topic, partition: String(partition) });
  }

  limiterError(): void {
    this.limiterErrors.inc();
  }

  private tenantCount(event: NotificationEvent): { delivered: number; deferred: number } {
    const label = this.tenantLabels.labelOf(event.tenant);
    let counts = this.tenantCounts.get(label);
    if (!counts) {
      counts = { delivered: 0, deferred: 0 };
      this.tenantCounts.set(label, counts);
    }
    return counts;
  }

  private endPause(key: string): void {
    const pause = this.pausedSince.get(key);
    if (!pause) return;
    this.pausedSince.delete(key);
    this.throttledSeconds.inc({ topic: pause.topic }, (Date.now() - pause.countedUntil) / 1000);
  }
}
