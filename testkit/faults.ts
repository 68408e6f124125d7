import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { topicFamily } from '../src/config.ts';
import { EVENT_LIMITS } from '../src/events/event.ts';
import { createKafka } from '../src/kafka/client.ts';
import { ensureTopicFamily, SINGLE_BROKER_DURABILITY } from '../src/kafka/topics.ts';
import { generateEvents } from '../src/publish/generate.ts';
import { messageKey } from '../src/publish/publisher.ts';
import type { SimulatorFaults } from '../src/simulators/faults.ts';
import {
  type FloodedDeviceRate,
  floodedDeviceRate,
  type OtherDevicesDrain,
  type OtherDevicesRate,
  otherDevicesDrain,
  otherDevicesRate,
} from './device-storm.ts';
import { type ConsumerProcess, consumerCrashes, fleetEnv, spawnConsumer, spawnFleet } from './fleet.ts';
import type { FuzzMessage } from './fuzz.ts';
import { type Ledger, outcomesSoFar, takeLedger } from './ledger.ts';
import { type OtlpSink, startOtlpSink } from './otlp-sink.ts';
import { publishRaw, type RawMessage } from './raw-publish.ts';
import { type Simulators, startSimulators } from './simulators.ts';
import { TokenScanner } from './token-scan.ts';

/** What a fault injection gets to work with. */
export interface FaultRunHandle {
  consumers: readonly ConsumerProcess[];
  /** Starts `count` more consumers of the run (an autoscaler adding replicas); they join `consumers`. */
  spawnConsumers: (count: number) => ConsumerProcess[];
  simulators: Simulators;
  log: (line: string) => void;
}

/** Options of {@link runFaultScenario}. */
export interface FaultRunOptions {
  /** Scenario name (in the topic name and the logs). */
  name: string;
  kafkaBrokers: string[];
  redisUrl: string;
  /** A Redis Cluster (`host:port,…`) the consumers use instead of `redisUrl` (REDIS_CLUSTER_NODES). */
  redisClusterNodes?: string;
  /** Valid events in the burst (all published before the consumers start). */
  events: number;
  /** Bad messages mixed in among them (spread evenly through the burst). */
  badMessages?: readonly FuzzMessage[];
  partitions: number;
  consumers: number;
  /** What each simulated provider allows. */
  provider: { rate: number; burst: number };
  /** What Aqueduct is configured with, per provider. */
  aqueduct: { rate: number; burst: number };
  deadTokenRatio: number;
  /** Simulator faults from the start (the fault itself may change them later). */
  faults?: Partial<SimulatorFaults>;
  /**
   * One APNs device flooded with this many events, spread evenly through the burst, while both
   * simulators hold every device to `deviceRate` pushes a second (`deviceBurst` at once) and answer
   * beyond it as the providers do (APNs 429 TooManyRequests).
   */
  flood?: { events: number; deviceRate: number; deviceBurst: number };
  /** The fault: started once the providers have accepted `injectAfterDelivered` events; resolves when it is over. */
  inject?: (run: FaultRunHandle) => Promise<void>;
  injectAfterDelivered?: number;
  /** Extra consumer environment. */
  env?: Record<string, string>;
  /** Export the consumers' spans to a local OTLP receiver and scan them for tokens too. Default true. */
  exportSpans?: boolean;
  logDir: string;
  log?: (line: string) => void;
  /** Give up waiting for outcomes after this long. Default 4 minutes. */
  timeoutMs?: number;
}

/** What a fault run measured (every count from the simulators and the topics, see takeLedger). */
export interface FaultResult extends Omit<Ledger, 'lostSamples'> {
  consumerCrashes: number;
  /** Distinct device tokens (whole or a 16-character piece) found in the consumers' logs or exported spans. */
  tokensInLogs: number;
  /** Distinct tokens found in exported spans (null: span export was off). */
  tokensInSpans: number | null;
  /** OTLP export requests received (0 with exportSpans off). */
  spanExports: number;
  /** Log lines scanned. */
  logLines: number;
  seconds: number;
  /** Seconds from the first consumer start to the fault (null: no fault). */
  faultAtSeconds: number | null;
  /**
   * For each duplicated event, when its first copy reached a provider, in ms after the fault started
   * (negative: before). A kill can only duplicate what the killed process had already sent.
   */
  duplicateFirstArrivalsAfterFaultMs: number[];
  /** Where the first leaks were seen (never the tokens), and the first lost messages. */
  notes: string[];
  /** With `flood`: how fast each provider delivered the other devices' events (see otherDevicesRate). */
  otherDevices?: Record<'fcm' | 'apns', OtherDevicesRate>;
  /** With `flood`: how long each provider took for the other devices' events (see otherDevicesDrain). */
  otherDevicesDrain?: Record<'fcm' | 'apns', OtherDevicesDrain>;
  /** With `flood`: the flooded device's deliveries against its own limit (see floodedDeviceRate). */
  floodedDevice?: FloodedDeviceRate;
}

/**
 * One fault scenario on real processes: a fresh topic family, both simulators enforcing the provider
 * limit, a burst of valid events (with any bad messages mixed in) published before `consumers` ×
 * `aqueduct consume` start, the fault injected mid-burst, and then a wait until every published message
 * has an outcome (or the timeout). The consumers are stopped with SIGTERM at the end.
 */
export async function runFaultScenario(options: FaultRunOptions): Promise<FaultResult> {
  const log = options.log ?? (() => {});
  const runId = randomUUID().slice(0, 8);
  const topic = `faults-${options.name}-${runId}`;
  const topics = topicFamily(topic);
  const kafka = createKafka({ brokers: options.kafkaBrokers, clientId: 'aqueduct-faults' });
  const simulators = await startSimulators({
    ...options.provider,
    ...(options.flood
      ? { deviceRate: options.flood.deviceRate, deviceBurst: options.flood.deviceBurst }
      : {}),
    faults: { deadTokenPrefix: 'dead-', ...options.faults },
  });
  const sink: OtlpSink | undefined = options.exportSpans === false ? undefined : await startOtlpSink();
  const consumers: ConsumerProcess[] = [];
  let floodIds = new Set<string>();
  const logDir = join(options.logDir, topic);
  await mkdir(logDir, { recursive: true });
  try {
    await ensureTopicFamily(kafka, topic, options.partitions, SINGLE_BROKER_DURABILITY);
    const others = [
      ...generateEvents({ count: options.events, deadTokenRatio: options.deadTokenRatio, idPrefix: runId }),
    ];
    const floodToken = randomBytes(32).toString('hex');
    const flood = [
      ...generateEvents({ count: options.flood?.events ?? 0, apnsRatio: 1, idPrefix: `${runId}-flood` }),
    ].map((event) => ({ ...event, token: floodToken }));
    floodIds = new Set(flood.map((event) => event.id));
    const events = spread(others, flood);
    const valid: RawMessage[] = events.map((event) => ({
      key: messageKey(event),
      value: JSON.stringify(event),
    }));
    const messages = interleave(valid, options.badMessages ?? []);
    await publishRaw(kafka, topic, messages);
    log(`${options.name}: published ${messages.length} (${options.badMessages?.length ?? 0} bad)`);

    const env = fleetEnv({
      kafkaBrokers: options.kafkaBrokers,
      redisUrl: options.redisUrl,
      redisClusterNodes: options.redisClusterNodes,
      topic,
      redisPrefix: `aq-${runId}`,
      aqueduct: options.aqueduct,
      simulatorEnv: simulators.env,
      extra: { ...sink?.env(), OTEL_SERVICE_NAME: `aqueduct-${options.name}`, ...options.env },
    });
    const started = Date.now();
    consumers.push(...spawnFleet(options.consumers, env, (name) => join(logDir, `${name}.log`)));

    let fault: Promise<void> | undefined;
    let faultOver = !options.inject;
    let faultAt: number | null = null;
    const deadline = started + (options.timeoutMs ?? 240_000);
    let lastReport = 0;
    const timeline: Array<{ second: number; delivered: number; provider429: number }> = [];
    for (;;) {
      await sleep(1000);
      // While the broker is down (brokerRestart) the topics cannot be counted: wait and count again.
      const progress = await outcomesSoFar(kafka, topics, simulators).catch(() => undefined);
      if (!progress) {
        if (Date.now() > deadline) break;
        continue;
      }
      timeline.push({
        second: Math.round((Date.now() - started) / 100) / 10,
        delivered: progress.delivered,
        provider429: simulators.fcm.stats().throttled + simulators.apns.stats().throttled,
      });
      if (options.inject && !fault && progress.delivered >= (options.injectAfterDelivered ?? 0)) {
        faultAt = Date.now();
        log(
          `${options.name}: fault at ${((faultAt - started) / 1000).toFixed(1)} s, ${progress.delivered} delivered`,
        );
        const spawnConsumers = (count: number) => {
          const added = Array.from({ length: count }, (_, i) => {
            const name = `consumer-${consumers.length + i + 1}`;
            return spawnConsumer(name, env, join(logDir, `${name}.log`));
          });
          consumers.push(...added);
          return added;
        };
        fault = options.inject({ consumers, spawnConsumers, simulators, log }).then(() => {
          faultOver = true;
          log(`${options.name}: fault over at ${((Date.now() - started) / 1000).toFixed(1)} s`);
        });
      }
      if (Date.now() - lastReport >= 5000) {
        lastReport = Date.now();
        log(
          `  ${options.name} t=${((lastReport - started) / 1000).toFixed(0)}s delivered ${progress.delivered} dlq ${progress.deadLettered} invalid ${progress.invalidTokens} of ${messages.length}`,
        );
      }
      if (faultOver && progress.total >= messages.length) {
        // The counts say done; the exact ledger decides (a record written twice counts twice above).
        const ledger = await takeLedger(kafka, topics, simulators, EVENT_LIMITS.maxMessageBytes).catch(
          () => undefined,
        );
        if (ledger?.lost === 0) break;
      }
      if (Date.now() > deadline) {
        log(`${options.name}: gave up waiting after ${((Date.now() - started) / 1000).toFixed(0)} s`);
        break;
      }
    }
    await fault;
    const seconds = (Date.now() - started) / 1000;
    await Promise.all(consumers.map((c) => (c.ended ? c.exited : c.stop())));
    const ledger = await takeLedger(kafka, topics, simulators, EVENT_LIMITS.maxMessageBytes);

    // Everything the consumers printed, and every span they exported, searched for every token.
    const tokens = [
      ...events.map((e) => e.token),
      ...(options.badMessages ?? []).flatMap((m) => (m.token ? [m.token] : [])),
    ];
    const inLogs = new TokenScanner(tokens);
    let logLines = 0;
    for (const consumer of consumers) {
      const text = await readFile(join(logDir, `${consumer.name}.log`), 'utf8').catch(() => '');
      logLines += text.split('\n').length - 1;
      inLogs.scanLogLines(text, consumer.name);
    }
    const inSpans = new TokenScanner(tokens);
    if (sink) {
      await sleep(1000); // the last export of each process is sent as it shuts down
      for (const body of sink.bodies()) inSpans.scan(body.toString('utf8'), 'OTLP export');
      await writeFile(
        join(logDir, 'spans.jsonl'),
        sink
          .bodies()
          .map((b) => b.toString('utf8'))
          .join('\n'),
      );
    }
    const leaked = new Set([...inLogs.foundTokens(), ...inSpans.foundTokens()]);

    // For an investigation: when each duplicated event reached a provider, and the run's progress.
    const arrivals = new Map<string, { provider: string; ms: number[] }>();
    for (const [provider, simulator] of [
      ['fcm', simulators.fcm],
      ['apns', simulators.apns],
    ] as const) {
      for (const record of simulator.records()) {
        if (record.eventId === undefined) continue;
        const entry = arrivals.get(record.eventId) ?? { provider, ms: [] };
        entry.ms.push(Math.round(record.arrivedAtMs - started));
        arrivals.set(record.eventId, entry);
      }
    }
    const duplicated = [...arrivals].filter(([, entry]) => entry.ms.length > 1);
    await writeFile(
      join(logDir, 'run.json'),
      JSON.stringify(
        {
          faultAtMs: faultAt === null ? null : faultAt - started,
          duplicated: duplicated.map(([id, entry]) => ({
            id,
            provider: entry.provider,
            arrivalsMs: entry.ms,
          })),
          timeline,
        },
        null,
        1,
      ),
    );
    return {
      published: ledger.published,
      delivered: ledger.delivered,
      deadLettered: ledger.deadLettered,
      invalidTokens: ledger.invalidTokens,
      retried: ledger.retried,
      lost: ledger.lost,
      duplicates: ledger.duplicates,
      provider429: ledger.provider429,
      consumerCrashes: consumerCrashes(consumers),
      tokensInLogs: leaked.size,
      tokensInSpans: sink ? inSpans.foundTokens().size : null,
      spanExports: sink?.requests() ?? 0,
      logLines,
      seconds: Math.round(seconds * 10) / 10,
      faultAtSeconds: faultAt === null ? null : Math.round((faultAt - started) / 100) / 10,
      duplicateFirstArrivalsAfterFaultMs:
        faultAt === null ? [] : duplicated.map(([, entry]) => Math.min(...entry.ms) - (faultAt - started)),
      deviceThrottled: ledger.deviceThrottled,
      ...(options.flood
        ? {
            otherDevices: {
              fcm: otherDevicesRate(simulators.fcm, floodIds, options.aqueduct),
              apns: otherDevicesRate(simulators.apns, floodIds, options.aqueduct),
            },
            otherDevicesDrain: {
              fcm: otherDevicesDrain(simulators.fcm, floodIds, options.aqueduct),
              apns: otherDevicesDrain(simulators.apns, floodIds, options.aqueduct),
            },
            ...(floodIds.size > 0
              ? {
                  floodedDevice: floodedDeviceRate(simulators.apns, floodIds, {
                    rate: options.flood.deviceRate,
                    burst: options.flood.deviceBurst,
                  }),
                }
              : {}),
          }
        : {}),
      notes: [
        ...[...inLogs.findings().where, ...inSpans.findings().where].map((w) => `token seen in ${w}`),
        ...ledger.lostSamples.map((l) => `lost ${l}`),
      ],
    };
  } finally {
    await Promise.all(consumers.map((c) => c.kill()));
    await simulators.close();
    await sink?.close();
  }
}

/** `few` spread evenly through `many`. */
function spread<T>(many: readonly T[], few: readonly T[]): T[] {
  if (few.length === 0) return [...many];
  const out: T[] = [];
  const every = many.length / few.length;
  let next = 0;
  for (const [i, item] of many.entries()) {
    out.push(item);
    while (next < few.length && (next + 1) * every <= i + 1) out.push(few[next++] as T);
  }
  while (next < few.length) out.push(few[next++] as T);
  return out;
}

/** The bad messages spread evenly through the valid ones. */
function interleave(valid: readonly RawMessage[], bad: readonly RawMessage[]): RawMessage[] {
  if (bad.length === 0) return [...valid];
  const out: RawMessage[] = [];
  const total = valid.length + bad.length;
  let v = 0;
  let b = 0;
  for (let i = 0; i < total; i++) {
    const wantBad = b < bad.length && (v >= valid.length || (b + 1) * total <= (i + 1) * bad.length);
    const next = wantBad ? bad[b++] : valid[v++];
    if (next) out.push(next);
  }
  return out;
}
