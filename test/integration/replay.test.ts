import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { topicFamily } from '../../src/config.ts';
import { createKafka } from '../../src/kafka/client.ts';
import { HEADER, headerString } from '../../src/kafka/headers.ts';
import { ensureTopicFamily, SINGLE_BROKER_DURABILITY } from '../../src/kafka/topics.ts';
import { DoneStore } from '../../src/pipeline/done-store.ts';
import { replayDeadLetters } from '../../src/replay/replay.ts';
import { eventIdOf, readTopic } from '../../testkit/topics.ts';
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
  doneStore = new DoneStore(redis.client as Redis, {
    prefix: redis.prefix.slice(0, -1),
    groupId: 'replay-test',
    windowSeconds: 60,
  });
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
    const topics = topicFamily(topic);
    await ensureTopicFamily(kafka, topic, 2, SINGLE_BROKER_DURABILITY);
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
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
      { topic: 'somewhere', partition: 0, offset: '7', final: { key: 'e1', outcome: 'dead-lettered' } },
      // delivered meanwhile by another copy: its mark must stay
      { topic: 'somewhere', partition: 0, offset: '8', final: { key: 'e3', outcome: 'delivered' } },
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
    expect((await doneStore.check(['e1', 'e3'])).done).toEqual(new Map([['e3', 'delivered']]));

    // The group remembers: nothing is replayed twice, and a new dead letter is picked up next time.
    await producer.send({ topic: topics.deadLetter, messages: [deadLetter('e5', 'max-attempts')] });
    await producer.disconnect();
    const second = await replayDeadLetters({ kafka, topics, doneStore, groupId });
    expect(second).toMatchObject({ read: 1, replayed: 1 });
    expect(await readTopic(kafka, topics.main)).toHaveLength(3);
  });

  describe('reads and republishes each dead letter exactly once', () => {
    const PARTITIONS = 3;
    // About 1.5 MB per partition: more than one fetch (kafkajs asks for 1 MiB per partition).
    const PER_PARTITION = 1500;
    const filler = 'x'.repeat(1000);

    async function deadLetterTopic(): Promise<{ topics: ReturnType<typeof topicFamily>; ids: string[] }> {
      const topic = `test-replay-${randomUUID().slice(0, 8)}`;
      const topics = topicFamily(topic);
      await ensureTopicFamily(kafka, topic, PARTITIONS, SINGLE_BROKER_DURABILITY);
      const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      const ids: string[] = [];
      for (let partition = 0; partition < PARTITIONS; partition++) {
        const messages = Array.from({ length: PER_PARTITION }, (_, i) => {
          const id = `p${partition}-${i}`;
          ids.push(id);
          return {
            partition,
            key: id,
            value: JSON.stringify({ id, platform: 'fcm', filler }),
            headers: { [HEADER.reasonKind]: 'max-attempts' },
          };
        });
        // In parts: a produce request larger than 1 MiB is refused by the broker.
        for (let i = 0; i < messages.length; i += 300) {
          await producer.send({ topic: topics.deadLetter, messages: messages.slice(i, i + 300) });
        }
      }
      await producer.disconnect();
      return { topics, ids };
    }

    async function expectEachOnce(topics: ReturnType<typeof topicFamily>, ids: string[]): Promise<void> {
      const main = await readTopic(kafka, topics.main);
      const seen = main.map((m) => eventIdOf(m.value));
      expect(seen).toHaveLength(ids.length);
      expect(new Set(seen)).toEqual(new Set(ids));
    }

    it('across several partitions, each with more messages than one fetch', async () => {
      const { topics, ids } = await deadLetterTopic();
      const groupId = `${topics.main}-group.replay`;
      const dry = await replayDeadLetters({ kafka, topics, doneStore, groupId, dryRun: true });
      expect(dry).toMatchObject({ read: ids.length, replayed: ids.length });
      const real = await replayDeadLetters({ kafka, topics, doneStore, groupId, batchSize: 200 });
      expect(real).toMatchObject({ read: ids.length, replayed: ids.length, filtered: 0 });
      await expectEachOnce(topics, ids);
      expect(await replayDeadLetters({ kafka, topics, doneStore, groupId })).toMatchObject({ read: 0 });
    });

    it('when kafkajs hands a batch over again after a failure in the middle of it', async () => {
      const { topics, ids } = await deadLetterTopic();
      const groupId = `${topics.main}-group.replay`;
      let failures = 0;
      const summary = await replayDeadLetters({
        kafka,
        topics,
        doneStore,
        groupId,
        batchSize: 100,
        onProgress: (progress) => {
          // The first part of a batch went out; the rest of that batch fails, once.
          if (failures === 0 && progress.replayed >= 100) {
            failures++;
            throw new Error('failure injected after the first part of a batch');
          }
        },
      });
      expect(failures).toBe(1);
      expect(summary).toMatchObject({ read: ids.length, replayed: ids.length });
      await expectEachOnce(topics, ids);
    });

    it('when a signal stops it after a part, and a second replay goes on from there', async () => {
      const { topics, ids } = await deadLetterTopic();
      const groupId = `${topics.main}-group.replay`;
      const stop = new AbortController();
      const first = await replayDeadLetters({
        kafka,
        topics,
        doneStore,
        groupId,
        batchSize: 100,
        signal: stop.signal,
        onProgress: (progress) => {
          if (progress.replayed >= 100) stop.abort();
        },
      });
      expect(first.interrupted).toBe(true);
      expect(first.replayed).toBeGreaterThanOrEqual(100);
      expect(first.replayed).toBeLessThan(ids.length);
      const second = await replayDeadLetters({ kafka, topics, doneStore, groupId, batchSize: 100 });
      expect(second.interrupted).toBe(false);
      expect(first.replayed + second.replayed).toBe(ids.length);
      await expectEachOnce(topics, ids);
    });

    it("when the replay's group rebalances mid-run", async () => {
      const { topics, ids } = await deadLetterTopic();
      const groupId = `${topics.main}-group.replay`;
      // A second member joins the group while the replay runs, holds its share without reading it, and
      // leaves: two rebalances, and the replay gets those partitions back from their committed offsets.
      let visitor: ReturnType<typeof kafka.consumer> | undefined;
      let visit: Promise<void> | undefined;
      const summary = await replayDeadLetters({
        kafka,
        topics,
        doneStore,
        groupId,
        batchSize: 100,
        onProgress: () => {
          visit ??= (async () => {
            visitor = kafka.consumer({ groupId, allowAutoTopicCreation: false });
            await visitor.connect();
            await visitor.subscribe({ topic: topics.deadLetter });
            let joined!: () => void;
            const hasJoined = new Promise<void>((resolve) => {
              joined = resolve;
            });
            visitor.on(visitor.events.GROUP_JOIN, () => joined());
            await visitor.run({ autoCommit: false, eachBatchAutoResolve: false, eachBatch: async () => {} });
            await hasJoined;
            await sleep(1000);
            await visitor.disconnect();
          })();
        },
      });
      await visit;
      expect(summary).toMatchObject({ read: ids.length, replayed: ids.length });
      await expectEachOnce(topics, ids);
    });
  });
});
