import type { IHeaders, KafkaMessage, Message, Producer, TopicMessages } from 'kafkajs';
import type { Topics } from '../config.ts';
import type { NotificationEvent } from '../events/event.ts';
import { HEADER, stringHeaders } from '../kafka/headers.ts';

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
      origin: Origin;
      attempt: number;
      notBefore: number;
      reason: string;
    }
  | {
      kind: 'invalid-token';
      event: NotificationEvent;
      message: KafkaMessage;
      origin: Origin;
      reason: string;
    };

/**
 * Writes dead letters, retries and invalid-token reports, all records of a batch in one produce
 * request (idempotent producer, acknowledged by all in-sync replicas). A record is the event's
 * outcome, so the consumer resolves an offset only after this resolves.
 */
export class OutcomeWriter {
  private readonly producer: Producer;
  private readonly topics: Topics;

  constructor(producer: Producer, topics: Topics) {
    this.producer = producer;
    this.topics = topics;
  }

  async write(records: readonly OutcomeRecord[]): Promise<void> {
    if (records.length === 0) return;
    const byTopic = new Map<string, Message[]>();
    for (const record of records) {
      const [topic, message] = this.toMessage(record);
      const list = byTopic.get(topic) ?? [];
      list.push(message);
      byTopic.set(topic, list);
    }
    const topicMessages: TopicMessages[] = [...byTopic].map(([topic, messages]) => ({ topic, messages }));
    await this.producer.sendBatch({ topicMessages, acks: -1 });
  }

  private toMessage(record: OutcomeRecord): [string, Message] {
    const origin = originHeaders(record.message, record.origin);
    switch (record.kind) {
      case 'dead-letter':
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
            key: record.message.key,
            value: record.message.value,
            headers: {
              ...origin,
              [HEADER.attempt]: String(record.attempt),
              [HEADER.notBefore]: String(record.notBefore),
              [HEADER.reason]: record.reason,
            },
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
              reportedAt: new Date().toISOString(),
            }),
            headers: { ...origin, [HEADER.reason]: record.reason },
          },
        ];
    }
  }
}

/** The original headers (trace context included), plus where the event was first read. */
function originHeaders(message: KafkaMessage, origin: Origin): IHeaders {
  const headers: Record<string, string> = stringHeaders(message.headers);
  // A retried message keeps the coordinates of its first reading.
  headers[HEADER.originTopic] ??= origin.topic;
  headers[HEADER.originPartition] ??= String(origin.partition);
  headers[HEADER.originOffset] ??= origin.offset;
  headers[HEADER.originTimestamp] ??= message.timestamp;
  return headers;
}
