import { DECODE_FAILURE_KINDS, type DecodeResult } from '../events/decode.ts';
import type { Platform } from '../events/event.ts';
import { messageKey } from '../events/message-key.ts';
import { MAX_TIMER_MS } from '../timer-delay.ts';
import type { FinalMark } from './done-store.ts';
import type { Answered, Item } from './item.ts';
import type { Origin, OutcomeRecord } from './outcome-writer.ts';

/**
 * What an item's outcome comes to: the record for an outcome topic, the final outcome remembered once that
 * record is written, and what the observer is told besides the outcome itself. Made by pure functions; the
 * batch processor carries it out.
 */
export interface Settlement {
  record?: OutcomeRecord;
  /** The final outcome the idempotency window remembers, once the record is written. */
  final?: FinalMark;
  /** Dead-lettered, for this reason kind (`observer.deadLettered`). */
  deadLettered?: string;
  /** Written to the retry topic (`observer.retried`). */
  retried?: boolean;
}

/** When a transiently failing event is tried again, and when it is given up. */
export interface RetryPolicy {
  /** Attempts before a transiently failing event is dead-lettered. */
  maxAttempts: number;
  /**
   * Provider throttles (429s) an event may meet before it is dead-lettered. A throttle spends no
   * attempt: under a provider's per-minute quota every try within the rest of the minute is refused,
   * whatever the push, so counting them as attempts would dead-letter pushes the next minute accepts.
   */
  maxThrottles: number;
  /** First retry delay (doubles per attempt, with jitter) when the provider gave no Retry-After. */
  retryBaseMs: number;
  /** Longest delay of one retry, in ms: a provider's Retry-After and the back-off are both cut to it. */
  maxRetryDelayMs: number;
}

/**
 * Every reason kind a dead letter can carry (`aqueduct-reason-kind`): a decode failure's, a provider's
 * refusal (`rejected`), attempts used up (`max-attempts`), throttled too often (`max-throttles`), or its
 * TTL run out before it could be pushed (`expired`).
 */
export const DEAD_LETTER_KINDS: readonly string[] = [
  ...DECODE_FAILURE_KINDS,
  'rejected',
  'max-attempts',
  'max-throttles',
  'expired',
];

/** A message that did not decode (or was too large): dead-lettered under its failure kind. */
export function settleUndecodable(
  item: Item,
  decoded: Extract<DecodeResult, { ok: false }>,
  origin: Origin,
): Settlement {
  return deadLetter(item, origin, decoded.kind, decoded.reason);
}

/** A provider's answer for an item. Deliveries need nothing more: the sender marked them. */
export function settleAnswered(
  { item, event, outcome }: Answered,
  origin: Origin,
  policy: RetryPolicy,
  now = Date.now(),
  random = Math.random,
): Settlement {
  switch (outcome.kind) {
    case 'delivered':
      return {};
    case 'invalid-token':
      return {
        record: {
          kind: 'invalid-token',
          event,
          message: item.message,
          origin,
          reason: outcome.reason,
          ...(outcome.invalidSinceMs !== undefined ? { invalidSinceMs: outcome.invalidSinceMs } : {}),
        },
        final: { key: item.dedupeKey, outcome: 'invalid-token' },
      };
    case 'rejected':
      return deadLetter(item, origin, 'rejected', outcome.reason);
    case 'retry': {
      if (outcome.throttled) return settleThrottled(item, outcome, origin, policy, now, random);
      if (item.attempt >= policy.maxAttempts) {
        const reason = `gave up after ${item.attempt} attempts; last: ${outcome.reason}`;
        return deadLetter(item, origin, 'max-attempts', reason);
      }
      const delay = retryDelayMs(
        item.attempt,
        outcome.retryAfterMs,
        policy.retryBaseMs,
        random,
        policy.maxRetryDelayMs,
      );
      return {
        record: retryCopy(item, origin, now + delay, outcome.reason, { attempt: item.attempt + 1 }),
        retried: true,
      };
    }
  }
}

/**
 * A throttled push (a 429 of any scope): tried again without spending an attempt, after the provider's
 * Retry-After or a back-off that doubles with each throttle the event has met (from the provider's own
 * first delay when it documents one, e.g. FCM's minute for its quota); dead-lettered as
 * `max-throttles` once it has met `maxThrottles` of them.
 */
function settleThrottled(
  item: Item,
  outcome: Extract<Answered['outcome'], { kind: 'retry' }>,
  origin: Origin,
  policy: RetryPolicy,
  now: number,
  random: () => number,
): Settlement {
  const throttles = item.throttles + 1;
  if (throttles >= policy.maxThrottles) {
    const reason = `gave up after ${throttles} throttles; last: ${outcome.reason}`;
    return deadLetter(item, origin, 'max-throttles', reason);
  }
  const delay = retryDelayMs(
    throttles,
    outcome.retryAfterMs,
    Math.max(policy.retryBaseMs, outcome.backoffBaseMs ?? 0),
    random,
    policy.maxRetryDelayMs,
  );
  return { record: retryCopy(item, origin, now + delay, outcome.reason, { throttles }), retried: true };
}

/**
 * The provider's Retry-After when it gave one, else `baseMs` doubled per attempt, ±25 % jitter; never
 * more than `maxMs` (nor Node's timer limit: the retry's due time arms a resume timer).
 */
export function retryDelayMs(
  attempt: number,
  retryAfterMs: number | undefined,
  baseMs: number,
  random = Math.random,
  maxMs = MAX_TIMER_MS,
): number {
  const limit = Math.min(Math.max(0, maxMs), MAX_TIMER_MS);
  if (retryAfterMs !== undefined) return Math.min(limit, Math.max(0, retryAfterMs));
  const base = baseMs * 2 ** Math.min(attempt - 1, 60);
  return Math.min(limit, Math.round(base * (0.75 + random() * 0.5)));
}

/**
 * An event whose TTL ran out (at `expiredAtMs`) before it could be pushed: a push its sender wanted
 * gone by then is not sent late; dead-lettered as `expired`, to be replayed (with a fresh TTL) if wanted.
 */
export function settleExpired(item: Item, origin: Origin, expiredAtMs: number): Settlement {
  const ttl = item.decoded.ok ? item.decoded.event.ttlSeconds : undefined;
  const reason = `its ttlSeconds (${ttl}) ran out at ${new Date(expiredAtMs).toISOString()}, before it could be pushed`;
  return deadLetter(item, origin, 'expired', reason);
}

/**
 * An event held back for a device the provider throttled on its own (see DeviceBackoff): back to the
 * retry topic, due at `notBefore`. It was not sent, so it keeps its attempt count.
 */
export function settleDeferred(item: Item, origin: Origin, notBefore: number): Settlement {
  return { record: retryCopy(item, origin, notBefore, 'device throttled: waiting for its slot') };
}

/** The item's copy for the retry topic, due at `notBefore`; its attempt and throttle counts as they were unless given. */
function retryCopy(
  item: Item,
  origin: Origin,
  notBefore: number,
  reason: string,
  counts: { attempt?: number; throttles?: number } = {},
): OutcomeRecord {
  return {
    kind: 'retry',
    message: item.message,
    key: copyKey(item),
    origin,
    attempt: counts.attempt ?? item.attempt,
    throttles: counts.throttles ?? item.throttles,
    notBefore,
    reason,
  };
}

/**
 * An event of a tenant over its fair share: parked on the deferred topic, to be read back as the share
 * allows. It was not sent, so it keeps its attempt count; its outcome is recorded when it is read back.
 */
export function settleParked(item: Item, platform: Platform, origin: Origin): Settlement {
  return { record: { kind: 'parked', message: item.message, key: copyKey(item), platform, origin } };
}

function deadLetter(item: Item, origin: Origin, reasonKind: string, reason: string): Settlement {
  return {
    record: { kind: 'dead-letter', message: item.message, origin, reasonKind, reason },
    // A message that did not decode has no (tenant, id) a second copy could share.
    ...(item.decoded.ok ? { final: { key: item.dedupeKey, outcome: 'dead-lettered' as const } } : {}),
    deadLettered: reasonKind,
  };
}

/**
 * The key of an item's copy on the retry or deferred topic: the message's own, else its device's
 * (`messageKey`). A producer that keys nothing (Kafka's console producer, by default) spreads one
 * device's events over every partition; their copies, keyed by device, meet in one partition, so that
 * one process reads them back in order and paces the device (see DeviceBackoff).
 */
function copyKey(item: Item): Buffer | string | null {
  return item.message.key ?? (item.decoded.ok ? messageKey(item.decoded.event) : null);
}
