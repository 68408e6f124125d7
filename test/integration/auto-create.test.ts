import { setTimeout as sleep } from 'node:timers/promises';
import type { Kafka } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { topicFamily } from '../../src/config.ts';
import { createKafka } from '../../src/kafka/client.ts';
import { HEADER, headerString } from '../../src/kafka/headers.ts';
import { ensureTopicFamily, SINGLE_BROKER_DURABILITY } from '../../src/kafka/topics.ts';
import { LocalKafka, LocalRedis } from '../../src/services/index.ts';
import { type ConsumerProcess, spawnConsumer } from '../../testkit/fleet.ts';
import { type Simulators, startSimulators } from '../../testkit/simulators.ts';
import { readTopic } from '../../testkit/topics.ts';

/**
 * Apache Kafka creates a topic that a client's metadata request names when the broker's
 * auto.create.topics.enable is on, its default: with the broker's num.partitions (1) and default
 * settings. A topic an operator deletes while Aqueduct runs, to create it again, must not come back
 * that way, so this broker runs with Kafka's default (the shared test broker turns it off).
 */

const TOPIC = 'auto-create';
const topics = topicFamily(TOPIC);

let broker: LocalKafka;
let redis: LocalRedis;
let simulators: Simulators;
let kafka: Kafka;
let consumer: ConsumerProcess | undefined;

beforeAll(async () => {
  [broker, redis, simulators] = await Promise.all([
    LocalKafka.start({ heapMb: 512, properties: { 'auto.create.topics.enable': 'true' } }),
    LocalRedis.start(),
    startSimulators(),
  ]);
  kafka = createKafka({ brokers: broker.brokers, clientId: 'auto-create-test' });
}, 120_000);

afterAll(async () => {
  await consumer?.kill();
  await Promise.all([simulators?.close(), redis?.dispose(), broker?.stop()]);
});

async function partitionsOf(topic: string): Promise<number | undefined> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    if (!(await admin.listTopics()).includes(topic)) return undefined;
    return (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0]?.partitions.length;
  } finally {
    await admin.disconnect();
  }
}

describe('a topic deleted while the consumer runs, on a broker that creates topics on request', () => {
  it('is not created again by the consumer: its dead letter waits for the topic the operator creates', async () => {
    await ensureTopicFamily(kafka, TOPIC, 3, SINGLE_BROKER_DURABILITY);
    consumer = spawnConsumer('consumer', {
      KAFKA_BROKERS: broker.brokers.join(','),
      REDIS_URL: redis.url,
      AQUEDUCT_TOPIC: TOPIC,
      AQUEDUCT_TOPIC_REPLICATION_FACTOR: '1',
      AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS: '1',
      ...simulators.env,
    });
    await consumer.joined();

    const admin = kafka.admin();
    await admin.connect();
    try {
      await admin.deleteTopics({ topics: [topics.deadLetter] });
      const producer = kafka.producer({ allowAutoTopicCreation: false });
      await producer.connect();
      await producer.send({ topic: TOPIC, messages: [{ key: 'poison', value: 'not json' }] });
      await producer.disconnect();

      // Either the consumer's write of the dead letter is refused (the topic is missing), or the
      // topic is back because its metadata request created it.
      const refused = () =>
        consumer?.logs.some((line) => /does not host this topic-partition/.test(String(line.msg)));
      const deadline = Date.now() + 90_000;
      while (!refused() && (await partitionsOf(topics.deadLetter)) === undefined) {
        if (Date.now() > deadline) throw new Error('neither refused nor created within 90 s');
        await sleep(250);
      }
      expect(await partitionsOf(topics.deadLetter)).toBeUndefined();

      await admin.createTopics({
        topics: [{ topic: topics.deadLetter, numPartitions: 3, replicationFactor: 1 }],
        waitForLeaders: true,
      });
    } finally {
      await admin.disconnect();
    }
    let deadLetters = await readTopic(kafka, topics.deadLetter);
    const deadline = Date.now() + 120_000;
    while (deadLetters.length === 0 && Date.now() < deadline) {
      await sleep(500);
      deadLetters = await readTopic(kafka, topics.deadLetter);
    }
    expect(deadLetters.map((m) => headerString(m.headers, HEADER.reasonKind))).toEqual(['invalid-json']);
    expect(await partitionsOf(topics.deadLetter)).toBe(3);
    expect(consumer.ended).toBeUndefined();
  }, 300_000);
});
