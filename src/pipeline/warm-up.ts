import { createRequire } from 'node:module';
import { setImmediate as yieldToIo } from 'node:timers/promises';
import type { KafkaMessage } from 'kafkajs';
import { HEADER } from '../kafka/headers.ts';
import { generateEvents } from '../publish/generate.ts';
import { readItem } from './item.ts';

/** Options of {@link warmUpHotPaths}. */
export interface WarmUpOptions {
  /** Round trips through the codecs. Default 20. */
  rounds?: number;
  /** Records per round trip. Default 500 (about one fetch of one partition). */
  batchSize?: number;
  /** Stops between rounds once aborted (the consumer is shutting down). */
  signal?: AbortSignal;
}

/** What {@link warmUpHotPaths} did. */
export type WarmUpResult =
  | { warmed: true; rounds: number; records: number; events: number; ms: number }
  | { warmed: false; reason: string };

/** kafkajs' own record codecs: the code its producer and fetcher run for every record. */
interface Codecs {
  produceRequest: (args: Record<string, unknown>) => { encode: () => Promise<{ buffer: Buffer }> };
  Decoder: new (
    buffer: Buffer,
  ) => {
    readString(): string | null;
    readInt16(): number;
    readInt32(): number;
  };
  recordBatch: (decoder: unknown) => Promise<{ records: KafkaMessage[] }>;
  Long: { fromInt(value: number): unknown };
}

/**
 * Runs the consumer's per-record hot paths on synthetic events while the group join is in flight:
 * kafkajs' produce encoding (every parked, retried or dead-lettered event is written again) and record
 * batch decoding (every event read), and Aqueduct's own decoding and validation.
 *
 * Why: a consumer joins exactly when there is work (KEDA scales the group up on lag), and its first
 * fetch rounds then run interpreted, unoptimized code. On a busy machine that made the first rounds
 * several times slower than later ones: a small tenant's events behind a big tenant's backlog waited for
 * those rounds to park the backlog. The join itself mostly waits for the broker (the group coordinator
 * holds a new group for `group.initial.rebalance.delay.ms`, 3 s by default), so the warm-up costs no
 * time on the way to the first fetch; it yields to I/O between rounds.
 *
 * kafkajs has no public codec API, so its internal modules are loaded by path (kafkajs 2.2.4, the last
 * release). If they cannot be loaded or do not behave as expected, the warm-up is skipped: it never
 * fails a start.
 */
export async function warmUpHotPaths(options: WarmUpOptions = {}): Promise<WarmUpResult> {
  const codecs = loadCodecs();
  if (typeof codecs === 'string') return { warmed: false, reason: codecs };
  const rounds = options.rounds ?? 20;
  const batchSize = options.batchSize ?? 500;
  const started = performance.now();
  const values = [...generateEvents({ count: batchSize, tenants: ['warm-up'], idPrefix: 'warm-up' })].map(
    (event) => Buffer.from(JSON.stringify(event)),
  );
  const limits = { retryTopic: 'warm-up.retry', maxMessageBytes: 16 * 1024, maxHeaderBytes: 16 * 1024 };
  let done = 0;
  let records = 0;
  let events = 0;
  try {
    for (; done < rounds && !options.signal?.aborted; done++) {
      const now = String(Date.now());
      const messages = values.map((value, i) => ({
        key: null,
        value,
        headers: {
          [HEADER.originTopic]: 'warm-up',
          [HEADER.originPartition]: '0',
          [HEADER.originOffset]: String(i),
          [HEADER.originTimestamp]: now,
        },
      }));
      const batch = await roundTrip(codecs, messages);
      records += batch.length;
      for (const message of batch) if (readItem('warm-up', 0, message, limits).decoded.ok) events++;
      await yieldToIo();
    }
  } catch (error) {
    return { warmed: false, reason: `kafkajs codecs failed: ${(error as Error).message}` };
  }
  if (records !== done * batchSize) {
    return { warmed: false, reason: `kafkajs codecs returned ${records} of ${done * batchSize} records` };
  }
  return { warmed: true, rounds: done, records, events, ms: Math.round(performance.now() - started) };
}

/** Encodes `messages` as kafkajs' producer does (a Produce v3 request) and decodes the record batch back. */
async function roundTrip(codecs: Codecs, messages: readonly object[]): Promise<KafkaMessage[]> {
  const request = codecs.produceRequest({
    acks: -1,
    timeout: 30_000,
    producerId: codecs.Long.fromInt(1),
    producerEpoch: 0,
    topicData: [{ topic: 'warm-up', partitions: [{ partition: 0, firstSequence: 0, messages }] }],
  });
  const { buffer } = await request.encode();
  // Produce v3: transactional_id, acks, timeout_ms, [topic: name, [partition: index, records]].
  const decoder = new codecs.Decoder(buffer);
  decoder.readString();
  decoder.readInt16();
  decoder.readInt32();
  decoder.readInt32();
  decoder.readString();
  decoder.readInt32();
  decoder.readInt32();
  decoder.readInt32();
  return (await codecs.recordBatch(decoder)).records;
}

function loadCodecs(): Codecs | string {
  try {
    const require = createRequire(import.meta.url);
    return {
      produceRequest: require('kafkajs/src/protocol/requests/produce/v3/request'),
      Decoder: require('kafkajs/src/protocol/decoder'),
      recordBatch: require('kafkajs/src/protocol/recordBatch/v0/decoder'),
      Long: require('kafkajs/src/utils/long'),
    };
  } catch (error) {
    return `kafkajs codecs not found: ${(error as Error).message}`;
  }
}
