import type { Admin, IHeaders, Kafka, KafkaMessage, Message } from 'kafkajs';
import type { Topics } from '../config.ts';
import { idempotencyKey } from '../events/event.ts';
import { createProducer } from '../kafka/client.ts';
import { retryRetriable } from '../kafka/errors.ts';
import { HEADER, headerString, writableHeaders } from '../kafka/headers.ts';
import type { DoneStore } from '../pipeline/done-store.ts';

/** Options of {@link replayDeadLetters}. */
export interface ReplayOptions {
  kafka: Kafka;
  topics: Topics;
  /** Forgets the dead-letter marks of replayed event ids (else the consumer skips them as duplicates). */
  doneStore: DoneStore;
  /** The consumer group that remembers how far the dead-letter topic has been replayed. */
  groupId: string;
  /** Replay only dead letters with these reason kinds (`aqueduct-reason-kind`); empty: all. */
  kinds?: readonly string[];
  /** Read the dead-letter topic from its start, not from where the last replay stopped. */
  fromBeginning?: boolean;
  /** Count what would be replayed; publish nothing, forget nothing, remember nothing. */
  dryRun?: boolean;
  /** Messages per produce request. Default 500. */
  batchSize?: number;
  /** Called after each batch with the counts so far. */
  onProgress?: (summary: ReplaySummary) => void;
  /**
   * Stops the replay early (Ctrl-C): the part being published finishes and is committed, nothing more
   * is read, and the summary says `interrupted`. A later replay goes on from there.
   */
  signal?: AbortSignal;
}

/** What a replay did (or, with `dryRun`, would do). */
export interface ReplaySummary {
  /** Dead letters read (up to the end of the topic when the replay started). */
  read: number;
  /** Republished to the main topic. */
  replayed: number;
  /** Left out by the kind filter. */
  filtered: number;
  /** Not replayable: the dead letter kept no value (`too-large` for its value: the original is at its origin). */
  withoutValue: number;
  /** Dead-letter marks forgotten in Redis, so the replayed events are not skipped as duplicates. */
  marksForgotten: number;
  /** Read per reason kind. */
  byKind: Record<string, number>;
  /** Stopped by `signal` before the end of the topic (as it was when the replay started). */
  interrupted: boolean;
}

/**
 * Replays the dead-letter topic (`<topic>.dlq`) into the main topic: every dead letter up to the end of
 * the topic as it is when the replay starts, optionally only some reason kinds, each republished with
 * its original key and value and its original headers minus Aqueduct's own (`aqueduct-*`: reason,
 * attempt, origin), so that it starts over as a new event. Before a batch is published, the
 * dead-letter marks of its event ids are forgotten in Redis (the consumer would otherwise skip them as
 * already done); marks of any other outcome stay, so an event delivered meanwhile is not pushed twice.
 *
 * Progress is committed to the consumer group `groupId` after each published batch, so a second replay
 * goes on after the last one (`fromBeginning` starts over). A dry run commits nothing.
 */
export async function replayDeadLetters(options: ReplayOptions): Promise<ReplaySummary> {
  const { kafka, topics } = options;
  const summary: ReplaySummary = {
    read: 0,
    replayed: 0,
    filtered: 0,
    withoutValue: 0,
    marksForgotten: 0,
    byKind: {},
    interrupted: false,
  };
  const kinds = new Set(options.kinds ?? []);
  const admin = kafka.admin();
  await admin.connect();
  let end: Map<number, bigint>;
  let start: Map<number, bigint>;
  try {
    if (options.fromBeginning && !options.dryRun) {
      await retryRetriable(() =>
        admin.resetOffsets({ groupId: options.groupId, topic: topics.deadLetter, earliest: true }),
      );
    }
    end = await highWatermarks(admin, topics.deadLetter);
    start = options.fromBeginning
      ? await lowWatermarks(admin, topics.deadLetter)
      : await committedOrLow(admin, options.groupId, topics.deadLetter);
  } finally {
    await admin.disconnect();
  }
  const remaining = new Map([...end].filter(([partition, high]) => high > (start.get(partition) ?? 0n)));
  if (remaining.size === 0) return summary;
  const { signal } = options;
  if (signal?.aborted) return { ...summary, interrupted: true };

  const producer = options.dryRun ? undefined : createProducer(kafka, { allowAutoTopicCreation: false });
  await producer?.connect();
  // A dry run reads with a group of its own, so that it never moves the real group's offsets.
  const groupId = options.dryRun
    ? `${options.groupId}-dry-run-${process.pid}-${Date.now()}`
    : options.groupId;
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 200, allowAutoTopicCreation: false });
  await consumer.connect();
  await consumer.subscribe({ topic: topics.deadLetter, fromBeginning: true });
  // The last offset of each partition whose outcome is in `summary`. It lives as long as the replay, so
  // whatever kafkajs hands over again (a fetch retried, a restart after a failed batch, a rebalance that
  // gives the partition back from an older committed offset) is recognised and neither counted nor
  // published twice.
  const handledThrough = new Map<number, bigint>();
  const committedThrough = new Map<number, bigint>();
  // Commits what is handled and not committed yet: also when a commit failed (a rebalance) and the batch
  // comes back with nothing new in it.
  const commitHandled = async (topic: string, partition: number) => {
    const handled = handledThrough.get(partition);
    if (options.dryRun || handled === undefined || handled <= (committedThrough.get(partition) ?? -1n))
      return;
    await consumer.commitOffsets([{ topic, partition, offset: String(handled + 1n) }]);
    committedThrough.set(partition, handled);
  };
  const batchSize = options.batchSize ?? 500;
  try {
    await new Promise<void>((resolve, reject) => {
      // kafkajs restarts itself after a retriable crash; any other ends the replay with its error.
      consumer.on(consumer.events.CRASH, ({ payload }) => {
        if (!payload.restart) reject(payload.error);
      });
      // Disconnecting (below) waits for the part in progress: eachBatch stops before the next one.
      signal?.addEventListener('abort', () => resolve(), { once: true });
      consumer
        .run({
          autoCommit: false,
          eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
            const last = remaining.get(batch.partition);
            if (last === undefined) return;
            const first = start.get(batch.partition) ?? 0n;
            const fresh = batch.messages.filter((message) => {
              const offset = BigInt(message.offset);
              // A dry run reads with a group of its own from the start: what was replayed before is skipped.
              return (
                offset >= first && offset < last && offset > (handledThrough.get(batch.partition) ?? -1n)
              );
            });
            for (let i = 0; i < fresh.length; i += batchSize) {
              if (signal?.aborted) return;
              const part = fresh.slice(i, i + batchSize);
              const counted = classify(part, kinds);
              if (producer && counted.replay.length > 0) {
                summary.marksForgotten += await options.doneStore.forgetDeadLettered(counted.ids);
                await producer.send({ topic: topics.main, messages: counted.replay, acks: -1 });
              }
              // Only a part that was published counts as handled: a part whose publishing failed is handed
              // over again by kafkajs and then counted once, when it goes through.
              addCounts(summary, counted);
              const through = (part.at(-1) as KafkaMessage).offset;
              handledThrough.set(batch.partition, BigInt(through));
              resolveOffset(through);
              await commitHandled(batch.topic, batch.partition);
              options.onProgress?.(summary);
              await heartbeat();
            }
            await commitHandled(batch.topic, batch.partition);
            const reached = BigInt(batch.messages.at(-1)?.offset ?? -1n) + 1n >= last;
            if (reached || (handledThrough.get(batch.partition) ?? -1n) + 1n >= last) {
              remaining.delete(batch.partition);
            }
            if (remaining.size === 0) resolve();
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
    await producer?.disconnect();
    if (options.dryRun) {
      const cleanup = kafka.admin();
      await cleanup.connect();
      await retryRetriable(() => cleanup.deleteGroups([groupId])).catch(() => {});
      await cleanup.disconnect();
    }
  }
  // The part in progress when the signal came was finished before the consumer let go.
  summary.interrupted = remaining.size > 0;
  return summary;
}

/** What one part of a batch holds: the counts it adds to the summary and what it republishes. */
interface PartCounts {
  read: number;
  filtered: number;
  withoutValue: number;
  byKind: Record<string, number>;
  /** The messages to republish, stripped of Aqueduct's headers. */
  replay: Message[];
  /** Their idempotency keys ((tenant, id), see idempotencyKey), whose dead-letter marks are forgotten. */
  ids: string[];
}

function classify(messages: readonly KafkaMessage[], kinds: ReadonlySet<string>): PartCounts {
  const counts: PartCounts = { read: 0, filtered: 0, withoutValue: 0, byKind: {}, replay: [], ids: [] };
  for (const message of messages) {
    counts.read++;
    const kind = headerString(message.headers, HEADER.reasonKind) ?? 'unknown';
    counts.byKind[kind] = (counts.byKind[kind] ?? 0) + 1;
    if (kinds.size > 0 && !kinds.has(kind)) {
      counts.filtered++;
      continue;
    }
    if (message.value === null) {
      counts.withoutValue++;
      continue;
    }
    counts.replay.push({
      key: message.key,
      value: message.value,
      headers: withoutAqueductHeaders(message.headers),
    });
    const key = idempotencyKeyOf(message.value);
    if (key !== undefined) counts.ids.push(key);
  }
  return counts;
}

function addCounts(summary: ReplaySummary, counts: PartCounts): void {
  summary.read += counts.read;
  summary.replayed += counts.replay.length;
  summary.filtered += counts.filtered;
  summary.withoutValue += counts.withoutValue;
  for (const [kind, n] of Object.entries(counts.byKind))
    summary.byKind[kind] = (summary.byKind[kind] ?? 0) + n;
}

/** The headers of a dead letter without Aqueduct's own (`aqueduct-*`): what the producer sent. */
export function withoutAqueductHeaders(headers: IHeaders | undefined): IHeaders {
  return writableHeaders(headers, (name) => !name.startsWith('aqueduct-'));
}

/** The dead letter's idempotency key, as the consumer marked it (undefined when it has no event id). */
function idempotencyKeyOf(value: Buffer): string | undefined {
  try {
    const parsed = JSON.parse(value.toString('utf8')) as { id?: unknown; tenant?: unknown };
    if (typeof parsed?.id !== 'string') return undefined;
    return idempotencyKey({
      id: parsed.id,
      ...(typeof parsed.tenant === 'string' ? { tenant: parsed.tenant } : {}),
    });
  } catch {
    return undefined;
  }
}

async function highWatermarks(admin: Admin, topic: string): Promise<Map<number, bigint>> {
  const offsets = await retryRetriable(() => admin.fetchTopicOffsets(topic));
  return new Map(offsets.map((p) => [p.partition, BigInt(p.high)]));
}

async function lowWatermarks(admin: Admin, topic: string): Promise<Map<number, bigint>> {
  const offsets = await retryRetriable(() => admin.fetchTopicOffsets(topic));
  return new Map(offsets.map((p) => [p.partition, BigInt(p.low)]));
}

/** Where the group stopped in each partition (its committed offset), or the partition's start. */
async function committedOrLow(admin: Admin, groupId: string, topic: string): Promise<Map<number, bigint>> {
  const low = await lowWatermarks(admin, topic);
  const [committed] = await retryRetriable(() => admin.fetchOffsets({ groupId, topics: [topic] }));
  for (const p of committed?.partitions ?? []) {
    const offset = BigInt(p.offset);
    if (offset >= 0n && offset > (low.get(p.partition) ?? 0n)) low.set(p.partition, offset);
  }
  return low;
}
