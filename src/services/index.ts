import getPort from 'get-port';
import { Redis } from 'ioredis';
import { redactUrl } from '../redact.ts';
import { SetupError } from './errors.ts';
import { LocalKafka } from './kafka-local.ts';
import { kafkaVersion } from './kafka-version.ts';
import { LocalRedisCluster } from './redis-cluster-local.ts';
import { LocalRedis } from './redis-local.ts';

export { SetupError } from './errors.ts';
export { LocalKafka } from './kafka-local.ts';
export { DEFAULT_KAFKA_VERSION, kafkaVersion, TESTED_KAFKA_VERSIONS } from './kafka-version.ts';
export { LocalRedisCluster, type LocalRedisClusterOptions } from './redis-cluster-local.ts';
export { LocalRedis } from './redis-local.ts';

/** Where a service came from. */
export type ServiceSource = 'env' | 'local' | 'containers';

/** Running Kafka and Redis, however they were obtained. */
export interface Services {
  kafkaBrokers: string[];
  redisUrl: string;
  /** With `redisCluster`: the Redis Cluster's nodes as REDIS_CLUSTER_NODES takes them (`host:port,…`). */
  redisClusterNodes?: string;
  source: { kafka: ServiceSource; redis: ServiceSource; redisCluster?: ServiceSource };
  /** The local broker when this call started one (fault-injection runs stop and start it). */
  localKafka?: LocalKafka;
  /** The local redis-server when this call started one. */
  localRedis?: LocalRedis;
  /** The local Redis Cluster when this call started one. */
  localRedisCluster?: LocalRedisCluster;
  /** Stops what this call started; leaves services given by the environment alone. */
  stop(): Promise<void>;
}

/** Options of {@link startServices}. */
export interface StartServicesOptions {
  /**
   * The environment to read `KAFKA_BROKERS`, `REDIS_URL`, `REDIS_CLUSTER_NODES`, `AQUEDUCT_TEST_RUNTIME`
   * and `KAFKA_VERSION` (the release of a broker started here) from.
   */
  env?: NodeJS.ProcessEnv;
  /** Progress messages. */
  log?: (message: string) => void;
  /**
   * Also a Redis Cluster: the one `REDIS_CLUSTER_NODES` names when set, else a local 3-master cluster
   * of `redis-server`s (never a container). Default false.
   */
  redisCluster?: boolean;
}

/**
 * The one switch for where Kafka and Redis come from, used by the tests' global setup and by the demo:
 *
 * 1. `KAFKA_BROKERS` (comma-separated host:port) and `REDIS_URL` when set: those are used as they are;
 * 2. else, with `AQUEDUCT_TEST_RUNTIME=containers` and a Docker engine: testcontainers starts them;
 * 3. else: a local Kafka broker from the Maven jars and a private `redis-server`, on free ports.
 *
 * A broker started here (2 or 3) runs the release `KAFKA_VERSION` names, by default the current 4.x one.
 *
 * Each service is decided on its own, so `REDIS_URL` alone still starts a local broker.
 */
export async function startServices(options: StartServicesOptions = {}): Promise<Services> {
  const env = options.env ?? process.env;
  const log = options.log ?? (() => {});
  const useContainers = env.AQUEDUCT_TEST_RUNTIME === 'containers';
  const stoppers: Array<() => Promise<void>> = [];
  const stop = async () => {
    for (const stopOne of stoppers.reverse()) await stopOne().catch(() => {});
  };

  try {
    let redisUrl: string;
    let redisSource: ServiceSource;
    let localRedis: LocalRedis | undefined;
    if (env.REDIS_URL) {
      redisUrl = env.REDIS_URL;
      redisSource = 'env';
      await assertRedisReachable(redisUrl);
    } else if (useContainers) {
      const container = await startRedisContainer();
      redisUrl = container.url;
      stoppers.push(container.stop);
      redisSource = 'containers';
    } else {
      localRedis = await LocalRedis.start();
      stoppers.push(() => localRedis?.dispose() ?? Promise.resolve());
      redisUrl = localRedis.url;
      redisSource = 'local';
    }
    log(`Redis ${redactUrl(redisUrl)} (${redisSource})`);

    let redisClusterNodes: string | undefined;
    let redisClusterSource: ServiceSource | undefined;
    let localRedisCluster: LocalRedisCluster | undefined;
    if (options.redisCluster && env.REDIS_CLUSTER_NODES) {
      redisClusterNodes = env.REDIS_CLUSTER_NODES;
      redisClusterSource = 'env';
    } else if (options.redisCluster) {
      localRedisCluster = await LocalRedisCluster.start();
      stoppers.push(() => localRedisCluster?.stop() ?? Promise.resolve());
      redisClusterNodes = localRedisCluster.nodes;
      redisClusterSource = 'local';
    }
    if (redisClusterNodes) log(`Redis Cluster ${redisClusterNodes} (${redisClusterSource})`);

    let kafkaBrokers: string[];
    let kafkaSource: ServiceSource;
    let localKafka: LocalKafka | undefined;
    if (env.KAFKA_BROKERS) {
      kafkaBrokers = parseBrokers(env.KAFKA_BROKERS);
      kafkaSource = 'env';
    } else if (useContainers) {
      const container = await startKafkaContainer(kafkaVersion(env));
      kafkaBrokers = container.brokers;
      stoppers.push(container.stop);
      kafkaSource = 'containers';
    } else {
      localKafka = await LocalKafka.start({ version: kafkaVersion(env), log });
      stoppers.push(() => localKafka?.stop() ?? Promise.resolve());
      kafkaBrokers = localKafka.brokers;
      kafkaSource = 'local';
    }
    log(`Kafka ${kafkaBrokers.join(',')} (${kafkaSource})`);

    return {
      kafkaBrokers,
      redisUrl,
      ...(redisClusterNodes ? { redisClusterNodes } : {}),
      source: {
        kafka: kafkaSource,
        redis: redisSource,
        ...(redisClusterSource ? { redisCluster: redisClusterSource } : {}),
      },
      ...(localKafka ? { localKafka } : {}),
      ...(localRedis ? { localRedis } : {}),
      ...(localRedisCluster ? { localRedisCluster } : {}),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** Parses `KAFKA_BROKERS` ("host:port,host:port"), failing clearly on anything else. */
export function parseBrokers(value: string): string[] {
  const brokers = value
    .split(',')
    .map((b) => b.trim())
    .filter(Boolean);
  const bad = brokers.find((b) => !/^[^\s:]+:\d{1,5}$/.test(b));
  if (brokers.length === 0 || bad !== undefined) {
    throw new SetupError(
      `KAFKA_BROKERS must be a comma-separated list of host:port, got "${bad ?? value}".`,
      'set KAFKA_BROKERS=host:9092[,host2:9092], or unset it to start a local broker.',
    );
  }
  return brokers;
}

async function assertRedisReachable(url: string): Promise<void> {
  const client = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 3000,
  });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.ping();
  } catch (error) {
    throw new SetupError(
      `Redis is unreachable at REDIS_URL=${redactUrl(url)}: ${(error as Error).message}`,
      'start Redis there (or correct the URL and its password), or unset REDIS_URL to let Aqueduct start a private redis-server.',
      { cause: error },
    );
  } finally {
    client.disconnect();
  }
}

// testcontainers is a development dependency used only where a Docker engine exists; it is imported
// lazily so that the default path does not load it at all.
async function startRedisContainer(): Promise<{ url: string; stop: () => Promise<void> }> {
  const { RedisContainer } = await import('@testcontainers/redis').catch(noContainers);
  const container = await new RedisContainer('redis:7-alpine').start().catch(noDocker);
  return { url: container.getConnectionUrl(), stop: async () => void (await container.stop()) };
}

/**
 * The Apache Kafka image (`apache/kafka`), one KRaft node, configured by the environment variables its
 * documentation gives for a single node. `@testcontainers/kafka`'s KafkaContainer is not used: it drives
 * the Confluent images' start script and refuses any other image in KRaft mode. The broker advertises
 * a host port chosen here, since the advertised address must be known before it starts.
 */
async function startKafkaContainer(
  version: string,
): Promise<{ brokers: string[]; stop: () => Promise<void> }> {
  const { GenericContainer, Wait, getContainerRuntimeClient } = await import('testcontainers').catch(
    noContainers,
  );
  const runtime = await getContainerRuntimeClient().catch(noDocker);
  const host = runtime.info.containerRuntime.host;
  const port = await getPort();
  const container = await new GenericContainer(`apache/kafka:${version}`)
    .withExposedPorts({ container: 9092, host: port })
    .withEnvironment({
      KAFKA_NODE_ID: '1',
      KAFKA_PROCESS_ROLES: 'broker,controller',
      KAFKA_LISTENERS: 'PLAINTEXT://:9092,CONTROLLER://:9093',
      KAFKA_ADVERTISED_LISTENERS: `PLAINTEXT://${host}:${port}`,
      KAFKA_CONTROLLER_LISTENER_NAMES: 'CONTROLLER',
      KAFKA_LISTENER_SECURITY_PROTOCOL_MAP: 'CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT',
      KAFKA_CONTROLLER_QUORUM_VOTERS: '1@localhost:9093',
      KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR: '1',
      KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR: '1',
      KAFKA_TRANSACTION_STATE_LOG_MIN_ISR: '1',
      KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS: '0',
    })
    .withWaitStrategy(Wait.forLogMessage(/Kafka Server started/))
    .withStartupTimeout(180_000)
    .start()
    .catch(noDocker);
  return {
    brokers: [`${host}:${port}`],
    stop: async () => void (await container.stop()),
  };
}

function noContainers(error: unknown): never {
  throw new SetupError(
    'AQUEDUCT_TEST_RUNTIME=containers needs the testcontainers packages, which are not installed.',
    'run npm install (with development dependencies), or unset AQUEDUCT_TEST_RUNTIME.',
    { cause: error },
  );
}

function noDocker(error: unknown): never {
  throw new SetupError(
    `AQUEDUCT_TEST_RUNTIME=containers, but no container could be started: ${(error as Error).message}`,
    'start a Docker engine, or unset AQUEDUCT_TEST_RUNTIME to use the local Kafka broker and redis-server.',
    { cause: error },
  );
}
