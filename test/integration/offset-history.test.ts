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

const FCM_IDS = Array.from({ length: 10 }, (_, i) => `old-${i}`);

/**
 * Leaves offsets 2-11 finished above the commit at offset 1: APNs gets one token in 100 s, so the
 * second APNs event holds the commit while the FCM events behind it are pushed, and the consumer stops.
 */
async function finishAboveTheCommit(current: Rig, env: Record<string, string> = {}): Promise<void> {
  const first = await current.startConsumer('before', {
    ...env,
    AQUEDUCT_APNS_RATE: '0.01',
    AQUEDUCT_APNS_BURST: '1',
  });
  await publishEvents(
    current.kafka,
    [push('apns-0', 'apns'), push('apns-1', 'apns'), ...FCM_IDS.map((id) => push(id, 'fcm'))],
    { topic: current.topic },
  );
  const deadline = Date.now() + 60_000;
  for (;;) {
    const { delivered } = await current.ledger();
    if (['apns-0', ...FCM_IDS].every((id) => delivered.has(id))) break;
    if (Date.now() > deadline) throw new Error(`delivered before the stop: ${[...delivered].join(', ')}`);
    await sleep(250);
  }
  expect(await first.stop()).toBe(0);
  const finishedKey = `aqueduct:{d0}:finished:${current.topic}:0:${current.env.AQUEDUCT_GROUP_ID}`;
  expect(await current.redis.zrangebyscore(finishedKey, 2, '+inf')).toEqual(
    Array.from({ length: 10 }, (_, i) => String(i + 2)),
  );
}

/** Waits until the group has committed `offset` on the rig's partition 0. */
async function committedThrough(current: Rig, offset: number): Promise<void> {
  const admin = current.kafka.admin();
  await admin.connect();
  try {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const [offsets] = await admin.fetchOffsets({
        groupId: current.env.AQUEDUCT_GROUP_ID as string,
        topics: [current.topic],
      });
      const committed = Number(offsets?.partitions.find((p) => p.partition === 0)?.offset ?? -1);
      if (committed >= offset) return;
      if (Date.now() > deadline) throw new Error(`committed ${committed}, not ${offset}`);
      await sleep(250);
    }
  } finally {
    await admin.disconnect();
  }
}

describe('finished offsets across a history of the partition', () => {
  it('a topic deleted and created again: every new record is pushed, none skipped for an old offset', async () => {
    rig = await startRig({ partitions: 1, rate: 1000, burst: 1000 });
    await finishAboveTheCommit(rig);

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

  it("the group's offsets reset to the earliest while it was stopped: the partition is read again from there", async () => {
    // With the idempotency window off only offsets say what was finished: a re-read is pushed again.
    const windowOff = { AQUEDUCT_IDEMPOTENCY_WINDOW_SECONDS: '0' };
    rig = await startRig({ partitions: 1, rate: 1000, burst: 1000 });
    await finishAboveTheCommit(rig, windowOff);

    // What kafka-consumer-groups.sh --reset-offsets --to-earliest --execute commits.
    const admin = rig.kafka.admin();
    await admin.connect();
    try {
      await admin.resetOffsets({
        groupId: rig.env.AQUEDUCT_GROUP_ID as string,
        topic: rig.topic,
        earliest: true,
      });
    } finally {
      await admin.disconnect();
    }
    await rig.startConsumer('after', windowOff);
    await committedThrough(rig, 12);
    const pushes = new Map<string, number>();
    for (const { eventId } of [...rig.simulators.fcm.records(), ...rig.simulators.apns.records()])
      if (eventId !== undefined) pushes.set(eventId, (pushes.get(eventId) ?? 0) + 1);
    expect(Object.fromEntries(pushes)).toEqual({
      'apns-0': 2,
      'apns-1': 1,
      ...Object.fromEntries(FCM_IDS.map((id) => [id, 2])),
    });
  }, 180_000);
});
