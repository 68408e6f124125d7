import { randomUUID } from 'node:crypto';
import { type Kafka, KafkaJSProtocolError } from 'kafkajs';
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

// kafkajs builds its protocol errors from the broker's error code entry (message, type, code).
const ProtocolError = KafkaJSProtocolError as unknown as new (entry: {
  message: string;
  type: string;
  code: number;
  retriable: boolean;
}) => Error;

/** The error kafkajs throws for the broker's error code `code` (named `type`, as kafkajs names it). */
export function protocolError(type: string, code: number, retriable = false): Error {
  return new ProtocolError({ message: `broker said ${type}`, type, code, retriable });
}
