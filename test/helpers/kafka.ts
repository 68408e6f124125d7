import { randomUUID } from 'node:crypto';
import { Kafka, logLevel } from 'kafkajs';
import { inject } from 'vitest';

/** A kafkajs client on the run's broker. */
export function testKafka(clientId = 'aqueduct-test'): Kafka {
  return new Kafka({ clientId, brokers: inject('kafkaBrokers'), logLevel: logLevel.NOTHING });
}

/** A topic name no other test uses. */
export function uniqueTopic(name: string): string {
  return `test-${name}-${randomUUID().slice(0, 8)}`;
}
