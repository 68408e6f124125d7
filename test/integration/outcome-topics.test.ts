import kafkajs from 'kafkajs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { topicFamily } from '../../src/config.ts';
import { createProducer } from '../../src/kafka/client.ts';
import { generateEvents } from '../../src/publish/generate.ts';
import { type Rig, startRig } from '../helpers/pipeline.ts';

// An outcome topic whose settings refuse a record: the consumer says so and waits, and goes on once the
// topic is fixed; it never exits over it.

let rig: Rig | undefined;
afterEach(async () => {
  await rig?.close();
  rig = undefined;
});

describe('an outcome topic that refuses records', () => {
  it('warns at start, pauses the partition while Kafka refuses its dead letter, and dead-letters it once the topic is fixed', async () => {
    rig = await startRig({ partitions: 1, rate: 100_000, burst: 100_000, redis: 'single' });
    const { deadLetter } = topicFamily(rig.topic);
    const admin = rig.kafka.admin();
    await admin.connect();
    const setPolicy = (value: string) =>
      admin.alterConfigs({
        validateOnly: false,
        resources: [
          {
            type: kafkajs.ConfigResourceTypes.TOPIC,
            name: deadLetter,
            configEntries: [{ name: 'cleanup.policy', value }],
          },
        ],
      });
    try {
      // A compacted topic refuses records without a key: a keyless message's dead letter is one.
      await setPolicy('compact');
      const consumer = await rig.startConsumer('a');
      expect(consumer.logs.map((line) => line.msg)).toContainEqual(
        expect.stringContaining(`topic ${deadLetter}: cleanup.policy=compact`),
      );
      const [event] = generateEvents({ count: 1, tenants: ['acme'] });
      if (!event) throw new Error('no event generated');
      const producer = createProducer(rig.kafka);
      await producer.connect();
      await producer.send({
        topic: rig.topic,
        messages: [{ value: 'not json' }, { key: 'k', value: JSON.stringify(event) }],
      });
      await producer.disconnect();

      await vi.waitFor(
        () =>
          expect(consumer.logs).toContainEqual(
            expect.objectContaining({
              msg: 'batch step failed; partition paused for a back-off',
              err: expect.objectContaining({ name: 'OutcomeWriteError', retriable: false }),
            }),
          ),
        { timeout: 20_000, interval: 200 },
      );
      expect(consumer.ended).toBeUndefined();

      await setPolicy('delete');
      const ledger = await rig.settle([event.id], 60_000);
      expect(ledger.delivered.has(event.id)).toBe(true);
      await vi.waitFor(
        async () =>
          expect((await rig?.ledger())?.deadLettered).toEqual([
            expect.objectContaining({ reasonKind: 'invalid-json' }),
          ]),
        { timeout: 20_000, interval: 500 },
      );
      expect(consumer.ended).toBeUndefined();
    } finally {
      await admin.disconnect();
    }
  });
});
