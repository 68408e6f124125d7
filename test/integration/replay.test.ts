import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { topicsOf } from '../../src/config.ts';
import { readTopic } from '../../src/harness/topics.ts';
import { createKafka } from '../../src/kafka/client.ts';
import { HEADER, headerString } from '../../src/kafka/headers.ts';
import { ensureTopicFamily } from '../../src/kafka/topics.ts';
import { DoneStore } from '../../src/pipeline/done-store.ts';
import { replayDeadLetters } from '../../src/replay/replay.ts';
import { testRedis } from '../helpers/redis.ts';

/**
 * aqueduct replay on the suite's broker and Redis: dead letters go back to the main topic with their
 * key, value and producer headers (Aqueduct's own headers stripped), filtered by reason kind, each at
 * most once per replay group, and the dead-letter marks of their ids are forgotten so the consumer does
 * not skip them as duplicates (marks of delivered events stay).
 */

const kafka = createKafka({ brokers: inject('kafkaBrokers'), clientId: 'aqueduct-test' });
const redis = testRedis('replay');
let doneStore: DoneStore;
beforeAll(() => {
  doneStore = new DoneStore(redis.client as Redis, { prefix: redis.prefix.slice(0, -1), ttlSeconds: 60 });
});
afterAll(async () => {
  await redis.cleanup();
});

function deadLetter(id: string | null, kind: string, extra: Record<string, string> = {}) {
  return {
    key: id === null ? null : `key-${id}`,
    value: id === null ? null : JSON.stringify({ id, platform: 'fcm' }),
    headers: {
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      [HEADER.reasonKind]: kind,
      [HEADER.reason]: `because ${kind}`,
      [HEADER.originTopic]: 'somewhere',
      [HEADER.originPartition]: '0',
      [HEADER.originOffset]: '7',
      [HEADER.attempt]: '5',
      ...extra,
    },
  };
}

describe('aqueduct replay', () => {
  it('republishes the chosen kinds once, with the original key, value and headers, and forgets their dead-letter marks', async () => {
    const topic = `test-replay-${randomUUID().slice(0, 8)}`;
    const topics = topicsOf({ AQUEDUCT_TOPIC: topic });
    await ensureTopicFamily(kafka, topic, 2);
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({
      topic: topics.deadLetter,
      messages: [
        deadLetter('e1', 'max-attempts'),
        deadLetter('e2', 'rejected'),
        deadLetter('e3', 'max-attempts'),
        deadLetter('e4', 'invalid-event'),
        deadLetter(null, 'too-large'),
      ],
    });
    await doneStore.mark([
      { id: 'e1', outcome: 'dead-lettered' },
      { id: 'e3', outcome: 'delivered' }, // delivered meanwhile by another copy: its mark must stay
    ]);
    const groupId = `${topic}-group.replay`;

    const dry = await replayDeadLetters({
      kafka,
      topics,
      doneStore,
      groupId,
      kinds: ['max-attempts'],
      dryRun: true,
    });
    expect(dry).toMatchObject({ read: 5, replayed: 2, filtered: 3, marksForgotten: 0 });
    expect(await readTopic(kafka, topics.main)).toHaveLength(0);

    const first = await replayDeadLetters({
      kafka,
      topics,
      doneStore,
      groupId,
      kinds: ['max-attempts', 'too-large'],
    });
    expect(first).toMatchObject({ read: 5, replayed: 2, filtered: 2, withoutValue: 1, marksForgotten: 1 });
    const main = await readTopic(kafka, topics.main);
    expect(main.map((m) => m.key?.toString()).sort()).toEqual(['key-e1', 'key-e3']);
    for (const message of main) {
      expect(Object.keys(message.headers ?? {})).toEqual(['traceparent']);
      expect(headerString(message.headers, 'traceparent')).toContain('0af7651916cd43dd8448eb211c80319c');
    }
    expect(await doneStore.check(['e1', 'e3'])).toEqual(new Map([['e3', 'delivered']]));

    // The group remembers: nothing is replayed twice, and a new dead letter is picked up next time.
    await producer.send({ topic: topics.deadLetter, messages: [deadLetter('e5', 'max-attempts')] });
    await producer.disconnect();
    const second = await replayDeadLetters({ kafka, topics, doneStore, groupId });
    expect(second).toMatchObject({ read: 1, replayed: 1 });
    expect(await readTopic(kafka, topics.main)).toHaveLength(3);
  });
});
