/**
 * The value of a Retry-After header in milliseconds: delta-seconds (`"7"`) or an HTTP date. Undefined
 * when the header is absent or unparsable; never negative.
 */
export function parseRetryAfterMs(value: unknown, nowMs: number = Date.now()): number | undefined {
  const raw = Array.isArray(value) ? value[0] : value;
  if (typeof raw === 'number') return Number.isFinite(raw) && raw >= 0 ? Math.round(raw * 1000) : undefined;
  if (typeof raw !== 'string') return undefined;
  const text = raw.trim();
  if (text === '') return undefined;
  if (/^\d+(\.\d+)?$/.test(text)) return Math.round(Number(text) * 1000);
  // An HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT") has letters; "-5" must not pass as the year -5.
  if (!/[A-Za-z]/.test(text)) return undefined;
  const date = Date.parse(text);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - nowMs);
}
