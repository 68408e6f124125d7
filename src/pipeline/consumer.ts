import type { Consumer, Kafka, Producer } from 'kafkajs';
import { derivedTopics, readBackGroupId, type Topics } from '../config.ts';
import type { NotificationEvent, Platform } from '../events/event.ts';
import { createProducer } from '../kafka/client.ts';
import { isRebalancing, restartable } from '../kafka/errors.ts';
import { ensureTopics, topicWarnings } from '../kafka/topics.ts';
import { poolKey, poolPlan } from '../limiter/pool-policy.ts';
import { type PoolBucket, TokenPool, type TokenSource } from '../limiter/token-pool.ts';
import type { Logger } from '../log.ts';
import { CREDENTIAL_FAILURE } from '../providers/fcm-classification.ts';
import type { PushProvider } from '../providers/types.ts';
import type { RedisClient } from '../redis/client.ts';
import { BatchProcessor, type TokenPriority } from './batch-processor.ts';
import {
  type NotificationConsumerOptions,
  type ResolvedConsumerOptions,
  withTuningDefaults,
} from './consumer-options.ts';
import { DoneStore } from './done-store.ts';
import { noopObserver, type PipelineObserver } from './observer.ts';
import { OutcomeWriter, OWN_RECORD_BYTES } from './outcome-writer.ts';
import { Parking } from './parking.ts';
import { TenantPools } from './tenant-pools.ts';
import { TenantShares } from './tenant-shares.ts';

/** What {@link NotificationConsumer.start} needs besides its options. */
export interface ConsumerDeps {
  kafka: Kafka;
  redis: RedisClient;
  providers: Record<Platform, PushProvider>;
  /** The Redis token bucket; ignored when the limiter is disabled. */
  tokenSource: TokenSource;
  logger: Logger;
  observer?: PipelineObserver;
}

/**
 * One kafkajs consumer of the process, a member of one group. The main topic and its retry topic are
 * read by the group `AQUEDUCT_GROUP_ID`; the deferred topic by a group of its own (see
 * {@link readBackGroupId}): kafkajs fetches again only once every batch of its last fetch has been
 * handled, so with one consumer for all three, the sends of parked events read back and the parking of
 * a burst on the main topic would each hold the other back.
 */
interface GroupMember {
  /** In logs: `main` or `deferred`. */
  name: 'main' | 'deferred';
  consumer: Consumer;
  topics: string[];
  joined: boolean;
  /** Group joins so far: the first, and one per rebalance after it. */
  joins: number;
  /** A restart after a crash: scheduled, then joining the group. Stopping waits for it (see stop). */
  restartTimer: NodeJS.Timeout | undefined;
  restarting: Promise<void> | undefined;
}

/** A started consumer: a member of the group (and of the read-back group). */
export class NotificationConsumer {
  readonly topics: Topics;
  private readonly options: ResolvedConsumerOptions;
  private readonly deps: ConsumerDeps;
  private readonly members: GroupMember[];
  private readonly producer: Producer;
  private readonly processor: BatchProcessor;
  private readonly observer: PipelineObserver;
  private readonly pools = new TenantPools<TokenPool>();
  /** Called when the consumer died for good (a non-retriable crash); the process should exit. */
  onFatal: ((error: Error) => void) | undefined;
  private stopping: Promise<StopResult> | undefined;

  /** Tenant fairness (undefined when off). */
  private readonly parking: Parking | undefined;
  /** Partitions of the main topic, as last read (at start, then at each join of the group). */
  private partitionCount: number;
  /** Joins of the main group so far: a count read for an earlier join is not applied after a later one. */
  private mainJoins = 0;
  /** The partition count being read after a join, if one is (stop waits for it, see fleetShareAfterJoin). */
  private partitionCountRead: Promise<void> | undefined;

  private constructor(
    options: NotificationConsumerOptions,
    deps: ConsumerDeps,
    producer: Producer,
    partitionCounts: { main: number; deferred: number },
  ) {
    this.options = withTuningDefaults(options);
    this.deps = deps;
    this.topics = options.topics;
    this.producer = producer;
    const member = (name: GroupMember['name'], groupId: string, topics: string[]): GroupMember => ({
      name,
      consumer: deps.kafka.consumer({
        groupId,
        maxBytesPerPartition: this.options.fetchMaxBytesPerPartition,
        maxWaitTimeInMs: this.options.maxWaitTimeMs,
        sessionTimeout: this.options.sessionTimeoutMs,
        metadataMaxAge: this.options.metadataMaxAgeMs,
        rebalanceTimeout: this.options.rebalanceTimeoutMs,
        heartbeatInterval: this.options.heartbeatIntervalMs,
        // kafkajs asks the broker to create a subscribed topic it does not find, and a broker with
        // auto.create.topics.enable (Kafka's default) does, with its default partitions and settings: a
        // topic an operator deletes to create it again would be back at once with the broker's defaults.
        allowAutoTopicCreation: false,
        // kafkajs would restart itself after a retriable crash, with a new group member that nothing
        // here can reach: stopped while it is still joining, it joins anyway and consumes on, and the
        // process never exits. This class restarts it instead (restartAfterCrash), so that a stop can
        // wait for it.
        retry: { restartOnFailure: async () => false },
      }),
      topics,
      joined: false,
      joins: 0,
      restartTimer: undefined,
      restarting: undefined,
    });
    this.members = [
      member('main', this.options.groupId, [this.topics.main, this.topics.retry]),
      member('deferred', readBackGroupId(this.options.groupId), [this.topics.deferred]),
    ];
    const observer = deps.observer ?? noopObserver;
    this.observer = observer;
    this.partitionCount = partitionCounts.main;
    this.parking = this.options.fairness.enabled
      ? new Parking(
          new TenantShares({
            weights: this.options.fairness.weights,
            nominalRates: new Map([
              ['fcm', this.options.limits.fcm.rate],
              ['apns', this.options.limits.apns.rate],
            ]),
          }),
          this.topics,
        )
      : undefined;
    const doneStore = new DoneStore(deps.redis, {
      prefix: this.options.redisPrefix,
      groupId: this.options.groupId,
      windowSeconds: this.options.idempotencyWindowSeconds,
      shards: this.options.idempotencyShards,
      markCoalesceMs: this.options.markFlushMs,
    });
    // Kafka's commit says what is done below it: the finished offsets under it are dropped from Redis.
    for (const { consumer } of this.members)
      consumer.on(consumer.events.COMMIT_OFFSETS, ({ payload }) => {
        for (const { topic, partitions } of payload.topics)
          for (const { partition, offset } of partitions)
            doneStore.committed({ topic, partition: Number(partition) }, offset);
      });
    // A fetch holding only records a consumer skips (an aborted transaction's, and the transaction
    // markers) never reaches eachBatch: kafkajs resolves its last offset itself but commits it only if
    // its auto-commit interval has passed since the last commit, and the empty fetches after it commit
    // nothing. A partition whose log ends so would keep a lag for good (KEDA scales on it). Everything
    // below that batch was resolved before kafkajs fetched it, so its end is committed at once.
    for (const { consumer } of this.members)
      consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) => {
        if (payload.batchSize !== 0) return;
        const offset = (BigInt(payload.lastOffset) + 1n).toString();
        consumer
          .commitOffsets([{ topic: payload.topic, partition: payload.partition, offset }])
          .catch((error: unknown) =>
            deps.logger.debug({ err: errorSummary(error) }, 'commit past skipped records failed'),
          );
      });
    this.processor = new BatchProcessor(
      {
        providers: deps.providers,
        doneStore,
        outcomes: new OutcomeWriter(producer, this.topics, partitionCounts.deferred, {
          maxMessageBytes: this.options.maxMessageBytes,
          maxHeaderBytes: this.options.maxHeaderBytes,
        }),
        poolFor: (event, priority) => this.poolFor(event, priority),
        ...(this.parking ? { parking: this.parking } : {}),
        pause: (topic, partition) => this.pauseOrResume('pause', topic, partition),
        resume: (topic, partition) => this.pauseOrResume('resume', topic, partition),
        observer,
      },
      {
        retryTopic: this.topics.retry,
        deferredTopic: this.topics.deferred,
        maxMessageBytes: this.options.maxMessageBytes,
        maxHeaderBytes: this.options.maxHeaderBytes,
        maxAttempts: this.options.maxAttempts,
        maxThrottles: this.options.maxThrottles,
        retryBaseMs: this.options.retryBaseMs,
        maxRetryDelayMs: this.options.maxRetryDelayMs,
        maxFleetBlockMs: this.options.maxFleetBlockMs,
        maxPerStep: this.options.maxPerStep,
        failOpen: this.options.failurePolicy === 'open',
      },
    );
  }

  /** Connects, creates the outcome topics, joins the group and starts consuming. */
  static async start(
    options: NotificationConsumerOptions,
    deps: ConsumerDeps,
  ): Promise<NotificationConsumer> {
    const { topics } = options;
    const admin = deps.kafka.admin();
    await admin.connect();
    let numPartitions = 1;
    let deferredPartitions = 1;
    try {
      const existing = new Set(await admin.listTopics());
      if (!existing.has(topics.main)) {
        throw new Error(
          `topic "${topics.main}" does not exist: create it (aqueduct publish --create-topic --partitions N) or set AQUEDUCT_TOPIC`,
        );
      }
      const [metadata] = (await admin.fetchTopicMetadata({ topics: [topics.main] })).topics;
      numPartitions = metadata?.partitions.length ?? 1;
      await ensureTopics(
        admin,
        derivedTopics(topics).map((topic) => ({ topic, numPartitions })),
        options.topicDurability,
      );
      // An existing deferred topic keeps its own count: parked events are laid out over what it has.
      const [deferred] = (await admin.fetchTopicMetadata({ topics: [topics.deferred] })).topics;
      deferredPartitions = deferred?.partitions.length ?? 1;
      const family = [topics.main, ...derivedTopics(topics)];
      const recordBytes = options.maxMessageBytes + options.maxHeaderBytes + OWN_RECORD_BYTES;
      for (const warning of await topicWarnings(admin, family, options.topicDurability, recordBytes)) {
        deps.logger.warn(warning);
      }
    } finally {
      await admin.disconnect();
    }

    // Writes only to the topics ensured above: one deleted meanwhile is not created with the broker's defaults.
    const producer = createProducer(deps.kafka, { allowAutoTopicCreation: false });
    await producer.connect();
    // Loads the outcome topics' metadata now (a batch without messages sends nothing): the first step
    // that parks or retries events would otherwise wait for it while its partition holds.
    await producer.sendBatch({
      acks: -1,
      topicMessages: derivedTopics(topics).map((topic) => ({ topic, messages: [] })),
    });
    const instance = new NotificationConsumer(options, deps, producer, {
      main: numPartitions,
      deferred: deferredPartitions,
    });
    await instance.run();
    return instance;
  }

  /** True once this process has joined its groups and received its partitions. */
  get ready(): boolean {
    return this.members.every((member) => member.joined) && !this.stopping;
  }

  private memberOf(topic: string): GroupMember {
    return this.members.find((member) => member.topics.includes(topic)) ?? (this.members[0] as GroupMember);
  }

  pausedPartitions(): number {
    return this.processor.pausedCount();
  }

  private async run(): Promise<void> {
    for (const member of this.members) this.watch(member);
    await Promise.all(this.members.map((member) => this.startConsuming(member)));
  }

  /**
   * Tells the fair shares which part of the main topic's partitions this process holds after a join:
   * at once with the count last read, then with the topic's count read anew, since a join may follow
   * partitions added to the topic (which this process's part of the provider's rate depends on).
   */
  private fleetShareAfterJoin(assigned: number): void {
    const parking = this.parking;
    if (!parking) return;
    parking.assigned(assigned, this.partitionCount);
    const join = ++this.mainJoins;
    this.partitionCountRead = this.readPartitionCount().then((count) => {
      if (count === undefined || join !== this.mainJoins || count === this.partitionCount) return;
      this.deps.logger.info(
        { topic: this.topics.main, partitions: count, before: this.partitionCount },
        'the topic has a new partition count',
      );
      this.partitionCount = count;
      parking.assigned(assigned, count);
    });
  }

  /**
   * The main topic's partition count from the brokers, or undefined when they could not say. Asked
   * once, without kafkajs' retries: the count read before stays meanwhile, and a stop waits for this.
   */
  private async readPartitionCount(): Promise<number | undefined> {
    const admin = this.deps.kafka.admin({ retry: { retries: 0 } });
    try {
      await admin.connect();
      const [metadata] = (await admin.fetchTopicMetadata({ topics: [this.topics.main] })).topics;
      return metadata && metadata.partitions.length > 0 ? metadata.partitions.length : undefined;
    } catch (error) {
      // The count read before stays: it only sets how much of the rate the fair shares assume is ours.
      this.deps.logger.debug({ err: errorSummary(error) }, 'could not read the partition count');
      return undefined;
    } finally {
      await admin.disconnect().catch(() => {});
    }
  }

  private watch(member: GroupMember): void {
    const { logger } = this.deps;
    const { consumer } = member;
    const events = consumer.events;
    consumer.on(events.GROUP_JOIN, ({ payload }) => {
      // Partition state (pause timers, finished offsets) never survives a rebalance: a partition that
      // stays ours is re-read from its committed offset and deduped against Redis.
      this.processor.reset({ unpause: true, topics: member.topics });
      // A rejoin may bring partitions of a member that was expelled (its session expired) and is still
      // finishing a step: their done-marks are read again before each send for a while, longer than
      // that member may go on (until its next heartbeat, due before each of its send windows: about a
      // second, more when a provider is slow). A process's first join skips it (no extra Redis calls).
      if (member.joins++ > 0) this.processor.recheckAssignedFor(this.options.recheckAfterRejoinMs);
      if (member.name === 'main')
        this.fleetShareAfterJoin(payload.memberAssignment[this.topics.main]?.length ?? 0);
      member.joined = true;
      logger.info(
        { assignment: payload.memberAssignment, leader: payload.isLeader },
        member.name === 'main' ? 'joined the consumer group' : 'joined the read-back group',
      );
    });
    consumer.on(events.REBALANCING, () => {
      this.processor.revoke(member.topics);
      logger.info({ group: member.name }, 'rebalancing');
    });
    consumer.on(events.CRASH, ({ payload }) => {
      const restart = !this.stopping && restartable(payload.error);
      logger.error({ group: member.name, err: errorSummary(payload.error), restart }, 'consumer crashed');
      // The crashed member's partitions are gone with its group session: their resume timers must not
      // fire into a kafkajs consumer that is not running (its restart starts with nothing paused).
      this.processor.reset({ unpause: false, topics: member.topics });
      if (this.stopping) return;
      if (restart) {
        member.joined = false; // not ready until it has joined again
        this.restartAfterCrash(member, 1);
        return;
      }
      // After any other crash this member is dead weight in the group: stop cleanly so the process
      // exits and its supervisor starts a fresh one.
      this.onFatal?.(payload.error);
    });
  }

  /**
   * Pauses or resumes a partition of the member that reads `topic`. Called from timers: a kafkajs
   * consumer that is not running (crashed, restarting, stopped) refuses with an error, which must not
   * escape the timer and end the process; it has nothing paused to resume either.
   */
  private pauseOrResume(action: 'pause' | 'resume', topic: string, partition: number): void {
    const member = this.memberOf(topic);
    try {
      member.consumer[action]([{ topic, partitions: [partition] }]);
    } catch (error) {
      this.deps.logger.warn(
        { group: member.name, topic, partition, err: errorSummary(error) },
        `could not ${action} a partition: its consumer is not running`,
      );
    }
  }

  /** Starts a kafkajs consumer again after a crash, backing off up to 30 s while it fails. */
  private restartAfterCrash(member: GroupMember, attempt: number): void {
    const delayMs = Math.min(30_000, 1000 * 2 ** (attempt - 1));
    this.deps.logger.warn({ group: member.name, attempt, delayMs }, 'restarting the consumer');
    member.restartTimer = setTimeout(() => {
      member.restartTimer = undefined;
      if (this.stopping) return;
      this.processor.reset({ unpause: true, topics: member.topics });
      member.restarting = this.startConsuming(member)
        .catch((error: unknown) => {
          this.deps.logger.warn({ group: member.name, err: errorSummary(error) }, 'consumer restart failed');
          if (this.stopping) return;
          void member.consumer.disconnect().catch(() => {});
          this.restartAfterCrash(member, attempt + 1);
        })
        .finally(() => {
          member.restarting = undefined;
        });
    }, delayMs);
  }

  private async startConsuming(member: GroupMember): Promise<void> {
    await member.consumer.connect();
    await member.consumer.subscribe({ topics: member.topics, fromBeginning: true });
    await member.consumer.run({
      eachBatchAutoResolve: false,
      autoCommitInterval: this.options.autoCommitIntervalMs,
      partitionsConsumedConcurrently: this.options.partitionsConsumedConcurrently,
      eachBatch: (payload) =>
        this.processor.eachBatch(payload).catch((error: unknown) => {
          // A heartbeat that finds a rebalance under way is the member's first word of it: every
          // partition of the member is handed out anew, so the steps still running on its other
          // partitions stop sending now rather than at their own next heartbeat.
          if (isRebalancing(error)) this.processor.revoke(member.topics);
          throw error;
        }),
    });
  }

  /**
   * The pool of an event's bucket group (its provider's bucket, and its tenant's when it has one) and
   * priority: parked events read back take low-priority tokens from pools of their own.
   */
  private poolFor(event: NotificationEvent, priority: TokenPriority): TokenPool | undefined {
    if (!this.options.limits.enabled) return undefined;
    const key = poolKey(event.platform, event.tenant, this.options.limits);
    return this.pools.get(priority === 'low' ? `${key}:low` : key, () => {
      const provider = this.providerBucket(event.platform);
      const { buckets, chunk, window } = poolPlan(provider, event.tenant, this.options.limits);
      return new TokenPool(this.deps.tokenSource, buckets, {
        chunk,
        window,
        priority,
        // A woken partition's take comes once kafkajs fetches it again: up to a fetch wait later.
        wakeLeadMs: this.options.maxWaitTimeMs,
        onError: (error) => {
          this.observer.limiterError?.(error);
          this.deps.logger.warn({ err: errorSummary(error) }, 'token acquire failed');
        },
        onAcquire: (acquire) => this.observer.poolAcquired?.(buckets, acquire),
      });
    });
  }

  private providerBucket(platform: Platform): PoolBucket {
    const { rate, burst } = this.options.limits[platform];
    return { name: platform, rate, capacity: burst };
  }

  /**
   * Graceful stop: no new fetches, the batch in progress finishes its sends and records, offsets are
   * committed, held tokens are refunded, connections close. Bounded by `timeoutMs` (default: the
   * `shutdownTimeoutMs` option); past it the process may exit and the uncommitted tail is redelivered
   * (and deduped) elsewhere.
   *
   * kafkajs' stop waits for whatever its group member is doing, and after a broker restart that can be
   * a commit retried with back-off and then a rejoin of the group, which takes up to the rebalance
   * timeout and is not cut short by the stop. So the kafkajs part gets most of the bound, and when it
   * has not finished by then the rest (done-marks, refunds, the producer) still runs; `timedOut` then
   * tells the caller that kafkajs is still busy and only the process's exit ends it.
   */
  stop(timeoutMs = this.options.shutdownTimeoutMs): Promise<StopResult> {
    this.stopping ??= (async () => {
      const { logger } = this.deps;
      const started = Date.now();
      for (const member of this.members) clearTimeout(member.restartTimer);
      const kafkaStopped = within(
        Math.round(timeoutMs * 0.7),
        (async () => {
          // A restart that is joining the group must finish (or fail) first: kafkajs can only stop a
          // member once its join has returned.
          await Promise.all(this.members.map((member) => member.restarting));
          // No resume timer may fire into a stopping consumer (kafkajs throws once it has stopped).
          this.processor.reset({ unpause: false });
          await Promise.all(this.members.map((member) => member.consumer.stop()));
        })(),
      );
      const stuck: string[] = [];
      if (!(await kafkaStopped)) stuck.push('kafkajs consumer stop');
      const rest = async () => {
        // The last steps' done-marks are not waited for by the steps themselves: they land before Redis
        // is let go.
        await this.processor.marksSettled();
        if (stuck.length === 0) await Promise.all(this.members.map((member) => member.consumer.disconnect()));
        await this.pools.closeAll();
        await this.producer.disconnect();
        await this.partitionCountRead;
      };
      if (!(await within(Math.max(0, started + timeoutMs - Date.now()), rest()))) {
        stuck.push('done-marks, refunds and producer disconnect');
      }
      const timedOut = stuck.length > 0;
      logger.info(
        { ms: Date.now() - started, timedOut, ...(timedOut ? { stuck } : {}) },
        timedOut ? 'drain timed out' : 'drained and committed',
      );
      return { timedOut };
    })();
    return this.stopping;
  }
}

/** What {@link NotificationConsumer.stop} achieved. */
export interface StopResult {
  /** Something was still running when the bound passed (kafkajs rejoining, say): only an exit ends it. */
  timedOut: boolean;
}

/** True when `work` settles within `ms`; false when the time ran out first (the work goes on). */
async function within(ms: number, work: Promise<unknown>): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(resolve, ms, false);
    timer.unref();
  });
  try {
    return await Promise.race([work.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** An error as a log field: its name, message and retriable flag, never its full context. */
export function errorSummary(error: unknown): Record<string, unknown> {
  if (!(error instanceof Error)) return { message: String(error) };
  return {
    name: error.name,
    message: error.message,
    ...('retriable' in error ? { retriable: (error as { retriable: unknown }).retriable } : {}),
  };
}

/**
 * Logs the pipeline's failures (Redis or an outcome topic unavailable, a provider refusing our
 * credentials' refresh rate), at most one line per kind every five seconds with the count in between:
 * a Redis outage must not turn into thousands of log lines.
 */
export function failureLogger(
  logger: Logger,
): Pick<PipelineObserver, 'stepFailed' | 'markFailed' | 'outcome'> {
  const last = new Map<string, { at: number; suppressed: number }>();
  const log = (kind: string, error: unknown, fields: Record<string, unknown>) => {
    const now = Date.now();
    const seen = last.get(kind);
    if (seen && now - seen.at < 5000) {
      seen.suppressed++;
      return;
    }
    last.set(kind, { at: now, suppressed: 0 });
    logger.warn({ err: errorSummary(error), ...fields, suppressed: seen?.suppressed ?? 0 }, kind);
  };
  return {
    stepFailed: (error, topic, partition) =>
      log('batch step failed; partition paused for a back-off', error, { topic, partition }),
    markFailed: (error, count) => log('dedupe marks unavailable', error, { count }),
    outcome: (event, outcome) => {
      if (outcome.kind === 'retry' && outcome.reason.startsWith(CREDENTIAL_FAILURE)) {
        log(
          "FCM: no OAuth access token (GOOGLE_APPLICATION_CREDENTIALS, or the way to Google's token endpoint): pushes are retried, and dead-lettered after AQUEDUCT_MAX_ATTEMPTS",
          new Error(outcome.reason),
          { provider: event.platform },
        );
        return;
      }
      // Not a rate limit on sends but on how often the provider token changes (APNs
      // TooManyProviderTokenUpdates): a configuration problem, worth an operator's look.
      if (outcome.kind !== 'retry' || outcome.scope !== 'credentials') return;
      log(
        'APNs refuses our provider-token updates as too frequent (a credentials set-up problem, not the send rate): the token signed with APNS_KEY_ID changed again within 20 minutes; processes signing their own (AQUEDUCT_APNS_SHARED_TOKEN=false, or Redis out of reach), another system signing with the same key, or a clock far off; pushes are retried',
        new Error(outcome.reason),
        { provider: event.platform },
      );
    },
  };
}
