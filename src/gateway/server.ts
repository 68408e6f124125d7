import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import type { Kafka } from 'kafkajs';
import { createKafka } from '../kafka/client.ts';
import { kafkaSecurity } from '../kafka/security.ts';
import { topicWarnings } from '../kafka/topics.ts';
import { listenOrExplain } from '../lifecycle.ts';
import { TokenBucketLimiter } from '../limiter/index.ts';
import { createLogger, type Logger } from '../log.ts';
import { createRedis, onNodeErrors, redisErrorSummary } from '../redis/client.ts';
import { warnIfRedisEvicts } from '../redis/eviction-policy.ts';
import { RedisReachability } from '../redis/reachability.ts';
import { ConfigError } from '../settings.ts';
import { kafkaSecurityOptions, redisConnectionOptions, topicDurabilityOf } from '../settings-options.ts';
import { buildAdminApp } from './admin-app.ts';
import { admissionBucketName, TenantAdmission } from './admission.ts';
import { ApiKeys } from './api-keys.ts';
import { buildGatewayApp } from './app.ts';
import { closeGently } from './bounded-server.ts';
import { apiKeyHashes, defaultTenantLimit, type GatewayConfig, tenantLimitOverrides } from './config.ts';
import { KafkaWriter } from './kafka-writer.ts';
import { GatewayMetrics } from './metrics.ts';

/** A running gateway. */
export interface Gateway {
  /** `http://host:port` of the API. */
  url: string;
  port: number;
  /** `http://host:port` of the admin routes (/openapi.json, /healthz, /readyz, /metrics). */
  adminUrl: string;
  adminPort: number;
  /** True while Kafka (and Redis, when tenants are limited) are reachable and the topic is there. */
  readonly ready: boolean;
  metrics: GatewayMetrics;
  /**
   * Stops taking requests, lets those in flight finish (their Kafka writes acknowledged or failed),
   * disconnects. Bounded by `AQUEDUCT_SHUTDOWN_TIMEOUT_MS` at the caller.
   */
  close(): Promise<void>;
}

/** Options of {@link startGateway}. */
export interface StartGatewayOptions {
  logger?: Logger;
  /** Makes the id of an event that has none (default: a random UUID). */
  newId?: () => string;
  /** Collect Node's default process metrics (default true; tests running several gateways turn it off). */
  defaultMetrics?: boolean;
}

const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

/**
 * Starts everything `aqueduct serve` runs: a Kafka writer (idempotent producer), the admission limiter on
 * Redis (only connected when some tenant has a limit), the API on AQUEDUCT_GATEWAY_PORT and the admin
 * routes on AQUEDUCT_GATEWAY_ADMIN_PORT.
 * Starts even when Kafka is down (answering 503 and not ready until it is reachable).
 * @throws ConfigError when no API key is configured
 */
export async function startGateway(
  config: GatewayConfig,
  options: StartGatewayOptions = {},
): Promise<Gateway> {
  const logger = options.logger ?? createLogger(config.LOG_LEVEL, 'aqueduct-gateway');
  const apiKeys = new ApiKeys(apiKeyHashes(config));
  const metrics = new GatewayMetrics({ defaultMetrics: options.defaultMetrics ?? true });

  const defaultLimit = defaultTenantLimit(config);
  const overrides = tenantLimitOverrides(config);
  const limited = defaultLimit !== null || overrides.size > 0;
  const redis = limited
    ? createRedis(redisConnectionOptions(config), { maxRetriesPerRequest: 1, enableAutoPipelining: true })
    : undefined;
  redis?.on('error', (error: Error) =>
    logger.warn({ err: redisErrorSummary(error) }, 'redis connection error'),
  );
  if (redis)
    onNodeErrors(redis, (error, node, suppressed) =>
      logger.warn({ node, err: redisErrorSummary(error), suppressed }, 'redis node connection error'),
    );
  // The slots of the tenants' admission buckets (at most 32 of them: enough to cover every master).
  const reachability = redis
    ? new RedisReachability(
        redis,
        [...new Set(apiKeyHashes(config).values())]
          .slice(0, 32)
          .map((tenant) => `${config.AQUEDUCT_REDIS_PREFIX}:{${admissionBucketName(tenant)}}:reachable`),
      )
    : undefined;
  const limiter = redis
    ? new TokenBucketLimiter(redis, {
        keyPrefix: config.AQUEDUCT_REDIS_PREFIX,
        failurePolicy: config.AQUEDUCT_LIMITER_FAILURE_POLICY,
        onFailOpen: (error) =>
          logger.warn({ err: { message: error.message } }, 'admission limiter failed open'),
      })
    : undefined;
  const admission = new TenantAdmission({ ...(limiter ? { limiter } : {}), defaultLimit, overrides });

  const kafka = createKafka({
    brokers: config.KAFKA_BROKERS,
    clientId: `${config.KAFKA_CLIENT_ID}-gateway`,
    logger,
    // Connecting gives up within about a second when the broker is down (the default retries for
    // half a minute): a request must get its 503 within AQUEDUCT_GATEWAY_PRODUCE_TIMEOUT_MS.
    extra: {
      ...kafkaSecurity(kafkaSecurityOptions(config)),
      connectionTimeout: 1000,
      requestTimeout: config.AQUEDUCT_GATEWAY_PRODUCE_TIMEOUT_MS,
      retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 1000 },
    },
  });
  const writer = new KafkaWriter({
    kafka,
    topic: config.AQUEDUCT_TOPIC,
    timeoutMs: config.AQUEDUCT_GATEWAY_PRODUCE_TIMEOUT_MS,
    producers: config.AQUEDUCT_GATEWAY_PRODUCERS,
    logger,
    onWrite: (sample) => {
      metrics.kafkaWriteSeconds.observe({ outcome: sample.ok ? 'ok' : 'failed' }, sample.seconds);
      if (sample.ok) metrics.kafkaWriteEvents.observe(sample.events);
    },
  });
  await writer.start();
  await warnAboutDurability(kafka, config, logger);
  if (redis) void warnIfRedisEvicts(redis, logger);

  let closing = false;
  const isReady = () => !closing && writer.ready && (reachability === undefined || reachability.ok);
  const app = buildGatewayApp({
    sink: writer,
    admission,
    apiKeys,
    metrics,
    logger,
    maxBatch: config.AQUEDUCT_GATEWAY_MAX_BATCH,
    maxBodyBytes: config.AQUEDUCT_GATEWAY_MAX_BODY_BYTES,
    bodyMemoryBytes: config.AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES,
    retryAfterSeconds: config.AQUEDUCT_GATEWAY_RETRY_AFTER_SECONDS,
    connections: {
      requestTimeoutMs: config.AQUEDUCT_GATEWAY_REQUEST_TIMEOUT_MS,
      headersTimeoutMs: config.AQUEDUCT_GATEWAY_HEADERS_TIMEOUT_MS,
      keepAliveTimeoutMs: config.AQUEDUCT_GATEWAY_KEEP_ALIVE_TIMEOUT_MS,
      connectionTimeoutMs: config.AQUEDUCT_GATEWAY_CONNECTION_TIMEOUT_MS,
      maxConnections: config.AQUEDUCT_GATEWAY_MAX_CONNECTIONS,
      maxPipelined: config.AQUEDUCT_GATEWAY_MAX_PIPELINED,
    },
    ...(options.newId ? { newId: options.newId } : {}),
  });
  const admin = buildAdminApp({
    metrics,
    isReady,
    version: pkg.version,
    maxBatch: config.AQUEDUCT_GATEWAY_MAX_BATCH,
    maxBodyBytes: config.AQUEDUCT_GATEWAY_MAX_BODY_BYTES,
  });
  try {
    await listenOrExplain(
      'AQUEDUCT_GATEWAY_ADMIN_PORT',
      config.AQUEDUCT_GATEWAY_ADMIN_PORT,
      config.AQUEDUCT_GATEWAY_HOST,
      () =>
        onGatewayHost(config.AQUEDUCT_GATEWAY_HOST, () =>
          admin.listen({ port: config.AQUEDUCT_GATEWAY_ADMIN_PORT, host: config.AQUEDUCT_GATEWAY_HOST }),
        ),
    );
    await listenOrExplain(
      'AQUEDUCT_GATEWAY_PORT',
      config.AQUEDUCT_GATEWAY_PORT,
      config.AQUEDUCT_GATEWAY_HOST,
      () =>
        onGatewayHost(config.AQUEDUCT_GATEWAY_HOST, () =>
          app.listen({ port: config.AQUEDUCT_GATEWAY_PORT, host: config.AQUEDUCT_GATEWAY_HOST }),
        ),
    );
  } catch (error) {
    await app.close();
    await admin.close();
    await writer.close();
    reachability?.stop();
    redis?.disconnect();
    throw error;
  }
  const url = urlOf(app.server.address() as AddressInfo);
  const adminUrl = urlOf(admin.server.address() as AddressInfo);
  logger.info(
    {
      url,
      adminUrl,
      topic: config.AQUEDUCT_TOPIC,
      apiKeys: apiKeys.size,
      defaultTenantLimit: defaultLimit,
      tenantOverrides: overrides.size,
    },
    'gateway listening',
  );
  return {
    url,
    port: (app.server.address() as AddressInfo).port,
    adminUrl,
    adminPort: (admin.server.address() as AddressInfo).port,
    get ready() {
      return isReady();
    },
    metrics,
    async close() {
      closing = true;
      await closeGently(app);
      await writer.close();
      await closeGently(admin);
      reachability?.stop();
      redis?.disconnect();
    },
  };
}

function urlOf(address: AddressInfo): string {
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${address.port}`;
}

/**
 * Logs an error when the topic does not exist (every write would fail: 503 and not ready until it is
 * created) and a warning when it cannot keep the promise of a 202 (`acks: -1` on too few replicas).
 * Best effort: while Kafka is down the gateway starts all the same (and answers 503).
 */
async function warnAboutDurability(kafka: Kafka, config: GatewayConfig, logger: Logger): Promise<void> {
  const admin = kafka.admin();
  try {
    await admin.connect();
    if (!(await admin.listTopics()).includes(config.AQUEDUCT_TOPIC)) {
      logger.error(
        { topic: config.AQUEDUCT_TOPIC },
        `topic "${config.AQUEDUCT_TOPIC}" does not exist: requests are answered 503 until it is created (aqueduct publish --create-topic --partitions N), or set AQUEDUCT_TOPIC`,
      );
      return;
    }
    const warnings = await topicWarnings(admin, [config.AQUEDUCT_TOPIC], topicDurabilityOf(config));
    for (const warning of warnings) logger.warn(warning);
  } catch (error) {
    logger.debug({ err: { message: (error as Error).message } }, 'topic durability not checked');
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

/**
 * Runs `listen` on `host`; a host that is no address of this machine (EADDRNOTAVAIL) or no name at all
 * (ENOTFOUND) is a refused AQUEDUCT_GATEWAY_HOST, told in one line naming it rather than as a crash.
 */
async function onGatewayHost<T>(host: string, listen: () => Promise<T>): Promise<T> {
  try {
    return await listen();
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND' || code === 'EAI_AGAIN') {
      throw new ConfigError(
        `AQUEDUCT_GATEWAY_HOST=${host}: cannot listen there (${code}): give an address of this host, or 0.0.0.0 for all of them`,
        { cause: error },
      );
    }
    throw error;
  }
}
