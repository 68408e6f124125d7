import { MAX_TIMER_MS } from '../timer-delay.ts';

/**
 * The value of a Retry-After header in milliseconds: delta-seconds (`"7"`, `"1.5"`) or an HTTP date.
 * Undefined when the header is absent or unparsable (negative numbers and garbage included); a past
 * date is 0. Never more than `maxMs` (default Node's timer limit): a provider's or a proxy's absurd
 * value (`"99999999"`, a date in year 9999) must not freeze anything for years, nor make a timer fire at
 * once. Callers clamp further to what they allow (AQUEDUCT_MAX_FLEET_BLOCK_MS, AQUEDUCT_MAX_RETRY_DELAY_MS).
 */
export function parseRetryAfterMs(
  value: unknown,
  nowMs: number = Date.now(),
  maxMs: number = MAX_TIMER_MS,
): number | undefined {
  const raw = Array.isArray(value) ? value[0] : value;
  const clamp = (ms: number) => Math.min(Math.max(0, maxMs), ms);
  if (typeof raw === 'number')
    return Number.isFinite(raw) && raw >= 0 ? clamp(Math.round(raw * 1000)) : undefined;
  if (typeof raw !== 'string') return undefined;
  const text = raw.trim();
  if (text === '') return undefined;
  // A long digit string is Infinity as a number: still "very long", so it is clamped like any other.
  if (/^\d+(\.\d+)?$/.test(text)) return clamp(Math.round(Number(text) * 1000));
  // An HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT") has letters; "-5" must not pass as the year -5.
  if (!/[A-Za-z]/.test(text)) return undefined;
  // Every HTTP-date is GMT, the asctime form ("Sun Nov  6 08:49:37 1994") too, which names no zone and
  // which Date.parse would read in the machine's own.
  const zoned = /\b(GMT|UTC|UT)\b|Z$|[+-]\d{2}:?\d{2}$/i.test(text) ? text : `${text} GMT`;
  const date = Date.parse(zoned);
  if (Number.isNaN(date)) return undefined;
  return clamp(Math.max(0, date - nowMs));
}
