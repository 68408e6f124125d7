import { withoutToken } from '../redact.ts';
import { parseRetryAfterMs } from './retry-after.ts';
import type { PushOutcome } from './types.ts';

/**
 * Everything about a failed FCM send that decides its outcome, taken from a firebase-admin error by
 * {@link describeFcmError}. Kept apart from the library's error types so the decision table below can
 * be tested row by row.
 */
export interface FcmFailure {
  /** HTTP status of the server's answer, when there was one. */
  httpStatus?: number;
  /** `error.details[].errorCode` of the FcmError detail (UNREGISTERED, QUOTA_EXCEEDED, …). */
  fcmErrorCode?: string;
  /** `error.status`, the canonical Google status (NOT_FOUND, RESOURCE_EXHAUSTED, …). */
  status?: string;
  /** `error.message` of the server's answer, or firebase-admin's own message when it refused to send. */
  message?: string;
  /** The Retry-After header, as sent. */
  retryAfter?: string;
  /** firebase-admin's own code when no server answer decided it (`app/network-timeout`, `messaging/invalid-payload`). */
  clientCode?: string;
  /** The socket or TLS error code underneath a network failure (ECONNRESET, ETIMEDOUT, a certificate error…). */
  networkCode?: string;
  /**
   * `device` when the answer names the quota as one device's message rate: a `google.rpc.QuotaFailure`
   * detail (see {@link isDeviceQuotaViolation}), the error's message, or the legacy device-rate error
   * code; absent otherwise (project quota, overload).
   */
  quotaScope?: 'device';
  /** The fields a `google.rpc.BadRequest` detail names as invalid (`message.token`, …). */
  invalidFields?: string[];
}

/**
 * FCM's first retry delay for a project-wide QUOTA_EXCEEDED that came without Retry-After: "use
 * exponential backoff with a minimum initial delay of 1 minute to retry rejected messages" (ErrorCode
 * reference); the quota is counted per minute.
 */
export const FCM_QUOTA_BACKOFF_MS = 60_000;

type Kind = Exclude<PushOutcome['kind'], 'delivered'>;

/**
 * The FCM decision table: server error code (the FcmError detail, else the canonical status) → outcome.
 * https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
 */
const BY_CODE: Record<string, { kind: Kind; throttled?: boolean }> = {
  // The token is gone (app uninstalled, token rotated or expired): stop sending to it.
  UNREGISTERED: { kind: 'invalid-token' },
  NOT_FOUND: { kind: 'invalid-token' },
  // The token belongs to another Firebase project: it will never work with this one.
  SENDER_ID_MISMATCH: { kind: 'invalid-token' },
  // Something in the message itself (or a malformed token: see below).
  INVALID_ARGUMENT: { kind: 'rejected' },
  // 429: the project's quota (per minute, minutes not aligned to the clock), overload, or one device's
  // message rate. Only the last is narrower than the fleet, and only the answer says so (see
  // readErrorBody).
  QUOTA_EXCEEDED: { kind: 'retry', throttled: true },
  RESOURCE_EXHAUSTED: { kind: 'retry', throttled: true },
  // The legacy API's name for one device's message rate, which firebase-admin still maps: that device's.
  DEVICE_MESSAGE_RATE_EXCEEDED: { kind: 'retry', throttled: true },
  DeviceMessageRateExceeded: { kind: 'retry', throttled: true },
  UNAVAILABLE: { kind: 'retry' },
  INTERNAL: { kind: 'retry' },
  UNSPECIFIED_ERROR: { kind: 'retry' },
  UNKNOWN: { kind: 'retry' },
  DEADLINE_EXCEEDED: { kind: 'retry' },
  // Our OAuth token expired or was refused: the provider has firebase-admin fetch a fresh one (fcm.ts).
  UNAUTHENTICATED: { kind: 'retry' },
  // APNs credentials of the Firebase project (pushes to iOS through FCM) are missing or invalid, or our
  // service account lacks the permission: no retry helps until someone fixes the project.
  THIRD_PARTY_AUTH_ERROR: { kind: 'rejected' },
  APNS_AUTH_ERROR: { kind: 'rejected' },
  PERMISSION_DENIED: { kind: 'rejected' },
};

/**
 * How the reason of a push begins when firebase-admin could not get an OAuth access token for it (the
 * credential's own words follow): every push fails so until the credentials or the way to Google's
 * token endpoint are fixed, which the consumer's log says (failureLogger).
 */
export const CREDENTIAL_FAILURE = 'credential: could not get an access token';

/** A malformed token is reported as INVALID_ARGUMENT with this in the message. */
const INVALID_TOKEN_MESSAGE = /registration token/i;

/** Decides the outcome of one failed FCM send. Pure: the same failure always gives the same outcome. */
export function classifyFcmFailure(failure: FcmFailure, nowMs: number = Date.now()): PushOutcome {
  const httpStatus = failure.httpStatus;
  const retryAfterMs = parseRetryAfterMs(failure.retryAfter, nowMs);
  const status = httpStatus === undefined ? {} : { httpStatus };
  const after = retryAfterMs === undefined ? {} : { retryAfterMs };
  const code = failure.fcmErrorCode ?? failure.status;

  if (code !== undefined && code in BY_CODE) {
    const rule = BY_CODE[code] as { kind: Kind; throttled?: boolean };
    if (code === 'INVALID_ARGUMENT' && namesTheToken(failure)) {
      return { kind: 'invalid-token', reason: 'INVALID_ARGUMENT: invalid registration token', ...status };
    }
    const reason = rule.kind === 'rejected' && failure.message ? `${code}: ${clip(failure.message)}` : code;
    if (rule.kind === 'retry') {
      if (rule.throttled !== true) return { kind: 'retry', reason, throttled: false, ...status, ...after };
      const scope = throttleScope(failure);
      return {
        kind: 'retry',
        reason: scopedReason(reason, scope),
        throttled: true,
        scope,
        ...status,
        ...after,
        ...quotaBackoff(scope, retryAfterMs),
      };
    }
    return { kind: rule.kind, reason, ...status };
  }

  if (httpStatus === 429) {
    const scope = throttleScope(failure);
    const reason = scopedReason(code ?? 'HTTP 429', scope);
    return {
      kind: 'retry',
      reason,
      throttled: true,
      scope,
      ...status,
      ...after,
      ...quotaBackoff(scope, retryAfterMs),
    };
  }
  if (httpStatus !== undefined) return classifyByStatus(httpStatus, code, status, after);

  // No answer from the server.
  switch (failure.clientCode) {
    case 'app/network-timeout':
      return { kind: 'retry', reason: 'timeout', throttled: false };
    case 'app/network-error':
      return { kind: 'retry', reason: `network: ${failure.networkCode ?? 'error'}`, throttled: false };
    case 'app/invalid-credential':
      // The OAuth token could not be fetched (often the network again): not the notification's fault.
      return {
        kind: 'retry',
        reason: `${CREDENTIAL_FAILURE}${failure.message ? `: ${clip(credentialCause(failure.message))}` : ''}`,
        throttled: false,
      };
  }
  if (failure.clientCode?.startsWith('messaging/')) {
    // firebase-admin refused the message before sending it (bad field): permanent.
    return {
      kind: 'rejected',
      reason: `${failure.clientCode}${failure.message ? `: ${clip(failure.message)}` : ''}`,
    };
  }
  if (failure.networkCode)
    return { kind: 'retry', reason: `network: ${failure.networkCode}`, throttled: false };
  return { kind: 'retry', reason: `unknown: ${failure.clientCode ?? 'error'}`, throttled: false };
}

function classifyByStatus(
  httpStatus: number,
  code: string | undefined,
  status: { httpStatus?: number },
  after: { retryAfterMs?: number },
): PushOutcome {
  const reason = code ?? `HTTP ${httpStatus}`;
  if (httpStatus >= 500 || httpStatus === 408)
    return { kind: 'retry', reason, throttled: false, ...status, ...after };
  if (httpStatus === 401) return { kind: 'retry', reason, throttled: false, ...status };
  // A 404 without FCM's JSON error is no statement about the token (a proxy or a wrong path said it).
  if (httpStatus === 404 && code === undefined) return { kind: 'retry', reason, throttled: false, ...status };
  if (httpStatus === 404) return { kind: 'invalid-token', reason, ...status };
  if (httpStatus >= 400) return { kind: 'rejected', reason, ...status };
  return { kind: 'retry', reason, throttled: false, ...status };
}

/**
 * A throttle is one device's when the answer says so; the project quota and overload (no device named)
 * stop the fleet, as Google asks: back off on every 429 unless told it is narrower.
 */
function throttleScope(failure: FcmFailure): 'fleet' | 'device' {
  return failure.quotaScope === 'device' ? 'device' : 'fleet';
}

/** FCM's minute for a project-wide throttle that named no Retry-After (see FCM_QUOTA_BACKOFF_MS). */
function quotaBackoff(
  scope: 'fleet' | 'device',
  retryAfterMs: number | undefined,
): { backoffBaseMs?: number } {
  return scope === 'fleet' && retryAfterMs === undefined ? { backoffBaseMs: FCM_QUOTA_BACKOFF_MS } : {};
}

/**
 * Whether an INVALID_ARGUMENT is about the registration token: the `google.rpc.BadRequest` detail
 * names `message.token` (the reference says that detail tells which field was invalid); without one,
 * the message says "registration token".
 */
function namesTheToken(failure: FcmFailure): boolean {
  if (failure.invalidFields !== undefined && failure.invalidFields.length > 0)
    return failure.invalidFields.includes('message.token');
  return failure.message !== undefined && INVALID_TOKEN_MESSAGE.test(failure.message);
}

function scopedReason(reason: string, scope: 'fleet' | 'device'): string {
  return scope === 'device' ? `${reason}: device message rate` : reason;
}

/** What went wrong, out of firebase-admin's sentence about a credential that failed to fetch a token. */
function credentialCause(message: string): string {
  return message.replace(/^.*? with the following error: /s, '');
}

function clip(text: string): string {
  return text.length > 160 ? `${text.slice(0, 157)}...` : text;
}

/**
 * Reads a firebase-admin error (a `FirebaseMessagingError` with `httpResponse`, or a `FirebaseAppError`
 * for network and credential failures) into an {@link FcmFailure}. `token` is the message's device
 * token: a QuotaFailure violation whose subject names it is that device's quota, and the message is
 * kept without it.
 */
export function describeFcmError(error: unknown, token?: string): FcmFailure {
  const failure: FcmFailure = {};
  if (typeof error !== 'object' || error === null) return { clientCode: 'unknown' };
  const record = error as Record<string, unknown>;
  if (typeof record.code === 'string') failure.clientCode = record.code;
  const response = record.httpResponse;
  if (typeof response !== 'object' || response === null) {
    // Refused before sending (firebase-admin's own validation): its message names the field.
    if (typeof record.message === 'string') failure.message = record.message;
  } else {
    const { status, headers, data } = response as { status?: unknown; headers?: unknown; data?: unknown };
    if (typeof status === 'number') failure.httpStatus = status;
    if (typeof headers === 'object' && headers !== null) {
      const retryAfter = (headers as Record<string, unknown>)['retry-after'];
      if (typeof retryAfter === 'string') failure.retryAfter = retryAfter;
    }
    Object.assign(failure, readErrorBody(data, token));
  }
  const networkCode = findNetworkCode(record.cause);
  if (networkCode) failure.networkCode = networkCode;
  // Before any reason is cut from it: a token cut in two would no longer be found whole.
  if (token !== undefined && failure.message !== undefined)
    failure.message = withoutToken(failure.message, token);
  return failure;
}

type BodyFields = Pick<FcmFailure, 'fcmErrorCode' | 'status' | 'message' | 'quotaScope' | 'invalidFields'>;

/**
 * Google's JSON error: `{ error: { code, message, status, details: [...] } }`, where details hold an
 * FcmError (`{ '@type': …FcmError, errorCode }`) and, for QUOTA_EXCEEDED, a `google.rpc.QuotaFailure`
 * (`{ '@type': …QuotaFailure, violations: [{ subject, description }] }`) naming the quota exceeded.
 * firebase-admin keeps the parsed body as `httpResponse.data` (it maps both QUOTA_EXCEEDED and
 * RESOURCE_EXHAUSTED to `messaging/message-rate-exceeded`, so its own code cannot tell them apart).
 */
function readErrorBody(data: unknown, token: string | undefined): BodyFields {
  if (typeof data !== 'object' || data === null) return {};
  const error = (data as { error?: unknown }).error;
  if (typeof error !== 'object' || error === null) return {};
  const { status, message, details } = error as { status?: unknown; message?: unknown; details?: unknown };
  const out: BodyFields = {};
  if (typeof status === 'string') out.status = status;
  if (typeof message === 'string') out.message = message;
  if (Array.isArray(details)) {
    for (const detail of details) {
      if (typeof detail !== 'object' || detail === null) continue;
      const {
        '@type': type,
        errorCode,
        violations,
        fieldViolations,
        metadata,
      } = detail as Record<string, unknown>;
      if (type === FCM_ERROR_TYPE && typeof errorCode === 'string') out.fcmErrorCode = errorCode;
      if (
        type === QUOTA_FAILURE_TYPE &&
        Array.isArray(violations) &&
        violations.some((violation) => isDeviceQuotaViolation(violation, token))
      )
        out.quotaScope = 'device';
      if (type === ERROR_INFO_TYPE && namesADeviceQuota(metadata)) out.quotaScope = 'device';
      if (type === BAD_REQUEST_TYPE && Array.isArray(fieldViolations)) {
        out.invalidFields = fieldViolations.flatMap((violation) => {
          const field = (violation as { field?: unknown } | null)?.field;
          return typeof field === 'string' ? [field] : [];
        });
      }
    }
  }
  if (out.fcmErrorCode !== undefined && DEVICE_RATE_CODES.has(out.fcmErrorCode)) out.quotaScope = 'device';
  if (out.message !== undefined && speaksOfADevice(out.message)) out.quotaScope = 'device';
  return out;
}

/** Error codes that name one device's message rate (the legacy API's, still in firebase-admin's table). */
const DEVICE_RATE_CODES = new Set(['DEVICE_MESSAGE_RATE_EXCEEDED', 'DeviceMessageRateExceeded']);

/**
 * Whether a text speaks of one device: the word `device` (FCM's ErrorCode reference calls that cause
 * "Device message rate exceeded"), or what FCM's API calls a device, its registration token, or a
 * message's recipient; a project's quota is worded in terms of the project and its requests. Only read
 * for a throttle: `quotaScope` decides nothing else.
 */
function speaksOfADevice(text: string): boolean {
  return /\b(device|registration[ _-]?token|recipient)\b/i.test(text);
}

/**
 * Whether a quota's identifier names a device: `DeviceMessagesPerMinute`, `…/device_message_rate`,
 * `perDevice`, `MessagesPerRegistrationToken`, `per_recipient` (camel case and separators split into
 * words first).
 */
function identifierNamesADevice(identifier: string): boolean {
  const words = identifier.replace(/([a-z0-9])([A-Z])/g, '$1 $2').replace(/[^A-Za-z0-9]+/g, ' ');
  return /\b(devices?|registration tokens?|recipients?)\b/i.test(words);
}

/**
 * A `google.rpc.ErrorInfo`'s metadata names a device's quota: Google's quota errors carry the quota's
 * identifiers there (`quota_limit`, `quota_metric`, `quota_id`…).
 */
function namesADeviceQuota(metadata: unknown): boolean {
  if (typeof metadata !== 'object' || metadata === null) return false;
  return Object.entries(metadata).some(
    ([key, value]) => /^quota/i.test(key) && typeof value === 'string' && identifierNamesADevice(value),
  );
}

export const FCM_ERROR_TYPE = 'type.googleapis.com/google.firebase.fcm.v1.FcmError';
export const QUOTA_FAILURE_TYPE = 'type.googleapis.com/google.rpc.QuotaFailure';
export const ERROR_INFO_TYPE = 'type.googleapis.com/google.rpc.ErrorInfo';
export const BAD_REQUEST_TYPE = 'type.googleapis.com/google.rpc.BadRequest';

/**
 * A QuotaFailure violation about one device's message rate. FCM's ErrorCode reference names three
 * causes of QUOTA_EXCEEDED (the message rate, a device's message rate, a topic's message rate) and says
 * the QuotaFailure detail tells which; it does not fix the violation's wording, so a violation whose
 * subject or description speaks of a device (or "per device") counts, and so does one whose subject
 * names the message's own device token (`token`, when known). Anything else stays project-wide.
 */
export function isDeviceQuotaViolation(violation: unknown, token?: string): boolean {
  if (typeof violation !== 'object' || violation === null) return false;
  const { subject, description, ...identifiers } = violation as Record<string, unknown>;
  if (token && typeof subject === 'string' && namesToken(subject, token)) return true;
  if ([subject, description].some((text) => typeof text === 'string' && speaksOfADevice(text))) return true;
  // quotaMetric, quotaId, quotaDimensions (or their snake_case spelling): identifiers, not prose.
  return Object.entries(identifiers).some(([key, value]) => /^quota/i.test(key) && namesADeviceIn(value));
}

function namesADeviceIn(value: unknown): boolean {
  if (typeof value === 'string') return identifierNamesADevice(value);
  if (typeof value === 'object' && value !== null)
    return Object.entries(value).some(([key, inner]) => identifierNamesADevice(key) || namesADeviceIn(inner));
  return false;
}

/** `token`, `…/token` or `…:token` (a resource name or a `kind:value` pair), never a mere substring. */
function namesToken(subject: string, token: string): boolean {
  return subject === token || subject.endsWith(`/${token}`) || subject.endsWith(`:${token}`);
}

function findNetworkCode(cause: unknown): string | undefined {
  for (let depth = 0; depth < 4 && typeof cause === 'object' && cause !== null; depth += 1) {
    const code = (cause as { code?: unknown }).code;
    // ECONNRESET, ETIMEDOUT, ERR_TLS_CERT_ALTNAME_INVALID, DEPTH_ZERO_SELF_SIGNED_CERT…
    if (typeof code === 'string' && /^[A-Z][A-Z0-9_]{3,}$/.test(code)) return code;
    cause = (cause as { cause?: unknown }).cause;
  }
  return undefined;
}
