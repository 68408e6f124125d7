import { type Config, idempotencyWindowOf, topicsOf } from '../config.ts';
import type { NotificationConsumerOptions } from '../pipeline/consumer-options.ts';
import { topicDurabilityOf } from '../settings-options.ts';

/**
 * The consumer's options from the settings (environment variables or `--config`): the one place below
 * which no setting name is read. The tuning options the settings do not name keep their defaults
 * (CONSUMER_TUNING_DEFAULTS).
 */
export function consumerOptions(config: Config): NotificationConsumerOptions {
  return {
    topics: topicsOf(config),
    topicDurability: topicDurabilityOf(config),
    groupId: config.AQUEDUCT_GROUP_ID,
    redisPrefix: config.AQUEDUCT_REDIS_PREFIX,
    idempotencyWindowSeconds: idempotencyWindowOf(config),
    idempotencyShards: config.AQUEDUCT_IDEMPOTENCY_SHARDS,
    markFlushMs: config.AQUEDUCT_MARK_FLUSH_MS,
    maxMessageBytes: config.AQUEDUCT_MAX_MESSAGE_BYTES,
    maxHeaderBytes: config.AQUEDUCT_MAX_HEADER_BYTES,
    maxAttempts: config.AQUEDUCT_MAX_ATTEMPTS,
    maxThrottles: config.AQUEDUCT_MAX_THROTTLES,
    retryBaseMs: config.AQUEDUCT_RETRY_BASE_MS,
    maxRetryDelayMs: config.AQUEDUCT_MAX_RETRY_DELAY_MS,
    maxFleetBlockMs: config.AQUEDUCT_MAX_FLEET_BLOCK_MS,
    failurePolicy: config.AQUEDUCT_LIMITER_FAILURE_POLICY,
    fetchMaxBytesPerPartition: config.AQUEDUCT_FETCH_MAX_BYTES_PER_PARTITION,
    sessionTimeoutMs: config.AQUEDUCT_SESSION_TIMEOUT_MS,
    metadataMaxAgeMs: config.AQUEDUCT_METADATA_MAX_AGE_MS,
    shutdownTimeoutMs: config.AQUEDUCT_SHUTDOWN_TIMEOUT_MS,
    limits: {
      enabled: config.AQUEDUCT_LIMITER_ENABLED,
      fcm: { rate: config.AQUEDUCT_FCM_RATE, burst: config.AQUEDUCT_FCM_BURST },
      apns: { rate: config.AQUEDUCT_APNS_RATE, burst: config.AQUEDUCT_APNS_BURST },
      tenantRate: config.AQUEDUCT_TENANT_RATE,
      tenantBurst: config.AQUEDUCT_TENANT_BURST,
      acquireChunk: config.AQUEDUCT_ACQUIRE_CHUNK,
      sendConcurrency: config.AQUEDUCT_SEND_CONCURRENCY,
    },
    fairness: {
      enabled: config.AQUEDUCT_TENANT_FAIRNESS,
      weights: config.AQUEDUCT_TENANT_WEIGHTS,
    },
  };
}
