import { logLevel } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { kafkajsLogLevel } from '../../src/kafka/client.ts';

/** The level each of kafkajs' own log lines gets in Aqueduct's log (messages as kafkajs 2.2.4 words them). */
describe('kafkajsLogLevel', () => {
  it('logs a request refused with an error kafkajs recovers from at debug, not as an error', () => {
    for (const error of [
      "The coordinator is loading and hence can't process requests for this group",
      'There is no leader for this topic-partition as we are in the middle of a leadership election',
      'This server is not the leader for that topic-partition',
      'The group is rebalancing, so a rejoin is needed',
    ])
      expect(
        kafkajsLogLevel(logLevel.ERROR, { message: 'Response Heartbeat(key: 12, version: 3)', error }),
      ).toBe('debug');
  });

  it('keeps an error that needs the operator at the error level', () => {
    expect(
      kafkajsLogLevel(logLevel.ERROR, {
        message: 'Response Metadata(key: 3, version: 6)',
        error: 'Not authorized to access topics: [Topic authorization failed]',
      }),
    ).toBe('error');
    expect(
      kafkajsLogLevel(logLevel.ERROR, { message: 'Connection error: connect ECONNREFUSED 127.0.0.1:9092' }),
    ).toBe('error');
    expect(kafkajsLogLevel(logLevel.ERROR, { message: 'Crash: KafkaJSNumberOfRetriesExceeded' })).toBe(
      'error',
    );
  });

  it('logs the bounded-retries warning at debug and keeps other warnings', () => {
    expect(
      kafkajsLogLevel(logLevel.WARN, {
        message: 'Limiting retries for the idempotent producer may invalidate EoS guarantees',
      }),
    ).toBe('debug');
    expect(kafkajsLogLevel(logLevel.WARN, { message: 'KafkaJS v2.0.0 switched default partitioner' })).toBe(
      'warn',
    );
  });

  it('logs kafkajs info and debug lines at debug', () => {
    expect(kafkajsLogLevel(logLevel.INFO, { message: 'Starting' })).toBe('debug');
    expect(kafkajsLogLevel(logLevel.DEBUG, { message: 'Request Fetch' })).toBe('debug');
  });
});
