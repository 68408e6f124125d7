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
  /** Decoded messages whose offsets are not resolved yet. */
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

  item(message: KafkaMessage, build: (message: KafkaMessage) => Item): Item {
    let item = this.items.get(message.offset);
    if (!item) {
      item = build(message);
      this.items.set(message.offset, item);
    }
    return item;
  }

  isResolved(offset: string): boolean {
    return BigInt(offset) <= this.resolvedThrough;
  }

  /** Finished, whether resolved already or waiting for an earlier offset. */
  isSettled(offset: string): boolean {
    return this.finished.has(offset) || this.isResolved(offset);
  }

  /** Forgets what is resolved (everything up to and including `offset`). */
  resolved(offset: string): void {
    this.items.delete(offset);
    this.finished.delete(offset);
    this.resolvedThrough = BigInt(offset);
  }
}
