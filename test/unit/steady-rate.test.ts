import { describe, expect, it } from 'vitest';
import { steadyRate } from '../../testkit/steady-rate.ts';

/**
 * A fleet draining `total` requests through a token bucket (rate, burst), in 1 ms ticks: it sends up to
 * `capacity` per second while the bucket has tokens; once dry it waits until `chunk` tokens are back
 * (as Aqueduct's pools do) and sends those at once; nothing is sent during `lulls` ([fromMs, toMs)).
 * Returns the send times, in ms.
 */
function fleet(options: {
  rate: number;
  burst: number;
  capacity: number;
  chunk: number;
  total: number;
  lulls?: Array<[number, number]>;
}): number[] {
  const sent: number[] = [];
  let level = options.burst;
  let waiting = false;
  let allowance = 0;
  for (let ms = 0; sent.length < options.total; ms++) {
    level = Math.min(options.burst, level + options.rate / 1000);
    if (options.lulls?.some(([from, to]) => ms >= from && ms < to)) continue;
    if (waiting && level < options.chunk) continue;
    waiting = false;
    allowance = Math.min(allowance + options.capacity / 1000, options.capacity / 100);
    while (allowance >= 1 && level >= 1 && sent.length < options.total) {
      sent.push(1_000_000 + ms + (sent.length % 10) / 10);
      level -= 1;
      allowance -= 1;
    }
    if (level < 1) waiting = true;
  }
  return sent;
}

const near = (value: number, expected: number, tolerance = 0.03) =>
  expect(Math.abs(value - expected) / expected).toBeLessThan(tolerance);

describe('steadyRate', () => {
  it('measures the configured rate once the burst is spent, whatever the chunking', () => {
    for (const chunk of [20, 95, 200, 333]) {
      const sent = fleet({ rate: 380, burst: 808, capacity: 1200, chunk, total: 2500 });
      const { rate, seconds } = steadyRate(sent, sent, { rate: 380, burst: 808 });
      expect(seconds).toBeGreaterThan(2);
      near(rate, 380);
    }
  });

  it('does not count the allowance saved up before the phase, nor a short lull inside it', () => {
    const busy = { rate: 760, burst: 1800, capacity: 3000, chunk: 200, total: 9000 };
    const lulled = fleet({ ...busy, lulls: [[4000, 4500]] });
    near(steadyRate(lulled, lulled, { rate: 760, burst: 1800 }).rate, 760);
    // A lull at the start (a rebalance): the bucket refills only up to its burst meanwhile.
    const lateStart = fleet({ ...busy, lulls: [[300, 3300]] });
    near(steadyRate(lateStart, lateStart, { rate: 760, burst: 1800 }).rate, 760);
  });

  it('counts what a lull longer than the burst lasts wasted against the rate', () => {
    const sent = fleet({
      rate: 760,
      burst: 1800,
      capacity: 3000,
      chunk: 200,
      total: 12_000,
      lulls: [[6000, 10_000]],
    });
    const { rate } = steadyRate(sent, sent, { rate: 760, burst: 1800 });
    expect(rate).toBeLessThan(700);
  });

  it('a fleet slower than the rate never spends the bucket: counted after the first burst deliveries', () => {
    const sent = fleet({ rate: 760, burst: 1800, capacity: 500, chunk: 200, total: 4000 });
    near(steadyRate(sent, sent, { rate: 760, burst: 1800 }).rate, 500);
  });

  it('counts only deliveries: requests that failed took tokens but are not rate', () => {
    const admissions = fleet({ rate: 380, burst: 808, capacity: 1200, chunk: 200, total: 3000 });
    const arrivals = admissions.filter((_, i) => i % 10 !== 0); // a tenth refused (dead tokens, 5xx)
    near(steadyRate(arrivals, admissions, { rate: 380, burst: 808 }).rate, 342);
  });
});
