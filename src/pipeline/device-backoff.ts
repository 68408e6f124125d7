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
 * Longest a paced device's due send waits for its bucket group's tokens when the process's pool is dry
 * (see Sender.sendMetered). A throttled pool's dry spell is the time its chunk takes to refill (a
 * quarter second of the rate, at least 200 tokens' worth, at most a quarter of the burst: see
 * acquireChunk), shared with the other processes; the wait ends with it, when the partitions waiting
 * for the pool are woken anyway. A longer one (a fleet-wide block) is not waited for: the send gives
 * its slot back (DeviceBackoff.unsent).
 */
export const PACED_SEND_WAIT_MS = 1000;

/**
 * Pacing of the devices a provider has throttled on their own (APNs TooManyRequests, FCM's device
 * message rate): a device-scoped 429 says nothing about the fleet, so the fleet's bucket is not blocked;
 * only that device waits. The providers do not publish a device's rate (FCM documents 240 a minute on
 * Android; Apple nothing), so it is learned per process from the answers:
 *
 * - a throttle means the device's bucket was empty when that push was decided, so the deliveries decided
 *   after it prove a rate: n of them within t ms need at least (n - 1) / t. The highest rate so proven
 *   is the device's known rate (spells sent below the device's limit make a proof weaker, never wrong);
 * - every delivery while events wait for the device raises the sending rate a little (the probing), so
 *   the rate climbs to the device's limit;
 * - a throttle (unless its push was decided before the previous one was known: one wave counts once)
 *   sets the rate back to a fifth under the pace of the latest deliveries, never under the known rate
 *   (which each throttle lowers by a tenth, so a device whose limit was lowered is found out by
 *   throttles in a row), halves the probing, and blocks the device for the provider's Retry-After when
 *   it gave one (APNs gives none), else one spacing.
 *
 * An event for a paced device is sent when the device's next send is due (one spacing after the
 * previous; a device behind its pace catches up by at most `catchUpMs` of sends), first for its group's
 * tokens, waiting for a dry pool's refill (see Sender.sendMetered); a send that gets no token gives its
 * slot back (`unsent`). Else the event goes to the back of the device's queue: back to the retry topic,
 * told to come back half a spacing (at most `queueSpacingMs`) after the event queued before it. So the
 * queue comes back in the order it was deferred, twice as fast as the device is sent to or faster, and
 * the device's next send always finds an event; who comes back before it goes to the back again.
 * Keeping that order matters: the retry topic is read in order from its oldest unfinished record, a
 * fetch's worth at a time, so an event told to come back later than events deferred after it would
 * hold them back.
 *
 * Deferred events go to the retry topic without costing an attempt or a token, so a flooded device
 * spends the fleet's tokens only on what it is likely to accept; a device with a queue costs up to
 * 1000 / `queueSpacingMs` retry records a second.
 *
 * A device quiet for `idleMs` (no send due and no event queued) is forgotten. Everything is in this
 * process's memory, a few numbers per device, bounded by `maxDevices` (oldest first out); the keys hold
 * device tokens and are never logged.
 */
export interface DeviceBackoffOptions {
  /** Spacing after a device's first throttle, in ms. Default 250 (FCM's 240 a minute per Android device). */
  initialIntervalMs?: number;
  /** Narrowest spacing, in ms. Default 5. */
  minIntervalMs?: number;
  /** Widest spacing, in ms. Default 60 000. */
  maxIntervalMs?: number;
  /** Widest gap between two events of a device's queue coming back, in ms. Default 20. */
  queueSpacingMs?: number;
  /**
   * How far behind its pace a device may catch up, in ms (at least one spacing): its events come back
   * with the retry topic's fetches, not one spacing apart, and its bucket kept the tokens meanwhile.
   * Default 250.
   */
  catchUpMs?: number;
  /** A device with no send due and no event queued for this long is forgotten, in ms. Default 60 000. */
  idleMs?: number;
  /** Devices remembered at most. Default 10 000. */
  maxDevices?: number;
}

/** What to do with an event now: send it, or defer it to `notBefore` (epoch ms). */
export type DeviceDecision = { send: true } | { send: false; notBefore: number };

interface DeviceState {
  /** No send before this (the provider's delay after its latest throttle). */
  blockedUntil: number;
  /** Sends per ms in force: the spacing between two sends is its inverse. */
  rate: number;
  /** The highest rate the device has been seen to accept, per ms (0 before any proof). */
  knownRate: number;
  /** How much the rate grows with each delivery while events wait. */
  probe: number;
  /** When the next send is due. */
  nextSlot: number;
  /** When the event at the back of the queue was told to come back. */
  queueTail: number;
  /** When the push of the latest throttle was decided: the device's bucket was empty then. */
  emptyAt: number;
  /** Deliveries decided after `emptyAt`. */
  deliveredSince: number;
  /** When the latest throttle was registered: sends decided before it belong to the same wave. */
  throttleKnownAt: number;
  /** When the latest deliveries were decided, oldest first (at most RECENT_DELIVERIES). */
  recent: number[];
}

const SEND: DeviceDecision = { send: true };
/** Probing per delivery after a device's first throttle, and its floor once throttles have halved it. */
const FIRST_PROBE = 0.25;
const LEAST_PROBE = 0.01;
/** A throttle sets the rate back to this share of the latest deliveries' pace. */
const THROTTLED_SHARE_OF_PACE = 0.8;
/** What a throttle leaves of the known rate. */
const KNOWN_RATE_KEPT_PER_THROTTLE = 0.9;
/** Deliveries whose pace a throttle falls back from. */
const RECENT_DELIVERIES = 8;

export class DeviceBackoff {
  private readonly options: Required<DeviceBackoffOptions>;
  private readonly devices = new Map<string, DeviceState>();

  constructor(options: DeviceBackoffOptions = {}) {
    this.options = {
      initialIntervalMs: options.initialIntervalMs ?? 250,
      minIntervalMs: options.minIntervalMs ?? 5,
      maxIntervalMs: options.maxIntervalMs ?? 60_000,
      queueSpacingMs: options.queueSpacingMs ?? 20,
      catchUpMs: options.catchUpMs ?? 250,
      idleMs: options.idleMs ?? 60_000,
      maxDevices: options.maxDevices ?? 10_000,
    };
  }

  /** Devices currently paced. */
  get size(): number {
    return this.devices.size;
  }

  /** Whether this device is paced (the provider throttled it on its own). */
  isPaced(event: NotificationEvent): boolean {
    return this.devices.size > 0 && this.devices.has(deviceKey(event));
  }

  /** Whether an event for this device may be sent now, or when to try again. */
  decide(event: NotificationEvent, now: number): DeviceDecision {
    if (this.devices.size === 0) return SEND;
    const device = deviceKey(event);
    const state = this.devices.get(device);
    if (!state) return SEND;
    const due = Math.max(state.nextSlot, state.blockedUntil);
    if (now >= due + this.options.idleMs && now >= state.queueTail + this.options.idleMs) {
      this.devices.delete(device);
      return SEND;
    }
    const spacing = 1 / state.rate;
    if (now >= due) {
      state.nextSlot = Math.max(due, now - Math.max(spacing, this.options.catchUpMs)) + spacing;
      return SEND;
    }
    const queueSpacing = Math.min(spacing / 2, this.options.queueSpacingMs);
    state.queueTail = Math.max(state.queueTail + queueSpacing, due);
    return { send: false, notBefore: Math.ceil(state.queueTail) };
  }

  /**
   * A send `decide` allowed did not go out (its bucket group had no token for it): its slot is free
   * again, so the device's next event is due at once instead of a spacing later. Without this, while
   * the fleet's bucket is short (other devices draining a backlog) a paced device would spend its slots
   * on sends that never happen.
   */
  unsent(event: NotificationEvent): void {
    if (this.devices.size === 0) return;
    const state = this.devices.get(deviceKey(event));
    if (state) state.nextSlot -= 1 / state.rate;
  }

  /**
   * The provider throttled this device, for a push decided at `decidedAt` (see the class comment); no
   * send before `now + retryAfterMs` (the provider's delay), or before one spacing has passed when it
   * gave none.
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
        rate: 1 / this.options.initialIntervalMs,
        knownRate: 0,
        probe: FIRST_PROBE,
        nextSlot: 0,
        queueTail: 0,
        emptyAt: decidedAt,
        deliveredSince: 0,
        throttleKnownAt: now,
        recent: [],
      };
      this.devices.set(device, state);
      if (this.devices.size > this.options.maxDevices) {
        this.devices.delete(this.devices.keys().next().value as string);
      }
    } else if (decidedAt >= state.throttleKnownAt) {
      // A proof holds while the device's limit does; a limit lowered since is found by throttles in a row.
      state.knownRate *= KNOWN_RATE_KEPT_PER_THROTTLE;
      const pace = recentPace(state.recent);
      const slower = pace === undefined ? state.rate / 1.5 : pace * THROTTLED_SHARE_OF_PACE;
      state.rate = this.bounded(Math.min(Math.max(state.knownRate, slower), state.rate));
      state.probe = Math.max(LEAST_PROBE, state.probe / 2);
      state.emptyAt = decidedAt;
      state.deliveredSince = 0;
      state.throttleKnownAt = now;
    } else if (decidedAt > state.emptyAt) {
      // Same wave, decided later: the bucket was empty then too, and the proof starts over from there.
      state.emptyAt = decidedAt;
      state.deliveredSince = 0;
    }
    state.blockedUntil = Math.max(state.blockedUntil, now + (retryAfterMs ?? 1 / state.rate));
    state.nextSlot = state.blockedUntil;
  }

  /**
   * A provider's answer for a push to this device (decided at `decidedAt`): a delivery, or a
   * device-scoped throttle (its Retry-After cut to `maxDelayMs`; the event itself waits for its own
   * back-off on the retry topic).
   */
  answered(
    event: NotificationEvent,
    outcome: PushOutcome,
    now: number,
    decidedAt: number,
    maxDelayMs: number,
  ): void {
    if (outcome.kind === 'delivered') this.delivered(event, decidedAt);
    else if (outcome.kind === 'retry' && outcome.scope === 'device') {
      const retryAfter =
        outcome.retryAfterMs === undefined ? undefined : Math.min(outcome.retryAfterMs, maxDelayMs);
      this.throttled(event, now, retryAfter, decidedAt);
    }
  }

  /** The provider accepted a push to this device, decided at `decidedAt`: what it proves, and the probing. */
  delivered(event: NotificationEvent, decidedAt: number): void {
    if (this.devices.size === 0) return;
    const state = this.devices.get(deviceKey(event));
    if (!state) return;
    state.recent.push(decidedAt);
    if (state.recent.length > RECENT_DELIVERIES) state.recent.shift();
    if (decidedAt > state.emptyAt) {
      state.deliveredSince += 1;
      const proven = (state.deliveredSince - 1) / (decidedAt - state.emptyAt);
      state.knownRate = Math.max(state.knownRate, proven);
    }
    // Only a device with events waiting probes: a delivery in an idle spell says nothing of its limit.
    const waiting = state.queueTail > decidedAt;
    state.rate = this.bounded(
      Math.max(state.knownRate, waiting ? state.rate * (1 + state.probe) : state.rate),
    );
  }

  private bounded(rate: number): number {
    return Math.min(1 / this.options.minIntervalMs, Math.max(1 / this.options.maxIntervalMs, rate));
  }
}

/** The pace of the latest deliveries, per ms (undefined with too few of them to tell). */
function recentPace(recent: readonly number[]): number | undefined {
  if (recent.length < RECENT_DELIVERIES / 2) return undefined;
  const span = (recent.at(-1) as number) - (recent[0] as number);
  return span > 0 ? (recent.length - 1) / span : undefined;
}

/** A device: the provider and its token (a token is unique per app within its provider). */
export function deviceKey(event: Pick<NotificationEvent, 'platform' | 'token'>): string {
  return `${event.platform}:${event.token}`;
}
