import { describe, expect, it } from 'vitest';
import { warmUpHotPaths } from '../../src/pipeline/warm-up.ts';

describe('warmUpHotPaths', () => {
  it('round-trips every record through kafkajs codecs and decodes every event', async () => {
    const result = await warmUpHotPaths({ rounds: 3, batchSize: 40 });
    expect(result).toMatchObject({ warmed: true, rounds: 3, records: 120, events: 120 });
  });

  it('stops between rounds once aborted', async () => {
    const controller = new AbortController();
    controller.abort();
    const result = await warmUpHotPaths({ rounds: 5, batchSize: 10, signal: controller.signal });
    expect(result).toMatchObject({ warmed: true, rounds: 0, records: 0 });
  });
});
