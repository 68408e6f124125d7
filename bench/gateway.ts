import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import type { Message } from 'kafkajs';
import { hashApiKey } from '../src/gateway/api-keys.ts';
import { createKafka } from '../src/kafka/client.ts';
import { ensureTopics, SINGLE_BROKER_DURABILITY } from '../src/kafka/topics.ts';
import { messageKey } from '../src/publish/publisher.ts';
import { startServices } from '../src/services/index.ts';
import { machine } from './machine.ts';

/**
 * `npm run bench -- gateway`: the ingest gateway (`aqueduct serve`, its own process) driven by autocannon
 * with batches of 100 events against a real Kafka broker, next to a plain kafkajs producer writing the
 * same batches in the same run; then a tenant far above its admission limit, to count its 429s against
 * its bucket's envelope. See docs/benchmarks.md and docs/gateway.md.
 */

const CLI = fileURLToPath(new URL('../bin/aqueduct.js', import.meta.url));
export const RESULTS_DIR = fileURLToPath(new URL('./results/', import.meta.url));

export interface GatewayBenchOptions {
  /** An existing broker and Redis (the test suite's); default: the service switch. */
  services?: { kafkaBrokers: string[]; redisUrl: string };
  /** Events per request (and per producer batch). */
  batch: number;
  /** autocannon connections, and concurrent senders of the plain producer. */
  connections: number;
  /** The gateway and the producer take turns this many times, for `phaseSeconds` each. */
  rounds: number;
  phaseSeconds: number;
  /** The tenant above its limit: its bucket, and how long and how hard it is driven. */
  overLimit: { rate: number; burst: number; seconds: number; connections: number };
  outDir: string;
  log: (line: string) => void;
}

export function fullOptions(): GatewayBenchOptions {
  return {
    batch: 100,
    connections: 16,
    rounds: 2,
    phaseSeconds: 6,
    overLimit: { rate: 2000, burst: 1000, seconds: 5, connections: 4 },
    outDir: RESULTS_DIR,
    log: (line) => console.error(line),
  };
}

interface Throughput {
  requestsPerSecond: number;
  eventsPerSecond: number;
  p99Ms: number;
}

export interface GatewayBenchResult {
  scenario: 'gateway';
  command: string;
  measuredAt: string;
  machine: ReturnType<typeof machine>;
  settings: Omit<GatewayBenchOptions, 'services' | 'outDir' | 'log'> & { partitions: number; acks: -1 };
  requestsPerSecond: number;
  eventsPerSecond: number;
  p99Ms: number;
  producerEventsPerSecond: number;
  ratioVsProducer: number;
  rounds: Array<{ gateway: Throughput; producerEventsPerSecond: number }>;
  overLimit: {
    rate: number;
    burst: number;
    seconds: number;
    requests: number;
    accepted: number;
    throttled: number;
    /** Events the bucket allows in that time: burst + rate × seconds. */
    envelopeEvents: number;
    /** Requests beyond the envelope: what should have been refused. */
    expectedThrottled: number;
    /** accepted events ÷ envelope: at most 1 (nothing beyond it), near 1 (nothing below it refused). */
    acceptedVsEnvelope: number;
    otherStatuses: Record<string, number>;
  };
  targets: { ratioVsProducer: { target: string; value: number; met: boolean } };
}

const PARTITIONS = 6;
const KEYS = { bench: `bench-${randomUUID()}`, noisy: `noisy-${randomUUID()}` };

export async function runGatewayBench(options: GatewayBenchOptions): Promise<GatewayBenchResult> {
  const services = await startServices({
    env: options.services
      ? {
          ...process.env,
          KAFKA_BROKERS: options.services.kafkaBrokers.join(','),
          REDIS_URL: options.services.redisUrl,
        }
      : process.env,
    log: options.log,
  });
  const kafka = createKafka({ brokers: services.kafkaBrokers, clientId: 'bench-gateway' });
  const topic = `bench-gateway-${randomUUID().slice(0, 8)}`;
  const admin = kafka.admin();
  await admin.connect();
  await ensureTopics(admin, [{ topic, numPartitions: PARTITIONS }], SINGLE_BROKER_DURABILITY);
  await admin.disconnect();

  const gateway = await spawnServe({
    KAFKA_BROKERS: services.kafkaBrokers.join(','),
    AQUEDUCT_TOPIC_REPLICATION_FACTOR: '1',
    AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS: '1',
    REDIS_URL: services.redisUrl,
    AQUEDUCT_REDIS_PREFIX: `bench-gw-${randomUUID().slice(0, 8)}`,
    AQUEDUCT_TOPIC: topic,
    AQUEDUCT_GATEWAY_PORT: '0',
    AQUEDUCT_GATEWAY_ADMIN_PORT: '0',
    AQUEDUCT_GATEWAY_HOST: '127.0.0.1',
    AQUEDUCT_GATEWAY_API_KEYS: JSON.stringify({
      [hashApiKey(KEYS.bench)]: 'bench',
      [hashApiKey(KEYS.noisy)]: 'noisy',
    }),
    // The measured tenant goes through its admission bucket on every request, with room to spare.
    AQUEDUCT_GATEWAY_TENANT_LIMITS: JSON.stringify({
      bench: { rate: 1e9, burst: 1e9 },
      noisy: { rate: options.overLimit.rate, burst: options.overLimit.burst },
    }),
    AQUEDUCT_GATEWAY_MAX_BATCH: String(Math.max(500, options.batch)),
    // info: the "gateway listening" line says where it listens (few other lines are logged at info).
    LOG_LEVEL: 'info',
  });
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
  });
  await producer.connect();
  try {
    const bodies = Array.from({ length: 64 }, () => makeBatch(options.batch));
    options.log(`gateway ${gateway.url}, topic ${topic} (${PARTITIONS} partitions)`);
    await drive(gateway.url, KEYS.bench, bodies, options.connections, 1); // warm-up
    const rounds: GatewayBenchResult['rounds'] = [];
    for (let round = 1; round <= options.rounds; round++) {
      const producerEventsPerSecond = await plainProducer(producer, topic, bodies, options);
      const result = await drive(gateway.url, KEYS.bench, bodies, options.connections, options.phaseSeconds);
      const ok = result.statusCodeStats?.['202']?.count ?? 0;
      if (ok !== result.requests.total || result.errors > 0) {
        throw new Error(
          `gateway answered ${ok} of ${result.requests.total} requests with 202 (${result.errors} errors)`,
        );
      }
      const requestsPerSecond = ok / result.duration;
      const gatewayRound = {
        requestsPerSecond: round1(requestsPerSecond),
        eventsPerSecond: Math.round(requestsPerSecond * options.batch),
        p99Ms: result.latency.p99,
      };
      rounds.push({ gateway: gatewayRound, producerEventsPerSecond });
      options.log(
        `round ${round}: gateway ${gatewayRound.eventsPerSecond} events/s (${gatewayRound.requestsPerSecond} req/s, p99 ${gatewayRound.p99Ms} ms), plain producer ${producerEventsPerSecond} events/s`,
      );
    }

    options.log(`tenant above its limit: rate ${options.overLimit.rate}/s, burst ${options.overLimit.burst}`);
    const noisy = await drive(
      gateway.url,
      KEYS.noisy,
      bodies,
      options.overLimit.connections,
      options.overLimit.seconds,
    );
    const stats = noisy.statusCodeStats ?? {};
    const accepted = stats['202']?.count ?? 0;
    const throttled = stats['429']?.count ?? 0;
    const seconds = (noisy.finish.getTime() - noisy.start.getTime()) / 1000;
    const envelopeEvents = Math.floor(options.overLimit.burst + options.overLimit.rate * seconds);
    const otherStatuses = Object.fromEntries(
      Object.entries(stats)
        .filter(([code]) => code !== '202' && code !== '429')
        .map(([code, value]) => [code, value.count ?? 0]),
    );

    const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
    const requestsPerSecond = round1(mean(rounds.map((r) => r.gateway.requestsPerSecond)));
    const eventsPerSecond = Math.round(mean(rounds.map((r) => r.gateway.eventsPerSecond)));
    const producerEventsPerSecond = Math.round(mean(rounds.map((r) => r.producerEventsPerSecond)));
    const ratioVsProducer = Number((eventsPerSecond / producerEventsPerSecond).toFixed(3));
    const result: GatewayBenchResult = {
      scenario: 'gateway',
      command: 'npm run bench -- gateway',
      measuredAt: new Date().toISOString(),
      machine: machine(),
      settings: {
        batch: options.batch,
        connections: options.connections,
        rounds: options.rounds,
        phaseSeconds: options.phaseSeconds,
        overLimit: options.overLimit,
        partitions: PARTITIONS,
        acks: -1,
      },
      requestsPerSecond,
      eventsPerSecond,
      p99Ms: Math.max(...rounds.map((r) => r.gateway.p99Ms)),
      producerEventsPerSecond,
      ratioVsProducer,
      rounds,
      overLimit: {
        rate: options.overLimit.rate,
        burst: options.overLimit.burst,
        seconds: round1(seconds),
        requests: noisy.requests.total,
        accepted,
        throttled,
        envelopeEvents,
        expectedThrottled: Math.max(0, noisy.requests.total - Math.floor(envelopeEvents / options.batch)),
        acceptedVsEnvelope: Number(((accepted * options.batch) / envelopeEvents).toFixed(3)),
        otherStatuses,
      },
      targets: { ratioVsProducer: { target: '≥ 0.7', value: ratioVsProducer, met: ratioVsProducer >= 0.7 } },
    };
    await mkdir(options.outDir, { recursive: true });
    await writeFile(join(options.outDir, 'gateway.json'), `${JSON.stringify(result, null, 2)}\n`);
    return result;
  } finally {
    await producer.disconnect();
    await gateway.stop();
    await services.stop();
  }
}

/** One request body: `{"events": [...]}` of `size` events without ids (the gateway assigns them). */
function makeBatch(size: number): string {
  const events = Array.from({ length: size }, (_, i) => ({
    platform: i % 3 === 0 ? 'apns' : 'fcm',
    token: randomBytes(32).toString('hex'),
    notification: { title: 'Your order shipped', body: `Parcel ${i} is on its way and arrives tomorrow.` },
    data: { orderId: String(100_000 + i) },
  }));
  return JSON.stringify({ events });
}

function drive(url: string, key: string, bodies: string[], connections: number, seconds: number) {
  return autocannon({
    url: `${url}/v1/notifications`,
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    requests: bodies.map((body) => ({ method: 'POST', body })),
    connections,
    duration: seconds,
    timeout: 30,
  });
}

/**
 * The baseline: one idempotent kafkajs producer (as the gateway uses), acks from all in-sync replicas,
 * the same events in batches of the same size, sent by as many concurrent senders as autocannon has
 * connections, for the same time. Messages are built (key, JSON) once, so only the producing is timed.
 */
async function plainProducer(
  producer: ReturnType<ReturnType<typeof createKafka>['producer']>,
  topic: string,
  bodies: string[],
  options: GatewayBenchOptions,
): Promise<number> {
  const batches: Message[][] = bodies.map((body) =>
    (JSON.parse(body) as { events: Array<{ platform: 'fcm' | 'apns'; token: string }> }).events.map(
      (event) => ({
        key: messageKey(event),
        value: JSON.stringify({ id: randomUUID(), ...event }),
      }),
    ),
  );
  const deadline = Date.now() + options.phaseSeconds * 1000;
  let events = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: options.connections }, async (_, sender) => {
      for (let i = sender; Date.now() < deadline; i += options.connections) {
        const messages = batches[i % batches.length] as Message[];
        await producer.send({ topic, messages, acks: -1 });
        events += messages.length;
      }
    }),
  );
  return Math.round(events / ((performance.now() - started) / 1000));
}

export interface ServeProcess {
  url: string;
  stop(): Promise<void>;
}

export function spawnServe(env: Record<string, string>): Promise<ServeProcess> {
  const child: ChildProcess = spawn(process.execPath, [CLI, 'serve'], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const ensureGone = () => child.kill('SIGKILL');
  process.once('exit', ensureGone);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => process.removeListener('exit', ensureGone));
  return new Promise((resolve, reject) => {
    let output = '';
    const onData = (chunk: Buffer) => {
      output += chunk.toString('utf8');
      const match = /"url":"(http:\/\/[^"]+)"[^\n]*"msg":"gateway listening"/.exec(output);
      if (match) {
        resolve({
          url: match[1] as string,
          stop: async () => {
            child.kill('SIGTERM');
            await exited;
          },
        });
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    void exited.then(() =>
      reject(new Error(`aqueduct serve exited before listening:\n${output.slice(-2000)}`)),
    );
  });
}

function round1(value: number): number {
  return Math.round(value * 10) / 10;
}

/** The docs/benchmarks.md block of a result (rendered by `node bench/readme.ts`). */
export function gatewayTable(result: GatewayBenchResult): string {
  const m = result.machine;
  const o = result.overLimit;
  const t = result.settings;
  const rounds = result.rounds
    .map(
      (r, i) =>
        `| round ${i + 1} | ${r.gateway.eventsPerSecond} | ${r.gateway.requestsPerSecond} | ${r.gateway.p99Ms} | ${r.producerEventsPerSecond} |`,
    )
    .join('\n');
  return [
    `Measured with \`${result.command}\` on ${m.cores} cores, ${m.memoryGiB} GiB, Node ${m.node}, ${m.kafka ?? 'Kafka 3.9.1 (local)'}: \`aqueduct serve\` in its own process, autocannon with ${t.connections} connections sending batches of ${t.batch} events, one ${t.partitions}-partition topic, acks from all in-sync replicas; gateway and plain producer take turns, ${t.rounds} × ${t.phaseSeconds} s each.`,
    '',
    '| | gateway events/s | gateway requests/s | gateway p99 (ms) | plain kafkajs producer events/s |',
    '| --- | ---: | ---: | ---: | ---: |',
    rounds,
    `| **mean** | **${result.eventsPerSecond}** | **${result.requestsPerSecond}** | **${result.p99Ms}** (worst) | **${result.producerEventsPerSecond}** |`,
    '',
    `\`ratioVsProducer\` = ${result.ratioVsProducer} (target ≥ 0.7: ${result.targets.ratioVsProducer.met ? 'met' : '**missed**'}).`,
    '',
    `A tenant above its limit (rate ${o.rate} events/s, burst ${o.burst}) driven by ${t.overLimit.connections} connections for ${o.seconds} s: ${o.requests} requests, ${o.accepted} accepted (${o.accepted * t.batch} events = ${o.acceptedVsEnvelope} of its envelope burst + rate × time, ${o.envelopeEvents} events), **${o.throttled} answered 429** where everything beyond the envelope is ${o.expectedThrottled}.`,
  ].join('\n');
}

export async function main(): Promise<void> {
  const result = await runGatewayBench(fullOptions());
  console.log(gatewayTable(result));
  console.log(
    `${result.targets.ratioVsProducer.met ? 'met    ' : 'MISSED '} ratioVsProducer ≥ 0.7: ${result.ratioVsProducer}`,
  );
}
