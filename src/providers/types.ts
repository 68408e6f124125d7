import type { NotificationEvent, Platform } from '../events/event.ts';
import type { EVENT_ID_DATA_KEY } from '../events/payload.ts';

/**
 * One push to send: the validated event plus delivery bookkeeping. Providers put `eventId` into the
 * push's data payload under {@link EVENT_ID_DATA_KEY}, so that the receiving side (and the simulators)
 * can count deliveries and duplicates per event.
 */
export interface PushRequest {
  event: NotificationEvent;
  /** 1 for the first try; retries count up. */
  attempt: number;
  /**
   * When the event's TTL runs out (epoch ms: `ttlSeconds` after it was published), if it has one: the
   * provider is asked to keep it only that long, however late the push goes out.
   */
  expiresAtMs?: number;
}

/**
 * Exactly one outcome per push.
 * - `delivered`: the provider accepted it (with its message id);
 * - `retry`: transient (5xx, timeout, connection reset, 429); `retryAfterMs` when the server said;
 *   `throttled` for a 429, with its `scope` (see {@link ThrottleScope});
 * - `invalid-token`: the device token is dead (FCM UNREGISTERED/404, APNs 410 / 400 BadDeviceToken);
 * - `rejected`: a permanent error in the notification itself (payload too large, bad field).
 */
export type PushOutcome =
  | { kind: 'delivered'; messageId: string; httpStatus: number }
  | {
      kind: 'retry';
      reason: string;
      httpStatus?: number;
      retryAfterMs?: number;
      /**
       * The first delay of the back-off the provider documents for this answer when it gave no
       * Retry-After (FCM: a minute for its quota), if longer than the consumer's own.
       */
      backoffBaseMs?: number;
      throttled: boolean;
      /** What a throttle is about; set when `throttled` (absent: `fleet`). */
      scope?: ThrottleScope;
      /**
       * A `device` throttle whose answer does not name the device: its reason alone is documented as one
       * device's limit (APNs `TooManyRequests`). The sender reads it as the sender's rate when it answers
       * the device's first push lately (see Sender), which a device's own limit cannot refuse.
       */
      deviceScopeAssumed?: boolean;
    }
  | {
      kind: 'invalid-token';
      reason: string;
      httpStatus?: number;
      /** When the provider says the token stopped being valid (APNs' timestamp on a 410), epoch ms. */
      invalidSinceMs?: number;
    }
  | { kind: 'rejected'; reason: string; httpStatus?: number };

export type OutcomeKind = PushOutcome['kind'];

/**
 * What a provider's 429 limits (docs/providers.md, "How answers are classified"):
 * - `fleet`: the sender's rate as a whole (FCM's project quota, or overload): every consumer stops
 *   sending to that provider until Retry-After;
 * - `device`: the rate of pushes to one device (APNs TooManyRequests, FCM's device message rate): only
 *   that device's events wait; the fleet keeps flowing;
 * - `credentials`: not the send rate at all, but how often the provider token is refreshed (APNs
 *   TooManyProviderTokenUpdates): the push is retried later, and the configuration is at fault.
 */
export type ThrottleScope = 'fleet' | 'device' | 'credentials';

/** Whether an outcome is a throttle that stops the whole fleet (a 429 without a narrower scope). */
export function blocksFleet(outcome: PushOutcome): boolean {
  return outcome.kind === 'retry' && outcome.throttled && (outcome.scope ?? 'fleet') === 'fleet';
}

/** A push provider: sends a batch, answers one outcome per request, in the same order; never throws per push. */
export interface PushProvider {
  readonly platform: Platform;
  send(batch: readonly PushRequest[]): Promise<PushOutcome[]>;
  /**
   * Opens the connections the first sends will need, before any token is taken for them (best effort:
   * resolves with how many are open, never rejects). Without it the first batch of a fresh process waits
   * for its TLS handshakes while holding granted tokens.
   */
  warmUp?(): Promise<number>;
  close(): Promise<void>;
}
