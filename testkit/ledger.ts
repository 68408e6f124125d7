import type { Kafka } from 'kafkajs';
import type { Topics } from '../src/config.ts';
import { decodeEvent } from '../src/events/decode.ts';
import { HEADER, headerString } from '../src/kafka/headers.ts';
import type { Simulators } from './simulators.ts';
import { countMessages, readTopic, type TopicMessage } from './topics.ts';

/**
 * Every outcome of a run, counted from what the outside world saw: the simulators' records of accepted
 * pushes and the messages on the outcome topics. The consumers' own words (logs, metrics) play no part.
 */
export interface Ledger {
  /** Messages on the main topic (the run's input). */
  published: number;
  /** Distinct event ids the providers accepted. */
  delivered: number;
  /** Records on the dead-letter topic. */
  deadLettered: number;
  /** Records on the invalid-tokens topic. */
  invalidTokens: number;
  /** Records on the retry topic. */
  retried: number;
  /** Published messages with no outcome at all (see {@link takeLedger}). */
  lost: number;
  /** Pushes the providers accepted beyond the first for the same event id. */
  duplicates: number;
  /** 429 answers of both providers for their own limit (the fleet's rate). */
  provider429: number;
  /** 429 answers of both providers for one device's limit (see the simulators' deviceRate). */
  deviceThrottled: number;
  /** Up to ten lost messages' coordinates (`partition:offset`) and ids, to start an investigation. */
  lostSamples: string[];
}

/** A cheap progress reading for a wait loop: outcomes so far (may count a re-written record twice). */
export async function outcomesSoFar(
  kafka: Kafka,
  topics: Topics,
  simulators: Simulators,
): Promise<{
  delivered: number;
  deadLettered: number;
  invalidTokens: number;
  retried: number;
  total: number;
  /** The ids the providers accepted so far. */
  acceptedIds: Set<string>;
}> {
  const [deadLettered, invalidTokens, retried] = await Promise.all([
    countMessages(kafka, topics.deadLetter),
    countMessages(kafka, topics.invalidTokens),
    countMessages(kafka, topics.retry),
  ]);
  const acceptedIds = simulators.accepted().ids;
  const delivered = acceptedIds.size;
  return {
    delivered,
    deadLettered,
    invalidTokens,
    retried,
    total: delivered + deadLettered + invalidTokens,
    acceptedIds,
  };
}

/**
 * The ledger of a run. Each message of the main topic needs an outcome:
 * - a message that is a valid event: its id accepted by a provider, or a dead-letter or invalid-token
 *   record carrying its coordinates (the `aqueduct-origin-*` headers, kept across retries);
 * - any other message (not JSON, wrong types, too large…): a dead-letter record carrying its
 *   coordinates. It has no trustworthy id, so an id that a valid event shares proves nothing for it.
 * `maxMessageBytes` must be the consumers' AQUEDUCT_MAX_MESSAGE_BYTES, so that "valid" means the same here.
 */
export async function takeLedger(
  kafka: Kafka,
  topics: Topics,
  simulators: Simulators,
  maxMessageBytes: number,
): Promise<Ledger> {
  const [main, dlq, invalid, retry] = await Promise.all([
    readTopic(kafka, topics.main),
    readTopic(kafka, topics.deadLetter),
    readTopic(kafka, topics.invalidTokens),
    readTopic(kafka, topics.retry),
  ]);
  const accepted = simulators.accepted();
  const recorded = new Set<string>();
  for (const record of [...dlq, ...invalid]) {
    const coordinates = originOf(record, topics.main);
    if (coordinates) recorded.add(coordinates);
  }
  const lostSamples: string[] = [];
  let lost = 0;
  for (const message of main) {
    const coordinates = `${message.partition}:${message.offset}`;
    if (recorded.has(coordinates)) continue;
    const decoded = decodeEvent(message.value, maxMessageBytes);
    if (decoded.ok && accepted.ids.has(decoded.event.id)) continue;
    lost++;
    if (lostSamples.length < 10)
      lostSamples.push(`${coordinates}${decoded.ok ? ` ${decoded.event.id}` : ''}`);
  }
  return {
    published: main.length,
    delivered: accepted.ids.size,
    deadLettered: dlq.length,
    invalidTokens: invalid.length,
    retried: retry.length,
    lost,
    duplicates: accepted.total - accepted.ids.size,
    provider429: simulators.fcm.stats().throttled + simulators.apns.stats().throttled,
    deviceThrottled: simulators.fcm.stats().deviceThrottled + simulators.apns.stats().deviceThrottled,
    lostSamples,
  };
}

/** `partition:offset` of the main-topic message an outcome record was made from. */
function originOf(record: TopicMessage, mainTopic: string): string | undefined {
  if (headerString(record.headers, HEADER.originTopic) !== mainTopic) return undefined;
  const partition = headerString(record.headers, HEADER.originPartition);
  const offset = headerString(record.headers, HEADER.originOffset);
  return partition !== undefined && offset !== undefined ? `${partition}:${offset}` : undefined;
}
