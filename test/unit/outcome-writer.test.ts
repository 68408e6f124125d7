import type { KafkaMessage, Producer, TopicMessages } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { topicFamily } from '../../src/config.ts';
import type { NotificationEvent } from '../../src/events/event.ts';
import { HEADER, headerString } from '../../src/kafka/headers.ts';
import { type OutcomeRecord, OutcomeWriter } from '../../src/pipeline/outcome-writer.ts';

// The records' shapes; that Kafka takes them is what the pipeline's integration tests show.
const topics = topicFamily('orders');
const origin = { topic: 'orders', partition: 0, offset: '7' };
const message: KafkaMessage = {
  key: Buffer.from('k'),
  value: Buffer.from('{}'),
  timestamp: '1700000000000',
  attributes: 0,
  offset: '7',
  headers: {},
};
const event: NotificationEvent = {
  schemaVersion: 1,
  id: 'e1',
  platform: 'apns',
  token: 'a'.repeat(64),
  notification: { title: 't', body: 'b' },
} as NotificationEvent;

async function written(records: OutcomeRecord[]): Promise<TopicMessages[]> {
  const sent: TopicMessages[] = [];
  const producer = {
    sendBatch: async ({ topicMessages }: { topicMessages: TopicMessages[] }) => {
      sent.push(...topicMessages);
      return [];
    },
  } as unknown as Producer;
  await new OutcomeWriter(producer, topics, 1, { maxMessageBytes: 16_384, maxHeaderBytes: 16_384 }).write(
    records,
  );
  return sent;
}

describe('outcome writer', () => {
  it('reports a dead token with when the provider says it died, when it said so', async () => {
    const at = Date.parse('2026-11-30T12:00:00Z');
    const [batch] = await written([
      { kind: 'invalid-token', event, message, origin, reason: 'Unregistered', invalidSinceMs: at },
      { kind: 'invalid-token', event: { ...event, id: 'e2' }, message, origin, reason: 'BadDeviceToken' },
    ]);
    expect(batch?.topic).toBe(topics.invalidTokens);
    const [dead, bad] = (batch?.messages ?? []).map((m) => JSON.parse(String(m.value)));
    expect(dead).toMatchObject({
      id: 'e1',
      reason: 'Unregistered',
      invalidSince: '2026-11-30T12:00:00.000Z',
    });
    expect(bad).toMatchObject({ id: 'e2', reason: 'BadDeviceToken' });
    expect(bad).not.toHaveProperty('invalidSince');
  });

  it('writes the throttles a retry has met beside its attempt, and nothing when it has met none', async () => {
    const retry = (throttles: number): OutcomeRecord => ({
      kind: 'retry',
      message,
      key: message.key,
      origin,
      attempt: 2,
      throttles,
      notBefore: 1,
      reason: 'QUOTA_EXCEEDED',
    });
    const [batch] = await written([retry(3), retry(0)]);
    const [throttled, plain] = batch?.messages ?? [];
    expect(headerString(throttled?.headers, HEADER.throttles)).toBe('3');
    expect(headerString(throttled?.headers, HEADER.attempt)).toBe('2');
    expect(headerString(plain?.headers, HEADER.throttles)).toBeUndefined();
  });
});
