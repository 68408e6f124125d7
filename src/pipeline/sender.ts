import type { Platform } from '../events/event.ts';
import type { TokenPool } from '../limiter/token-pool.ts';
import { blocksFleet, type PushOutcome, type PushProvider, type PushRequest } from '../providers/types.ts';
import type { DoneMark, DoneReading, DoneStore } from './done-store.ts';
import { FirstPushes } from './first-pushes.ts';
import { type Answered, expiresAtMs, type Item, type Sendable } from './item.ts';
import type { PipelineObserver } from './observer.ts';
import type { PartitionState } from './partition-state.ts';

/** What {@link Sender} works with. */
export interface SenderDeps {
  providers: Record<Platform, PushProvider>;
  doneStore: Pick<DoneStore, 'check' | 'mark'>;
  observer: PipelineObserver;
  /** Send without the recheck when Redis is unreachable (the limiter's failure policy `open`). */
  failOpen: boolean;
}

/** What the sends of one bucket group (or of the events sent unmetered) came to. */
export interface SendResult {
  /** What the providers answered (deliveries are marked done already). */
  answered: Answered[];
  /** Found done by the recheck before send (see Sender.recheck): finished, not sent. */
  skipped: Item[];
  /** What got no token (the pool's unmet need), in the group's order. */
  unsent: Sendable[];
}

/**
 * The platforms whose device throttle is known by its reason alone (APNs `TooManyRequests` names no
 * device; FCM's names the device's quota): only their pushes are recorded in FirstPushes, the evidence
 * that such a throttle is the sender's.
 */
const DEVICE_SCOPE_ASSUMED: ReadonlySet<Platform> = new Set(['apns']);

/**
 * Sends a partition's events to their providers: a bucket group's one window of tokens at a time, each
 * window rechecked against the done-marks first while the partition is fresh from a rejoin, and the
 * deliveries marked done as soon as their window is answered.
 */
export class Sender {
  private readonly deps: SenderDeps;
  /** The APNs devices this process pushed to lately: who answers a first push with a device's throttle. */
  private readonly firstPushes = new FirstPushes();

  constructor(deps: SenderDeps) {
    this.deps = deps;
  }

  /** Sends events whose bucket group has no limit (the limiter is disabled). */
  async sendUnmetered(state: PartitionState, entries: readonly Sendable[]): Promise<SendResult> {
    const { keep, skipped } = await this.recheck(state, entries);
    return { answered: await this.send(state, keep, floodedDevices(entries)), skipped, unsent: [] };
  }

  /**
   * Sends a bucket group's entries one window at a time: take tokens for at most `pool.window` of them,
   * send those, give the window back once they are answered, and go on while tokens last. Taking right
   * before sending keeps what the fleet has been granted and the provider has not yet seen small (see
   * TokenPoolOptions.window). What gets no token is the result's `unsent`; a project-wide 429 ends the
   * loop (the outcome handling then blocks the fleet); a device's 429 does not.
   *
   * The window holding the first `urgent.count` entries (sends due for a paced device, see
   * DeviceBackoff) is taken for with an urgent take (see TokenPool.take), which waits up to
   * `urgent.waitMs` for a dry pool's refill and is served before the other partitions' takes: a
   * paced device's slot is worth a token now, while the backlog of the other devices loses nothing by
   * waiting one refill. (A paced device's send that took its chance when its partition was read would
   * find the pool drained by the partitions the refill woke, refill after refill, while they have a
   * backlog.)
   *
   * `owned` is asked before every window, after `beforeWindow` (the member's heartbeat): once the
   * partition is no longer this member's (a rebalance, the consumer crashed or stopping), the rest is
   * left unsent for its next owner, who reads it again from the commit. A step spans as many windows as
   * a fetch holds events, and a member that went on sending them would push twice what the next owner
   * sends meanwhile.
   */
  async sendMetered(
    state: PartitionState,
    pool: TokenPool,
    group: readonly Sendable[],
    options: {
      urgent?: { count: number; waitMs: number };
      owned?: () => boolean;
      beforeWindow?: () => Promise<void>;
      /**
       * The first step of a fetched batch: its partition may have been woken a wake lead before its
       * pool's turn (TokenPoolOptions.wakeLeadMs), so its first take waits for a refill due that soon.
       */
      firstStep?: boolean;
    } = {},
  ): Promise<SendResult> {
    const urgent = options.urgent ?? { count: 0, waitMs: 0 };
    const owned = options.owned ?? (() => true);
    const result: SendResult = { answered: [], skipped: [], unsent: [] };
    const flooded = floodedDevices(group);
    let next = 0;
    while (next < group.length) {
      await options.beforeWindow?.();
      if (!owned()) break;
      const slice = group.slice(next, next + pool.window);
      // Only a batch's first take may wait for its turn (see `firstStep`). Any other take that finds
      // the pool dry ends the step, and the partition pauses: a step that waited in place instead
      // would hold kafkajs' fetch loop, and the other partitions' new records, until its batch is sent.
      const takeOptions =
        next < urgent.count
          ? { urgentWithinMs: urgent.waitMs }
          : next === 0 && options.firstStep
            ? { first: true }
            : {};
      const granted = await this.deps.observer.acquire(
        pool,
        slice.length,
        () => pool.take(slice.length, takeOptions),
        {
          topic: state.topic,
          partition: state.partition,
          items: slice.map((entry) => entry.item),
        },
      );
      if (granted === 0) break;
      next += granted;
      let answered: Answered[];
      try {
        const { keep, skipped } = await this.recheck(state, slice.slice(0, granted));
        result.skipped.push(...skipped);
        answered = await this.send(state, keep, flooded);
      } finally {
        pool.release(granted);
      }
      result.answered.push(...answered);
      if (answered.some(({ outcome }) => blocksFleet(outcome))) break;
    }
    result.unsent = group.slice(next);
    return result;
  }

  /**
   * A member whose session expired (cut off from the broker longer than the session timeout) goes on
   * with the step it is in until its next heartbeat (due before each window, see `beforeWindow`) tells
   * it the partition has moved. What it delivers
   * after the new owner's dedupe check (made when the batch was fetched) would be pushed twice. So, for
   * a while after a rejoin (BatchProcessor.recheckAssignedFor), the marks are read again right before
   * sending (one Redis call per window, only in that time); what is marked by now is skipped. Its
   * tokens are not given back.
   */
  private async recheck(
    state: PartitionState,
    entries: readonly Sendable[],
  ): Promise<{ keep: readonly Sendable[]; skipped: Item[] }> {
    if (entries.length === 0 || !state.rechecksBeforeSend()) return { keep: entries, skipped: [] };
    let reading: DoneReading;
    try {
      reading = await this.deps.doneStore.check(
        entries.map((entry) => entry.item.dedupeKey),
        [state],
      );
    } catch (error) {
      if (!this.deps.failOpen) throw error;
      this.deps.observer.markFailed?.(error, entries.length);
      return { keep: entries, skipped: [] };
    }
    const finished = reading.finished.get(state.key);
    const keep: Sendable[] = [];
    const skipped: Item[] = [];
    for (const entry of entries) {
      if (reading.done.has(entry.item.dedupeKey.text) || finished?.has(entry.item.offset)) {
        this.deps.observer.duplicateSkipped?.(entry.item);
        skipped.push(entry.item);
      } else {
        keep.push(entry);
      }
    }
    return { keep, skipped };
  }

  /**
   * One provider call per platform for the entries, all at once; deliveries are marked done at once.
   * `flooded`: the devices with more than one event in the step (see floodedDevices).
   */
  private async send(
    state: PartitionState,
    entries: readonly Sendable[],
    flooded: ReadonlySet<string>,
  ): Promise<Answered[]> {
    const byPlatform = new Map<Platform, Sendable[]>();
    for (const entry of entries) {
      const list = byPlatform.get(entry.event.platform) ?? [];
      list.push(entry);
      byPlatform.set(entry.event.platform, list);
    }
    const results = await Promise.all(
      [...byPlatform].map(async ([platform, list]) => {
        const requests: PushRequest[] = list.map(({ item, event }) => {
          const expiresAt = expiresAtMs(event, item.publishedAtMs);
          return {
            event,
            attempt: item.attempt,
            ...(expiresAt === undefined ? {} : { expiresAtMs: expiresAt }),
          };
        });
        const items = list.map((entry) => entry.item);
        // Recorded as the pushes go out. Proving nothing: a retry copy's push (its device's earlier
        // pushes may have come from the process that owns its main partition), and a flooded device's
        // (events not keyed by device flood it from every process, and the others may have spent its
        // limit first).
        const pushedAt = Date.now();
        const firstPushes = DEVICE_SCOPE_ASSUMED.has(platform)
          ? list.map(
              ({ item, event }) =>
                this.firstPushes.record(event.token, pushedAt) &&
                !item.fromRetryTopic &&
                !flooded.has(event.token),
            )
          : undefined;
        const provider = this.deps.providers[platform];
        const outcomes = await this.deps.observer.send({ platform, requests, items }, () =>
          provider.send(requests),
        );
        return list.map(
          (entry, i): Answered => ({
            ...entry,
            outcome: this.scopedByFirstPushes(
              outcomes[i] ?? { kind: 'retry', reason: 'provider returned no outcome', throttled: false },
              entry.event.token,
              firstPushes?.[i] === true,
            ),
          }),
        );
      }),
    );
    const answered = results.flat();
    // Deliveries are marked as soon as their sends are answered, not when the step ends: a step spans
    // many send windows, and a process killed meanwhile would leave the early ones unmarked (pushed
    // again by the partition's next owner).
    markDone(
      this.deps,
      answered
        .filter(({ outcome }) => outcome.kind === 'delivered')
        .map(({ item }) => ({
          topic: state.topic,
          partition: state.partition,
          offset: item.offset,
          final: { key: item.dedupeKey, outcome: 'delivered' },
        })),
    );
    return answered;
  }

  /**
   * A throttle read as one device's only from its reason's documentation (APNs `TooManyRequests`) is
   * the sender's when it refuses first pushes lately of three devices within a second: no device's own
   * limit refuses a device's first push, unless another process spent it (see FirstPushes). It then
   * blocks the fleet like any project-wide 429.
   */
  private scopedByFirstPushes(outcome: PushOutcome, token: string, firstPush: boolean): PushOutcome {
    if (!firstPush || outcome.kind !== 'retry' || outcome.scope !== 'device' || !outcome.deviceScopeAssumed)
      return outcome;
    return this.firstPushes.refusedFirst(token, Date.now()) ? { ...outcome, scope: 'fleet' } : outcome;
  }
}

/**
 * The devices (of the platforms in DEVICE_SCOPE_ASSUMED) with more than one of a step's entries: a
 * device flooded with events. Its first push here is no evidence of a sender-wide throttle: when the
 * producer did not key events by device, every process pushes to it at once.
 */
function floodedDevices(entries: readonly Sendable[]): ReadonlySet<string> {
  const seen = new Set<string>();
  const flooded = new Set<string>();
  for (const { event } of entries) {
    if (!DEVICE_SCOPE_ASSUMED.has(event.platform)) continue;
    if (seen.has(event.token)) flooded.add(event.token);
    else seen.add(event.token);
  }
  return flooded;
}

/**
 * Hands done-marks to the store without waiting for them. Done-marks are the dedupe memory, not the
 * outcome itself (the provider's acceptance, or a record on a topic): when Redis cannot take them the
 * events are still finished, and the offset commit keeps them from being read again; the failure is
 * reported, not thrown. So the step does not wait for them to land: this process knows the ids at once
 * (DoneStore.isDoneLocally), Redis gets them in the same few milliseconds, and the offsets are resolved
 * meanwhile. Committing an offset before its mark lands only narrows the crash window (a committed
 * event is not read again); a re-read before the commit dedupes against the mark as it would have,
 * since the mark is sent just as early. Shutdown waits for marks in flight (DoneStore.settled).
 */
export function markDone(
  deps: { doneStore: Pick<DoneStore, 'mark'>; observer: Pick<PipelineObserver, 'markFailed'> },
  marks: readonly DoneMark[],
): void {
  if (marks.length === 0) return;
  deps.doneStore.mark(marks).catch((error: unknown) => {
    deps.observer.markFailed?.(error, marks.length);
  });
}
