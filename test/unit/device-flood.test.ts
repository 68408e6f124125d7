import { describe, expect, it } from 'vitest';
import { simulateFlood } from '../helpers/device-flood-sim.ts';

const SEEDS = [1, 2, 3, 4, 5];

/**
 * DeviceBackoff against a device's own bucket on a fake clock (see simulateFlood): the pace it reaches,
 * before the integration test and the chattyDevice bench measure it with Kafka, Redis and the simulators.
 */
describe('a flooded device, simulated', () => {
  it("reaches 0.95 of the device's limit (10/s, burst 5, 500 events) with deferred events read again 50–400 or 100–800 ms late, 450 retry records at a time, fetched as they come due or every 300 ms; never above its bucket, nothing dead-lettered", () => {
    for (const [lateMs, fetchEveryMs] of [
      [[50, 400], 0],
      [[100, 800], 0],
      [[50, 400], 300],
    ] as const) {
      for (const seed of SEEDS) {
        const run = simulateFlood({
          rate: 10,
          burst: 5,
          events: 500,
          arrivalMs: 6000,
          lateMs: [...lateMs],
          answerMs: 20,
          maxAttempts: 5,
          fetchWindow: 450,
          fetchEveryMs,
          seed,
        });
        expect(run.delivered).toBe(500);
        expect(run.deadLettered).toBe(0);
        expect(run.overLimit).toBe(0);
        expect(run.throttled).toBeLessThan(30);
        expect(run.ofDeviceLimit).toBeGreaterThanOrEqual(0.95);
      }
    }
  });

  it('climbs to a faster device (20/s, burst 20) and settles on a slower one (5/s) alike', () => {
    for (const seed of SEEDS) {
      const flood = {
        events: 300,
        lateMs: [50, 400] as [number, number],
        answerMs: 20,
        maxAttempts: 5,
        fetchWindow: 450,
        fetchEveryMs: 300,
        seed,
      };
      const fast = simulateFlood({ ...flood, rate: 20, burst: 20, arrivalMs: 3000 });
      expect(fast.ofDeviceLimit).toBeGreaterThanOrEqual(0.95);
      const slow = simulateFlood({ ...flood, rate: 5, burst: 5, arrivalMs: 4000 });
      expect(slow.ofDeviceLimit).toBeGreaterThanOrEqual(0.95);
      for (const run of [fast, slow]) {
        expect(run.delivered).toBe(300);
        expect(run.deadLettered).toBe(0);
        expect(run.overLimit).toBe(0);
      }
    }
  });
});
