/** What a simulator counts and records, and the log line that reports the counts. */

/** Counts served on /stats. Every request lands in exactly one of the outcome counters. */
export interface SimulatorStats {
  /** Requests that reached the push endpoint. */
  requests: number;
  /** Notifications accepted (200), duplicates included. */
  accepted: number;
  /** Distinct event ids among the accepted (read from the data payload). */
  distinctEventIds: number;
  /** Accepted notifications whose event id had been accepted before. */
  duplicates: number;
  /** Answered 429 for the provider's own limit (bucket empty or storm). */
  throttled: number;
  /** Answered 429 for one device's limit (`deviceRate`): APNs TooManyRequests, FCM's device message rate. */
  deviceThrottled: number;
  /** Answered 500 or 503 (injected). */
  serverErrors: number;
  /** Dead or malformed device tokens (FCM 404/400, APNs 410/400). */
  invalidTokens: number;
  /** Refused as invalid (payload too large, missing fields, bad headers). */
  rejected: number;
  /** Refused for credentials (missing, malformed, or failing verification). */
  authFailures: number;
  /** Connections dropped without an answer (injected). */
  dropped: number;
  /** Answers delayed by the slow fault. */
  slowed: number;
}

/** One 429 answer: when the request arrived, and which limit refused it. */
export interface ThrottleRecord {
  atMs: number;
  scope: 'provider' | 'device';
}

/** One accepted notification. */
export interface AcceptedRecord {
  /** The id the simulator answered with (FCM `projects/…/messages/…`, APNs `apns-id`). */
  messageId: string;
  /** The event id found in the data payload under `aqueduct_id`, if any. */
  eventId: string | undefined;
  /** When the request arrived, in epoch milliseconds (Date.now()). */
  arrivedAtMs: number;
  /** The request as received (with `keepPayloads`). */
  payload?: unknown;
}

export const emptyStats = (): SimulatorStats => ({
  requests: 0,
  accepted: 0,
  distinctEventIds: 0,
  duplicates: 0,
  throttled: 0,
  deviceThrottled: 0,
  serverErrors: 0,
  invalidTokens: 0,
  rejected: 0,
  authFailures: 0,
  dropped: 0,
  slowed: 0,
});

/** The stats counters that changed between two snapshots, as one log line. */
export function summaryLine(kind: 'fcm' | 'apns', previous: SimulatorStats, current: SimulatorStats): string {
  const delta = (key: keyof SimulatorStats) => current[key] - previous[key];
  const errors = delta('serverErrors') + delta('dropped');
  const time = new Date().toISOString().slice(11, 19);
  return (
    `${kind}-sim ${time} accepted ${delta('accepted')}/s (total ${current.accepted}) · 429s ${delta('throttled')}` +
    ` · errors ${errors} (5xx ${delta('serverErrors')}, dropped ${delta('dropped')})` +
    ` · invalid tokens ${delta('invalidTokens')} · rejected ${delta('rejected')} · duplicates ${current.duplicates}` +
    ` · device 429s ${delta('deviceThrottled')}`
  );
}
