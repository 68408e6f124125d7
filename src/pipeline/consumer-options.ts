import type { Topics } from '../config.ts';
import type { TopicDurability } from '../kafka/topics.ts';

/** A provider's token bucket, shared by the whole fleet. */
export interface BucketLimit {
  /** Pushes per second allowed to the whole fleet (may be fractional). */
  rate: number;
  /** The most pushes the fleet may send at once after an idle spell (the bucket's capacity). */
  burst: number;
}

/** The token buckets the consumer's sends are metered by. */
export interface ConsumerLimits {
  /** False: no limit at all (every event is sent unmetered). */
  enabled: boolean;
  fcm: BucketLimit;
  apns: BucketLimit;
  /** Per-tenant cap inside the provider's limit (each tenant its own bucket); undefined: none. */
  tenantRate: number | undefined;
  /** Burst of each tenant bucket; undefined: one second of `tenantRate`. */
  tenantBurst: number | undefined;
  /** Tokens a throttled pool waits for before asking again; undefined: a quarter second of the provider's rate, at least 200. */
  acquireChunk: number | undefined;
  /** Pushes in flight at once per provider in this process (also the least of a pool's send window). */
  sendConcurrency: number;
}

/** How the provider's budget is shared among tenants. */
export interface TenantFairness {
  /**
   * True: the events of a tenant over its max-min fair share are parked on the deferred topic and read
   * back with low-priority tokens, so that they hold back no other tenant. False: first come, first served.
   */
  enabled: boolean;
  /** Weight of each tenant named (others weigh 1): shares are split in proportion to weight. */
  weights: ReadonlyMap<string, number>;
}

/**
 * How a {@link NotificationConsumer} runs. Built from the settings by `src/consume/options.ts`; see
 * docs/configuration.md for the settings each option comes from.
 */
export interface NotificationConsumerOptions {
  /** The topics read (main and retry) and written (retry, dead letters, invalid tokens). */
  topics: Topics;
  /** Replication of the outcome topics it creates, and what it warns about in existing ones. */
  topicDurability: TopicDurability;
  /** The consumer group every instance joins. */
  groupId: string;
  /** Prefix of every Redis key the consumer writes (the dedupe memory). */
  redisPrefix: string;
  /**
   * How long a final outcome is remembered by (tenant, id), in seconds: a second copy of an event
   * published within it is skipped. 0 turns it off (redeliveries are still recognized by offset).
   */
  idempotencyWindowSeconds: number;
  /** Shards of the idempotency window (see DoneStoreOptions.shards). */
  idempotencyShards: number;
  /** How long marks wait for others before going to Redis together, in ms (DoneStoreOptions.markCoalesceMs). */
  markFlushMs: number;
  /** Largest accepted message value, in bytes: a larger one is dead-lettered before it is parsed. */
  maxMessageBytes: number;
  /** Largest accepted message key plus headers, in bytes: a larger message is dead-lettered unread. */
  maxHeaderBytes: number;
  /** Attempts before a transiently failing event is dead-lettered. */
  maxAttempts: number;
  /** Provider throttles (429s) one event may meet before it is dead-lettered; they spend no attempt. */
  maxThrottles: number;
  /** First retry delay, in ms; doubles each attempt (with jitter) unless the provider said Retry-After. */
  retryBaseMs: number;
  /** Longest delay of one event's retry, in ms (a Retry-After or the back-off is cut to it). */
  maxRetryDelayMs: number;
  /** Longest fleet-wide block a project-wide 429 sets, in ms. */
  maxFleetBlockMs: number;
  /** When Redis cannot be reached: `closed` waits (nothing is sent unmetered), `open` sends anyway. */
  failurePolicy: 'closed' | 'open';
  /** Bytes fetched per partition per request: bounds the re-read window after a pause. */
  fetchMaxBytesPerPartition: number;
  /** Kafka group session timeout, in ms: how long a member that died without leaving holds its partitions. */
  sessionTimeoutMs: number;
  /**
   * How often the topics' metadata is read again, in ms (kafkajs `metadataMaxAge`): partitions added to
   * a topic are assigned once a member has seen them.
   */
  metadataMaxAgeMs: number;
  /** Bound of a graceful stop, in ms: in-flight work finishes and offsets commit within it. */
  shutdownTimeoutMs: number;
  /** The token buckets. */
  limits: ConsumerLimits;
  /** Max-min fairness among tenants under the provider's limit (see TenantShares). */
  fairness: TenantFairness;
  /** Most pushes started in one step of a batch. Default 2000. */
  maxPerStep?: number;
  /** Partitions whose batches are handled at once (kafkajs `partitionsConsumedConcurrently`). Default 8. */
  partitionsConsumedConcurrently?: number;
  /**
   * Interval of the group heartbeats, in ms. A member learns of a rebalance at its next heartbeat: a
   * short interval keeps the stop short. Default 1000.
   */
  heartbeatIntervalMs?: number;
  /**
   * Longest a fetch waits for data, in ms (kafkajs `maxWaitTimeInMs`): a resumed partition should be
   * fetched promptly, not after a long-poll of an idle one. Default 100.
   */
  maxWaitTimeMs?: number;
  /** How long the group waits for every member to rejoin during a rebalance, in ms. Default 60000. */
  rebalanceTimeoutMs?: number;
  /** How often resolved offsets are committed, in ms (kafkajs `autoCommitInterval`). Default 1000. */
  autoCommitIntervalMs?: number;
  /**
   * How long after a rejoin newly assigned partitions read their done-marks again before each send, in
   * ms (see Sender.recheck). Default 10000.
   */
  recheckAfterRejoinMs?: number;
}

/** The defaults of the tuning options of {@link NotificationConsumerOptions}. */
export const CONSUMER_TUNING_DEFAULTS = {
  maxPerStep: 2000,
  partitionsConsumedConcurrently: 8,
  heartbeatIntervalMs: 1000,
  maxWaitTimeMs: 100,
  rebalanceTimeoutMs: 60_000,
  autoCommitIntervalMs: 1000,
  recheckAfterRejoinMs: 10_000,
} satisfies Partial<NotificationConsumerOptions>;

/** The options with every tuning option set. */
export type ResolvedConsumerOptions = NotificationConsumerOptions & typeof CONSUMER_TUNING_DEFAULTS;

/** The options, with the defaults of the tuning options not given. */
export function withTuningDefaults(options: NotificationConsumerOptions): ResolvedConsumerOptions {
  const defaults = CONSUMER_TUNING_DEFAULTS;
  return {
    ...options,
    maxPerStep: options.maxPerStep ?? defaults.maxPerStep,
    partitionsConsumedConcurrently:
      options.partitionsConsumedConcurrently ?? defaults.partitionsConsumedConcurrently,
    heartbeatIntervalMs: options.heartbeatIntervalMs ?? defaults.heartbeatIntervalMs,
    maxWaitTimeMs: options.maxWaitTimeMs ?? defaults.maxWaitTimeMs,
    rebalanceTimeoutMs: options.rebalanceTimeoutMs ?? defaults.rebalanceTimeoutMs,
    autoCommitIntervalMs: options.autoCommitIntervalMs ?? defaults.autoCommitIntervalMs,
    recheckAfterRejoinMs: options.recheckAfterRejoinMs ?? defaults.recheckAfterRejoinMs,
  };
}
