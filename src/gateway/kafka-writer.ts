import type { Message } from 'kafkajs';
import { ProducerLane, type ProducerLaneOptions } from './producer-lane.ts';
import { TopicCheck } from './topic-check.ts';

/**
 * Writes the gateway's events to the topic and says when Kafka has them: an idempotent producer,
 * `acks: -1` (every in-sync replica), and nothing reported as written that Kafka did not acknowledge.
 *
 * - **Coalescing.** An idempotent producer has one request in flight per broker, so requests that arrive
 *   while a write is in flight are sent together in the next one (up to {@link KafkaWriterOptions.maxBatchBytes}):
 *   one round trip for many HTTP requests, each still answered on its own. A few producers
 *   ({@link KafkaWriterOptions.producers}) keep that many produce requests in flight.
 * - **Bounded.** Every write has a deadline (`timeoutMs` from when its request arrived). A request still
 *   queued at its deadline is dropped unsent; an in-flight write past the earliest deadline of its
 *   requests fails them all. The producer's own retries are bounded well inside that time (kafkajs
 *   retries an idempotent producer forever by default, which would let a write the caller was told had
 *   failed land minutes later, once the broker is back).
 * - **A failed write retires its producer.** kafkajs rewinds a partition's sequence number when a produce
 *   request fails; had the broker in fact written it (a reply lost in a timeout), the next batch of the
 *   same size would reuse that sequence and the broker would acknowledge it as a duplicate without
 *   writing it. A fresh producer gets a new producer id, so that can never happen.
 */

/** Options of {@link KafkaWriter}. */
export interface KafkaWriterOptions extends ProducerLaneOptions {
  /**
   * Idempotent producers (default 4), each with one produce request in flight: requests go to the least
   * busy one. All events of one request go through one producer, so their order per device holds;
   * requests in flight at the same time have no order among them anyway.
   */
  producers?: number;
}

/**
 * Writes events to the topic through a few {@link ProducerLane}s (see the module comment): 202 only
 * after Kafka acknowledged, 503 by the deadline otherwise.
 */
export class KafkaWriter {
  readonly topic: string;
  private readonly lanes: ProducerLane[];
  private readonly topicCheck: TopicCheck;

  constructor(options: KafkaWriterOptions) {
    this.topic = options.topic;
    const count = options.producers ?? 4;
    if (!Number.isInteger(count) || count < 1)
      throw new RangeError(`producers must be an integer >= 1, got ${count}`);
    this.topicCheck = new TopicCheck({
      kafka: options.kafka,
      topic: options.topic,
      ...(options.reconnectIntervalMs !== undefined ? { intervalMs: options.reconnectIntervalMs } : {}),
      ...(options.logger ? { logger: options.logger } : {}),
    });
    const laneOptions: ProducerLaneOptions = {
      ...options,
      onWrite: (sample) => {
        if (sample.ok) this.topicCheck.written();
        else if (sample.refused) this.topicCheck.refused();
        options.onWrite?.(sample);
      },
    };
    this.lanes = Array.from(
      { length: count },
      () =>
        new ProducerLane(laneOptions, (ok) => {
          this.healthy = ok;
        }),
    );
  }

  /** The outcome of the latest write or connection attempt of any producer. */
  private healthy = false;

  /**
   * True while the latest write or connection attempt (of any producer) succeeded, a producer is
   * connected and the topic is there (see {@link TopicCheck}). A failed write makes the gateway unready at
   * once, even though its other producers have not noticed the broker is gone yet; a producer
   * reconnecting in the background makes it ready again, but after Kafka refused the topic itself only
   * once its metadata shows it is back.
   */
  get ready(): boolean {
    return this.healthy && this.topicCheck.there && this.lanes.some((lane) => lane.ready);
  }

  /**
   * Connects the producers and reads the topic's metadata; while Kafka cannot be reached or the topic is
   * missing they keep trying in the background (never throws).
   */
  async start(): Promise<void> {
    await Promise.all([...this.lanes.map((lane) => lane.start()), this.topicCheck.start()]);
  }

  /**
   * Resolves once Kafka acknowledged every message (all in-sync replicas); rejects with
   * {@link KafkaUnavailableError} otherwise, by the deadline at the latest.
   */
  write(messages: Message[]): Promise<void> {
    let best = this.lanes[0] as ProducerLane;
    for (const lane of this.lanes) {
      // A healthy lane before an unhealthy one, then the least busy.
      if (lane.ready !== best.ready ? lane.ready : lane.load < best.load) best = lane;
    }
    return best.write(messages);
  }

  /** Waits for queued and in-flight writes (each still bounded by its deadline), then disconnects. */
  async close(): Promise<void> {
    await Promise.all([this.topicCheck.close(), ...this.lanes.map((lane) => lane.close())]);
  }
}
