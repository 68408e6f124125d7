import { afterEach, describe, expect, it, vi } from 'vitest';
import type { NotificationEventInput } from '../../src/events/event.ts';
import { createProducer } from '../../src/kafka/client.ts';
import type { ConsumerProcess } from '../../testkit/fleet.ts';
import { type Rig, startRig } from '../helpers/pipeline.ts';

/**
 * Partitions added to the topic while consumers run (`kafka-topics.sh --alter --partitions`): the
 * consumers learn of them when they read the topics' metadata again (AQUEDUCT_METADATA_MAX_AGE_MS),
 * the group rebalances, the new partitions are read from their beginning, and each process counts
 * its part of the partitions (the fair shares' fleet part) over the new count.
 */

let rig: Rig | undefined;
afterEach(async () => {
  await rig?.close();
  rig = undefined;
});

function push(id: string): NotificationEventInput {
  return { id, platform: 'fcm', token: `partitions-added-${id}`, notification: { title: 'New', body: id } };
}

describe('partitions added while the consumers run', () => {
  it('are read: every event written to a new partition is pushed', async () => {
    rig = await startRig({
      partitions: 2,
      rate: 1000,
      burst: 1000,
      env: { AQUEDUCT_METADATA_MAX_AGE_MS: '1000' },
    });
    await rig.startConsumer('first');
    await rig.startConsumer('second');

    const admin = rig.kafka.admin();
    await admin.connect();
    try {
      await admin.createPartitions({ topicPartitions: [{ topic: rig.topic, count: 4 }] });
    } finally {
      await admin.disconnect();
    }
    // Written to the new partitions by number, as a producer that knows them already would.
    const ids = Array.from({ length: 8 }, (_, i) => `added-${i}`);
    const producer = createProducer(rig.kafka, { allowAutoTopicCreation: false });
    await producer.connect();
    try {
      await producer.send({
        topic: rig.topic,
        messages: ids.map((id, i) => ({ partition: 2 + (i % 2), key: id, value: JSON.stringify(push(id)) })),
      });
    } finally {
      await producer.disconnect();
    }
    const ledger = await rig.settle(ids, 90_000);
    expect(ids.filter((id) => !ledger.delivered.has(id))).toEqual([]);
    expect(rig.consumers.map((consumer) => consumer.ended)).toEqual([undefined, undefined]);
    // The fair shares count this process's part of the provider's rate over the new count, read after
    // the join (once: a later join reads the same count).
    const { consumers } = rig;
    const counted = (consumer: ConsumerProcess) =>
      consumer.logs.filter((l) => l.msg === 'the topic has a new partition count');
    await vi.waitFor(() => expect(consumers.every((c) => counted(c).length > 0)).toBe(true), {
      timeout: 10_000,
    });
    for (const consumer of consumers) expect(counted(consumer)).toMatchObject([{ partitions: 4, before: 2 }]);
  }, 180_000);
});
