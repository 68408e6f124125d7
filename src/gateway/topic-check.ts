import type { Kafka } from 'kafkajs';
import type { Logger } from '../log.ts';

/**
 * Kafka's refusals of the topic itself, by kafkajs' protocol error type: the write was refused before
 * anything was appended (the topic's metadata or the produce answer said so), so nothing was written.
 */
const TOPIC_REFUSALS = new Map<string, (topic: string) => string>([
  ['UNKNOWN_TOPIC_OR_PARTITION', (topic) => `topic "${topic}" does not exist`],
  ['TOPIC_AUTHORIZATION_FAILED', (topic) => `not authorized to write to topic "${topic}"`],
  ['INVALID_TOPIC_EXCEPTION', (topic) => `"${topic}" is not a valid topic name`],
]);

/**
 * Why Kafka refused the topic behind `error` (kafkajs wraps the broker's answer in its retry error, as
 * `cause`), or undefined when the failure says nothing definite about the topic (a timeout, a lost
 * connection, a partition without a leader for the moment).
 */
export function topicRefusal(error: unknown, topic: string): string | undefined {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const refusal = TOPIC_REFUSALS.get(String((e as { type?: unknown }).type));
    if (refusal) return refusal(topic);
  }
  return undefined;
}

/** Options of {@link TopicCheck}. */
export interface TopicCheckOptions {
  kafka: Kafka;
  topic: string;
  /** Every this many ms, while the topic is not known to be writable, its metadata is read. Default 2000. */
  intervalMs?: number;
  logger?: Logger;
}

/**
 * Whether the topic is there to be written, for readiness: a connected producer says nothing about the
 * topic (Kafka refuses a missing or forbidden topic only when a write names it), and a gateway that
 * reports ready while every write would be refused keeps getting traffic it can only answer 503, while
 * one that is unready gets none and so never sees a write succeed again. So the topic counts as there
 * once its metadata was read or a write to it was acknowledged, and not after Kafka refused it; until
 * it is there again, its metadata is read every {@link TopicCheckOptions.intervalMs}, whatever traffic
 * comes.
 */
export class TopicCheck {
  private readonly kafka: Kafka;
  private readonly topic: string;
  private readonly intervalMs: number;
  private readonly logger: Logger | undefined;
  private state: 'unknown' | 'there' | 'refused' = 'unknown';
  private timer: NodeJS.Timeout | undefined;
  private checking: Promise<void> | null = null;
  private closed = false;

  constructor(options: TopicCheckOptions) {
    this.kafka = options.kafka;
    this.topic = options.topic;
    this.intervalMs = options.intervalMs ?? 2000;
    this.logger = options.logger;
  }

  /** True once the topic's metadata was read, or a write to it acknowledged, since Kafka last refused it. */
  get there(): boolean {
    return this.state === 'there';
  }

  /** Reads the topic's metadata once; keeps reading it in the background until it is there (never throws). */
  start(): Promise<void> {
    return this.check();
  }

  /** A write to the topic was acknowledged. */
  written(): void {
    this.state = 'there';
  }

  /** Kafka refused a write for the topic itself (see {@link topicRefusal}). */
  refused(): void {
    this.state = 'refused';
    this.schedule();
  }

  /** Stops reading the topic's metadata (waits for a read in flight). */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.checking;
  }

  private check(): Promise<void> {
    this.checking ??= this.readMetadata().finally(() => {
      this.checking = null;
      if (this.state !== 'there') this.schedule();
    });
    return this.checking;
  }

  private async readMetadata(): Promise<void> {
    // No retries: a missing topic is an answer, not a failure to wait out; the next check is the retry.
    const admin = this.kafka.admin({ retry: { retries: 0 } });
    try {
      await admin.connect();
      await admin.fetchTopicMetadata({ topics: [this.topic] });
      if (this.state === 'refused')
        this.logger?.info({ topic: this.topic }, 'topic is there to write to again');
      this.state = 'there';
    } catch (error) {
      const refusal = topicRefusal(error, this.topic);
      // Anything else (Kafka unreachable, a partition between leaders) says nothing about the topic.
      if (refusal) this.state = 'refused';
    } finally {
      await admin.disconnect().catch(() => {});
    }
  }

  private schedule(): void {
    if (this.closed || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (!this.closed && this.state !== 'there') void this.check();
    }, this.intervalMs);
    this.timer.unref();
  }
}
