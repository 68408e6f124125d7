import type { ErrorHandler } from '@opentelemetry/core';

/**
 * What the SDK cannot deliver (a span batch the collector refused or never answered) reaches its global
 * error handler once per batch: with the collector down under load, several times a second. Its default
 * handler writes each as the whole error serialized to JSON. This one writes the error's message and
 * code, the first at once and then at most one line per interval, counting the failures in between.
 */
export function throttledErrorHandler(
  report: (message: string, detail: string) => void,
  intervalMs = 30_000,
  now: () => number = Date.now,
): ErrorHandler {
  let lastReportAt = Number.NEGATIVE_INFINITY;
  let unreported = 0;
  return (error) => {
    const at = now();
    if (at - lastReportAt < intervalMs) {
      unreported++;
      return;
    }
    const since =
      unreported > 0
        ? ` (and ${unreported} more since the last report, ${Math.round((at - lastReportAt) / 1000)} s ago)`
        : '';
    lastReportAt = at;
    unreported = 0;
    report(
      `telemetry export failed: spans lost${since}; the next failures are summarized every ${intervalMs / 1000} s`,
      errorDetail(error),
    );
  };
}

/** The message and code of what the SDK threw (an Error, a string, or any object). */
function errorDetail(error: unknown): string {
  if (typeof error === 'string') return error;
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return code !== undefined && !error.message.includes(String(code))
      ? `${error.message} (${String(code)})`
      : error.message;
  }
  if (error && typeof error === 'object' && 'message' in error) return String(error.message);
  return String(error);
}
