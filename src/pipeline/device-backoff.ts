import type { NotificationEvent } from '../events/event.ts';
import type { PushOutcome } from '../providers/types.ts';

/**
 * Most events for one device token sent in one step. A device the provider throttles on its own is
 * known only from its first 429, so a step must not send a whole batch's worth to one device before
 * that answer can come back (a flood's first wave would waste as many of the fleet's tokens); what is
 * left waits for the next step, which starts as soon as this one is answered.
 */
export const MAX_PER_DEVICE_PER_STEP = 8;

/**
 * Pacing of the devices a provider has throttled on their own (APNs TooManyRequests, FCM's device
 * message rate): a device-scoped 429 says nothing about the fleet, so the fleet's bucket is not blocked;
 * only that device waits. The providers do not publish a device's rate (FCM documents 240 a minute on
 * Android; Apple nothing), so it is learned per process from the answers:
 *
 * - a throttle blocks the device for the provider's Retry-After when it gave one (APNs gives none),
 *   else for one spacing, and widens the spacing between its sends by half (sends decided before the
 *   throttle was known count once, not once each);
 * - every delivery to a paced device narrows the spacing by a tenth;
 * - an event for a paced device is sent when its time has come, or gets a reserved slot (`notBefore`),
 *   one spacing after the previous one, up to `horizonMs` ahead. Beyond that it is told to come back
 *   after its place in the device's queue (the events deferred without a slot and not back yet), three
 *   quarters of a spacing per place: a long queue comes back in order, a little faster than the spacing
 *   in force (the device may speed up meanwhile), and who comes back early takes a slot then.
 *
 * Deferred events go to the retry topic without costing an attempt or a token, so a flooded device
 * spends the fleet's tokens only on what it is likely to accept.
 *
 * A throttle voids the slots given before it (their spacing was too tight). A device quiet for
 * `idleMs` past its last slot is forgotten. Everything is in this process's memory, bounded by
 * `maxDevices` and `maxReservations` (oldest first out); the keys hold device tokens and are never
 * logged.
 */
export interface DeviceBackoffOptions {
  /** Spacing after a device's first throttle, in ms. Default 250 (FCM's 240 a minute per Android device). */
  initialIntervalMs?: number;
  /** Narrowest spacing, in ms. Default 5. */
  minIntervalMs?: number;
  /** Widest spacing, in ms. Default 60 000. */
  maxIntervalMs?: number;
  /** How far ahead slots are reserved, in ms. Default 3000. */
  horizonMs?: number;
  /** A device with no throttle and no slot for this long is forgotten, in ms. Default 60 000. */
  idleMs?: number;
  /** Devices remembered at most. Default 10 000. */
  maxDevices?: number;
  /** Reserved slots remembered at most. Default 100 000. */
  maxReservations?: number;
}

/** What to do with an event now: send it, or defer it to `notBefore` (epoch ms). */
export type DeviceDecision = { send: true } | { send: false; notBefore: number };

interface DeviceState {
  /** No send before this (the provider's delay after its latest throttle). */
  blockedUntil: number;
  /** Current spacing between two sends to the device. */
  intervalMs: number;
  /** The earliest time not yet given to a send. */
  nextSlot: number;
  /** When the latest throttle was registered: sends decided before it belong to the same wave. */
  throttledAt: number;
  /** Bumped on every counted throttle: slots of an older epoch are void. */
  epoch: number;
  /** Events deferred without a slot and not back yet: the queue beyond the horizon. */
  queued: number;
}

const SEND: DeviceDecision = { send: true };

export class DeviceBackoff {
  private readonly options: Required<DeviceBackoffOptions>;
  private readonly devices = new Map<string, DeviceState>();
  private readonly reservations = new Map<string, { device: string; slot: number; epoch: number }>();
  /** Events deferred without a slot, by dedupe key: the device whose queue they are in. */
  private readonly queuedEvents = new Map<string, string>();

  constructor(options: DeviceBackoffOptions = {}) {
    this.options = {
      initialIntervalMs: options.initialIntervalMs ?? 250,
      minIntervalMs: options.minIntervalMs ?? 5,
      maxIntervalMs: options.maxIntervalMs ?? 60_000,
      horizonMs: options.horizonMs ?? 3000,
      idleMs: options.idleMs ?? 60_000,
      maxDevices: options.maxDevices ?? 10_000,
      maxReservations: options.maxReservations ?? 100_000,
    };
  }

  /** Devices currently paced. */
  get size(): number {
    return this.devices.size;
  }

  /** Whether the event (keyed by `dedupeKey`) may be sent now, or when to try again. */
  decide(event: NotificationEvent, dedupeKey: string, now: number): DeviceDecision {
    if (this.devices.size === 0) return SEND;
    const device = deviceKey(event);
    const state = this.devices.get(device);
    if (!state) return SEND;
    if (now >= state.blockedUntil && now >= state.nextSlot + this.options.idleMs) {
      this.devices.delete(device);
      return SEND;
    }
    const queuedFor = this.queuedEvents.get(dedupeKey);
    if (queuedFor !== undefined) {
      this.queuedEvents.delete(dedupeKey);
      const queue = this.devices.get(queuedFor);
      if (queue) queue.queued = Math.max(0, queue.queued - 1);
    }
    const reserved = this.reservations.get(dedupeKey);
    if (reserved !== undefined) {
      this.reservations.delete(dedupeKey);
      if (reserved.device === device && reserved.epoch === state.epoch && now >= reserved.slot) return SEND;
    }
    if (now >= state.blockedUntil && now >= state.nextSlot) {
      state.nextSlot = now + state.intervalMs;
      return SEND;
    }
    const slot = Math.max(state.nextSlot, state.blockedUntil, now);
    if (slot - now > this.options.horizonMs) {
      const notBefore = Math.ceil(slot + state.queued * state.intervalMs * 0.75);
      state.queued += 1;
      this.queuedEvents.set(dedupeKey, device);
      if (this.queuedEvents.size > this.options.maxReservations) {
        this.queuedEvents.delete(this.queuedEvents.keys().next().value as string);
      }
      return { send: false, notBefore };
    }
    state.nextSlot = slot + state.intervalMs;
    this.reservations.set(dedupeKey, { device, slot, epoch: state.epoch });
    if (this.reservations.size > this.options.maxReservations) {
      this.reservations.delete(this.reservations.keys().next().value as string);
    }
    return { send: false, notBefore: slot };
  }

  /**
   * The provider throttled this device: (unless the send was decided before the previous throttle was
   * known, at `decidedAt`) half as much spacing again, and no send before `now + retryAfterMs` (the
   * provider's delay), or before one spacing has passed when it gave none.
   */
  throttled(
    event: NotificationEvent,
    now: number,
    retryAfterMs: number | undefined,
    decidedAt: number,
  ): void {
    const device = deviceKey(event);
    let state = this.devices.get(device);
    if (!state) {
      state = {
        blockedUntil: 0,
        intervalMs: this.options.initialIntervalMs,
        nextSlot: 0,
        throttledAt: now,
        epoch: 0,
        queued: 0,
      };
      this.devices.set(device, state);
      if (this.devices.size > this.options.maxDevices) {
        this.devices.delete(this.devices.keys().next().value as string);
      }
    } else if (decidedAt >= state.throttledAt) {
      state.intervalMs = Math.min(this.options.maxIntervalMs, state.intervalMs * 1.5);
      state.throttledAt = now;
      state.epoch += 1;
    }
    state.blockedUntil = Math.max(state.blockedUntil, now + (retryAfterMs ?? state.intervalMs));
    state.nextSlot = Math.max(state.nextSlot, state.blockedUntil);
  }

  /**
   * A provider's answer for a push to this device: a delivery, or a device-scoped throttle (its
   * Retry-After cut to `maxDelayMs`; the event itself waits for its own back-off on the retry topic).
   */
  answered(
    event: NotificationEvent,
    outcome: PushOutcome,
    now: number,
    decidedAt: number,
    maxDelayMs: number,
  ): void {
    if (outcome.kind === 'delivered') this.delivered(event);
    else if (outcome.kind === 'retry' && outcome.scope === 'device') {
      const retryAfter =
        outcome.retryAfterMs === undefined ? undefined : Math.min(outcome.retryAfterMs, maxDelayMs);
      this.throttled(event, now, retryAfter, decidedAt);
    }
  }

  /** The provider accepted a push to this device: a paced device may go a little faster. */
  delivered(event: NotificationEvent): void {
    if (this.devices.size === 0) return;
    const state = this.devices.get(deviceKey(event));
    if (state) state.intervalMs = Math.max(this.options.minIntervalMs, state.intervalMs * 0.9);
  }
}

/** A device: the provider and its token (a token is unique per app within its provider). */
export function deviceKey(event: Pick<NotificationEvent, 'platform' | 'token'>): string {
  return `${event.platform}:${event.token}`;
}
