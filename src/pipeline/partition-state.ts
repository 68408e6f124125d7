import type { KafkaMessage } from 'kafkajs';
import type { DecodeResult } from '../events/decode.ts';

/** One message of a partition, decoded once and remembered until its offset is resolved. */
export interface Item {
  offset: string;
  message: KafkaMessage;
  decoded: DecodeResult;
  /** 1 for an event read from the main topic; the retry topic counts up. */
  attempt: number;
  /** Epoch ms before which it must not be sent (retries only); 0 for "now". */
  notBefore: number;
  /** The key its outcome is recorded under: the event id, or the message's coordinates when it has none. */
  dedupeKey: string;
  /** The outcome already recorded by an earlier reading (a redelivery): nothing more is done with it. */
  alreadyDone?: string;
}

/**
 * What the consumer keeps about one assigned partition between batches. kafkajs re-reads a partition
 * from the last resolved offset after a pause, so the messages behind a throttled one come again;
 * this state lets them be recognized (decoded once, deduped once, finished out of order) instead of
 * being redone.
 */
export class PartitionState {
  readonly topic: string;
  readonly partition: number;
  readonly key: string;
  /** Decoded messages that were not resolved yet when their batch was handled (see keepUnresolved). */
  readonly items = new Map<string, Item>();
  /** Offsets whose outcome is recorded but that wait for an earlier offset before they can be resolved. */
  readonly finished = new Set<string>();
  /** Highest offset resolved (its outcome and every earlier one's recorded). */
  resolvedThrough = -1n;
  /** Highest offset whose dedupe state was read from Redis. */
  checkedThrough = -1n;
  /** Set while the consumer holds the partition paused; cancels the scheduled resume. */
  cancelResume: (() => void) | undefined;
  pausedAt = 0;
  /** Failed steps in a row (Redis or Kafka unavailable), for the back-off. */
  failures = 0;
  /** Until then (epoch ms) done-marks are read again right before each send (see BatchProcessor). */
  recheckUntil = 0;

  constructor(topic: string, partition: number) {
    this.topic = topic;
    this.partition = partition;
    this.key = `${topic}:${partition}`;
  }

  /** The item a message was when it was read before (and not resolved since), or a new one. */
  item(message: KafkaMessage, build: (message: KafkaMessage) => Item): Item {
    return this.items.get(message.offset) ?? build(message);
  }

  /**
   * Remembers a batch's items that are not resolved yet, for the next read of the partition. Called once
   * a batch is handled (however it ended), rather than for every message as it is read: most are
   * resolved by then, and the map would only churn.
   */
  keepUnresolved(items: readonly Item[]): void {
    // Offsets ascend and what is resolved is a prefix of them.
    const last = items.at(-1);
    if (last === undefined || this.isResolved(last.offset)) return;
    let start = 0;
    while (start < items.length && this.isResolved((items[start] as Item).offset)) start++;
    for (let i = start; i < items.length; i++) {
      const item = items[i] as Item;
      this.items.set(item.offset, item);
    }
  }

  isResolved(offset: string): boolean {
    return BigInt(offset) <= this.resolvedThrough;
  }

  /** Forgets what is resolved (everything up to and including `offset`). */
  resolved(offset: string): void {
    this.items.delete(offset);
    this.finished.delete(offset);
    this.resolvedThrough = BigInt(offset);
  }
}
