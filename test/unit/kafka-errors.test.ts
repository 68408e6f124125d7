import {
  KafkaJSAggregateError,
  KafkaJSConnectionError,
  KafkaJSGroupCoordinatorNotFound,
  KafkaJSNonRetriableError,
  KafkaJSNumberOfRetriesExceeded,
  KafkaJSOffsetOutOfRange,
  KafkaJSProtocolError,
  KafkaJSServerDoesNotSupportApiKey,
} from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { brokerUnreachable, isKafkaJsError, isRebalancing, restartable } from '../../src/kafka/errors.ts';
import { protocolError } from '../helpers/kafka.ts';

/** Which kafkajs crashes the consumer restarts from in-process (a broker restart) and which end it. */
describe('brokerUnreachable', () => {
  it('is true for the coordinator lookup that failed while the broker was gone, however wrapped', () => {
    // kafkajs' runtime constructors take a message (its typings say otherwise for this one).
    const Lookup = KafkaJSGroupCoordinatorNotFound as unknown as new (message: string) => Error;
    const lookup = new Lookup('Failed to find group coordinator');
    expect(brokerUnreachable(lookup)).toBe(true);
    // What the consumer's crash event carries: the retrier's wrapper, the lookup as its cause.
    expect(brokerUnreachable(Object.assign(new KafkaJSNonRetriableError(lookup), { cause: lookup }))).toBe(
      true,
    );
    const refused = new KafkaJSConnectionError('Connection error: connect ECONNREFUSED 127.0.0.1:9092');
    expect(brokerUnreachable(Object.assign(new KafkaJSNonRetriableError(refused), { cause: refused }))).toBe(
      true,
    );
  });

  it('is false for crashes a restart cannot cure', () => {
    expect(brokerUnreachable(new KafkaJSServerDoesNotSupportApiKey('unsupported'))).toBe(false);
    expect(brokerUnreachable(new Error('SASL SCRAM SHA512 authentication failed'))).toBe(false);
    expect(brokerUnreachable('a string')).toBe(false);
  });
});

/** Which errors the batch handler leaves to kafkajs (rethrows) rather than backing off from itself. */
describe('isKafkaJsError', () => {
  it('is true for instances of kafkajs error classes', () => {
    expect(isKafkaJsError(new KafkaJSNonRetriableError('rebalancing'))).toBe(true);
    expect(isKafkaJsError(new KafkaJSOffsetOutOfRange('out of range', { topic: 't', partition: 0 }))).toBe(
      true,
    );
    expect(isKafkaJsError(new KafkaJSAggregateError('several', []))).toBe(true);
  });

  it('is false for other errors, whatever their name says', () => {
    expect(isKafkaJsError(new Error('connect ECONNREFUSED 127.0.0.1:6379'))).toBe(false);
    expect(isKafkaJsError(Object.assign(new Error('look-alike'), { name: 'KafkaJSConnectionError' }))).toBe(
      false,
    );
    expect(isKafkaJsError('KafkaJSError')).toBe(false);
  });
});

/** Which crashes the consumer restarts from in-process (kafkajs' own restarts are switched off). */
describe('restartable', () => {
  it('is true where kafkajs would have restarted: retries ran out, or a retriable root cause', () => {
    const retriable = new KafkaJSProtocolError('NOT_COORDINATOR');
    expect(
      restartable(
        new KafkaJSNumberOfRetriesExceeded(new Error('gave up'), { retryCount: 5, retryTime: 1000 }),
      ),
    ).toBe(true);
    expect(restartable(Object.assign(new KafkaJSNonRetriableError(retriable), { cause: retriable }))).toBe(
      true,
    );
  });

  it('is true for a broker that could not be reached, and false for what a restart cannot cure', () => {
    const refused = new KafkaJSConnectionError('Connection error: connect ECONNREFUSED 127.0.0.1:9092');
    expect(restartable(refused)).toBe(true);
    expect(restartable(new KafkaJSServerDoesNotSupportApiKey('unsupported'))).toBe(false);
    expect(restartable(new Error('SASL SCRAM SHA512 authentication failed'))).toBe(false);
    expect(restartable('a string')).toBe(false);
  });
});

/** The heartbeat errors by which the consumer learns that a rebalance took its partitions. */
describe('isRebalancing', () => {
  const protocol = (type: string, code: number) => protocolError(type, code);

  it('is true for a rebalance under way, a lost generation and a moved coordinator', () => {
    expect(isRebalancing(protocol('REBALANCE_IN_PROGRESS', 27))).toBe(true);
    expect(isRebalancing(protocol('ILLEGAL_GENERATION', 22))).toBe(true);
    expect(isRebalancing(protocol('NOT_COORDINATOR_FOR_GROUP', 16))).toBe(true);
  });

  it('is false for other errors, and for look-alikes that kafkajs did not throw', () => {
    expect(isRebalancing(protocol('OFFSET_OUT_OF_RANGE', 1))).toBe(false);
    expect(isRebalancing(Object.assign(new Error('x'), { type: 'REBALANCE_IN_PROGRESS' }))).toBe(false);
    expect(isRebalancing(undefined)).toBe(false);
  });
});
