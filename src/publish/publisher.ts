import type { IHeaders, Kafka, Message, Producer } from 'kafkajs';
import { describeIssues } from '../events/decode.ts';
import { notificationEventSchema } from '../events/event.ts';
import { messageKey } from '../events/message-key.ts';
import { createProducer } from '../kafka/client.ts';
import { jsonErrorWithoutInput } from '../redact.ts';
import { PublishTracing } from '../telemetry/producer-tracing.ts';
import { isTracingEnabled } from '../telemetry/tracing.ts';

/** Re-exported for the callers that publish: the key every Aqueduct producer gives an event. */
export { messageKey };

/** A line or object that could not be published. */
export class InvalidEventError extends Error {
  override readonly name = 'InvalidEventError';
  readonly retriable = false;
  /** The event's position among those given, from 1. */
  readonly index: number;
  /** What is wrong with it, without the event's content. */
  readonly reason: string;
  constructor(index: number, reason: string) {
    super(`event ${index}: ${reason}`);
    this.index = index;
    this.reason = reason;
  }
}

/** Options of {@link publishEvents}. */
export interface PublishOptions {
  topic: string;
  /** Events per produce request. Default 500. */
  batchSize?: number;
  /** Validate against the event contract before publishing (default true). Off: raw values are sent as given. */
  validate?: boolean;
  /** Called after each produce request with the running count. */
  onProgress?: (published: number) => void;
  /** Called for each event that is not published (invalid); publishing continues. */
  onInvalid?: (error: InvalidEventError) => void;
  /** Extra headers per event (W3C trace context, for example). */
  headersFor?: (event: unknown, index: number) => IHeaders | undefined;
}

/** What was published. */
export interface PublishResult {
  published: number;
  invalid: number;
  /** Epoch ms when each produce request was acknowledged, with the count it carried. */
  acknowledged: Array<{ at: number; count: number }>;
}

/**
 * Publishes events (objects, or raw strings/Buffers with `validate: false`) with an idempotent
 * producer, acknowledged by all in-sync replicas, in batches. While tracing is on, each message gets a
 * PRODUCER span, ended when its batch is acknowledged, and that span's `traceparent` in its headers.
 */
export async function publishEvents(
  kafka: Kafka,
  events: Iterable<unknown> | AsyncIterable<unknown>,
  options: PublishOptions,
): Promise<PublishResult> {
  const producer: Producer = createProducer(kafka, { allowAutoTopicCreation: false });
  await producer.connect();
  const batchSize = options.batchSize ?? 500;
  const validate = options.validate ?? true;
  const result: PublishResult = { published: 0, invalid: 0, acknowledged: [] };
  const tracing = isTracingEnabled() ? new PublishTracing(options.topic) : undefined;
  let pending: Message[] = [];
  const flush = async () => {
    if (pending.length === 0) return;
    const messages = pending;
    pending = [];
    await producer.send({ topic: options.topic, messages, acks: -1 });
    result.published += messages.length;
    result.acknowledged.push({ at: Date.now(), count: messages.length });
    tracing?.acknowledged(messages.length);
    options.onProgress?.(result.published);
  };
  try {
    let index = 0;
    for await (const raw of events) {
      index++;
      const message = toMessage(raw, index, validate);
      if (message instanceof InvalidEventError) {
        result.invalid++;
        options.onInvalid?.(message);
        continue;
      }
      const extra = options.headersFor?.(raw, index);
      if (extra) message.headers = { ...message.headers, ...extra };
      if (tracing) message.headers = { ...message.headers, ...tracing.start(raw) };
      pending.push(message);
      if (pending.length >= batchSize) await flush();
    }
    await flush();
  } catch (error) {
    tracing?.failed(error);
    throw error;
  } finally {
    await producer.disconnect();
  }
  return result;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function toMessage(raw: unknown, index: number, validate: boolean): Message | InvalidEventError {
  if (!validate) {
    if (typeof raw === 'string' || Buffer.isBuffer(raw)) return { value: raw };
    return { value: JSON.stringify(raw) };
  }
  let candidate = raw;
  if (typeof raw === 'string' || Buffer.isBuffer(raw)) {
    let text: string;
    try {
      text = typeof raw === 'string' ? raw : utf8.decode(raw);
    } catch {
      return new InvalidEventError(index, 'not UTF-8 text (JSON is UTF-8, RFC 8259)');
    }
    try {
      candidate = JSON.parse(text);
    } catch (error) {
      return new InvalidEventError(index, `not JSON: ${jsonErrorWithoutInput(error)}`);
    }
  }
  const parsed = notificationEventSchema.safeParse(candidate);
  if (!parsed.success) return new InvalidEventError(index, describeIssues(parsed.error.issues));
  // The value is the producer's own JSON (not re-serialized with defaults), so what was validated is
  // what is on the topic.
  const value = typeof raw === 'string' || Buffer.isBuffer(raw) ? raw : JSON.stringify(raw);
  return { key: messageKey(parsed.data), value };
}
