/**
 * The longest delay a Node timer can be armed with: `setTimeout` fires after 1 ms for anything above
 * 2^31 - 1 ms (about 24.8 days), and for Infinity and NaN.
 */
export const MAX_TIMER_MS = 2_147_483_647;

/** A delay fit for `setTimeout`: NaN and negatives become 0, anything above Node's limit the limit. */
export function timerDelayMs(ms: number): number {
  if (!(ms > 0)) return 0;
  return Math.min(MAX_TIMER_MS, ms);
}
