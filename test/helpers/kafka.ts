import { randomUUID } from 'node:crypto';
import type { Kafka } from 'kafkajs';
import { inject } from 'vitest';
import { createKafka } from '../../src/kafka/client.ts';

/** A kafkajs client on the run's broker. */
export function testKafka(clientId = 'aqueduct-test'): Kafka {
  return createKafka({ clientId, brokers: inject('kafkaBrokers') });
}

/** A topic name no other test uses. */
export function uniqueTopic(name: string): string {
  return `test-${name}-${randomUUID().slice(0, 8)}`;
}
