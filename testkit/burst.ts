import { randomUUID } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import type { Kafka } from 'kafkajs';
import { topicFamily } from '../src/config.ts';
import type { NotificationEventInput, Platform } from '../src/events/event.ts';
import { createKafka, createProducer } from '../src/kafka/client.ts';
import { HEADER, headerString } from '../src/kafka/headers.ts';
import { ensureTopicFamily, SINGLE_BROKER_DURABILITY } from '../src/kafka/topics.ts';
import { TokenBucketLimiter } from '../src/limiter/index.ts';
import { generateEvents } from '../src/publish/generate.ts';
import { messageKey, publishEvents } from '../src/publish/publisher.ts';
import type { SimulatorFaults } from '../src/simulators/faults.ts';
import { type ConsumerProcess, consumerCrashes, fleetEnv, spawnFleet } from './fleet.ts';
import { outcomesSoFar } from './ledger.ts';
import { commandStats, isRoundTrip, roundTripsBetween } from './redis-stats.ts';
import { startSimulators } from './simulators.ts';
import { steadyRate } from './steady-rate.ts';
import { eventIdOf, readTopic, type TopicMessage } from './topics.ts';

/** Options of {@link runBurst}. */
export interface BurstOptions {
  kafkaBrokers: string[];
  redisUrl: string;
  /** Events published before the consumers start. */
  events: number;
  partitions: number;
  consumers: number;
  /** What each simulated provider allows. */
  provider: { rate: number; burst: number };
  /** What Aqueduct is configured with, per provider (ignored when `limiter` is false). */
  aqueduct: { rate: number; burst: number };
  /** false: the fire-and-forget baseline (no token bucket, 429s retried). */
  limiter: boolean;
  deadTokenRatio: number;
  /** Tenants the events are spread over (round-robin); none: events carry no tenant. */
  tenants?: readonly string[];
  /** Events of other tenants published one by one while the burst drains (the burst's neighbours). */
  trickle?: TrickleOptions;
  /** Faults the simulators inject (e.g. `{ error500: 0.01 }`). */
  faults?: Partial<SimulatorFaults>;
  /** Extra consumer environment. */
  env?: Record<string, string>;
  /** Where the consumers' logs go. */
  logDir: string;
  /** Called about once a second with what is happening. */
  onTick?: (status: BurstStatus) => void;
  /** Give up after this long. Default 10 minutes. */
  timeoutMs?: number;
}

/** A live snapshot, for the demo's terminal view. */
export interface BurstStatus {
  elapsedSeconds: number;
  published: number;
  delivered: number;
  deliveredPerSecond: number;
  allowedPerSecond: number;
  tokensLeft: Record<string, number | null>;
  pausedPartitions: number;
  provider429: number;
  retried: number;
  deadLettered: number;
  invalidTokens: number;
  /** Per tenant (when the events have tenants): deliveries so far, and per second since the last tick. */
  tenants: TenantStatus[];
}

export interface TrickleOptions {
  tenants: readonly string[];
  /** How many events each of them publishes, evenly spread over `seconds` from when every consumer has joined. */
  eventsPerTenant: number;
  seconds: number;
}

/** One tenant's figures of a run. */
export interface TenantFigures {
  delivered: number;
  /**
   * Deliveries per second while the trickle was published (the contended phase), or over the whole
   * run without a trickle.
   */
  deliveredRate: number;
  /** Publish acknowledgement → provider acceptance, 99th percentile, in ms. */
  p99Ms: number;
  /** Deliveries in each whole second of the contended phase (of the run, without a trickle), in order. */
  perSecond: number[];
}

export interface TenantStatus {
  tenant: string;
  delivered: number;
  deliveredPerSecond: number;
}

/** What a burst run measured: every count from the simulators' records and the topics. */
export interface BurstResult {
  published: number;
  delivered: number;
  deadLettered: number;
  invalidTokens: number;
  retried: number;
  provider429: number;
  lost: number;
  duplicates: number;
  seconds: number;
  /** Sum over providers of the rate Aqueduct was configured with (the providers' allowance with no limiter). */
  configuredRate: number;
  /**
   * Steady-state deliveries per second, summed over providers: for each provider, measured while the
   * configured bucket's burst allowance is spent (see `steadyRate`).
   */
  achievedRate: number;
  /** Delivered ÷ (provider burst + provider rate × elapsed), the lower of the two providers. */
  envelopeRatio: number;
  /** Every request the provider let through (failed ones too) ÷ the same envelope, the lower of the two. */
  requestEnvelopeRatio: number;
  /** Publish acknowledgement → provider acceptance, in ms. */
  p50Ms: number;
  p99Ms: number;
  /** Top-level Redis calls (INFO commandstats, before/after) ÷ delivered. */
  redisCallsPerPush: number;
  /** The round trips behind redisCallsPerPush, by command (the harness's own excluded from the total only). */
  redisCallsByCommand: Record<string, number>;
  /**
   * Per provider; `requestEnvelopeRatio` is what the provider let through (every request that took a
   * token, including dead tokens and 5xx) ÷ the same envelope: how much of the allowance was used at all.
   */
  perProvider: Record<Platform, ProviderFigures>;
  /** Per tenant (empty when the events had no tenant). */
  tenants: Record<string, TenantFigures>;
  /** The trickle's publishing, in ms since the consumers started (the contended phase); undefined without one. */
  contendedPhase: { fromMs: number; toMs: number } | undefined;
  /** Deliveries and 429s per second of the run, for the picture. */
  timeline: Array<{ second: number; delivered: number; provider429: number }>;
  consumerCrashes: number;
  /** Why events were retried: reason → count (from the retry topic's headers). */
  retryReasons: Record<string, number>;
  /** The deferred-topic partitions each provider's parked events were written to (ascending). */
  parkedPartitions: Record<Platform, number[]>;
}

/**
 * The viral burst, end to end with real parts: a fresh topic, both simulators enforcing the provider
 * limit, N events published as fast as possible, then `consumers` × `aqueduct consume` processes that
 * drain it. Counts come from the simulators' records and the outcome topics, never from the consumers.
 */
export async function runBurst(options: BurstOptions): Promise<BurstResult> {
  const runId = randomUUID().slice(0, 8);
  const topic = `burst-${runId}`;
  const topics = topicFamily(topic);
  const kafka = createKafka({ brokers: options.kafkaBrokers, clientId: 'aqueduct-burst' });
  const redis = new Redis(options.redisUrl);
  // The harness's own calls (the live view's bucket inspection) reach the same server; they are counted
  // here and taken out of the consumers' figure.
  let harnessCalls = 0;
  const sendCommand = redis.sendCommand.bind(redis);
  redis.sendCommand = (command, stream) => {
    if (isRoundTrip(command.name.toLowerCase())) harnessCalls++;
    return sendCommand(command, stream);
  };
  const simulators = await startSimulators({
    ...options.provider,
    faults: { deadTokenPrefix: 'dead-', ...options.faults },
  });
  const consumers: ConsumerProcess[] = [];
  await mkdir(options.logDir, { recursive: true });
  try {
    await ensureTopicFamily(kafka, topic, options.partitions, SINGLE_BROKER_DURABILITY);

    // The viral burst: everything is on the topic before the first consumer starts.
    const events = [
      ...generateEvents({
        count: options.events,
        deadTokenRatio: options.deadTokenRatio,
        idPrefix: runId,
        ...(options.tenants ? { tenants: options.tenants } : {}),
      }),
    ];
    const trickleEvents = options.trickle
      ? [
          ...generateEvents({
            count: options.trickle.eventsPerTenant * options.trickle.tenants.length,
            deadTokenRatio: options.deadTokenRatio,
            idPrefix: `${runId}t`,
            tenants: options.trickle.tenants,
          }),
        ]
      : [];
    const tenantOf = new Map(
      [...events, ...trickleEvents].flatMap((e) => (e.tenant ? [[e.id as string, e.tenant]] : [])),
    );
    let lastByTenant = new Map<string, number>();
    const published = await publishEvents(kafka, events, {
      topic,
      batchSize: 1000,
      onProgress: (count) => options.onTick?.(status({ published: count })),
    });
    const publishedAt = new Map<string, number>();
    let index = 0;
    for (const ack of published.acknowledged) {
      for (let i = 0; i < ack.count; i++) publishedAt.set(events[index++]?.id as string, ack.at);
    }

    const statsBefore = await commandStats(redis);
    harnessCalls = 0;
    const env = fleetEnv({
      kafkaBrokers: options.kafkaBrokers,
      redisUrl: options.redisUrl,
      topic,
      redisPrefix: `aq-${runId}`,
      aqueduct: options.aqueduct,
      limiter: options.limiter,
      simulatorEnv: simulators.env,
      ...(options.env ? { extra: options.env } : {}),
    });
    const started = Date.now();
    const deadline = started + (options.timeoutMs ?? 600_000);
    consumers.push(
      ...spawnFleet(options.consumers, env, (name) => join(options.logDir, `${topic}-${name}.log`)),
    );

    const limiter = new TokenBucketLimiter(redis, { keyPrefix: `aq-${runId}` });
    // The trickle starts as the burst starts draining: once every consumer has joined the group and a
    // first push of the burst reached a provider. (A consumer logs its join before its first fetch;
    // until the first push nobody sends, and there is no budget to share yet.)
    const { trickle } = options;
    const trickling = trickle
      ? Promise.all(consumers.map((c) => c.joined()))
          .then(() => firstRequest(simulators, deadline))
          .then(() => publishTrickle(kafka, topic, trickleEvents, trickle, publishedAt))
      : Promise.resolve(undefined);
    const ids = [...events, ...trickleEvents].map((e) => e.id);
    let lastDelivered = 0;
    let lastTick = Date.now();
    const throttleSamples: Array<{ at: number; total: number }> = [];
    for (;;) {
      await sleep(1000);
      const { delivered, deadLettered, invalidTokens, retried, acceptedIds } = await outcomesSoFar(
        kafka,
        topics,
        simulators,
      );
      const now = Date.now();
      const throttledTotal = simulators.fcm.stats().throttled + simulators.apns.stats().throttled;
      throttleSamples.push({ at: now, total: throttledTotal });
      if (options.onTick) {
        const buckets = options.limiter ? await limiter.inspect('*').catch(() => []) : [];
        options.onTick({
          ...status({ published: published.published }),
          elapsedSeconds: (now - started) / 1000,
          delivered,
          deliveredPerSecond: ((delivered - lastDelivered) * 1000) / (now - lastTick),
          tokensLeft: Object.fromEntries(
            buckets.map((b) => [b.name, b.tokens === null ? null : Math.floor(b.tokens)]),
          ),
          pausedPartitions: pausedNow(consumers),
          provider429: throttledTotal,
          retried,
          deadLettered,
          invalidTokens,
          tenants: tenantStatus(byTenant(acceptedIds, tenantOf), lastByTenant, now - lastTick),
        });
      }
      lastByTenant = byTenant(acceptedIds, tenantOf);
      lastDelivered = delivered;
      lastTick = now;
      if (delivered + deadLettered + invalidTokens >= ids.length) break;
      if (now > deadline) break;
    }
    const seconds = (Date.now() - started) / 1000;
    const trickled = await trickling;
    const statsAfter = await commandStats(redis);
    const harnessCallsDuringRun = harnessCalls;
    await Promise.all(consumers.map((c) => c.stop()));

    // The ledger: who got which outcome, from the simulators and the topics.
    const [dlq, invalid, retry, parked] = await Promise.all([
      readTopic(kafka, topics.deadLetter),
      readTopic(kafka, topics.invalidTokens),
      readTopic(kafka, topics.retry),
      readTopic(kafka, topics.deferred),
    ]);
    const accepted = simulators.accepted();
    const outcomeIds = new Set<string>([...accepted.ids]);
    for (const message of [...dlq, ...invalid]) {
      const id = eventIdOf(message.value);
      if (id !== undefined) outcomeIds.add(id);
    }
    const lost = ids.filter((id) => !outcomeIds.has(id)).length;

    const publishedTo = (platform: 'fcm' | 'apns') =>
      [...events, ...trickleEvents].filter((e) => e.platform === platform).length;
    const perProvider = {
      fcm: providerFigures(simulators.fcm, publishedTo('fcm'), options),
      apns: providerFigures(simulators.apns, publishedTo('apns'), options),
    };
    const latencies: number[] = [];
    const records = [...simulators.fcm.records(), ...simulators.apns.records()];
    for (const record of records) {
      const at = record.eventId === undefined ? undefined : publishedAt.get(record.eventId);
      if (at !== undefined) latencies.push(record.arrivedAtMs - at);
    }
    latencies.sort((a, b) => a - b);
    const contendedPhase = trickled && { fromMs: trickled.from - started, toMs: trickled.to - started };
    const redisCalls = roundTripsBetween(statsBefore, statsAfter) - harnessCallsDuringRun;
    return {
      published: published.published,
      delivered: accepted.ids.size,
      deadLettered: dlq.length,
      invalidTokens: invalid.length,
      retried: retry.length,
      provider429: perProvider.fcm.provider429 + perProvider.apns.provider429,
      lost,
      duplicates: accepted.total - accepted.ids.size,
      seconds: round(seconds, 2),
      configuredRate: options.limiter ? options.aqueduct.rate * 2 : options.provider.rate * 2,
      achievedRate: round(perProvider.fcm.achievedRate + perProvider.apns.achievedRate, 1),
      envelopeRatio: round(Math.min(perProvider.fcm.envelopeRatio, perProvider.apns.envelopeRatio), 4),
      requestEnvelopeRatio: round(
        Math.min(perProvider.fcm.requestEnvelopeRatio, perProvider.apns.requestEnvelopeRatio),
        4,
      ),
      p50Ms: Math.round(quantile(latencies, 0.5)),
      p99Ms: Math.round(quantile(latencies, 0.99)),
      redisCallsPerPush: round(redisCalls / Math.max(1, accepted.ids.size), 4),
      redisCallsByCommand: callsByCommand(statsBefore, statsAfter),
      perProvider,
      tenants: tenantFigures(records, tenantOf, publishedAt, trickled ?? { from: started, to: Date.now() }),
      contendedPhase,
      timeline: timeline(simulators, started, throttleSamples),
      consumerCrashes: consumerCrashes(consumers),
      retryReasons: countBy(retry.map((m) => headerString(m.headers, HEADER.reason) ?? 'unknown')),
      parkedPartitions: partitionsByPlatform(parked),
    };
  } finally {
    await Promise.all(consumers.map((c) => c.kill()));
    redis.disconnect();
    await simulators.close();
  }

  function status(partial: Partial<BurstStatus>): BurstStatus {
    return {
      elapsedSeconds: 0,
      published: 0,
      delivered: 0,
      deliveredPerSecond: 0,
      allowedPerSecond: options.limiter ? options.aqueduct.rate * 2 : options.provider.rate * 2,
      tokensLeft: {},
      pausedPartitions: 0,
      provider429: 0,
      retried: 0,
      deadLettered: 0,
      invalidTokens: 0,
      tenants: [],
      ...partial,
    };
  }
}

/** Resolves once either simulator has had a request (polled every 5 ms), or at `deadline` (epoch ms). */
async function firstRequest(
  simulators: { fcm: { stats(): { requests: number } }; apns: { stats(): { requests: number } } },
  deadline: number,
): Promise<void> {
  while (simulators.fcm.stats().requests + simulators.apns.stats().requests === 0 && Date.now() < deadline)
    await sleep(5);
}

/**
 * Publishes the trickle's events evenly spread over its seconds, each due at its own time, recording
 * each one's acknowledgement; resolves with when the first was due and the last was acknowledged.
 *
 * The producers it stands for publish on their own clocks, not one after another's acknowledgement:
 * when an acknowledgement is slow (the broker busy with a burst), the next request carries every event
 * that fell due meanwhile, so the schedule slips by one round trip at most instead of piling up.
 */
async function publishTrickle(
  kafka: Kafka,
  topic: string,
  events: readonly NotificationEventInput[],
  trickle: TrickleOptions,
  publishedAt: Map<string, number>,
): Promise<{ from: number; to: number }> {
  const from = Date.now();
  const gapMs = (trickle.seconds * 1000) / Math.max(1, events.length);
  const producer = createProducer(kafka, { allowAutoTopicCreation: false });
  await producer.connect();
  let to = from;
  try {
    let next = 0;
    while (next < events.length) {
      const due = from + next * gapMs;
      if (due > Date.now()) await sleep(due - Date.now());
      const now = Date.now();
      const dueNow: NotificationEventInput[] = [];
      while (next < events.length && from + next * gapMs <= now)
        dueNow.push(events[next++] as NotificationEventInput);
      await producer.send({
        topic,
        acks: -1,
        messages: dueNow.map((event) => ({ key: messageKey(event), value: JSON.stringify(event) })),
      });
      to = Date.now();
      for (const event of dueNow) publishedAt.set(event.id as string, to);
    }
  } finally {
    await producer.disconnect();
  }
  return { from, to };
}

/** Per tenant: deliveries, their rate within `phase`, and their p99 latency from publish to provider. */
function tenantFigures(
  records: ReadonlyArray<{ eventId?: string | undefined; arrivedAtMs: number }>,
  tenantOf: ReadonlyMap<string, string>,
  publishedAt: ReadonlyMap<string, number>,
  phase: { from: number; to: number },
): Record<string, TenantFigures> {
  const seen = new Set<string>();
  const seconds = Math.max(1, Math.floor((phase.to - phase.from) / 1000));
  const byName = new Map<
    string,
    { delivered: number; inPhase: number; latencies: number[]; perSecond: number[] }
  >();
  for (const record of records) {
    if (record.eventId === undefined || seen.has(record.eventId)) continue;
    const tenant = tenantOf.get(record.eventId);
    if (tenant === undefined) continue;
    seen.add(record.eventId);
    let figures = byName.get(tenant);
    if (!figures) {
      figures = { delivered: 0, inPhase: 0, latencies: [], perSecond: new Array<number>(seconds).fill(0) };
      byName.set(tenant, figures);
    }
    figures.delivered++;
    if (record.arrivedAtMs >= phase.from && record.arrivedAtMs <= phase.to) {
      figures.inPhase++;
      const second = Math.floor((record.arrivedAtMs - phase.from) / 1000);
      if (second < seconds) figures.perSecond[second] = (figures.perSecond[second] ?? 0) + 1;
    }
    const at = publishedAt.get(record.eventId);
    if (at !== undefined) figures.latencies.push(record.arrivedAtMs - at);
  }
  const phaseSeconds = Math.max(0.001, (phase.to - phase.from) / 1000);
  return Object.fromEntries(
    [...byName]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([tenant, f]) => [
        tenant,
        {
          delivered: f.delivered,
          deliveredRate: round(f.inPhase / phaseSeconds, 1),
          p99Ms: Math.round(
            quantile(
              f.latencies.sort((a, b) => a - b),
              0.99,
            ),
          ),
          perSecond: f.perSecond,
        },
      ]),
  );
}

/** Deliveries so far per tenant, of the accepted ids that have one. */
function byTenant(
  acceptedIds: ReadonlySet<string>,
  tenantOf: ReadonlyMap<string, string>,
): Map<string, number> {
  const counts = new Map<string, number>();
  if (tenantOf.size === 0) return counts;
  for (const id of acceptedIds) {
    const tenant = tenantOf.get(id);
    if (tenant !== undefined) counts.set(tenant, (counts.get(tenant) ?? 0) + 1);
  }
  return counts;
}

function tenantStatus(
  now: ReadonlyMap<string, number>,
  before: ReadonlyMap<string, number>,
  elapsedMs: number,
): TenantStatus[] {
  return [...now]
    .map(([tenant, delivered]) => ({
      tenant,
      delivered,
      deliveredPerSecond: ((delivered - (before.get(tenant) ?? 0)) * 1000) / elapsedMs,
    }))
    .sort((a, b) => a.tenant.localeCompare(b.tenant));
}

/** Partitions held paused right now, from each consumer's last summary (paused − resumed). */
function pausedNow(consumers: readonly ConsumerProcess[]): number {
  let paused = 0;
  for (const consumer of consumers) {
    const last = consumer.logs.findLast((l) => l.msg === 'pipeline summary');
    const totals = last?.totals as { paused?: number; resumed?: number } | undefined;
    paused += Math.max(0, (totals?.paused ?? 0) - (totals?.resumed ?? 0));
  }
  return paused;
}

interface ProviderFigures {
  /**
   * Events published for this provider. Both providers' events share the partitions, so the one with
   * fewer events finishes about when the other does and uses less of its envelope, by about the ratio
   * of the two counts (see docs/benchmarks.md).
   */
  published: number;
  delivered: number;
  achievedRate: number;
  /** How long the throttled phase that `achievedRate` was measured over lasted, in seconds (0: none). */
  steadySeconds: number;
  envelopeRatio: number;
  requestEnvelopeRatio: number;
  /**
   * Where the rest of the envelope went, replaying the provider's bucket over the requests it admitted:
   * refill thrown away while the bucket was full (nobody sent), and tokens still in it at the last arrival.
   */
  envelopeUnused: { whileFull: number; leftAtEnd: number };
  provider429: number;
}

/** The provider's bucket replayed over its admissions from `first` to `last` (all epoch ms). */
function envelopeUnused(
  admissions: readonly number[],
  first: number,
  last: number,
  limit: { rate: number; burst: number },
): { whileFull: number; leftAtEnd: number } {
  let level = limit.burst;
  let at = first;
  let whileFull = 0;
  for (const admitted of admissions) {
    if (admitted < first || admitted > last) continue;
    const refill = ((admitted - at) / 1000) * limit.rate;
    whileFull += Math.max(0, level + refill - limit.burst);
    level = Math.min(limit.burst, level + refill) - 1;
    at = admitted;
  }
  const refill = ((last - at) / 1000) * limit.rate;
  whileFull += Math.max(0, level + refill - limit.burst);
  return { whileFull: Math.round(whileFull), leftAtEnd: Math.round(Math.min(limit.burst, level + refill)) };
}

function providerFigures(
  simulator: {
    records(): Array<{ arrivedAtMs: number }>;
    admissions(): number[];
    stats(): { throttled: number };
  },
  published: number,
  options: BurstOptions,
): ProviderFigures {
  const arrivals = simulator
    .records()
    .map((r) => r.arrivedAtMs)
    .sort((a, b) => a - b);
  const admissions = simulator.admissions().sort((a, b) => a - b);
  const first = arrivals[0] ?? 0;
  const last = arrivals.at(-1) ?? 0;
  const envelope = options.provider.burst + options.provider.rate * ((last - first) / 1000);
  const used = admissions.filter((at) => at >= first && at <= last).length;
  const steady = steadyRate(arrivals, admissions, options.limiter ? options.aqueduct : options.provider);
  return {
    published,
    delivered: arrivals.length,
    achievedRate: round(steady.rate, 1),
    steadySeconds: round(steady.seconds, 2),
    envelopeRatio: arrivals.length === 0 ? 0 : round(arrivals.length / envelope, 4),
    requestEnvelopeRatio: arrivals.length === 0 ? 0 : round(used / envelope, 4),
    envelopeUnused: envelopeUnused(admissions, first, last, options.provider),
    provider429: simulator.stats().throttled,
  };
}

/** Deliveries per second from the simulators' records; 429s per second from the once-a-second samples. */
function timeline(
  simulators: {
    fcm: { records(): Array<{ arrivedAtMs: number }> };
    apns: { records(): Array<{ arrivedAtMs: number }> };
  },
  started: number,
  throttleSamples: ReadonlyArray<{ at: number; total: number }>,
): Array<{ second: number; delivered: number; provider429: number }> {
  const seconds: Array<{ second: number; delivered: number; provider429: number }> = [];
  const slot = (second: number) => {
    while (seconds.length <= second) seconds.push({ second: seconds.length, delivered: 0, provider429: 0 });
    return seconds[second] as { second: number; delivered: number; provider429: number };
  };
  for (const record of [...simulators.fcm.records(), ...simulators.apns.records()]) {
    slot(Math.max(0, Math.floor((record.arrivedAtMs - started) / 1000))).delivered++;
  }
  let previous = 0;
  for (const sample of throttleSamples) {
    slot(Math.max(0, Math.floor((sample.at - started) / 1000) - 1)).provider429 += sample.total - previous;
    previous = sample.total;
  }
  return seconds;
}

function countBy(values: readonly string[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const value of values) counts[value] = (counts[value] ?? 0) + 1;
  return counts;
}

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
}

function round(value: number, digits: number): number {
  const factor = 10 ** digits;
  return Math.round(value * factor) / factor;
}

/** Round trips per command between two readings (what a script runs inside Redis is not counted). */
function callsByCommand(before: Map<string, number>, after: Map<string, number>): Record<string, number> {
  const calls: Record<string, number> = {};
  for (const [command, count] of after) {
    const delta = count - (before.get(command) ?? 0);
    if (delta > 0 && isRoundTrip(command)) calls[command] = delta;
  }
  return calls;
}

/** The partitions `messages` (events as published) are on, per provider. */
function partitionsByPlatform(messages: readonly TopicMessage[]): Record<Platform, number[]> {
  const seen: Record<Platform, Set<number>> = { fcm: new Set(), apns: new Set() };
  for (const message of messages) {
    const platform = platformOf(message.value);
    if (platform) seen[platform].add(message.partition);
  }
  return { fcm: [...seen.fcm].sort((a, b) => a - b), apns: [...seen.apns].sort((a, b) => a - b) };
}

function platformOf(value: Buffer | null): Platform | undefined {
  if (value === null) return undefined;
  try {
    const { platform } = JSON.parse(value.toString()) as { platform?: unknown };
    return platform === 'fcm' || platform === 'apns' ? platform : undefined;
  } catch {
    return undefined;
  }
}
