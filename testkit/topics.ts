import { randomUUID } from 'node:crypto';
import type { Kafka, KafkaMessage } from 'kafkajs';

/** A message as read back, with the partition it was read from. */
export type TopicMessage = KafkaMessage & { partition: number };

/** How many messages a topic holds (high watermark minus low, over its partitions). */
export async function countMessages(kafka: Kafka, topic: string): Promise<number> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const offsets = await admin.fetchTopicOffsets(topic);
    return offsets.reduce((sum, p) => sum + (Number(p.high) - Number(p.low)), 0);
  } finally {
    await admin.disconnect();
  }
}

/**
 * Every message a topic holds right now, read with a throw-away consumer group (no offsets of a real
 * group are touched). Stops when each partition's high watermark at the start has been reached.
 */
export async function readTopic(kafka: Kafka, topic: string, timeoutMs = 60_000): Promise<TopicMessage[]> {
  const admin = kafka.admin();
  await admin.connect();
  const offsets = await admin.fetchTopicOffsets(topic);
  await admin.disconnect();
  const remaining = new Map(
    offsets.filter((p) => Number(p.high) > Number(p.low)).map((p) => [p.partition, BigInt(p.high) - 1n]),
  );
  const messages: TopicMessage[] = [];
  if (remaining.size === 0) return messages;
  const consumer = kafka.consumer({ groupId: `aqueduct-reader-${randomUUID()}`, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`reading ${topic} timed out`)), timeoutMs);
      consumer
        .run({
          autoCommit: false,
          eachBatch: async ({ batch }) => {
            const last = remaining.get(batch.partition);
            if (last === undefined) return;
            for (const message of batch.messages) {
              if (BigInt(message.offset) <= last) messages.push({ ...message, partition: batch.partition });
            }
            if (BigInt(batch.lastOffset()) >= last) remaining.delete(batch.partition);
            if (remaining.size === 0) {
              clearTimeout(timer);
              resolve();
            }
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  return messages;
}

/** The `id` of an event in a message value, if the value is JSON with a string id. */
export function eventIdOf(value: Buffer | null): string | undefined {
  if (!value) return undefined;
  try {
    const parsed = JSON.parse(value.toString()) as { id?: unknown };
    return typeof parsed.id === 'string' ? parsed.id : undefined;
  } catch {
    return undefined;
  }
}
