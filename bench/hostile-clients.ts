import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { setPriority } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import type { Kafka } from 'kafkajs';
import { hashApiKey } from '../src/gateway/api-keys.ts';
import { headerString } from '../src/kafka/headers.ts';
import { ensureTopics, SINGLE_BROKER_DURABILITY } from '../src/kafka/topics.ts';
import { readTopic } from '../testkit/topics.ts';
import { spawnServe } from './gateway.ts';

/**
 * The `hostileClients` scenario of `npm run bench -- faults`: one `aqueduct serve` process, normal
 * traffic at a steady offered rate (a well-behaved tenant's batches of valid events), measured in
 * rounds alone and in rounds while hostile clients of another tenant hit the same gateway:
 * - slow bodies: connections that announce a large body and send it a byte a second;
 * - floods of invalid batches (bad tokens), as fast as the gateway answers;
 * - huge headers (beyond Node's 16 KiB header limit);
 * - valid events carrying a forged `baggage` and a sampled `traceparent`.
 * The targets: normal traffic's 202 rate and p99 latency within 20 % of the rounds without hostile
 * clients, every 202'd event on the topic (0 lost), and no `baggage` in any Kafka header.
 */

export interface HostileClientsOptions {
  kafka: Kafka;
  kafkaBrokers: string[];
  redisUrl: string;
  /** Normal traffic: requests per second offered, events per request, connections. */
  normal: { requestsPerSecond: number; batch: number; connections: number };
  /** Seconds per round; rounds alternate (alone, hostile, alone, hostile…). */
  roundSeconds: number;
  roundsEach: number;
  /** Concurrent hostile connections of each kind. */
  hostile: { slowBodies: number; invalidFlood: number; hugeHeaders: number; baggage: number };
  /** The gateway's AQUEDUCT_GATEWAY_REQUEST_TIMEOUT_MS. */
  requestTimeoutMs: number;
  log: (line: string) => void;
}

/** One round of normal traffic. */
export interface NormalRound {
  hostile: boolean;
  /** 202 answers per second. */
  acceptedPerSecond: number;
  p99Ms: number;
  requests: number;
  accepted: number;
  otherStatuses: Record<string, number>;
  errors: number;
  /** What the hostile clients got in this round (empty when alone). */
  hostileCounts: Record<string, number>;
}

export interface HostileClientsResult {
  rounds: NormalRound[];
  alone: { acceptedPerSecond: number; p99Ms: number };
  withHostile: { acceptedPerSecond: number; p99Ms: number };
  /** Events answered 202 (normal and baggage clients) that are not on the topic. */
  lost: number;
  acceptedEvents: number;
  eventsOnTopic: number;
  baggageHeadersOnTopic: number;
  /** Slow-body connections the gateway closed, and the longest any of them stayed open (ms). */
  slowBodiesClosed: number;
  slowBodyLongestOpenMs: number;
  targets: Record<string, { target: string; value: number; met: boolean }>;
}

const KEYS = { normal: `normal-${randomUUID()}`, hostile: `hostile-${randomUUID()}` };

export async function runHostileClients(options: HostileClientsOptions): Promise<HostileClientsResult> {
  const { log } = options;
  const topic = `bench-hostile-${randomUUID().slice(0, 8)}`;
  const admin = options.kafka.admin();
  await admin.connect();
  await ensureTopics(admin, [{ topic, numPartitions: 6 }], SINGLE_BROKER_DURABILITY);
  await admin.disconnect();
  const gateway = await spawnServe({
    KAFKA_BROKERS: options.kafkaBrokers.join(','),
    AQUEDUCT_TOPIC_REPLICATION_FACTOR: '1',
    AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS: '1',
    REDIS_URL: options.redisUrl,
    AQUEDUCT_REDIS_PREFIX: `bench-hostile-${randomUUID().slice(0, 8)}`,
    AQUEDUCT_TOPIC: topic,
    AQUEDUCT_GATEWAY_PORT: '0',
    AQUEDUCT_GATEWAY_ADMIN_PORT: '0',
    AQUEDUCT_GATEWAY_HOST: '127.0.0.1',
    AQUEDUCT_GATEWAY_API_KEYS: JSON.stringify({
      [hashApiKey(KEYS.normal)]: 'normal',
      [hashApiKey(KEYS.hostile)]: 'hostile',
    }),
    AQUEDUCT_GATEWAY_TENANT_LIMITS: JSON.stringify({
      normal: { rate: 1e9, burst: 1e9 },
      hostile: { rate: 100, burst: 200 },
    }),
    // Shorter than the defaults (20 s, 10 s), so that slow bodies are closed within a round.
    AQUEDUCT_GATEWAY_REQUEST_TIMEOUT_MS: String(options.requestTimeoutMs),
    AQUEDUCT_GATEWAY_HEADERS_TIMEOUT_MS: String(Math.min(options.requestTimeoutMs, 3000)),
    LOG_LEVEL: 'info',
  });
  log(`  gateway ${gateway.url}, topic ${topic}`);
  const url = new URL(gateway.url);
  const port = Number(url.port);
  const bodies = Array.from({ length: 32 }, () => validBatch(options.normal.batch));
  const rounds: NormalRound[] = [];
  let acceptedEvents = 0;
  const slow = { closed: 0, longestOpenMs: 0 };
  try {
    const warmUp = await driveNormal(gateway.url, bodies, options.normal, 2); // its events count too
    acceptedEvents += (warmUp.statusCodeStats?.['202']?.count ?? 0) * options.normal.batch;
    for (let round = 0; round < options.roundsEach * 2; round++) {
      const hostile = round % 2 === 1;
      // The hostile clients run in a process of their own, so that their work does not delay the
      // load generator's own clock and skew the latencies it measures.
      const clients = hostile ? await startHostileProcess(port, options.hostile) : undefined;
      if (clients) await sleep(1000); // the slow bodies are all open before measuring
      const result = await driveNormal(gateway.url, bodies, options.normal, options.roundSeconds);
      const report = clients ? await clients.stop() : undefined;
      const hostileCounts = report?.counts ?? {};
      const baggageAccepted = { events: report?.baggageAccepted ?? 0 };
      if (report) {
        slow.closed += report.slow.closed;
        slow.longestOpenMs = Math.max(slow.longestOpenMs, report.slow.longestOpenMs);
      }
      const stats = result.statusCodeStats ?? {};
      const accepted = stats['202']?.count ?? 0;
      acceptedEvents += accepted * options.normal.batch + baggageAccepted.events;
      const normalRound: NormalRound = {
        hostile,
        acceptedPerSecond: round1(accepted / result.duration),
        p99Ms: result.latency.p99,
        requests: result.requests.total,
        accepted,
        otherStatuses: Object.fromEntries(
          Object.entries(stats)
            .filter(([code]) => code !== '202')
            .map(([code, value]) => [code, value.count ?? 0]),
        ),
        errors: result.errors,
        hostileCounts,
      };
      rounds.push(normalRound);
      log(
        `  round ${round + 1} (${hostile ? 'with hostile clients' : 'alone'}): ${normalRound.acceptedPerSecond} × 202/s, p99 ${normalRound.p99Ms} ms, ${normalRound.errors} errors${hostile ? `; hostile: ${JSON.stringify(hostileCounts)}` : ''}`,
      );
    }
  } finally {
    await gateway.stop();
  }
  const messages = await readTopic(options.kafka, topic);
  const baggageHeadersOnTopic = messages.filter(
    (m) => headerString(m.headers, 'baggage') !== undefined,
  ).length;
  const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / Math.max(1, values.length);
  const summary = (hostile: boolean) => {
    const of = rounds.filter((r) => r.hostile === hostile);
    return {
      acceptedPerSecond: round1(mean(of.map((r) => r.acceptedPerSecond))),
      p99Ms: round1(mean(of.map((r) => r.p99Ms))),
    };
  };
  const alone = summary(false);
  const withHostile = summary(true);
  const lost = Math.max(0, acceptedEvents - messages.length);
  const rateRatio = withHostile.acceptedPerSecond / Math.max(1e-9, alone.acceptedPerSecond);
  const p99Ratio = withHostile.p99Ms / Math.max(1, alone.p99Ms);
  return {
    rounds,
    alone,
    withHostile,
    lost,
    acceptedEvents,
    eventsOnTopic: messages.length,
    baggageHeadersOnTopic,
    slowBodiesClosed: slow.closed,
    slowBodyLongestOpenMs: slow.longestOpenMs,
    targets: {
      acceptedRate: { target: '≥ 0.8 × alone', value: round3(rateRatio), met: rateRatio >= 0.8 },
      p99: { target: '≤ 1.2 × alone', value: round3(p99Ratio), met: p99Ratio <= 1.2 },
      lost: { target: '= 0', value: lost, met: lost === 0 },
      baggageHeaders: { target: '= 0', value: baggageHeadersOnTopic, met: baggageHeadersOnTopic === 0 },
    },
  };
}

/** What the hostile process reports when it stops. */
interface HostileReport {
  counts: Record<string, number>;
  slow: { closed: number; longestOpenMs: number };
  baggageAccepted: number;
}

const HOSTILE_WORKER = fileURLToPath(new URL('./hostile-worker.ts', import.meta.url));

/** Starts bench/hostile-worker.ts against the gateway; `stop` ends it and returns its report. */
async function startHostileProcess(
  port: number,
  hostile: HostileClientsOptions['hostile'],
): Promise<{ stop(): Promise<HostileReport> }> {
  const child = spawn(process.execPath, [HOSTILE_WORKER], {
    env: {
      ...process.env,
      HOSTILE_PORT: String(port),
      HOSTILE_KEY: KEYS.hostile,
      HOSTILE_CLIENTS: JSON.stringify(hostile),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  // Lowest CPU priority: on this shared 2-core machine the hostile clients' own work would otherwise be
  // taken from the gateway, which a remote attacker's never is. Their traffic is what is measured.
  if (child.pid !== undefined) setPriority(child.pid, 19);
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => {
    output += chunk.toString('utf8');
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    async stop() {
      child.kill('SIGTERM');
      await exited;
      return JSON.parse(output) as HostileReport;
    },
  };
}

function driveNormal(
  gatewayUrl: string,
  bodies: string[],
  normal: HostileClientsOptions['normal'],
  seconds: number,
) {
  return autocannon({
    url: `${gatewayUrl}/v1/notifications`,
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEYS.normal}` },
    requests: bodies.map((body) => ({ method: 'POST', body })),
    connections: normal.connections,
    overallRate: normal.requestsPerSecond,
    duration: seconds,
    timeout: 30,
  });
}

function validBatch(size: number): string {
  return JSON.stringify({
    events: Array.from({ length: size }, (_, i) => ({
      platform: i % 3 === 0 ? 'apns' : 'fcm',
      token:
        i % 3 === 0
          ? randomBytes(32).toString('hex')
          : `${randomBytes(11).toString('hex')}:APA91b${randomBytes(40).toString('hex')}`,
      notification: { title: 'Your order shipped', body: `Parcel ${i} is on its way and arrives tomorrow.` },
    })),
  });
}

function round1(value: number): number {
  return Math.round(value * 10) / 10;
}

function round3(value: number): number {
  return Math.round(value * 1000) / 1000;
}
