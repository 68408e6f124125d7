import { setTimeout as sleep } from 'node:timers/promises';
import type { Admin, Kafka } from 'kafkajs';
import { topicsOf } from '../config.ts';

/**
 * Creates the topics that do not exist yet (existing ones are left as they are, whatever their
 * partition count) and waits for their leaders.
 */
export async function ensureTopics(
  admin: Admin,
  topics: ReadonlyArray<{ topic: string; numPartitions: number }>,
): Promise<string[]> {
  const existing = new Set(await admin.listTopics());
  const missing = topics.filter((t) => !existing.has(t.topic));
  if (missing.length === 0) return [];
  try {
    await admin.createTopics({ topics: missing.map((t) => ({ ...t })), waitForLeaders: false });
  } catch (error) {
    // Another instance may have created it between listTopics and createTopics.
    if ((error as { type?: string }).type !== 'TOPIC_ALREADY_EXISTS') throw error;
  }
  await waitForLeaders(
    admin,
    missing.map((t) => t.topic),
  );
  return missing.map((t) => t.topic);
}

/**
 * Waits until every partition of the topics has a leader. kafkajs' own `waitForLeaders` gives up on the
 * first UNKNOWN_TOPIC_OR_PARTITION, which a busy broker answers for a moment after creating a topic.
 */
async function waitForLeaders(admin: Admin, topics: string[], timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const { topics: metadata } = await admin.fetchTopicMetadata({ topics });
      const ready = metadata.every(
        (t) => t.partitions.length > 0 && t.partitions.every((p) => p.leader >= 0),
      );
      if (ready && metadata.length === topics.length) return;
    } catch (error) {
      if (Date.now() > deadline) throw error;
    }
    if (Date.now() > deadline)
      throw new Error(`topics ${topics.join(', ')} have no leaders after ${timeoutMs} ms`);
    await sleep(100);
  }
}

/**
 * Creates a notification topic and the three topics derived from it (`.retry`, `.dlq`,
 * `.invalid-tokens`), all with `numPartitions`, where they do not exist yet.
 */
export async function ensureTopicFamily(
  kafka: Kafka,
  mainTopic: string,
  numPartitions: number,
): Promise<string[]> {
  const topics = topicsOf({ AQUEDUCT_TOPIC: mainTopic });
  const admin = kafka.admin();
  await admin.connect();
  try {
    return await ensureTopics(
      admin,
      [topics.main, topics.retry, topics.deadLetter, topics.invalidTokens].map((topic) => ({
        topic,
        numPartitions,
      })),
    );
  } finally {
    await admin.disconnect();
  }
}
