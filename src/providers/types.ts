import type { NotificationEvent, Platform } from '../events/event.ts';

/**
 * One push to send: the validated event plus delivery bookkeeping. Providers put `eventId` into the
 * push's data payload under {@link EVENT_ID_DATA_KEY}, so that the receiving side (and the simulators)
 * can count deliveries and duplicates per event.
 */
export interface PushRequest {
  event: NotificationEvent;
  /** 1 for the first try; retries count up. */
  attempt: number;
}

/** The data key that carries the event id inside every push. */
export const EVENT_ID_DATA_KEY = 'aqueduct_id';

/**
 * Exactly one outcome per push.
 * - `delivered`: the provider accepted it (with its message id);
 * - `retry`: transient (5xx, timeout, connection reset, 429); `retryAfterMs` when the server said;
 * - `invalid-token`: the device token is dead (FCM UNREGISTERED/404, APNs 410 / 400 BadDeviceToken);
 * - `rejected`: a permanent error in the notification itself (payload too large, bad field).
 */
export type PushOutcome =
  | { kind: 'delivered'; messageId: string; httpStatus: number }
  | { kind: 'retry'; reason: string; httpStatus?: number; retryAfterMs?: number; throttled: boolean }
  | { kind: 'invalid-token'; reason: string; httpStatus?: number }
  | { kind: 'rejected'; reason: string; httpStatus?: number };

export type OutcomeKind = PushOutcome['kind'];

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
