import { setTimeout as sleep } from 'node:timers/promises';
import { type Kafka, KafkaJSConnectionError, KafkaJSNumberOfRetriesExceeded } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { TopicCheck, topicRefusal } from '../../src/gateway/topic-check.ts';
import { protocolError } from '../helpers/kafka.ts';

/**
 * The topic check's states against a fake admin client; the real broker's answers (a missing topic,
 * then created) are covered by test/integration/cli-missing-topics.test.ts.
 */

const unknownTopic = () => protocolError('UNKNOWN_TOPIC_OR_PARTITION', 3, true);

/** A Kafka whose admin answers each metadata read with the next of `answers` (the last one repeated). */
function fakeKafka(answers: Array<Error | 'there'>): { kafka: Kafka; reads: () => number } {
  let reads = 0;
  const admin = {
    connect: async () => {},
    disconnect: async () => {},
    fetchTopicMetadata: async () => {
      const answer = answers[Math.min(reads, answers.length - 1)];
      reads += 1;
      if (answer instanceof Error) throw answer;
      return { topics: [] };
    },
  };
  return { kafka: { admin: () => admin } as unknown as Kafka, reads: () => reads };
}

async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !condition(); i++) await sleep(5);
}

describe('topicRefusal', () => {
  it('names a refusal of the topic, also wrapped by kafkajs as a cause, and nothing else', () => {
    expect(topicRefusal(unknownTopic(), 'events')).toBe('topic "events" does not exist');
    const wrapped = new KafkaJSNumberOfRetriesExceeded(unknownTopic(), { retryCount: 3, retryTime: 800 });
    expect(topicRefusal(wrapped, 'events')).toBe('topic "events" does not exist');
    expect(topicRefusal(new KafkaJSConnectionError('Connection timeout'), 'events')).toBeUndefined();
  });
});

describe('TopicCheck', () => {
  it('is there once its metadata was read, and not before', async () => {
    const { kafka } = fakeKafka(['there']);
    const check = new TopicCheck({ kafka, topic: 'events', intervalMs: 10 });
    expect(check.there).toBe(false);
    await check.start();
    expect(check.there).toBe(true);
    await check.close();
  });

  it('after a refused write, reads the metadata again until the topic is back, whatever traffic comes', async () => {
    const { kafka, reads } = fakeKafka(['there', unknownTopic(), unknownTopic(), 'there']);
    const check = new TopicCheck({ kafka, topic: 'events', intervalMs: 10 });
    await check.start();
    check.refused();
    expect(check.there).toBe(false);
    await until(() => check.there);
    expect(check.there).toBe(true);
    expect(reads()).toBe(4);
    await sleep(50);
    expect(reads(), 'no reads once it is there').toBe(4);
    await check.close();
  });

  it('keeps trying while Kafka cannot be reached, which says nothing about the topic', async () => {
    const { kafka, reads } = fakeKafka([new KafkaJSConnectionError('Connection timeout'), 'there']);
    const check = new TopicCheck({ kafka, topic: 'events', intervalMs: 10 });
    await check.start();
    expect(check.there).toBe(false);
    await until(() => check.there);
    expect(check.there).toBe(true);
    expect(reads()).toBe(2);
    await check.close();
  });

  it('an acknowledged write counts as the topic being there; close stops the reads', async () => {
    const { kafka, reads } = fakeKafka([unknownTopic()]);
    const check = new TopicCheck({ kafka, topic: 'events', intervalMs: 10 });
    await check.start();
    expect(check.there).toBe(false);
    check.written();
    expect(check.there).toBe(true);
    check.refused();
    await check.close();
    const after = reads();
    await sleep(50);
    expect(reads()).toBe(after);
  });
});
