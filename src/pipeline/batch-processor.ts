import type { EachBatchPayload } from 'kafkajs';
import type { DecodeResult } from '../events/decode.ts';
import type { NotificationEvent, Platform } from '../events/event.ts';
import { isKafkaJsError } from '../kafka/errors.ts';
import type { TokenPool } from '../limiter/token-pool.ts';
import { blocksFleet, type PushProvider } from '../providers/types.ts';
import { DeviceBackoff, MAX_PER_DEVICE_PER_STEP, PACED_SEND_WAIT_MS } from './device-backoff.ts';
import type { DoneMark, DoneReading, DoneStore } from './done-store.ts';
import { FleetBlocks } from './fleet-blocks.ts';
import { type Answered, expiresAtMs, type Item, type ItemLimits, readItem, type Sendable } from './item.ts';
import type { PipelineObserver } from './observer.ts';
import type { Origin, OutcomeRecord, OutcomeWriter } from './outcome-writer.ts';
import {
  type RetryPolicy,
  type Settlement,
  settleAnswered,
  settleDeferred,
  settleExpired,
  settleParked,
  settleUndecodable,
} from './outcomes.ts';
import type { Parking } from './parking.ts';
import { PartitionState } from './partition-state.ts';
import { backoffDelayMs, PauseTimers } from './pause-timers.ts';
import { markDone, Sender } from './sender.ts';

/**
 * How soon a paused partition that was read to its end is read again while a pool it draws from could
 * send (see pauseUntilReady), in ms: a trickle appended to it (retries coming due, a small tenant's
 * events) then waits this long at most for another pool's refill, which in a throttled fleet comes one
 * turn in several seconds.
 */
const READ_AGAIN_MS = 200;

/** Options of {@link BatchProcessor}. */
export interface BatchProcessorOptions extends ItemLimits, RetryPolicy {
  /** Most pushes started in one step of a batch. */
  maxPerStep: number;
  /** Go on without the dedupe check when Redis is unreachable (the limiter's failure policy `open`). */
  failOpen: boolean;
  /** Longest fleet-wide block a project-wide 429 sets, in ms (a longer Retry-After is cut to it). */
  maxFleetBlockMs: number;
}

/** The done-marks as the processor uses them (DoneStore over Redis; an in-memory one in unit tests). */
export type DoneMarks = Pick<
  DoneStore,
  'lookup' | 'check' | 'isDoneLocally' | 'mark' | 'settled' | 'committed'
>;

/** Everything the processor works with. */
export interface BatchProcessorDeps {
  providers: Record<Platform, PushProvider>;
  doneStore: DoneMarks;
  outcomes: Pick<OutcomeWriter, 'write'>;
  /**
   * The pool an event's tokens come from; undefined when the limiter is disabled. Events read back from
   * the deferred topic take `low` priority tokens: they cannot take the reserve kept for the others.
   */
  poolFor: (event: NotificationEvent, priority: TokenPriority) => TokenPool | undefined;
  /** Tenant fairness: what is parked and how it is read back (undefined: fairness off, nothing is). */
  parking?: Parking;
  /** Pauses and resumes a partition (the kafkajs consumer's own pause/resume). */
  pause: (topic: string, partition: number) => void;
  resume: (topic: string, partition: number) => void;
  observer: PipelineObserver;
}

/** The class of tokens a send takes (see TokenPoolOptions.priority). */
export type TokenPriority = 'normal' | 'low';

/** What one step of a batch did. */
interface StepResult {
  finished: number;
  /** The pools the step's sends drew from. */
  pools: TokenPool[];
  /** Pools that granted less than their items needed, with the unmet need. */
  starved: Map<TokenPool, number>;
}

/** A bucket group's sends of a step: the first `urgent` are due for devices the provider throttled. */
interface PoolGroup {
  entries: Sendable[];
  urgent: number;
}

/** The open items of a step, sorted by what happens to them. */
interface StepPlan {
  /** Finished by an earlier reading (a redelivery): skipped. */
  duplicates: Item[];
  /** Did not decode: dead-lettered. */
  undecodable: Array<{ item: Item; decoded: Extract<DecodeResult, { ok: false }> }>;
  /** Their TTL ran out before they could be pushed: dead-lettered. */
  expired: Array<Sendable & { expiredAtMs: number }>;
  /** Sent without tokens (the limiter is disabled). */
  unmetered: Sendable[];
  /** Sent with the tokens of their bucket group's pool: first the sends due for paced devices. */
  byPool: Map<TokenPool, PoolGroup>;
  /** For a device the provider throttled: back to the retry topic, due at `notBefore`, no attempt spent. */
  deferred: Array<Sendable & { notBefore: number }>;
  /** Of a tenant over its fair share: parked on the deferred topic, out of the other tenants' way. */
  parked: Sendable[];
  /** When the plan was made: a throttle answered to one of its sends was decided then. */
  at: number;
}

/**
 * The data path, top to bottom, for one fetched batch of one partition:
 *
 *   decode + validate ─► dedupe (one Redis call) ─► per bucket group: take tokens ─► send what was
 *   granted ─► record outcomes (topics, done-marks) ─► resolve the contiguous finished prefix, commit
 *
 * repeated while tokens last. When a bucket is short, or a retry is not due yet, the partition is
 * paused and resumed exactly when the pool has refilled (or the retry is due); kafkajs then re-reads
 * it from the first unresolved offset, and the partition state recognizes what was already finished.
 */
export class BatchProcessor {
  private readonly deps: BatchProcessorDeps;
  private readonly options: BatchProcessorOptions;
  private readonly sender: Sender;
  private readonly timers: PauseTimers;
  private readonly partitions = new Map<string, PartitionState>();
  /** The pools each partition's sends have drawn from (see pauseUntilReady). */
  private readonly poolsOf = new WeakMap<PartitionState, Set<TokenPool>>();
  /** Devices throttled on their own (device-scoped 429s), paced in this process. */
  private readonly devices = new DeviceBackoff();
  /** How long each project-wide 429 blocks the fleet. */
  private readonly fleetBlocks = new FleetBlocks();
  /** Partitions assigned before this time (epoch ms) read their done-marks again before each send. */
  private recheckUntil = 0;

  constructor(deps: BatchProcessorDeps, options: BatchProcessorOptions) {
    this.deps = deps;
    this.options = options;
    this.sender = new Sender({ ...deps, failOpen: options.failOpen });
    this.timers = new PauseTimers(deps);
  }

  /** The kafkajs `eachBatch` handler (run with `eachBatchAutoResolve: false`). */
  async eachBatch(payload: EachBatchPayload): Promise<void> {
    const { batch } = payload;
    const state = this.stateOf(batch.topic, batch.partition);
    const items = batch.messages.map((message) =>
      state.item(message, () => {
        const item = readItem(batch.topic, batch.partition, message, this.options);
        this.deps.observer.received?.(item, batch.topic, batch.partition);
        if (item.decoded.ok) this.deps.parking?.read(item.decoded.event);
        return item;
      }),
    );
    this.deps.parking?.backlog(batch.topic, batch, items);
    // A heartbeat is how a member learns that the group moved on without it (a rebalance, or its
    // session expired while it was cut off from the broker): one is due (kafkajs sends it once
    // heartbeatInterval has passed) before every send window, not only between steps, since a step
    // sends as many windows as a fetch holds events. A failed one ends the step before its next window,
    // and is thrown once the windows already answered are recorded.
    let heartbeatFailure: { error: unknown } | undefined;
    const heartbeat = async () => {
      if (heartbeatFailure) return;
      try {
        await payload.heartbeat();
      } catch (error) {
        heartbeatFailure = { error };
      }
    };
    // Whether the batch's partition is still this member's to work on (see Sender.sendMetered).
    const owned = () =>
      payload.isRunning() && !payload.isStale() && !state.revoked && heartbeatFailure === undefined;
    try {
      await this.dedupe(state, items);
      for (let firstStep = true; owned(); firstStep = false) {
        const open = state.openItems(items);
        if (open.length === 0) break;
        const step = await this.step(state, open, { owned, beforeWindow: heartbeat, firstStep });
        this.rememberPools(state, step.pools);
        this.resolvePrefix(state, items, payload);
        await payload.commitOffsetsIfNecessary();
        await heartbeat();
        if (heartbeatFailure) throw heartbeatFailure.error;
        if (step.finished === 0) {
          if (owned()) this.pauseUntilReady(state, open, step.starved, batch.offsetLag() === '0');
          break;
        }
      }
      state.stepSucceeded();
    } catch (error) {
      // kafkajs' own errors (a rebalance, a lost coordinator) are its to handle. Anything else (Redis
      // unreachable, an outcome topic that cannot be written) must not kill the consumer: what is not
      // recorded stays unresolved, and the partition is paused and read again after a back-off.
      if (isKafkaJsError(error)) {
        await this.handOver();
        throw error;
      }
      this.deps.observer.stepFailed?.(error, batch.topic, batch.partition);
      this.resolvePrefix(state, items, payload);
      if (!this.timers.isPaused(state)) this.timers.pauseFor(state, backoffDelayMs(state.stepFailed()));
    } finally {
      // Whatever happened (kafkajs' own errors included), a re-read must find what was decoded, deduped
      // and finished here: the dedupe check is not made twice.
      state.keepUnresolved(items);
    }
    this.deps.observer.batchDone?.(batch, state.openItems(items).length);
    if (!owned()) await this.handOver();
  }

  /**
   * The partition may go to another member once this batch returns (a rebalance, a crash, a stop):
   * what this member finished above the commit must be in Redis before the next owner reads it, so the
   * done-marks still coalescing (up to AQUEDUCT_MARK_FLUSH_MS) are waited for now.
   */
  private async handOver(): Promise<void> {
    await this.deps.doneStore.settled();
  }

  /**
   * Partitions assigned from now on may come from a member that was expelled without knowing it (see
   * Sender.recheck): until `ms` from now their done-marks are read again right before each send.
   */
  recheckAssignedFor(ms: number): void {
    this.recheckUntil = Date.now() + ms;
  }

  /**
   * Forgets the partitions of `topics` (every partition when not given): cancels the scheduled resumes
   * and, after a rebalance, un-pauses the partitions (kafkajs keeps a pause across a rebalance). On
   * shutdown (`unpause: false`) nothing is resumed: the consumer is stopping, and kafkajs refuses a
   * resume once it has stopped.
   */
  reset(options: { unpause: boolean; topics?: readonly string[] } = { unpause: true }): void {
    for (const [key, state] of this.partitions) {
      if (options.topics && !options.topics.includes(state.topic)) continue;
      this.timers.release(state, options.unpause);
      this.deps.observer.released?.(state.topic, state.partition);
      state.revoke();
      this.partitions.delete(key);
    }
  }

  /**
   * The partitions of `topics` are this member's no more (a rebalance began): the steps still running on
   * them stop before their next send window, and leave what is unsent to the partitions' next owners.
   * Their states stay until the rejoin resets them (with their pause timers).
   */
  revoke(topics: readonly string[]): void {
    for (const state of this.partitions.values()) if (topics.includes(state.topic)) state.revoke();
  }

  /** Partitions currently held paused. */
  pausedCount(): number {
    return this.timers.count();
  }

  /** Resolves once every done-mark handed over so far has landed in Redis or failed (for shutdown). */
  marksSettled(): Promise<void> {
    return this.deps.doneStore.settled();
  }

  private stateOf(topic: string, partition: number): PartitionState {
    const key = `${topic}:${partition}`;
    let state = this.partitions.get(key);
    if (!state) {
      state = new PartitionState(topic, partition, this.recheckUntil);
      this.partitions.set(key, state);
    }
    return state;
  }

  /**
   * One Redis call for the messages this partition has not checked yet, sent at once (see
   * DoneStore.lookup), with the partition's finished offsets on its first batch of an assignment. When Redis cannot answer, the failure policy decides: `closed` (the default)
   * throws, so the partition waits; `open` goes on without the check, accepting a duplicate push for an
   * event that is being redelivered right then.
   */
  private async dedupe(state: PartitionState, items: readonly Item[]): Promise<void> {
    const unchecked = state.unchecked(items);
    const readFinished = state.needsFinishedRead();
    if (unchecked.length === 0 && !readFinished) return;
    // A message that did not decode has no (tenant, id): only its offset can have been finished before.
    // An event to be parked is looked up when it is read back, not twice.
    const isOver = this.deps.parking?.judge(state.topic);
    const toPark = isOver ? unchecked.filter((item) => item.decoded.ok && isOver(item.decoded.event)) : [];
    const parked = new Set(toPark);
    const lookedUp = parked.size === 0 ? unchecked : unchecked.filter((item) => !parked.has(item));
    const keys = lookedUp.filter((item) => item.decoded.ok).map((item) => item.dedupeKey);
    let reading: DoneReading;
    try {
      const from = state.readFrom(items[0]?.offset);
      reading = await this.deps.doneStore.lookup(
        keys,
        readFinished ? [{ topic: state.topic, partition: state.partition, from }] : [],
      );
    } catch (error) {
      if (!this.options.failOpen) throw error;
      this.deps.observer.markFailed?.(error, unchecked.length);
      reading = { done: new Map(), finished: new Map() };
    }
    const finished = reading.finished.get(state.key);
    if (finished) state.finishedEarlier(finished);
    state.checked(
      unchecked,
      reading.done.size === 0 ? [] : lookedUp.filter((item) => reading.done.has(item.dedupeKey.text)),
      toPark,
    );
  }

  /**
   * Finishes what can be finished now: redeliveries, invalid messages, and events with tokens. Sends
   * stop, window by window, once the partition is no longer `owned` (asked after `beforeWindow`).
   */
  private async step(
    state: PartitionState,
    open: readonly Item[],
    membership: { owned: () => boolean; beforeWindow: () => Promise<void>; firstStep: boolean },
  ): Promise<StepResult> {
    const { owned } = membership;
    const plan = this.plan(state, open);
    for (const item of plan.duplicates) this.deps.observer.duplicateSkipped?.(item);
    const settled: Array<{ item: Item; settlement: Settlement }> = plan.undecodable.map(
      ({ item, decoded }) => {
        this.deps.observer.deadLettered?.(decoded.kind, item);
        return { item, settlement: settleUndecodable(item, decoded, this.origin(state, item)) };
      },
    );
    for (const { item, expiredAtMs } of plan.expired) {
      this.deps.observer.deadLettered?.('expired', item);
      settled.push({ item, settlement: settleExpired(item, this.origin(state, item), expiredAtMs) });
    }
    for (const { item, event, notBefore } of plan.deferred) {
      this.deps.observer.deferred?.(event, item, notBefore);
      settled.push({ item, settlement: settleDeferred(item, this.origin(state, item), notBefore) });
    }
    // What is parked at once is written while the sends go on: the partition is not held by both.
    const parkedAtOnce = plan.parked.map(({ item, event }) => {
      this.deps.observer.parked?.(event, item);
      return { item, settlement: settleParked(item, event.platform, this.origin(state, item)) };
    });
    const parkedWritten =
      parkedAtOnce.length === 0
        ? Promise.resolve()
        : this.deps.outcomes.write(
            parkedAtOnce.flatMap(({ settlement: s }): OutcomeRecord[] => (s.record ? [s.record] : [])),
          );
    // Awaited below; a failure here must not go unhandled meanwhile.
    parkedWritten.catch(() => {});
    const [unmetered, ...metered] = await Promise.all([
      this.sender.sendUnmetered(state, plan.unmetered),
      ...[...plan.byPool].map(([pool, group]) =>
        this.sender.sendMetered(state, pool, group.entries, {
          urgent: { count: group.urgent, waitMs: PACED_SEND_WAIT_MS },
          ...membership,
        }),
      ),
    ]);
    const sends = [unmetered, ...metered];
    for (const [i, group] of [...plan.byPool.values()].entries()) {
      const sent = group.entries.length - (metered[i]?.unsent.length ?? 0);
      for (const { event } of group.entries.slice(sent, group.urgent)) this.devices.unsent(event);
    }
    // What got no token now is parked too when its tenant turns out to be over its share (not once
    // the partition has moved: what is unsent is then its next owner's).
    const unsentByPool = [...plan.byPool.keys()].map((_, i) => metered[i]?.unsent ?? []);
    const lateParked =
      (owned()
        ? this.deps.parking?.afterSends(
            state.topic,
            [...plan.byPool.values()].map((group, i) => ({
              entries: group.entries,
              unsent: unsentByPool[i] ?? [],
            })),
          )
        : undefined) ?? [];
    for (const { item, event } of lateParked.flat()) {
      this.deps.observer.parked?.(event, item);
      settled.push({ item, settlement: settleParked(item, event.platform, this.origin(state, item)) });
    }
    const answered = sends.flatMap((send) => send.answered);
    for (const entry of answered)
      settled.push({ item: entry.item, settlement: await this.settleAnswered(state, entry, plan.at) });

    // The outcome is recorded once the provider accepted it or its record is on its topic; the marks
    // follow without being waited for (see markDone). Deliveries were marked by the sender already: if
    // writing the other records fails, a re-read must not push them again. Records are the outcome of
    // the rest, so those are marked done only once their records are on the topics.
    await Promise.all([
      parkedWritten,
      this.deps.outcomes.write(
        settled.flatMap(({ settlement: s }): OutcomeRecord[] => (s.record ? [s.record] : [])),
      ),
    ]);
    settled.push(...parkedAtOnce);
    markDone(
      this.deps,
      settled.flatMap(({ item, settlement }): DoneMark[] =>
        settlement.record
          ? [{ topic: state.topic, partition: state.partition, offset: item.offset, final: settlement.final }]
          : [],
      ),
    );
    const finished = [
      ...plan.duplicates,
      ...plan.undecodable.map((entry) => entry.item),
      ...plan.expired.map((entry) => entry.item),
      ...plan.deferred.map((entry) => entry.item),
      ...plan.parked.map((entry) => entry.item),
      ...lateParked.flat().map((entry) => entry.item),
      ...sends.flatMap((send) => send.skipped),
      ...answered.map((entry) => entry.item),
    ];
    state.finish(finished);
    this.deps.observer.settled?.(finished, state.topic, state.partition);
    const starved = new Map<TokenPool, number>();
    for (const [i, pool] of [...plan.byPool.keys()].entries()) {
      const unmet = (unsentByPool[i]?.length ?? 0) - (lateParked[i]?.length ?? 0);
      if (unmet > 0) starved.set(pool, unmet);
    }
    return { finished: finished.length, pools: [...plan.byPool.keys()], starved };
  }

  /** Sorts a step's open items: what is skipped, dead-lettered, and sent (by pool, up to maxPerStep each). */
  private plan(state: PartitionState, open: readonly Item[]): StepPlan {
    const now = Date.now();
    const plan: StepPlan = {
      duplicates: [],
      undecodable: [],
      expired: [],
      unmetered: [],
      byPool: new Map(),
      deferred: [],
      parked: [],
      at: now,
    };
    const parking = this.deps.parking;
    const isOver = parking?.judge(state.topic, now);
    const readingBack = parking?.readsBack(state.topic) ?? false;
    const seenIds = new Set<string>();
    // Sends per device, by platform and token (a token names a device within its platform).
    const perDevice: Record<Platform, Map<string, number>> = { fcm: new Map(), apns: new Map() };
    for (const item of open) {
      if (state.wasDoneEarlier(item)) {
        plan.duplicates.push(item);
        continue;
      }
      if (!item.decoded.ok) {
        plan.undecodable.push({ item, decoded: item.decoded });
        continue;
      }
      // A second copy of an event this process finished since the lookup. (Not asked for a message
      // that did not decode: its coordinates are no event's key. Nor for one parked before its lookup:
      // the lookup is made when it is read back.)
      if (!state.mustPark(item) && this.deps.doneStore.isDoneLocally(item.dedupeKey)) {
        plan.duplicates.push(item);
        continue;
      }
      // The same id twice in reach (a retry copy written twice): send one, the other waits for its mark.
      if (item.notBefore > now || seenIds.has(item.dedupeKey.text)) continue;
      seenIds.add(item.dedupeKey.text);
      const event = item.decoded.event;
      const expiresAt = expiresAtMs(event, item.publishedAtMs, now);
      if (expiresAt !== undefined && expiresAt <= now) {
        plan.expired.push({ item, event, expiredAtMs: expiresAt });
        continue;
      }
      if (isOver?.(event) || state.mustPark(item)) {
        plan.parked.push({ item, event });
        continue;
      }
      const pool = this.deps.poolFor(event, readingBack ? 'low' : 'normal');
      const group = pool ? (plan.byPool.get(pool) ?? { entries: [], urgent: 0 }) : undefined;
      const entries = group ? group.entries : plan.unmetered;
      if (entries.length >= this.options.maxPerStep) continue;
      const sentTo = perDevice[event.platform];
      const sentToDevice = sentTo.get(event.token) ?? 0;
      if (sentToDevice >= MAX_PER_DEVICE_PER_STEP) continue;
      // A device the provider throttled on its own waits for its slot; nothing else waits for it.
      const decision = this.devices.decide(event, now);
      if (!decision.send) {
        plan.deferred.push({ item, event, notBefore: decision.notBefore });
        continue;
      }
      sentTo.set(event.token, sentToDevice + 1);
      // A paced device's send is due now: it goes first for the group's tokens (and gets its slot back
      // when it gets none, see DeviceBackoff.unsent).
      if (group && this.devices.isPaced(event)) {
        group.entries.splice(group.urgent, 0, { item, event });
        group.urgent += 1;
      } else entries.push({ item, event });
      if (pool && group) plan.byPool.set(pool, group);
    }
    // Read back from the deferred topic, a group's tokens are split among its tenants by weight: the
    // step sends its events interleaved by tenant, window after window while tokens last.
    if (readingBack && parking)
      for (const group of plan.byPool.values())
        group.entries = parking.readBackOrder(group.entries, group.urgent);
    return plan;
  }

  private async settleAnswered(
    state: PartitionState,
    answered: Answered,
    decidedAt: number,
  ): Promise<Settlement> {
    const { item, event, outcome } = answered;
    this.deps.observer.outcome?.(event, outcome, item);
    if (blocksFleet(outcome) && outcome.kind === 'retry')
      await this.blockFleet(event, outcome.retryAfterMs, decidedAt);
    else if (outcome.kind === 'delivered') this.fleetBlocks.accepted(event.platform, decidedAt);
    const now = Date.now();
    const settlement = settleAnswered(answered, this.origin(state, item), this.options, now);
    this.devices.answered(event, outcome, now, decidedAt, this.options.maxRetryDelayMs);
    if (settlement.deadLettered) this.deps.observer.deadLettered?.(settlement.deadLettered, item);
    if (settlement.retried) this.deps.observer.retried?.(outcome, event);
    return settlement;
  }

  private origin(state: PartitionState, item: Item): Origin {
    return { topic: state.topic, partition: state.partition, offset: item.offset };
  }

  /**
   * A project-wide 429: every consumer of the fleet stops sending to this provider for the block
   * {@link FleetBlocks} gives it (Retry-After when there is one), never longer than `maxFleetBlockMs`.
   */
  private async blockFleet(
    event: NotificationEvent,
    retryAfterMs: number | undefined,
    decidedAt: number,
  ): Promise<void> {
    // The fleet block is written on the provider's bucket: any of the event's pools reaches it.
    const pool = this.deps.poolFor(event, 'normal');
    if (!pool) return;
    const now = Date.now();
    const blockMs = this.fleetBlocks.blockMs(event.platform, retryAfterMs, decidedAt, now);
    const until = now + Math.min(blockMs, this.options.maxFleetBlockMs);
    // Only a later block is news to the fleet. (The pool's own dry spell does not count: it is this
    // process's wait for tokens, which the other processes know nothing of.)
    if (until <= pool.blockedUntilMs) return;
    await pool.block(until).catch((error: unknown) => this.deps.observer.limiterError?.(error));
  }

  /** Resolves offsets up to the first one that is not finished: nothing after a gap is committed. */
  private resolvePrefix(state: PartitionState, items: readonly Item[], payload: EachBatchPayload): void {
    const through = state.resolvePrefix(items);
    // kafkajs keeps one resolved offset per partition (the next to read): one call for the prefix.
    if (through !== undefined) payload.resolveOffset(through);
  }

  /**
   * Pauses a partition that finished nothing, until a starved pool has refilled or a retry is due. A
   * partition read to its end (`readToEnd`) is also read again shortly when a pool it drew from before
   * is not dry: what was appended since may be that pool's to send, and must not wait for the starved
   * pools' turn.
   */
  private pauseUntilReady(
    state: PartitionState,
    open: readonly Item[],
    starved: Map<TokenPool, number>,
    readToEnd: boolean,
  ): void {
    const now = Date.now();
    const dueTimes = open.filter((item) => item.decoded.ok && item.notBefore > now).map((i) => i.notBefore);
    const retryDueAt = dueTimes.length > 0 ? Math.min(...dueTimes) : undefined;
    const couldSend = [...(this.poolsOf.get(state) ?? [])].some(
      (pool) => !starved.has(pool) && pool.dryUntilMs <= now,
    );
    const readAgainAt = readToEnd && couldSend ? now + READ_AGAIN_MS : undefined;
    this.timers.pauseUntilReady(state, { starved, retryDueAt, readAgainAt });
  }

  /** Adds to the pools a partition's sends have drawn from (a handful: one per bucket group). */
  private rememberPools(state: PartitionState, pools: readonly TokenPool[]): void {
    if (pools.length === 0) return;
    const known = this.poolsOf.get(state);
    if (known) for (const pool of pools) known.add(pool);
    else this.poolsOf.set(state, new Set(pools));
  }
}
