import type { KafkaMessage } from 'kafkajs';
import type { Item } from './item.ts';

/**
 * What the consumer keeps about one assigned partition between batches. kafkajs re-reads a partition
 * from the last resolved offset after a pause, so the messages behind a throttled one come again;
 * this state lets them be recognized (decoded once, deduped once, finished out of order) instead of
 * being redone. Offsets of a batch ascend, and what is resolved is always a prefix of them.
 */
export class PartitionState {
  readonly topic: string;
  readonly partition: number;
  readonly key: string;
  /** Decoded messages that were not resolved yet when their batch was handled (see keepUnresolved). */
  private readonly remembered = new Map<string, Item>();
  /** Offsets whose outcome is recorded but that wait for an earlier offset before they can be resolved. */
  private readonly finished = new Set<string>();
  /**
   * Offsets an earlier reading finished: by their offset (a redelivery of the same message) or by their
   * (tenant, id) (a second copy of the event).
   */
  private readonly doneEarlier = new Set<string>();
  /** Highest offset resolved (its outcome and every earlier one's recorded). */
  private resolvedThrough = -1n;
  /**
   * Offsets whose (tenant, id) was not looked up because they are parked (their tenant was over its
   * share): they must be parked, never sent from here; the lookup is made when they are read back.
   */
  private readonly parkUnchecked = new Set<string>();
  /** Highest offset whose (tenant, id) was looked up in the idempotency window. */
  private checkedThrough = -1n;
  /** Whether the offsets an earlier owner finished above the commit were read (once per assignment). */
  private finishedRead = false;
  /** The first offset this assignment read: the group's committed offset, or where its reset policy began. */
  private firstRead: string | undefined;
  /** Failed steps in a row (Redis or Kafka unavailable), for the back-off. */
  private failures = 0;
  /** Until then (epoch ms) done-marks are read again right before each send (see Sender). */
  private readonly recheckUntil: number;
  /** The partition is no longer this member's: a rebalance began, or its consumer crashed or stops. */
  private isRevoked = false;

  constructor(topic: string, partition: number, recheckUntil = 0) {
    this.topic = topic;
    this.partition = partition;
    this.key = `${topic}:${partition}`;
    this.recheckUntil = recheckUntil;
  }

  /** True once {@link revoke} was called: nothing more is to be sent from this state. */
  get revoked(): boolean {
    return this.isRevoked;
  }

  /** The partition has left this member (or may have: a rebalance hands out every partition anew). */
  revoke(): void {
    this.isRevoked = true;
  }

  /** The item a message was when it was read before (and not resolved since), or a new one. */
  item(message: KafkaMessage, build: (message: KafkaMessage) => Item): Item {
    return this.remembered.get(message.offset) ?? build(message);
  }

  /** The items whose done-marks were not read yet (none, usually all, else the tail of a re-read). */
  unchecked(items: readonly Item[]): Item[] {
    const last = items.at(-1);
    if (last === undefined || BigInt(last.offset) <= this.checkedThrough) return [];
    if (BigInt((items[0] as Item).offset) > this.checkedThrough) return [...items];
    return items.filter((item) => BigInt(item.offset) > this.checkedThrough);
  }

  /**
   * Records a dedupe check of `checked` (as {@link unchecked} gave them): `done` were finished before,
   * and `toPark` were left out of the lookup, to be parked.
   */
  checked(checked: readonly Item[], done: readonly Item[], toPark: readonly Item[] = []): void {
    const last = checked.at(-1);
    if (last !== undefined) this.checkedThrough = BigInt(last.offset);
    for (const item of done) this.doneEarlier.add(item.offset);
    for (const item of toPark) this.parkUnchecked.add(item.offset);
  }

  /** True for an item left out of the dedupe lookup to be parked (see {@link checked}). */
  mustPark(item: Item): boolean {
    return this.parkUnchecked.has(item.offset);
  }

  /**
   * True until the offsets earlier readings finished out of order are known: while a consumer owns a
   * partition it is the only one to finish its offsets, so one read per assignment is enough.
   */
  needsFinishedRead(): boolean {
    return !this.finishedRead;
  }

  /**
   * The first offset this assignment read, `offset` (the first of a batch) unless an earlier batch came
   * first. Offsets finished above a commit higher than it belong to another history (see DoneStore).
   */
  readFrom(offset: string | undefined): string | undefined {
    this.firstRead ??= offset;
    return this.firstRead;
  }

  /** Records the offsets earlier readings finished above the committed one: they are skipped. */
  finishedEarlier(offsets: Iterable<string>): void {
    this.finishedRead = true;
    for (const offset of offsets) if (!this.isResolved(offset)) this.doneEarlier.add(offset);
  }

  /** True when the dedupe check found the item's outcome recorded by an earlier reading. */
  wasDoneEarlier(item: Item): boolean {
    return this.doneEarlier.has(item.offset);
  }

  /** True while the partition reads its done-marks again right before each send (after a rejoin). */
  rechecksBeforeSend(now = Date.now()): boolean {
    return now <= this.recheckUntil;
  }

  /** The items of a batch not finished yet. */
  openItems(items: readonly Item[]): Item[] {
    return items.slice(this.firstUnresolved(items)).filter((item) => !this.finished.has(item.offset));
  }

  /** Their outcomes are recorded: they are resolved as soon as every earlier offset is. */
  finish(items: Iterable<Item>): void {
    for (const item of items) this.finished.add(item.offset);
  }

  /**
   * Resolves the batch's offsets up to the first one that is not finished (nothing after a gap) and
   * forgets them. Returns the last offset resolved, if any (kafkajs keeps one per partition).
   */
  resolvePrefix(items: readonly Item[]): string | undefined {
    let through: string | undefined;
    for (const item of items) {
      if (!this.finished.has(item.offset)) {
        if (this.isResolved(item.offset)) continue;
        break;
      }
      this.forget(item.offset);
      through = item.offset;
    }
    if (through !== undefined) this.resolvedThrough = BigInt(through);
    return through;
  }

  /**
   * Remembers a batch's items that are not resolved yet, for the next read of the partition. Called once
   * a batch is handled (however it ended), rather than for every message as it is read: most are
   * resolved by then, and the map would only churn.
   */
  keepUnresolved(items: readonly Item[]): void {
    for (const item of items.slice(this.firstUnresolved(items))) this.remembered.set(item.offset, item);
  }

  /** Counts a failed step; returns the failures in a row, this one included. */
  stepFailed(): number {
    return ++this.failures;
  }

  stepSucceeded(): void {
    this.failures = 0;
  }

  private isResolved(offset: string): boolean {
    return BigInt(offset) <= this.resolvedThrough;
  }

  /** Index of the first item not resolved yet (`items.length` when all are). */
  private firstUnresolved(items: readonly Item[]): number {
    const last = items.at(-1);
    if (last === undefined || this.isResolved(last.offset)) return items.length;
    let start = 0;
    while (start < items.length && this.isResolved((items[start] as Item).offset)) start++;
    return start;
  }

  private forget(offset: string): void {
    this.remembered.delete(offset);
    this.finished.delete(offset);
    this.doneEarlier.delete(offset);
    this.parkUnchecked.delete(offset);
  }
}
