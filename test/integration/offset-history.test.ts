import { setTimeout as sleep } from 'node:timers/promises';
import type { Kafka } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import type { NotificationEventInput } from '../../src/events/event.ts';
import { publishEvents } from '../../src/publish/publisher.ts';
import { type Rig, startRig } from '../helpers/pipeline.ts';

/**
 * What a consumer leaves in Redis about a partition (the offsets it finished above its commit) belongs
 * to the records those offsets named. When the group's offsets go back below that commit, because an
 * operator deleted and created the topic again, the partition's new records reuse those offsets and
 * must each get an outcome of their own.
 */

let rig: Rig | undefined;
afterEach(async () => {
  await rig?.close();
  rig = undefined;
});

function push(id: string, platform: 'fcm' | 'apns'): NotificationEventInput {
  return {
    id,
    platform,
    token: platform === 'apns' ? 'ab'.repeat(32) : `offset-history-device-${id}`,
    notification: { title: 'Offsets', body: id },
  };
}

/** Deletes `topic` and creates it again with one partition, once Kafka has finished deleting it. */
async function recreate(kafka: Kafka, topic: string): Promise<void> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    await admin.deleteTopics({ topics: [topic] });
    const deadline = Date.now() + 60_000;
    for (;;) {
      const created = await admin
        .createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }], waitForLeaders: true })
        .catch((error: unknown) => {
          if ((error as { type?: string }).type === 'TOPIC_ALREADY_EXISTS') return false;
          throw error;
        });
      if (created) return;
      if (Date.now() > deadline) throw new Error(`topic ${topic} still exists 60 s after its deletion`);
      await sleep(250);
    }
  } finally {
    await admin.disconnect();
  }
}

describe('finished offsets across a history of the partition', () => {
  it('a topic deleted and created again: every new record is pushed, none skipped for an old offset', async () => {
    rig = await startRig({ partitions: 1, rate: 1000, burst: 1000 });
    const finishedKey = `aqueduct:{d0}:finished:${rig.topic}:0:${rig.env.AQUEDUCT_GROUP_ID}`;

    // APNs gets one token in 100 s: the second APNs event holds the commit at offset 1 while the FCM
    // events behind it are pushed, so they are finished above the commit when the consumer stops.
    const first = await rig.startConsumer('before', { AQUEDUCT_APNS_RATE: '0.01', AQUEDUCT_APNS_BURST: '1' });
    const fcmIds = Array.from({ length: 10 }, (_, i) => `old-${i}`);
    await publishEvents(
      rig.kafka,
      [push('apns-0', 'apns'), push('apns-1', 'apns'), ...fcmIds.map((id) => push(id, 'fcm'))],
      { topic: rig.topic },
    );
    const deadline = Date.now() + 60_000;
    for (;;) {
      const { delivered } = await rig.ledger();
      if (['apns-0', ...fcmIds].every((id) => delivered.has(id))) break;
      if (Date.now() > deadline) throw new Error(`delivered before the stop: ${[...delivered].join(', ')}`);
      await sleep(250);
    }
    expect(await first.stop()).toBe(0);
    expect(await rig.redis.zrangebyscore(finishedKey, 2, '+inf')).toEqual(
      Array.from({ length: 10 }, (_, i) => String(i + 2)),
    );

    await recreate(rig.kafka, rig.topic);
    const newIds = Array.from({ length: 12 }, (_, i) => `new-${i}`);
    await publishEvents(
      rig.kafka,
      newIds.map((id) => push(id, 'fcm')),
      { topic: rig.topic },
    );
    await rig.startConsumer('after');
    const ledger = await rig.settle(newIds, 60_000);
    expect(newIds.filter((id) => !ledger.delivered.has(id))).toEqual([]);
  }, 180_000);
});
