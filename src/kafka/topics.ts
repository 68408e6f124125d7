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
 * Waits until every partition of the topics is served by its leader. A leader in the metadata is not
 * enough: for a moment after a topic is created the broker names a leader that still answers
 * NOT_LEADER_OR_FOLLOWER, and kafkajs retries a whole produce request when one partition in it fails,
 * so a producer without idempotence would append the other partitions' messages twice. A ListOffsets
 * request is answered by the leader itself, so its success means produce requests are taken too.
 * (kafkajs' own `waitForLeaders` also gives up on the first UNKNOWN_TOPIC_OR_PARTITION, which a busy
 * broker answers for a moment after creating a topic.)
 */
async function waitForLeaders(admin: Admin, topics: string[], timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const waiting = new Set(topics);
  for (;;) {
    let lastError: unknown;
    for (const topic of [...waiting]) {
      try {
        const [metadata] = (await admin.fetchTopicMetadata({ topics: [topic] })).topics;
        const led = metadata !== undefined && metadata.partitions.length > 0;
        if (led && metadata.partitions.every((p) => p.leader >= 0)) {
          await admin.fetchTopicOffsets(topic);
          waiting.delete(topic);
        }
      } catch (error) {
        lastError = error;
      }
    }
    if (waiting.size === 0) return;
    if (Date.now() > deadline) {
      const cause = lastError instanceof Error ? `: ${lastError.message}` : '';
      throw new Error(
        `topics ${[...waiting].join(', ')} are not served by a leader after ${timeoutMs} ms${cause}`,
      );
    }
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
