import { randomUUID } from 'node:crypto';
import kafkajs from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { createKafka } from '../../src/kafka/client.ts';
import {
  ensureTopics,
  PRODUCTION_DURABILITY,
  SINGLE_BROKER_DURABILITY,
  topicWarnings,
} from '../../src/kafka/topics.ts';
import { topicDurabilityOf } from '../../src/settings-options.ts';

// The run's broker is a single node: it can hold the override, and shows what the defaults refuse.

describe('topic durability', () => {
  const kafka = createKafka({ brokers: inject('kafkaBrokers'), clientId: 'aqueduct-test' });
  const admin = kafka.admin();
  beforeAll(() => admin.connect());
  afterAll(() => admin.disconnect());

  it('defaults to what a production cluster wants; the single broker is an override', () => {
    expect(topicDurabilityOf(loadConfig({}))).toEqual(PRODUCTION_DURABILITY);
    expect(PRODUCTION_DURABILITY).toEqual({ replicationFactor: 3, minInsyncReplicas: 2 });
    expect(
      topicDurabilityOf(
        loadConfig({ AQUEDUCT_TOPIC_REPLICATION_FACTOR: '1', AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS: '1' }),
      ),
    ).toEqual(SINGLE_BROKER_DURABILITY);
  });

  it('creates topics with the replication factor and min.insync.replicas asked for', async () => {
    const topic = `dur-${randomUUID().slice(0, 8)}`;
    // Three replicas cannot be placed on one broker: the production default is really asked for.
    // The refusal names the topic, the broker's reason and the settings that decide it.
    await expect(ensureTopics(admin, [{ topic, numPartitions: 1 }], PRODUCTION_DURABILITY)).rejects.toThrow(
      `Kafka refused to create ${topic}: Replication-factor is invalid (INVALID_REPLICATION_FACTOR)\n  fix: set AQUEDUCT_TOPIC_REPLICATION_FACTOR (now 3) and AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS (now 2) to what the cluster holds (1 and 1 for a single broker)`,
    );
    expect(await ensureTopics(admin, [{ topic, numPartitions: 2 }], SINGLE_BROKER_DURABILITY)).toEqual([
      topic,
    ]);
    const configs = await admin.describeConfigs({
      resources: [
        { type: kafkajs.ConfigResourceTypes.TOPIC, name: topic, configNames: ['min.insync.replicas'] },
      ],
      includeSynonyms: false,
    });
    const entry = configs.resources[0]?.configEntries.find((e) => e.configName === 'min.insync.replicas');
    expect(entry?.configValue).toBe('1');
    expect(entry?.configSource).toBe(1); // TOPIC_CONFIG: set on the topic, not inherited
  });

  it('warns about an existing topic that cannot keep the acks: -1 promise, and not about a good one', async () => {
    const topic = `dur-${randomUUID().slice(0, 8)}`;
    await ensureTopics(admin, [{ topic, numPartitions: 1 }], SINGLE_BROKER_DURABILITY);
    expect(await topicWarnings(admin, [topic], SINGLE_BROKER_DURABILITY)).toEqual([]);
    const warnings = await topicWarnings(admin, [topic, 'no-such-topic-here'], PRODUCTION_DURABILITY);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(
      `topic ${topic}: 1 replicas, fewer than AQUEDUCT_TOPIC_REPLICATION_FACTOR=3`,
    );
    expect(warnings[0]).toContain('min.insync.replicas=1, below AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS=2');
  });

  it('warns about a compacted topic and one whose max.message.bytes is below the largest record written there', async () => {
    const compacted = `cmp-${randomUUID().slice(0, 8)}`;
    const small = `small-${randomUUID().slice(0, 8)}`;
    await admin.createTopics({
      topics: [
        {
          topic: compacted,
          numPartitions: 1,
          configEntries: [{ name: 'cleanup.policy', value: 'compact,delete' }],
        },
        { topic: small, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: '4000' }] },
      ],
      waitForLeaders: true,
    });
    expect(await topicWarnings(admin, [small], SINGLE_BROKER_DURABILITY, 3_999)).toEqual([]);
    const warnings = await topicWarnings(admin, [compacted, small], SINGLE_BROKER_DURABILITY, 34_000);
    expect(warnings).toEqual([
      expect.stringContaining(
        `topic ${compacted}: cleanup.policy=compact,delete: compaction keeps only the last record of each key`,
      ),
      expect.stringContaining(
        `topic ${small}: max.message.bytes=4000, below the 34000 bytes of the largest record`,
      ),
    ]);
  });
});
