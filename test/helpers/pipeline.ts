import { randomUUID } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Kafka } from 'kafkajs';
import { inject } from 'vitest';
import { topicFamily } from '../../src/config.ts';
import { createKafka } from '../../src/kafka/client.ts';
import { HEADER, headerString } from '../../src/kafka/headers.ts';
import { ensureTopicFamily, SINGLE_BROKER_DURABILITY } from '../../src/kafka/topics.ts';
import { createRedis, type RedisClient, redisNodeAddresses } from '../../src/redis/client.ts';
import { LocalRedis, LocalRedisCluster } from '../../src/services/index.ts';
import type { SimulatorOptions } from '../../src/simulators/simulator.ts';
import { type ConsumerProcess, spawnConsumer } from '../../testkit/fleet.ts';
import { type Simulators, startSimulators } from '../../testkit/simulators.ts';
import { eventIdOf, readTopic } from '../../testkit/topics.ts';

/** Options of {@link startRig}. */
export interface RigOptions {
  partitions: number;
  /** Aqueduct's bucket per provider. */
  rate: number;
  burst: number;
  simulator?: SimulatorOptions;
  env?: Record<string, string>;
  /**
   * `cluster`: the consumers use a private 3-master Redis Cluster (REDIS_CLUSTER_NODES) instead of a
   * private redis-server. Default `single`.
   */
  redis?: 'single' | 'cluster';
}

/**
 * A real pipeline for a test: a fresh topic on the run's Kafka broker, a private redis-server or Redis
 * Cluster (so that INFO commandstats counts only this test), both provider simulators, and
 * `aqueduct consume` processes.
 */
export interface Rig {
  topic: string;
  kafka: Kafka;
  /** A client of the rig's Redis (a Cluster client with `redis: 'cluster'`). */
  redis: RedisClient;
  simulators: Simulators;
  env: Record<string, string>;
  logDir: string;
  consumers: ConsumerProcess[];
  startConsumer(name?: string, extraEnv?: Record<string, string>): Promise<ConsumerProcess>;
  /** Outcomes counted from the simulators and the topics (never from the consumers' own words). */
  ledger(): Promise<Ledger>;
  /** Waits until every published id has an outcome, or fails with the ledger. */
  settle(published: readonly string[], timeoutMs?: number): Promise<Ledger>;
  close(): Promise<void>;
}

export interface Ledger {
  delivered: Set<string>;
  acceptedTotal: number;
  deadLettered: Array<{ id: string | undefined; reasonKind: string | undefined; reason: string | undefined }>;
  invalidTokens: Set<string>;
  retried: number;
  throttled: number;
}

export async function startRig(options: RigOptions): Promise<Rig> {
  const topic = `pipe-${randomUUID().slice(0, 8)}`;
  const kafka = createKafka({ brokers: inject('kafkaBrokers'), clientId: 'aqueduct-test' });
  const topics = topicFamily(topic);
  await ensureTopicFamily(kafka, topic, options.partitions, SINGLE_BROKER_DURABILITY);
  const server = options.redis === 'cluster' ? await LocalRedisCluster.start() : await LocalRedis.start();
  const redisEnv: Record<string, string> =
    server instanceof LocalRedisCluster ? { REDIS_CLUSTER_NODES: server.nodes } : { REDIS_URL: server.url };
  const redis =
    server instanceof LocalRedisCluster
      ? createRedis({ url: '', clusterNodes: redisNodeAddresses(server.nodes.split(',')) })
      : createRedis({ url: server.url });
  const simulators = await startSimulators({ rate: 100_000, burst: 100_000, ...options.simulator });
  const logDir = await mkdtemp(join(tmpdir(), 'aqueduct-rig-'));
  const env: Record<string, string> = {
    KAFKA_BROKERS: inject('kafkaBrokers').join(','),
    AQUEDUCT_TOPIC_REPLICATION_FACTOR: '1',
    AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS: '1',
    ...redisEnv,
    AQUEDUCT_TOPIC: topic,
    AQUEDUCT_GROUP_ID: `${topic}-group`,
    AQUEDUCT_FCM_RATE: String(options.rate),
    AQUEDUCT_FCM_BURST: String(options.burst),
    AQUEDUCT_APNS_RATE: String(options.rate),
    AQUEDUCT_APNS_BURST: String(options.burst),
    AQUEDUCT_RETRY_BASE_MS: '200',
    AQUEDUCT_SHUTDOWN_TIMEOUT_MS: '15000',
    LOG_LEVEL: 'info',
    ...simulators.env,
    ...options.env,
  };
  const consumers: ConsumerProcess[] = [];
  const rig: Rig = {
    topic,
    kafka,
    redis,
    simulators,
    env,
    logDir,
    consumers,
    async startConsumer(name = `consumer-${consumers.length + 1}`, extraEnv = {}) {
      const consumer = spawnConsumer(name, { ...env, ...extraEnv }, join(logDir, `${name}.log`));
      consumers.push(consumer);
      await Promise.race([
        consumer.joined(),
        consumer.exited.then((code) => {
          throw new Error(
            `${name} exited (${code}) before joining: ${JSON.stringify(consumer.logs.slice(-5))}`,
          );
        }),
      ]);
      return consumer;
    },
    async ledger() {
      const [dlq, invalid, retry] = await Promise.all([
        readTopic(kafka, topics.deadLetter),
        readTopic(kafka, topics.invalidTokens),
        readTopic(kafka, topics.retry),
      ]);
      const accepted = simulators.accepted();
      return {
        delivered: accepted.ids,
        acceptedTotal: accepted.total,
        deadLettered: dlq.map((m) => ({
          id: eventIdOf(m.value),
          reasonKind: headerString(m.headers, HEADER.reasonKind),
          reason: headerString(m.headers, HEADER.reason),
        })),
        invalidTokens: new Set(
          invalid.map((m) => eventIdOf(m.value)).filter((id): id is string => id !== undefined),
        ),
        retried: retry.length,
        throttled: simulators.fcm.stats().throttled + simulators.apns.stats().throttled,
      };
    },
    async settle(published, timeoutMs = 90_000) {
      const deadline = Date.now() + timeoutMs;
      let ledger = await rig.ledger();
      while (Date.now() < deadline) {
        const done = new Set([
          ...ledger.delivered,
          ...ledger.invalidTokens,
          ...ledger.deadLettered.map((d) => d.id),
        ]);
        if (published.every((id) => done.has(id))) return ledger;
        await sleep(500);
        ledger = await rig.ledger();
      }
      throw new Error(
        `not settled: delivered ${ledger.delivered.size}, invalid ${ledger.invalidTokens.size}, dead ${ledger.deadLettered.length} of ${published.length}`,
      );
    },
    async close() {
      await Promise.all(consumers.map((c) => c.kill()));
      redis.disconnect();
      await Promise.all([
        server instanceof LocalRedisCluster ? server.stop() : server.dispose(),
        simulators.close(),
      ]);
    },
  };
  return rig;
}

/** Sums a counter over the last `pipeline summary` line of each consumer. */
export function summedTotal(consumers: readonly ConsumerProcess[], field: string): number {
  let sum = 0;
  for (const consumer of consumers) {
    const last = consumer.logs.filter((l) => l.msg === 'pipeline summary').at(-1);
    const totals = last?.totals as Record<string, number> | undefined;
    sum += totals?.[field] ?? 0;
  }
  return sum;
}
