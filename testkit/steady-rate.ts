/**
 * The steady-state delivery rate of a burst run: deliveries per second once the configured bucket's
 * burst allowance is spent.
 *
 * The bucket (configured rate and burst) is replayed over the requests the provider saw: every request
 * takes a token, failed ones too, and the level is capped at the burst, so a lull refills it only that
 * far. The allowance counts as spent when the level falls to a tenth of the burst above the lowest
 * level of the run. The rate is counted between the first and the last time the level falls through
 * that line: at both ends the bucket holds the same, so no allowance saved up before the window (or left at its end) is counted as rate, and a
 * throttled fleet's steps (each refill chunk sent at once, then nothing until the next) cannot tip the
 * count by a chunk depending on where the window's ends fall. Lulls inside the window (a rebalance, a
 * slow reaction to a refill) count against the rate; sending faster than the bucket allows cannot happen
 * through Aqueduct's bucket and would show as provider 429s.
 *
 * If the bucket is never spent for long (the consumers were slower than the rate throughout: its lowest
 * level stays above half the burst), the rate is counted after the first `burst` deliveries until the
 * last one.
 */
export function steadyRate(
  arrivals: readonly number[],
  admissions: readonly number[],
  bucket: { rate: number; burst: number },
): { rate: number; seconds: number } {
  const levels = replay(admissions, bucket);
  const lowest = levels.reduce((low, l) => Math.min(low, l.after), bucket.burst);
  // The line sits a little above the lowest level reached, so that a throttled fleet's steps (one refill
  // chunk each) cross it: a tenth of the burst, or less for a fleet that takes small chunks.
  let from: number | undefined;
  let to: number | undefined;
  for (const above of [bucket.burst / 10, bucket.burst / 40, bucket.burst / 160]) {
    const line = lowest + above;
    const crossings = levels.filter((l) => l.before > line && l.after <= line);
    const under = levels.filter((l) => l.after <= line);
    from = crossings[0]?.at;
    to = crossings.at(-1)?.at;
    const span = (under.at(-1)?.at ?? 0) - (under[0]?.at ?? 0);
    if (from !== undefined && to !== undefined && to - from >= Math.max(500, span / 2)) break;
    from = undefined;
    to = undefined;
  }
  if (from === undefined || to === undefined || lowest > bucket.burst / 2) {
    const start = arrivals[bucket.burst];
    const end = arrivals.at(-1);
    if (start === undefined || end === undefined || end <= start) return { rate: 0, seconds: 0 };
    return {
      rate: (arrivals.length - 1 - bucket.burst) / ((end - start) / 1000),
      seconds: (end - start) / 1000,
    };
  }
  const [start, end] = [from, to];
  const counted = arrivals.filter((at) => at >= start && at < end).length;
  return { rate: counted / ((end - start) / 1000), seconds: (end - start) / 1000 };
}

/** The bucket's level just before and just after each request took its token. */
export function replay(
  admissions: readonly number[],
  bucket: { rate: number; burst: number },
): Array<{ at: number; before: number; after: number }> {
  let level = bucket.burst;
  let previous = admissions[0] ?? 0;
  return admissions.map((at) => {
    const before = Math.min(bucket.burst, level + (bucket.rate * (at - previous)) / 1000);
    level = before - 1;
    previous = at;
    return { at, before, after: level };
  });
}
