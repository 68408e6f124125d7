import { setTimeout as sleep } from 'node:timers/promises';
import kafkajs, { type Admin, type Kafka } from 'kafkajs';
import { derivedTopics, topicFamily } from '../config.ts';
import { SetupError } from '../services/errors.ts';

// kafkajs is CommonJS, and Node's ESM import sees only some of its named exports: this one is read off
// the default export.
const { ConfigResourceTypes } = kafkajs;

/**
 * How many copies of each partition a topic Aqueduct creates keeps, and how many of them must have a
 * write before `acks: -1` (the gateway's 202, every Aqueduct producer) counts it as written. With
 * `min.insync.replicas` 1, "all in-sync replicas" may be the leader alone, and a lost leader loses
 * acknowledged events.
 */
export interface TopicDurability {
  replicationFactor: number;
  minInsyncReplicas: number;
}

/** What a production cluster wants (the settings' defaults): three copies, two of them in every write. */
export const PRODUCTION_DURABILITY: TopicDurability = { replicationFactor: 3, minInsyncReplicas: 2 };

/**
 * A single-broker cluster (the local services, tests, benchmarks, the demo): one copy is all it can
 * hold. An explicit override, never the default.
 */
export const SINGLE_BROKER_DURABILITY: TopicDurability = { replicationFactor: 1, minInsyncReplicas: 1 };

/**
 * Creates the topics that do not exist yet, with `durability`'s replication factor and
 * `min.insync.replicas` (existing ones are left as they are, whatever their partition count; see
 * {@link topicWarnings}), and waits for their leaders.
 */
export async function ensureTopics(
  admin: Admin,
  topics: ReadonlyArray<{ topic: string; numPartitions: number }>,
  durability: TopicDurability,
): Promise<string[]> {
  const existing = new Set(await admin.listTopics());
  const missing = topics.filter((t) => !existing.has(t.topic));
  if (missing.length === 0) return [];
  try {
    await admin.createTopics({
      topics: missing.map((t) => ({
        ...t,
        replicationFactor: durability.replicationFactor,
        configEntries: [{ name: 'min.insync.replicas', value: String(durability.minInsyncReplicas) }],
      })),
      waitForLeaders: false,
    });
  } catch (error) {
    // Another instance may have created it between listTopics and createTopics.
    if ((error as { type?: string }).type !== 'TOPIC_ALREADY_EXISTS')
      throw topicCreationError(error, durability);
  }
  await waitForLeaders(
    admin,
    missing.map((t) => t.topic),
  );
  return missing.map((t) => t.topic);
}

/**
 * The broker refused some of the topics (kafkajs' "Topic creation errors" carries one error per topic):
 * says which, why, and which settings decide it. Other errors pass as they are.
 */
function topicCreationError(error: unknown, durability: TopicDurability): unknown {
  const perTopic = (error as { errors?: unknown }).errors;
  if (!Array.isArray(perTopic) || perTopic.length === 0) return error;
  const refused = perTopic as Array<{ topic?: string; type?: string; message?: string }>;
  const reasons = [
    ...new Set(refused.map((e) => `${e.message ?? 'refused'}${e.type ? ` (${e.type})` : ''}`)),
  ];
  const problem = `Kafka refused to create ${refused.map((e) => e.topic).join(', ')}: ${reasons.join('; ')}`;
  const settings = refused.some(
    (e) => e.type === 'INVALID_REPLICATION_FACTOR' || e.type === 'INVALID_CONFIG',
  );
  const fix = settings
    ? `set AQUEDUCT_TOPIC_REPLICATION_FACTOR (now ${durability.replicationFactor}) and AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS (now ${durability.minInsyncReplicas}) to what the cluster holds (1 and 1 for a single broker)`
    : 'create the topics beforehand (see docs/operations.md, Kafka), or let this client create them';
  return new SetupError(problem, fix, { cause: error });
}

/**
 * One sentence per existing topic whose settings break what Aqueduct promises of it; empty when all is
 * well, and topics that do not exist are skipped:
 * - a replication factor or `min.insync.replicas` below what `durability` asks for, or a
 *   `min.insync.replicas` above its replicas (then every `acks: -1` write fails): an acknowledged write
 *   may be lost;
 * - `cleanup.policy` with `compact`: compaction keeps only the last record of each key (the events of one
 *   device, keyed alike, would be dropped before they are read), and a compacted topic refuses records
 *   without a key (a keyless message's dead letter);
 * - a `max.message.bytes` below `recordBytes`, the largest record Aqueduct may write there: the broker
 *   refuses it, and the partition it came from waits until the setting changes.
 */
export async function topicWarnings(
  admin: Admin,
  topics: readonly string[],
  durability: TopicDurability,
  recordBytes?: number,
): Promise<string[]> {
  const existing = new Set(await admin.listTopics());
  const present = topics.filter((topic) => existing.has(topic));
  if (present.length === 0) return [];
  const metadata = await admin.fetchTopicMetadata({ topics: present });
  const configs = await admin.describeConfigs({
    resources: present.map((name) => ({
      type: ConfigResourceTypes.TOPIC,
      name,
      configNames: ['min.insync.replicas', 'cleanup.policy', 'max.message.bytes'],
    })),
    includeSynonyms: false,
  });
  const warnings: string[] = [];
  for (const topic of present) {
    const partitions = metadata.topics.find((t) => t.name === topic)?.partitions ?? [];
    const replicas = Math.min(...partitions.map((p) => p.replicas.length));
    const entries = configs.resources.find((r) => r.resourceName === topic)?.configEntries ?? [];
    const setting = (name: string) => entries.find((e) => e.configName === name)?.configValue;
    const minIsr = Number(setting('min.insync.replicas') ?? 1);
    const problems: string[] = [];
    if (replicas < durability.replicationFactor)
      problems.push(
        `${replicas} replicas, fewer than AQUEDUCT_TOPIC_REPLICATION_FACTOR=${durability.replicationFactor}`,
      );
    if (minIsr < durability.minInsyncReplicas)
      problems.push(
        `min.insync.replicas=${minIsr}, below AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS=${durability.minInsyncReplicas}`,
      );
    if (minIsr > replicas) problems.push(`min.insync.replicas=${minIsr} exceeds its ${replicas} replicas`);
    if (problems.length > 0) {
      warnings.push(
        `topic ${topic}: ${problems.join('; ')}: an acknowledged (acks: -1) write may be lost or every write refused`,
      );
    }
    if ((setting('cleanup.policy') ?? '').split(',').some((policy) => policy.trim() === 'compact')) {
      warnings.push(
        `topic ${topic}: cleanup.policy=${setting('cleanup.policy')}: compaction keeps only the last record of each key and refuses records without one; use cleanup.policy=delete`,
      );
    }
    const maxMessageBytes = Number(setting('max.message.bytes'));
    if (recordBytes !== undefined && Number.isFinite(maxMessageBytes) && maxMessageBytes < recordBytes) {
      warnings.push(
        `topic ${topic}: max.message.bytes=${maxMessageBytes}, below the ${recordBytes} bytes of the largest record Aqueduct may write there (AQUEDUCT_MAX_MESSAGE_BYTES + AQUEDUCT_MAX_HEADER_BYTES + its own headers): the broker refuses such a record, and its partition waits until the setting changes`,
      );
    }
  }
  return warnings;
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
 * Creates a notification topic and the four topics derived from it (`.retry`, `.deferred`, `.dlq`,
 * `.invalid-tokens`), all with `numPartitions` and `durability`, where they do not exist yet.
 */
export async function ensureTopicFamily(
  kafka: Kafka,
  mainTopic: string,
  numPartitions: number,
  durability: TopicDurability,
): Promise<string[]> {
  const topics = topicFamily(mainTopic);
  const admin = kafka.admin();
  await admin.connect();
  try {
    return await ensureTopics(
      admin,
      [topics.main, ...derivedTopics(topics)].map((topic) => ({
        topic,
        numPartitions,
      })),
      durability,
    );
  } finally {
    await admin.disconnect();
  }
}

/**
 * Which of `names` the cluster does not have. kafkajs retries a produce to, or an offset fetch of, a
 * topic that does not exist as if it might appear: a verb checks first, to say so at once.
 */
export async function missingTopics(kafka: Kafka, names: readonly string[]): Promise<string[]> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const existing = new Set(await admin.listTopics());
    return names.filter((name) => !existing.has(name));
  } finally {
    await admin.disconnect();
  }
}
