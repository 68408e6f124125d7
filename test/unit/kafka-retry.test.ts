import { createRequire } from 'node:module';
import { describe, expect, it, vi } from 'vitest';
import { KAFKA_RETRY } from '../../src/kafka/client.ts';

const require = createRequire(import.meta.url);
type Retrier = (
  fn: (bail: (error: Error) => void, retryCount: number, retryTime: number) => Promise<unknown>,
) => Promise<unknown>;
const createRetry = require('kafkajs/src/retry') as (options: object) => Retrier;

/** The waits between the tries kafkajs' own retrier makes with KAFKA_RETRY for a request that never succeeds, in ms. */
async function waitsUntilGivenUp(): Promise<number[]> {
  vi.useFakeTimers();
  try {
    const tries: number[] = [];
    const outcome = createRetry(KAFKA_RETRY)(async () => {
      tries.push(Date.now());
      throw Object.assign(new Error('Connection error: connect ECONNREFUSED'), { retriable: true });
    }).then(
      () => 'succeeded',
      (error: Error) => error.name,
    );
    await vi.runAllTimersAsync();
    expect(await outcome).toBe('KafkaJSNumberOfRetriesExceeded');
    expect(tries).toHaveLength(KAFKA_RETRY.retries + 1);
    return tries.slice(1).map((at, i) => at - (tries[i] as number));
  } finally {
    vi.useRealTimers();
  }
}

describe('KAFKA_RETRY: how kafkajs retries a request or connection that fails', () => {
  it('never waits more than 3 s between tries, so a client resumes within 3 s of a broker coming back', async () => {
    const waits = await waitsUntilGivenUp();
    expect(Math.max(...waits)).toBeLessThanOrEqual(3000);
  });

  it('keeps trying for about a minute, as the one-shot verbs say while they wait', async () => {
    const total = (await waitsUntilGivenUp()).reduce((sum, wait) => sum + wait, 0);
    expect(total).toBeGreaterThan(55_000);
    expect(total).toBeLessThan(80_000);
  });
});
