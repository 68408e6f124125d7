import type { EachBatchPayload, KafkaMessage } from 'kafkajs';
import { type DecodeResult, decodeEvent } from '../events/decode.ts';
import type { NotificationEvent, Platform } from '../events/event.ts';
import { isKafkaJsError } from '../kafka/errors.ts';
import { envelopeBytes, HEADER, headerNumber } from '../kafka/headers.ts';
import type { PushOutcome, PushProvider, PushRequest } from '../providers/types.ts';
import type { DoneStore, FinalOutcome } from './done-store.ts';
import type { PipelineObserver } from './observer.ts';
import type { OutcomeRecord, OutcomeWriter } from './outcome-writer.ts';
import { type Item, PartitionState } from './partition-state.ts';
import type { TokenPool } from './token-pool.ts';

/** Options of {@link BatchProcessor}. */
export interface BatchProcessorOptions {
  /** The retry topic: its messages carry attempt and not-before headers. */
  retryTopic: string;
  /** Largest accepted message value, in bytes. */
  maxMessageBytes: number;
  /** Largest accepted key plus headers, in bytes (checked before the value is looked at). */
  maxHeaderBytes: number;
  /** Attempts before a transiently failing event is dead-lettered. */
  maxAttempts: number;
  /** First retry delay (doubles per attempt, with jitter) when the provider gave no Retry-After. */
  retryBaseMs: number;
  /** Most pushes started in one step of a batch. */
  maxPerStep: number;
  /** Go on without the dedupe check when Redis is unreachable (AQUEDUCT_LIMITER_FAILURE_POLICY=open). */
  failOpen: boolean;
}

/** Everything the processor works with. */
export interface BatchProcessorDeps {
  providers: Record<Platform, PushProvider>;
  doneStore: DoneStore;
  outcomes: OutcomeWriter;
  /** The pool an event's tokens come from; undefined when the limiter is disabled. */
  poolFor: (event: NotificationEvent) => TokenPool | undefined;
  /** Pauses and resumes a partition (the kafkajs consumer's own pause/resume). */
  pause: (topic: string, partition: number) => void;
  resume: (topic: string, partition: number) => void;
  observer: PipelineObserver;
}

/** What one step of a batch did. */
interface StepResult {
  finished: number;
  /** Pools that granted less than their items needed, with the unmet need. */
  starved: Map<TokenPool, number>;
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
  private readonly partitions = new Map<string, PartitionState>();
  /** Partitions assigned before this time (epoch ms) read their done-marks again before each send. */
  private recheckUntil = 0;

  constructor(deps: BatchProcessorDeps, options: BatchProcessorOptions) {
    this.deps = deps;
    this.options = options;
  }

  /** The kafkajs `eachBatch` handler (run with `eachBatchAutoResolve: false`). */
  async eachBatch(payload: EachBatchPayload): Promise<void> {
    const { batch } = payload;
    const state = this.stateOf(batch.topic, batch.partition);
    const build = (message: KafkaMessage) => this.toItem(batch.topic, batch.partition, message);
    const items = batch.messages.map((message) => state.item(message, build));
    try {
      await this.dedupe(state, items);
      while (payload.isRunning() && !payload.isStale()) {
        const open = this.openItems(state, items);
        if (open.length === 0) break;
        const step = await this.step(state, open);
        this.resolvePrefix(state, items, payload.resolveOffset);
        await payload.commitOffsetsIfNecessary();
        await payload.heartbeat();
        if (step.finished === 0) {
          this.pauseUntilReady(state, open, step.starved);
          break;
        }
      }
      state.failures = 0;
    } catch (error) {
      // kafkajs' own errors (a rebalance, a lost coordinator) are its to handle. Anything else (Redis
      // unreachable, an outcome topic that cannot be written) must not kill the consumer: what is not
      // recorded stays unresolved, and the partition is paused and read again after a back-off.
      if (isKafkaJsError(error)) throw error;
      this.deps.observer.stepFailed?.(error, batch.topic, batch.partition);
      this.resolvePrefix(state, items, payload.resolveOffset);
      this.pauseForBackoff(state);
    } finally {
      // Whatever happened (kafkajs' own errors included), a re-read must find what was decoded, deduped
      // and finished here: the dedupe check is not made twice.
      state.keepUnresolved(items);
    }
    this.deps.observer.batchDone?.(batch, this.openItems(state, items).length);
  }

  /** The items of a batch not finished yet. Offsets ascend, and what is resolved is a prefix of them. */
  private openItems(state: PartitionState, items: readonly Item[]): Item[] {
    const last = items.at(-1);
    if (last === undefined || state.isResolved(last.offset)) return [];
    let start = 0;
    while (start < items.length && state.isResolved((items[start] as Item).offset)) start++;
    const open: Item[] = [];
    for (let i = start; i < items.length; i++) {
      const item = items[i] as Item;
      if (!state.finished.has(item.offset)) open.push(item);
    }
    return open;
  }

  /**
   * Partitions assigned from now on may come from a member that was expelled without knowing it (see
   * recheckBeforeSend): until `ms` from now their done-marks are read again right before each send.
   */
  recheckAssignedFor(ms: number): void {
    this.recheckUntil = Date.now() + ms;
  }

  /**
   * Forgets every partition: cancels the scheduled resumes and, after a rebalance, un-pauses the
   * partitions (kafkajs keeps a pause across a rebalance). On shutdown (`unpause: false`) nothing is
   * resumed: the consumer is stopping, and kafkajs refuses a resume once it has stopped.
   */
  reset(options: { unpause: boolean } = { unpause: true }): void {
    for (const state of this.partitions.values()) this.forget(state, options.unpause);
    this.partitions.clear();
  }

  /** Partitions currently held paused. */
  pausedCount(): number {
    let count = 0;
    for (const state of this.partitions.values()) if (state.cancelResume) count++;
    return count;
  }

  private stateOf(topic: string, partition: number): PartitionState {
    const key = `${topic}:${partition}`;
    let state = this.partitions.get(key);
    if (!state) {
      state = new PartitionState(topic, partition);
      state.recheckUntil = this.recheckUntil;
      this.partitions.set(key, state);
    }
    return state;
  }

  private toItem(topic: string, partition: number, message: KafkaMessage): Item {
    const envelope = envelopeBytes(message);
    const decoded: DecodeResult =
      envelope > this.options.maxHeaderBytes
        ? {
            ok: false,
            kind: 'too-large',
            reason: `key and headers are ${envelope} bytes, limit ${this.options.maxHeaderBytes}`,
          }
        : decodeEvent(message.value, this.options.maxMessageBytes);
    // Only the retry topic's own headers are trusted: a producer must not be able to stall a partition
    // of the main topic with a far-future not-before.
    const fromRetry = topic === this.options.retryTopic;
    const attempt = fromRetry ? Math.max(1, headerNumber(message.headers, HEADER.attempt, 1)) : 1;
    const notBefore = fromRetry ? headerNumber(message.headers, HEADER.notBefore, 0) : 0;
    const dedupeKey = decoded.ok ? decoded.event.id : `@${topic}:${partition}:${message.offset}`;
    const item: Item = { offset: message.offset, message, decoded, attempt, notBefore, dedupeKey };
    this.deps.observer.received?.(item, topic, partition);
    return item;
  }

  /**
   * One Redis call for the messages this partition has not checked yet, sent at once (see
   * DoneStore.lookup). When Redis cannot answer, the failure policy decides: `closed` (the default)
   * throws, so the partition waits; `open` goes on without the check, accepting a duplicate push for an
   * event that is being redelivered right then.
   */
  private async dedupe(state: PartitionState, items: Item[]): Promise<void> {
    const last = items.at(-1);
    if (last === undefined || BigInt(last.offset) <= state.checkedThrough) return;
    // Offsets ascend: usually the whole batch is new, else a re-read starts with what was checked.
    const fresh =
      BigInt(items[0]?.offset ?? last.offset) > state.checkedThrough
        ? items
        : items.filter((item) => BigInt(item.offset) > state.checkedThrough);
    let done: Map<string, string>;
    try {
      done = await this.deps.doneStore.lookup(fresh.map((item) => item.dedupeKey));
    } catch (error) {
      if (!this.options.failOpen) throw error;
      this.deps.observer.markFailed?.(error, fresh.length);
      done = new Map();
    }
    if (done.size > 0)
      for (const item of fresh) {
        const outcome = done.get(item.dedupeKey);
        if (outcome !== undefined) item.alreadyDone = outcome;
      }
    state.checkedThrough = BigInt(last.offset);
  }

  /** Finishes what can be finished now: redeliveries, invalid messages, and events with tokens. */
  private async step(state: PartitionState, open: Item[]): Promise<StepResult> {
    const records: OutcomeRecord[] = [];
    const marks: Array<{ id: string; outcome: FinalOutcome }> = [];
    const finished: Item[] = [];
    const now = Date.now();

    const toSend: Array<{ item: Item; event: NotificationEvent }> = [];
    const byPool = new Map<TokenPool, Array<{ item: Item; event: NotificationEvent }>>();
    const seenIds = new Set<string>();
    for (const item of open) {
      if (item.alreadyDone !== undefined || this.deps.doneStore.isDoneLocally(item.dedupeKey)) {
        this.deps.observer.duplicateSkipped?.(item);
        finished.push(item);
        continue;
      }
      if (!item.decoded.ok) {
        const origin = { topic: state.topic, partition: state.partition, offset: item.offset };
        records.push({
          kind: 'dead-letter',
          message: item.message,
          origin,
          reasonKind: item.decoded.kind,
          reason: item.decoded.reason,
        });
        marks.push({ id: item.dedupeKey, outcome: 'dead-lettered' });
        this.deps.observer.deadLettered?.(item.decoded.kind, item);
        finished.push(item);
        continue;
      }
      // The same id twice in reach (a retry copy written twice): send one, the other waits for its mark.
      if (item.notBefore > now || seenIds.has(item.dedupeKey)) continue;
      seenIds.add(item.dedupeKey);
      const pool = this.deps.poolFor(item.decoded.event);
      const entry = { item, event: item.decoded.event };
      if (!pool) {
        if (toSend.length < this.options.maxPerStep) toSend.push(entry);
        continue;
      }
      const group = byPool.get(pool) ?? [];
      if (group.length < this.options.maxPerStep) group.push(entry);
      byPool.set(pool, group);
    }

    const starved = new Map<TokenPool, number>();
    const sent = (
      await Promise.all([
        this.send(await this.recheckBeforeSend(state, toSend, finished)),
        ...[...byPool].map(([pool, group]) => this.sendMetered(state, pool, group, { finished, starved })),
      ])
    ).flat();
    for (const { item, event, outcome } of sent) {
      finished.push(item);
      const origin = { topic: state.topic, partition: state.partition, offset: item.offset };
      this.deps.observer.outcome?.(event, outcome, item);
      switch (outcome.kind) {
        case 'delivered':
          break; // marked by send() as soon as the provider answered
        case 'invalid-token':
          records.push({
            kind: 'invalid-token',
            event,
            message: item.message,
            origin,
            reason: outcome.reason,
          });
          marks.push({ id: event.id, outcome: 'invalid-token' });
          break;
        case 'rejected':
          records.push({
            kind: 'dead-letter',
            message: item.message,
            origin,
            reasonKind: 'rejected',
            reason: outcome.reason,
          });
          marks.push({ id: event.id, outcome: 'dead-lettered' });
          this.deps.observer.deadLettered?.('rejected', item);
          break;
        case 'retry': {
          if (outcome.throttled) await this.blockFleet(event, outcome.retryAfterMs);
          if (item.attempt >= this.options.maxAttempts) {
            const reason = `gave up after ${item.attempt} attempts; last: ${outcome.reason}`;
            records.push({
              kind: 'dead-letter',
              message: item.message,
              origin,
              reasonKind: 'max-attempts',
              reason,
            });
            marks.push({ id: event.id, outcome: 'dead-lettered' });
            this.deps.observer.deadLettered?.('max-attempts', item);
          } else {
            const notBefore = Date.now() + this.retryDelay(item.attempt, outcome.retryAfterMs);
            records.push({
              kind: 'retry',
              message: item.message,
              origin,
              attempt: item.attempt + 1,
              notBefore,
              reason: outcome.reason,
            });
            this.deps.observer.retried?.(outcome, event);
          }
          break;
        }
      }
    }

    // The outcome is recorded once the provider accepted it or its record is on its topic; the marks
    // follow without being waited for (see markDone). Deliveries were marked by send() already: if
    // writing the other records fails, a re-read must not push them again. Records are the outcome of
    // the rest, so those are marked done only once their records are on the topics.
    await this.deps.outcomes.write(records);
    this.markDone(marks);
    for (const item of finished) state.finished.add(item.offset);
    this.deps.observer.settled?.(finished, state.topic, state.partition);
    return { finished: finished.length, starved };
  }

  /**
   * Sends a bucket group's entries one window at a time: take tokens for at most `pool.window` of them,
   * send those, give the window back once they are answered, and go on while tokens last. Taking right
   * before sending keeps what the fleet has been granted and the provider has not yet seen small (see
   * TokenPoolOptions.window). What gets no token is left in `starved`; a 429 ends the loop (the outcome
   * handling then blocks the fleet).
   */
  private async sendMetered(
    state: PartitionState,
    pool: TokenPool,
    group: ReadonlyArray<{ item: Item; event: NotificationEvent }>,
    step: { finished: Item[]; starved: Map<TokenPool, number> },
  ): Promise<Array<{ item: Item; event: NotificationEvent; outcome: PushOutcome }>> {
    const sent: Array<{ item: Item; event: NotificationEvent; outcome: PushOutcome }> = [];
    let next = 0;
    while (next < group.length) {
      const slice = group.slice(next, next + pool.window);
      const granted = await this.deps.observer.acquire(pool, slice.length, () => pool.take(slice.length), {
        topic: state.topic,
        partition: state.partition,
        items: slice.map((entry) => entry.item),
      });
      if (granted === 0) break;
      next += granted;
      let answered: Array<{ item: Item; event: NotificationEvent; outcome: PushOutcome }>;
      try {
        answered = await this.send(
          await this.recheckBeforeSend(state, slice.slice(0, granted), step.finished),
        );
      } finally {
        pool.release(granted);
      }
      sent.push(...answered);
      if (answered.some(({ outcome }) => outcome.kind === 'retry' && outcome.throttled)) break;
    }
    if (next < group.length) step.starved.set(pool, group.length - next);
    return sent;
  }

  /**
   * A member whose session expired (cut off from the broker longer than the session timeout) goes on
   * with the step it is in until its next heartbeat tells it the partition has moved. What it delivers
   * after the new owner's dedupe check (made when the batch was fetched) would be pushed twice: a fault
   * run with a 12 s broker outage pushed one step's worth (62 events) twice, half a second apart. So,
   * for a while after a rejoin (recheckAssignedFor), the marks are read again right before sending
   * (one Redis call per step, only in that window); what is marked by now is skipped. Its tokens are
   * not given back.
   */
  private async recheckBeforeSend(
    state: PartitionState,
    toSend: ReadonlyArray<{ item: Item; event: NotificationEvent }>,
    finished: Item[],
  ): Promise<ReadonlyArray<{ item: Item; event: NotificationEvent }>> {
    if (toSend.length === 0 || Date.now() > state.recheckUntil) return toSend;
    let done: Map<string, string>;
    try {
      done = await this.deps.doneStore.check(toSend.map((entry) => entry.item.dedupeKey));
    } catch (error) {
      if (!this.options.failOpen) throw error;
      this.deps.observer.markFailed?.(error, toSend.length);
      return toSend;
    }
    const keep: Array<{ item: Item; event: NotificationEvent }> = [];
    for (const entry of toSend) {
      const outcome = done.get(entry.item.dedupeKey);
      if (outcome === undefined) {
        keep.push(entry);
        continue;
      }
      entry.item.alreadyDone = outcome;
      this.deps.observer.duplicateSkipped?.(entry.item);
      finished.push(entry.item);
    }
    return keep;
  }

  private async send(
    entries: ReadonlyArray<{ item: Item; event: NotificationEvent }>,
  ): Promise<Array<{ item: Item; event: NotificationEvent; outcome: PushOutcome }>> {
    const byPlatform = new Map<Platform, Array<{ item: Item; event: NotificationEvent }>>();
    for (const entry of entries) {
      const list = byPlatform.get(entry.event.platform) ?? [];
      list.push(entry);
      byPlatform.set(entry.event.platform, list);
    }
    const results = await Promise.all(
      [...byPlatform].map(async ([platform, list]) => {
        const requests: PushRequest[] = list.map(({ item, event }) => ({ event, attempt: item.attempt }));
        const items = list.map((entry) => entry.item);
        const provider = this.deps.providers[platform];
        const outcomes = await this.deps.observer.send({ platform, requests, items }, () =>
          provider.send(requests),
        );
        return list.map((entry, i) => ({
          ...entry,
          outcome: outcomes[i] ?? {
            kind: 'retry' as const,
            reason: 'provider returned no outcome',
            throttled: false,
          },
        }));
      }),
    );
    const sent = results.flat();
    // Deliveries are marked as soon as their sends are answered, not when the step ends: a step spans
    // many send windows, and a process killed meanwhile would leave the early ones unmarked (pushed
    // again by the partition's next owner).
    this.markDone(
      sent
        .filter(({ outcome }) => outcome.kind === 'delivered')
        .map(({ event }) => ({ id: event.id, outcome: 'delivered' })),
    );
    return sent;
  }

  /** A 429: every consumer of the fleet stops sending to this provider until Retry-After has passed. */
  private async blockFleet(event: NotificationEvent, retryAfterMs: number | undefined): Promise<void> {
    const pool = this.deps.poolFor(event);
    if (!pool) return;
    const until = Date.now() + (retryAfterMs ?? 1000);
    // Only a later block is news to the fleet. (The pool's own dry spell does not count: it is this
    // process's wait for tokens, which the other processes know nothing of.)
    if (until <= pool.blockedUntilMs) return;
    await pool.block(until).catch((error: unknown) => this.deps.observer.limiterError?.(error));
  }

  private retryDelay(attempt: number, retryAfterMs: number | undefined): number {
    if (retryAfterMs !== undefined) return retryAfterMs;
    const base = this.options.retryBaseMs * 2 ** (attempt - 1);
    return Math.round(base * (0.75 + Math.random() * 0.5));
  }

  /**
   * Done-marks are the dedupe memory, not the outcome itself (the provider's acceptance, or a record on
   * a topic): when Redis cannot take them the events are still finished, and the offset commit keeps
   * them from being read again; the failure is reported, not thrown. So the step does not wait for them
   * to land: this process knows the ids at once (DoneStore.isDoneLocally), Redis gets them in the same
   * few milliseconds as before, and the offsets are resolved meanwhile. Committing an offset before its
   * mark lands only narrows the crash window (a committed event is not read again); a re-read before the
   * commit dedupes against the mark as it did, since the mark is sent just as early. Shutdown waits for
   * marks in flight (DoneStore.settled).
   */
  private markDone(marks: ReadonlyArray<{ id: string; outcome: FinalOutcome }>): void {
    if (marks.length === 0) return;
    this.deps.doneStore.mark(marks).catch((error: unknown) => {
      this.deps.observer.markFailed?.(error, marks.length);
    });
  }

  /** Resolves once every done-mark handed over so far has landed in Redis or failed (for shutdown). */
  marksSettled(): Promise<void> {
    return this.deps.doneStore.settled();
  }

  /** Pauses a partition whose step failed; each failure in a row doubles the wait, up to 10 s. */
  private pauseForBackoff(state: PartitionState): void {
    if (state.cancelResume) return;
    state.failures++;
    const delay = Math.min(10_000, 500 * 2 ** (state.failures - 1));
    const timer = setTimeout(() => {
      if (this.partitions.get(state.key) !== state || !state.cancelResume) return;
      state.cancelResume = undefined;
      this.deps.resume(state.topic, state.partition);
    }, delay);
    state.cancelResume = () => {
      clearTimeout(timer);
      state.cancelResume = undefined;
    };
    state.pausedAt = Date.now();
    this.deps.pause(state.topic, state.partition);
  }

  /** Resolves offsets up to the first one that is not finished: nothing after a gap is committed. */
  private resolvePrefix(state: PartitionState, items: Item[], resolveOffset: (offset: string) => void): void {
    let through: string | undefined;
    for (const item of items) {
      if (!state.finished.has(item.offset)) {
        if (state.isResolved(item.offset)) continue;
        break;
      }
      state.items.delete(item.offset);
      state.finished.delete(item.offset);
      through = item.offset;
    }
    if (through === undefined) return;
    state.resolved(through);
    // kafkajs keeps one resolved offset per partition (the next to read): one call for the prefix.
    resolveOffset(through);
  }

  /**
   * Pauses the partition and schedules its resume: when the starved pools have refilled enough for
   * what waits here, or when the earliest pending retry is due, whichever comes first.
   */
  private pauseUntilReady(state: PartitionState, open: Item[], starved: Map<TokenPool, number>): void {
    if (state.cancelResume) return;
    const timers: NodeJS.Timeout[] = [];
    const wake = () => {
      if (this.partitions.get(state.key) !== state || !state.cancelResume) return;
      cancel();
      this.deps.observer.resumed?.(state.topic, state.partition, Date.now() - state.pausedAt);
      this.deps.resume(state.topic, state.partition);
    };
    const cancel = () => {
      for (const timer of timers) clearTimeout(timer);
      for (const pool of starved.keys()) pool.cancel(state.key);
      state.cancelResume = undefined;
    };

    let wakeAt = Number.POSITIVE_INFINITY;
    for (const [pool, need] of starved) wakeAt = Math.min(wakeAt, pool.whenRefilled(state.key, need, wake));
    const dueTimes = open
      .filter((item) => item.decoded.ok && item.notBefore > Date.now() && item.alreadyDone === undefined)
      .map((item) => item.notBefore);
    if (dueTimes.length > 0) {
      const due = Math.min(...dueTimes);
      wakeAt = Math.min(wakeAt, due);
      timers.push(setTimeout(wake, Math.max(0, due - Date.now())));
    }
    if (wakeAt === Number.POSITIVE_INFINITY) {
      // Nothing to wait for (e.g. a duplicate id held back for its twin's mark): read again shortly.
      wakeAt = Date.now() + 50;
      timers.push(setTimeout(wake, 50));
    }
    state.cancelResume = cancel;
    state.pausedAt = Date.now();
    this.deps.pause(state.topic, state.partition);
    this.deps.observer.paused?.(state.topic, state.partition, Math.max(0, wakeAt - Date.now()));
  }

  private forget(state: PartitionState, unpause: boolean): void {
    if (state.cancelResume) {
      state.cancelResume();
      if (unpause) this.deps.resume(state.topic, state.partition);
    }
    this.deps.observer.released?.(state.topic, state.partition);
  }
}
