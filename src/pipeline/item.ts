import type { KafkaMessage } from 'kafkajs';
import { type DecodeResult, decodeEvent } from '../events/decode.ts';
import { idempotencyKey, type NotificationEvent } from '../events/event.ts';
import { envelopeBytes, HEADER, headerNumber } from '../kafka/headers.ts';
import type { PushOutcome } from '../providers/types.ts';
import { IdempotencyKey } from './idempotency-key.ts';

/** One message of a partition, decoded once and remembered until its offset is resolved. */
export interface Item {
  offset: string;
  message: KafkaMessage;
  decoded: DecodeResult;
  /** 1 for an event read from the main topic; the retry topic counts up. */
  attempt: number;
  /** Read from the retry topic: a copy of an event that was sent, or held back for its device, before. */
  fromRetryTopic: boolean;
  /** Provider throttles it has met (retries only; they spend no attempt). */
  throttles: number;
  /** Epoch ms before which it must not be sent (retries only); 0 for "now". */
  notBefore: number;
  /**
   * When it was published: the Kafka timestamp of its first message (for a retried or parked copy, the
   * one its origin headers keep), epoch ms. A TTL counts from here.
   */
  publishedAtMs: number;
  /** The key its outcome is recorded under: the event's (tenant, id), or the message's coordinates when it has none. */
  dedupeKey: IdempotencyKey;
}

/** An item whose event decoded, on its way to its provider. */
export interface Sendable {
  item: Item;
  event: NotificationEvent;
}

/** A sendable item the provider has answered. */
export interface Answered extends Sendable {
  outcome: PushOutcome;
}

/** What {@link readItem} checks a message against. */
export interface ItemLimits {
  /** The retry topic: its messages carry attempt and not-before headers. */
  retryTopic: string;
  /** The deferred topic: its messages, like the retry topic's, carry their origin's headers. */
  deferredTopic?: string;
  /** Largest accepted message value, in bytes. */
  maxMessageBytes: number;
  /** Largest accepted key plus headers, in bytes (checked before the value is looked at). */
  maxHeaderBytes: number;
}

/** Decodes a message read from `topic`/`partition` (size guard first) into an item. */
export function readItem(topic: string, partition: number, message: KafkaMessage, limits: ItemLimits): Item {
  const envelope = envelopeBytes(message);
  const decoded: DecodeResult =
    envelope > limits.maxHeaderBytes
      ? {
          ok: false,
          kind: 'too-large',
          reason: `key and headers are ${envelope} bytes, limit ${limits.maxHeaderBytes}`,
        }
      : decodeEvent(message.value, limits.maxMessageBytes);
  // Only the retry topic's own headers are trusted: a producer must not be able to stall a partition
  // of the main topic with a far-future not-before.
  const fromRetry = topic === limits.retryTopic;
  const fromAqueduct = fromRetry || topic === limits.deferredTopic;
  const timestamp = Number(message.timestamp);
  const publishedAtMs = fromAqueduct
    ? headerNumber(message.headers, HEADER.originTimestamp, timestamp)
    : timestamp;
  const attempt = fromRetry ? Math.max(1, headerNumber(message.headers, HEADER.attempt, 1)) : 1;
  const throttles = fromRetry ? Math.max(0, headerNumber(message.headers, HEADER.throttles, 0)) : 0;
  const notBefore = fromRetry ? headerNumber(message.headers, HEADER.notBefore, 0) : 0;
  const dedupeKey = new IdempotencyKey(
    decoded.ok ? idempotencyKey(decoded.event) : `@${topic}:${partition}:${message.offset}`,
  );
  return {
    offset: message.offset,
    message,
    decoded,
    attempt,
    fromRetryTopic: fromRetry,
    throttles,
    notBefore,
    publishedAtMs,
    dedupeKey,
  };
}

/**
 * When an event's TTL runs out: `ttlSeconds` after it was published, or after `nowMs` when its publish
 * time is still to come (a producer's clock ahead, or a timestamp it set itself: the TTL sent to the
 * provider is never more than the event asked for, and FCM refuses one above 28 days); none for no TTL,
 * a TTL of 0 (the provider's "now or never", whenever the push goes out) or no publish time.
 */
export function expiresAtMs(
  event: NotificationEvent,
  publishedAtMs: number,
  nowMs: number = Date.now(),
): number | undefined {
  // A message without a timestamp (-1) has no age to count from.
  if (event.ttlSeconds === undefined || event.ttlSeconds === 0 || !(publishedAtMs > 0)) return undefined;
  return Math.min(publishedAtMs, nowMs) + event.ttlSeconds * 1000;
}
