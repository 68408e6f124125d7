import { describe, expect, it } from 'vitest';
import { connectionNotice } from '../../src/kafka/connection-notice.ts';

describe('connectionNotice', () => {
  const setup = () => {
    const lines: string[] = [];
    let clock = 1_000_000;
    const notice = connectionNotice({
      verb: 'publish',
      brokers: ['k1:9092', 'k2:9092'],
      write: (line) => lines.push(line),
      now: () => clock,
    });
    return { lines, notice, advance: (ms: number) => (clock += ms) };
  };

  it("reports the first failure at once, with the brokers and kafkajs' reason without its seed-broker prefix", () => {
    const { lines, notice } = setup();
    notice(
      'Failed to connect to seed broker, trying another broker from the list: Connection error: connect ECONNREFUSED 10.0.0.1:9092',
    );
    expect(lines).toEqual([
      'aqueduct publish: waiting for Kafka at k1:9092,k2:9092: Connection error: connect ECONNREFUSED 10.0.0.1:9092 (kafkajs retries for about a minute; Ctrl-C to stop)',
    ]);
  });

  it('says it is still waiting at most every 5 s, with the time since the first failure', () => {
    const { lines, notice, advance } = setup();
    notice('Closed connection');
    advance(1000);
    notice('Closed connection');
    advance(3999);
    notice('Closed connection');
    expect(lines).toHaveLength(1);
    advance(1);
    notice('Connection timeout');
    advance(2000);
    notice('Connection timeout');
    expect(lines).toHaveLength(2);
    expect(lines[1]).toBe(
      'aqueduct publish: still waiting for Kafka at k1:9092,k2:9092: Connection timeout (5 s)',
    );
  });
});
