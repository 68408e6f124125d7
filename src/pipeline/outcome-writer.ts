import type { IHeaders, KafkaMessage, Message, Producer, TopicMessages } from 'kafkajs';
import type { Topics } from '../config.ts';
import type { NotificationEvent, Platform } from '../events/event.ts';
import { envelopeBytes, HEADER, writableHeaders } from '../kafka/headers.ts';
import { copyTraceContext } from '../telemetry/kafka-context.ts';
import { parkedPartition } from './parking-lanes.ts';

const AQUEDUCT_HEADER_PREFIX = 'aqueduct-';

/** Where a message was read: the coordinates carried into every record made from it. */
export interface Origin {
  topic: string;
  partition: number;
  offset: string;
}

/** A record for one of the outcome topics. */
export type OutcomeRecord =
  | { kind: 'dead-letter'; message: KafkaMessage; origin: Origin; reasonKind: string; reason: string }
  | {
      kind: 'retry';
      message: KafkaMessage;
      /** The copy's key: the message's own, else its device's (see copyKey in outcomes.ts for why). */
      key: Buffer | string | null;
      origin: Origin;
      attempt: number;
      /** Provider throttles met so far (written only when some). */
      throttles: number;
      notBefore: number;
      reason: string;
    }
  | {
      kind: 'parked';
      message: KafkaMessage;
      /** The copy's key, as a retry copy's. */
      key: Buffer | string | null;
      platform: Platform;
      origin: Origin;
    }
  | {
      kind: 'invalid-token';
      event: NotificationEvent;
      message: KafkaMessage;
      origin: Origin;
      reason: string;
      /** When the provider says the token stopped being valid, epoch ms. */
      invalidSinceMs?: number;
    };

/** The consumer's size limits (see ItemLimits): a `too-large` dead letter copies only what is within them. */
export interface CopyLimits {
  /** Largest message value, in bytes. */
  maxMessageBytes: number;
  /** Largest key plus headers, in bytes. */
  maxHeaderBytes: number;
}

/**
 * Room for what an outcome record holds besides the message's own key, value and headers: Aqueduct's
 * headers (origin coordinates, a reason, an attempt count; reasons are clipped) and the record's framing.
 */
export const OWN_RECORD_BYTES = 2048;

/**
 * Kafka did not take a step's outcome records. Not a kafkajs error, though its cause is one: the consumer
 * group is not at fault, so the step fails and its partition pauses for a back-off (nothing is resolved
 * that was not recorded) rather than the consumer crashing. `retriable` is the cause's: false when the
 * broker refuses the records themselves (a compacted outcome topic refusing keyless records, a record
 * above the topic's `max.message.bytes`), which its settings must change for; the step is still tried
 * again after each back-off, so the partition goes on once they do.
 */
export class OutcomeWriteError extends Error {
  override readonly name = 'OutcomeWriteError';
  readonly retriable: boolean;
  /** The topics of the records that were not taken. */
  readonly topics: string[];

  constructor(topics: string[], cause: unknown) {
    const detail = cause instanceof Error ? cause.message : String(cause);
    super(`Kafka did not take the outcome records for ${topics.join(', ')}: ${detail}`, { cause });
    this.topics = topics;
    this.retriable = (cause as { retriable?: unknown } | null)?.retriable !== false;
  }
}

/**
 * Bytes of records per produce request. A broker refuses a record batch larger than its
 * `message.max.bytes` (1 MiB by default) and kafkajs does not split one, so a step with many large
 * records (hundreds of dead letters near the 16 KiB value limit) is written in several requests.
 */
const MAX_REQUEST_BYTES = 512 * 1024;

/**
 * Writes dead letters, retries, parked events and invalid-token reports, the records of a step in as few produce
 * requests as their size allows (idempotent producer, acknowledged by all in-sync replicas). A record
 * is the event's outcome, so the consumer resolves an offset only after this resolves.
 */
export class OutcomeWriter {
  private readonly producer: Producer;
  private readonly topics: Topics;
  private readonly deferredPartitions: number;
  private readonly limits: CopyLimits;

  /**
   * `deferredPartitions`: the deferred topic's partitions, over which parked events are laid out in
   * one lane per provider (see parkedPartition). `limits`: what a `too-large` dead letter may copy.
   */
  constructor(producer: Producer, topics: Topics, deferredPartitions: number, limits: CopyLimits) {
    this.producer = producer;
    this.topics = topics;
    this.deferredPartitions = deferredPartitions;
    this.limits = limits;
  }

  async write(records: readonly OutcomeRecord[]): Promise<void> {
    let byTopic = new Map<string, Message[]>();
    let bytes = 0;
    const flush = async () => {
      if (byTopic.size === 0) return;
      const topicMessages: TopicMessages[] = [...byTopic].map(([topic, messages]) => ({ topic, messages }));
      byTopic = new Map();
      bytes = 0;
      try {
        await this.producer.sendBatch({ topicMessages, acks: -1 });
      } catch (error) {
        throw new OutcomeWriteError(
          topicMessages.map(({ topic }) => topic),
          error,
        );
      }
    };
    for (const record of records) {
      const [topic, message] = this.toMessage(record);
      const size = envelopeBytes(message) + (message.value?.length ?? 0);
      if (bytes > 0 && bytes + size > MAX_REQUEST_BYTES) await flush();
      const list = byTopic.get(topic) ?? [];
      list.push(message);
      byTopic.set(topic, list);
      bytes += size;
    }
    await flush();
  }

  private toMessage(record: OutcomeRecord): [string, Message] {
    const origin = originHeaders(record.message, record.origin, this.topics);
    switch (record.kind) {
      case 'dead-letter':
        if (record.reasonKind === 'too-large') {
          // Only the parts within their limits are copied, never the original headers: a copy over the
          // limits could be over the broker's too (and block the partition for good). A value within
          // its limit is kept, so a message refused for its headers alone can be replayed. The
          // original stays at its origin coordinates.
          const { key, value } = record.message;
          return [
            this.topics.deadLetter,
            {
              key: key && key.length <= this.limits.maxHeaderBytes ? key : null,
              value: value && value.length <= this.limits.maxMessageBytes ? value : null,
              headers: {
                ...originOnly(origin),
                [HEADER.reasonKind]: record.reasonKind,
                [HEADER.reason]: record.reason,
              },
            },
          ];
        }
        return [
          this.topics.deadLetter,
          {
            key: record.message.key,
            value: record.message.value,
            headers: { ...origin, [HEADER.reasonKind]: record.reasonKind, [HEADER.reason]: record.reason },
          },
        ];
      case 'retry':
        return [
          this.topics.retry,
          {
            key: record.key,
            value: record.message.value,
            headers: {
              ...origin,
              [HEADER.attempt]: String(record.attempt),
              ...(record.throttles > 0 ? { [HEADER.throttles]: String(record.throttles) } : {}),
              [HEADER.notBefore]: String(record.notBefore),
              [HEADER.reason]: record.reason,
            },
          },
        ];
      case 'parked':
        return [
          this.topics.deferred,
          {
            key: record.key,
            value: record.message.value,
            headers: origin,
            partition: parkedPartition(record.platform, record.key, this.deferredPartitions),
          },
        ];
      case 'invalid-token':
        // The token itself is the payload here: upstream needs it to delete the registration. This is
        // data on a topic, never a log line or a span attribute.
        return [
          this.topics.invalidTokens,
          {
            key: record.event.id,
            value: JSON.stringify({
              id: record.event.id,
              platform: record.event.platform,
              token: record.event.token,
              tenant: record.event.tenant,
              reason: record.reason,
              ...(record.invalidSinceMs !== undefined
                ? { invalidSince: new Date(record.invalidSinceMs).toISOString() }
                : {}),
              reportedAt: new Date().toISOString(),
            }),
            headers: { ...origin, [HEADER.reason]: record.reason },
          },
        ];
    }
  }
}

/**
 * The original headers (trace context included), byte for byte and repeated ones all kept (Kafka header
 * values are bytes, and a producer may send one name twice), plus where the event was first read; a
 * message without a valid trace context of its own gets the one its reading started instead. Only
 * Aqueduct writes `aqueduct-*` headers, and only on the retry and deferred topics: on any other topic
 * they are a producer's own and are dropped, so that no producer can fake where a message came from.
 */
function originHeaders(
  message: KafkaMessage,
  origin: Origin,
  topics: Pick<Topics, 'retry' | 'deferred'>,
): IHeaders {
  const fromAqueduct = origin.topic === topics.retry || origin.topic === topics.deferred;
  const headers = writableHeaders(
    message.headers,
    (name) => fromAqueduct || !name.startsWith(AQUEDUCT_HEADER_PREFIX),
  );
  // A message that carried no valid trace context started a trace when it was read: its copy carries
  // that trace on (the message's own tracestate goes with its invalid traceparent, as W3C asks).
  const started = copyTraceContext(message);
  if (started) {
    delete headers.traceparent;
    delete headers.tracestate;
    Object.assign(headers, started);
  }
  // A retried message keeps the coordinates of its first reading.
  headers[HEADER.originTopic] ??= origin.topic;
  headers[HEADER.originPartition] ??= String(origin.partition);
  headers[HEADER.originOffset] ??= origin.offset;
  headers[HEADER.originTimestamp] ??= message.timestamp;
  return headers;
}

/** The origin coordinates alone, out of {@link originHeaders}. */
function originOnly(headers: IHeaders): IHeaders {
  const origin: IHeaders = {};
  for (const name of [
    HEADER.originTopic,
    HEADER.originPartition,
    HEADER.originOffset,
    HEADER.originTimestamp,
  ]) {
    const value = headers[name];
    if (value !== undefined) origin[name] = value;
  }
  return origin;
}
