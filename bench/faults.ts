import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { createKafka } from '../src/kafka/client.ts';
import { LocalKafka, LocalRedis } from '../src/services/index.ts';
import { type FaultResult, type FaultRunOptions, runFaultScenario } from '../testkit/faults.ts';
import { FUZZ_KINDS, fuzzMessages } from '../testkit/fuzz.ts';
import {
  CHATTY_DEVICE,
  type ChattyDeviceRun,
  chattyDeviceRun,
  chattyDeviceTable,
  recordChattyDeviceRun,
} from './chatty-device.ts';
import {
  DEVICE_STORM,
  deviceStormTable,
  OTHER_DEVICES_TARGET,
  writeDeviceStormResult,
} from './device-storm.ts';
import { type HostileClientsResult, runHostileClients } from './hostile-clients.ts';
import { machine } from './machine.ts';

/**
 * `npm run bench -- faults`: fault injection on real processes, one scenario after another, each during
 * a burst at a throttled rate (three `aqueduct consume` processes, a private Kafka broker process and a
 * private redis-server started for the run, both provider simulators):
 * - `killConsumer`: `kill -9` of one of the three consumers mid-burst;
 * - `redisRestart`: redis-server stopped for 3 s and started again, empty;
 * - `brokerRestart`: the Kafka broker process stopped (controlled shutdown) for 5 s and started again;
 * - `providerStorm`: 30% 5xx all along, and three 1 s storms of 429 with Retry-After;
 * - `badInput`: fuzzed messages of every kind (see testkit/fuzz.ts) mixed into valid traffic;
 * - `deviceStorm`: one APNs device flooded among the others while the providers hold each device to
 *   a few pushes a second and answer 429 TooManyRequests beyond it; its figures (with the other
 *   devices' delivered rate against the bucket's) go to bench/results/device-storm.json;
 * - `chattyDevice`: issue 16's scenario: 10 000 events for distinct devices and 300 for one chatty APNs
 *   device, every device held to 20 pushes a second, run with the chatty device and, right after, without
 *   it; how long the other devices take to drain at each provider against the time the bucket needs, and
 *   the chatty device's pace against its limit, go to bench/results/chatty-device.json (every run kept);
 * - `hostileClients`: slow bodies, floods of invalid batches, huge headers and forged baggage against
 *   `aqueduct serve`, alongside normal traffic (bench/hostile-clients.ts); its figures go to
 *   bench/results/hostile-clients.json.
 * Every count comes from the simulators and the topics (testkit/ledger.ts); device tokens are looked
 * for in every consumer log line and every span exported to a local OTLP/HTTP receiver.
 */

/** Each simulated provider: a rate this 2-core machine sustains with room to spare, so the limiter throttles. */
export const PROVIDER = { rate: 250, burst: 500 };
/**
 * Aqueduct as configured for that provider: its rate, and its burst one second of rate under the
 * provider's. The margin is for arrival jitter: tokens granted over an interval must not reach the
 * provider in a shorter one. With the consumers, the broker, the simulators and span export sharing
 * two cores, grants took up to about a second longer to arrive than others (see docs/benchmarks.md).
 */
export const AQUEDUCT = { rate: 250, burst: 250 };

export const SCENARIOS = [
  'killConsumer',
  'redisRestart',
  'brokerRestart',
  'providerStorm',
  'badInput',
  'deviceStorm',
  'chattyDevice',
  'hostileClients',
] as const;
export type ScenarioName = (typeof SCENARIOS)[number];
/**
 * The scenarios run on consumers during a burst (all but hostileClients, which runs on the gateway, and
 * chattyDevice, which runs a burst twice and has figures of its own).
 */
type ConsumerScenario = Exclude<ScenarioName, 'hostileClients' | 'chattyDevice'>;

export interface FaultsBenchOptions {
  scenarios: readonly ScenarioName[];
  /** Valid events per scenario. */
  events: number;
  /** Bad messages in `badInput`. */
  badMessages: number;
  consumers: number;
  partitions: number;
  outDir: string;
  log: (line: string) => void;
}

export type ScenarioResult = FaultResult & {
  targets: Record<string, { target: string; value: number; met: boolean }>;
};

export interface FaultsBenchResult {
  scenario: 'faults';
  command: string;
  machine: ReturnType<typeof machine>;
  setup: Record<string, unknown>;
  results: Partial<Record<ConsumerScenario, ScenarioResult>>;
  hostileClients?: HostileClientsResult;
  chattyDevice?: ChattyDeviceRun;
  allTargetsMet: boolean;
}

/** The targets of issue 9, per scenario. */
export function targetsOf(name: ConsumerScenario, r: FaultResult): ScenarioResult['targets'] {
  const duplicateLimit = name === 'killConsumer' ? Math.floor(r.delivered * 0.001) : 0;
  const targets: ScenarioResult['targets'] = {
    lost: { target: '= 0', value: r.lost, met: r.lost === 0 },
    duplicates: {
      target: name === 'killConsumer' ? `≤ 0.1% of delivered (${duplicateLimit})` : '= 0',
      value: r.duplicates,
      met: r.duplicates <= duplicateLimit,
    },
    consumerCrashes: { target: '= 0', value: r.consumerCrashes, met: r.consumerCrashes === 0 },
    tokensInLogs: { target: '= 0', value: r.tokensInLogs, met: r.tokensInLogs === 0 },
  };
  if (name !== 'providerStorm') {
    targets.provider429 = { target: '= 0', value: r.provider429, met: r.provider429 === 0 };
  }
  if (name === 'deviceStorm') {
    for (const provider of ['fcm', 'apns'] as const) {
      const value = r.otherDevices?.[provider].ofBucketRate ?? 0;
      targets[`otherDevicesRate.${provider}`] = {
        target: `≥ ${OTHER_DEVICES_TARGET} of the bucket rate`,
        value,
        met: value >= OTHER_DEVICES_TARGET,
      };
    }
  }
  return targets;
}

/** hostileClients: normal traffic well inside what the gateway serves, and the hostile clients beside it. */
export const HOSTILE_SETUP = {
  normal: { requestsPerSecond: 100, batch: 20, connections: 8 },
  roundSeconds: 10,
  roundsEach: 3,
  hostile: { slowBodies: 200, invalidFlood: 4, hugeHeaders: 2, baggage: 2 },
  requestTimeoutMs: 5000,
};

export async function runFaultsBench(options: FaultsBenchOptions): Promise<FaultsBenchResult> {
  const log = options.log;
  // Private services: the broker is stopped mid-run and Redis is wiped, which no shared one may suffer.
  const kafka = await LocalKafka.start({ log });
  const redis = await LocalRedis.start();
  const logDir = await mkdtemp(join(tmpdir(), 'aqueduct-bench-faults-'));
  log(`logs: ${logDir}`);
  const results: FaultsBenchResult['results'] = {};
  let hostileClients: HostileClientsResult | undefined;
  let chattyDevice: ChattyDeviceRun | undefined;
  try {
    const common: Omit<FaultRunOptions, 'name'> = {
      kafkaBrokers: kafka.brokers,
      redisUrl: redis.url,
      events: options.events,
      partitions: options.partitions,
      consumers: options.consumers,
      provider: PROVIDER,
      aqueduct: AQUEDUCT,
      deadTokenRatio: 0.01,
      // Past the burst, into the throttled stream.
      injectAfterDelivered: Math.round(AQUEDUCT.burst * 2 + options.events * 0.15),
      // A consumer killed without leaving holds its partitions this long (default 30 s); a small send
      // window and acquire chunk keep what a process has in flight, and a short mark flush what it has
      // delivered but not yet marked (together, what a kill can duplicate), small. See
      // docs/delivery-guarantees.md.
      env: {
        AQUEDUCT_SESSION_TIMEOUT_MS: '10000',
        AQUEDUCT_ACQUIRE_CHUNK: '16',
        AQUEDUCT_SEND_CONCURRENCY: '16',
        AQUEDUCT_MARK_FLUSH_MS: '5',
      },
      logDir,
      log,
    };
    const scenarios: Record<ConsumerScenario, () => Promise<FaultResult>> = {
      killConsumer: () =>
        runFaultScenario({
          ...common,
          name: 'killConsumer',
          inject: async ({ consumers, log: say }) => {
            const victim = consumers[1];
            if (!victim) return;
            await victim.kill();
            say(`  kill -9 ${victim.name}`);
          },
        }),
      redisRestart: () =>
        runFaultScenario({
          ...common,
          name: 'redisRestart',
          inject: async ({ log: say }) => {
            await redis.stop();
            say('  redis-server stopped');
            await sleep(3000);
            await redis.restart(); // empty: nothing is persisted
            say('  redis-server started again, empty');
          },
        }),
      brokerRestart: () =>
        runFaultScenario({
          ...common,
          name: 'brokerRestart',
          inject: async ({ log: say }) => {
            await kafka.halt();
            say('  Kafka broker stopped');
            await sleep(5000);
            await kafka.resume();
            say('  Kafka broker started again');
          },
        }),
      providerStorm: () =>
        runFaultScenario({
          ...common,
          name: 'providerStorm',
          faults: { error500: 0.15, error503: 0.15 },
          inject: async ({ simulators, log: say }) => {
            for (let storm = 0; storm < 3; storm++) {
              for (const simulator of [simulators.fcm, simulators.apns]) {
                simulator.setFaults({ storm: { retryAfterSeconds: 1 } });
              }
              say('  429 storm (Retry-After: 1)');
              await sleep(1000);
              for (const simulator of [simulators.fcm, simulators.apns]) simulator.setFaults({ storm: null });
              await sleep(2500);
            }
          },
        }),
      badInput: () =>
        runFaultScenario({
          ...common,
          name: 'badInput',
          badMessages: fuzzMessages({ count: options.badMessages, idPrefix: 'fuzz' }),
          injectAfterDelivered: 0,
        }),
      // The storm is the flooded device itself, from the start; the fault injected is none.
      deviceStorm: () =>
        runFaultScenario({
          ...common,
          name: 'deviceStorm',
          flood: DEVICE_STORM,
          injectAfterDelivered: 0,
        }),
    };
    for (const name of options.scenarios) {
      log(`== ${name}`);
      if (name === 'chattyDevice') {
        // No dead tokens: every request for the other devices is an acceptance, so their drain is
        // counted from the simulators' records alone.
        const chatty = {
          ...common,
          events: CHATTY_DEVICE.otherEvents,
          deadTokenRatio: 0,
          injectAfterDelivered: 0,
        };
        const limit = { deviceRate: CHATTY_DEVICE.deviceRate, deviceBurst: CHATTY_DEVICE.deviceBurst };
        const withChatty = await runFaultScenario({
          ...chatty,
          name: 'chattyDevice',
          flood: { events: CHATTY_DEVICE.events, ...limit },
        });
        log(`  with the chatty device: ${JSON.stringify(withChatty)}`);
        const without = await runFaultScenario({
          ...chatty,
          name: 'chattyDeviceAlone',
          flood: { events: 0, ...limit },
        });
        log(`  without it: ${JSON.stringify(without)}`);
        chattyDevice = chattyDeviceRun(withChatty, without, machine());
        continue;
      }
      if (name === 'hostileClients') {
        hostileClients = await runHostileClients({
          kafka: createKafka({ brokers: kafka.brokers, clientId: 'bench-hostile' }),
          kafkaBrokers: kafka.brokers,
          redisUrl: redis.url,
          normal: HOSTILE_SETUP.normal,
          roundSeconds: HOSTILE_SETUP.roundSeconds,
          roundsEach: HOSTILE_SETUP.roundsEach,
          hostile: HOSTILE_SETUP.hostile,
          requestTimeoutMs: HOSTILE_SETUP.requestTimeoutMs,
          log,
        });
        log(`  hostileClients: ${JSON.stringify({ ...hostileClients, rounds: undefined })}`);
        continue;
      }
      const result = await scenarios[name]();
      results[name] = { ...result, targets: targetsOf(name, result) };
      log(`  ${name}: ${JSON.stringify(result)}`);
    }
  } finally {
    await kafka.stop();
    await redis.dispose();
  }
  const result: FaultsBenchResult = {
    scenario: 'faults',
    command: 'npm run bench -- faults',
    machine: machine(),
    setup: {
      eventsPerScenario: options.events,
      badMessages: options.badMessages,
      consumers: options.consumers,
      partitions: options.partitions,
      provider: PROVIDER,
      aqueductConfig: AQUEDUCT,
      deadTokenRatio: 0.01,
      sessionTimeoutMs: 10_000,
      acquireChunk: 16,
      faults: {
        killConsumer: 'kill -9 of consumer 2 of 3',
        redisRestart: 'redis-server stopped, 3 s, started again empty',
        brokerRestart: 'Kafka broker stopped (controlled shutdown), 5 s, started again on the same data',
        providerStorm:
          '15% 500 + 15% 503 all along; three 1 s storms of 429 with Retry-After: 1, 2.5 s apart',
        badInput: `${options.badMessages} fuzzed messages of ${FUZZ_KINDS.length} kinds (4 of them 1 MB values) spread through the valid ones`,
        deviceStorm: `one APNs device flooded with ${DEVICE_STORM.events} events spread through the others; every device held to ${DEVICE_STORM.deviceRate}/s, burst ${DEVICE_STORM.deviceBurst}`,
      },
      spans: 'every span exported over OTLP/HTTP (json) to a local receiver and scanned',
    },
    results,
    ...(hostileClients ? { hostileClients } : {}),
    ...(chattyDevice ? { chattyDevice } : {}),
    allTargetsMet:
      Object.values(results).every((r) => Object.values(r.targets).every((t) => t.met)) &&
      Object.values(hostileClients?.targets ?? {}).every((t) => t.met) &&
      Object.values(chattyDevice?.targets ?? {}).every((t) => t.met),
  };
  await mkdir(options.outDir, { recursive: true });
  // Each file holds the runs of its own scenarios: running hostileClients (or deviceStorm) alone keeps
  // faults.json.
  const { deviceStorm, ...faultResults } = results;
  if (Object.keys(faultResults).length > 0) {
    const { hostileClients: _separate, chattyDevice: _own, ...faults } = result;
    await writeFile(
      join(options.outDir, 'faults.json'),
      `${JSON.stringify({ ...faults, results: faultResults }, null, 2)}\n`,
    );
  }
  if (deviceStorm) {
    await writeDeviceStormResult(options.outDir, deviceStorm, {
      otherEvents: options.events,
      consumers: options.consumers,
      partitions: options.partitions,
      provider: PROVIDER,
      aqueductConfig: AQUEDUCT,
      machine: result.machine,
    });
  }
  if (chattyDevice) {
    await recordChattyDeviceRun(options.outDir, chattyDevice, {
      consumers: options.consumers,
      partitions: options.partitions,
      provider: PROVIDER,
      aqueductConfig: AQUEDUCT,
      deadTokenRatio: 0,
    });
  }
  if (hostileClients) {
    await writeFile(
      join(options.outDir, 'hostile-clients.json'),
      `${JSON.stringify(
        {
          scenario: 'faults/hostileClients',
          command: 'BENCH_FAULTS_SCENARIOS=hostileClients npm run bench -- faults',
          measuredAt: new Date().toISOString(),
          machine: result.machine,
          setup: HOSTILE_SETUP,
          ...hostileClients,
        },
        null,
        2,
      )}\n`,
    );
  }
  return result;
}

const FIGURES = [
  'published',
  'delivered',
  'deadLettered',
  'invalidTokens',
  'lost',
  'duplicates',
  'provider429',
  'consumerCrashes',
  'tokensInLogs',
  'seconds',
] as const;

/** The table printed after a run (and rendered into docs/benchmarks.md by bench/readme.ts). */
export function faultsTable(result: FaultsBenchResult): string {
  const names = SCENARIOS.filter(
    (name): name is ConsumerScenario =>
      name !== 'hostileClients' &&
      name !== 'chattyDevice' &&
      name !== 'deviceStorm' &&
      result.results[name] !== undefined,
  );
  const rows = FIGURES.map((figure) => {
    const cells = names.map((name) => {
      const r = result.results[name] as ScenarioResult;
      const target = r.targets[figure];
      return `${r[figure]}${target && !target.met ? ' ✗' : ''}`;
    });
    return `| ${figure} | ${cells.join(' | ')} |`;
  });
  return [
    `| figure | ${names.join(' | ')} |`,
    `| --- | ${names.map(() => '---:').join(' | ')} |`,
    ...rows,
  ].join('\n');
}

/** The hostileClients figures: normal traffic alone and beside the hostile clients, and the targets. */
export function hostileClientsTable(r: HostileClientsResult): string {
  return [
    '| figure | alone | with hostile clients | target |',
    '| --- | ---: | ---: | --- |',
    `| normal 202/s | ${r.alone.acceptedPerSecond} | ${r.withHostile.acceptedPerSecond} | ${r.targets.acceptedRate?.target} (${r.targets.acceptedRate?.value}) |`,
    `| normal p99 ms | ${r.alone.p99Ms} | ${r.withHostile.p99Ms} | ${r.targets.p99?.target} (${r.targets.p99?.value}) |`,
    `| lost events | | ${r.lost} of ${r.acceptedEvents} | = 0 |`,
    `| baggage headers on the topic | | ${r.baggageHeadersOnTopic} | = 0 |`,
    `| slow bodies closed by the gateway (longest open) | | ${r.slowBodiesClosed} (${r.slowBodyLongestOpenMs} ms) | |`,
  ].join('\n');
}

export const RESULTS_DIR = fileURLToPath(new URL('./results/', import.meta.url));

export async function main(): Promise<void> {
  const only = (process.env.BENCH_FAULTS_SCENARIOS ?? '').split(',').filter(Boolean);
  const unknown = only.filter((name) => !(SCENARIOS as readonly string[]).includes(name));
  if (unknown.length > 0) throw new Error(`BENCH_FAULTS_SCENARIOS: unknown ${unknown.join(', ')}`);
  const result = await runFaultsBench({
    scenarios: only.length > 0 ? (only as ScenarioName[]) : SCENARIOS,
    events: Number(process.env.BENCH_FAULTS_EVENTS ?? 4000),
    badMessages: Number(process.env.BENCH_FAULTS_BAD ?? 3000),
    consumers: 3,
    partitions: 6,
    outDir: RESULTS_DIR,
    log: (line) => console.error(line),
  });
  if (Object.keys(result.results).some((name) => name !== 'deviceStorm')) console.log(faultsTable(result));
  const storm = result.results.deviceStorm;
  if (storm) console.log(deviceStormTable(storm));
  if (result.hostileClients) console.log(hostileClientsTable(result.hostileClients));
  if (result.chattyDevice) {
    console.log(
      chattyDeviceTable({
        scenario: 'faults/chattyDevice',
        command: '',
        setup: {},
        runs: [result.chattyDevice],
      }),
    );
    for (const [figure, t] of Object.entries(result.chattyDevice.targets)) {
      if (!t.met) console.log(`MISSED chattyDevice.${figure} ${t.target}: ${t.value}`);
    }
  }
  for (const [figure, t] of Object.entries(result.hostileClients?.targets ?? {})) {
    if (!t.met) console.log(`MISSED hostileClients.${figure} ${t.target}: ${t.value}`);
  }
  for (const [name, r] of Object.entries(result.results)) {
    for (const [figure, t] of Object.entries(r.targets)) {
      if (!t.met) console.log(`MISSED ${name}.${figure} ${t.target}: ${t.value}`);
    }
    for (const note of r.notes) console.log(`  ${name}: ${note}`);
  }
  console.log(result.allTargetsMet ? 'all targets met' : 'some targets missed');
}
