import { describe, expect, it } from 'vitest';
import { scrub } from '../../src/providers/fcm.ts';
import {
  classifyFcmFailure,
  describeFcmError,
  type FcmFailure,
} from '../../src/providers/fcm-classification.ts';
import type { PushOutcome } from '../../src/providers/types.ts';

const NOW = Date.parse('2025-01-01T00:00:00Z');

// Every FCM v1 error code (https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode), the
// canonical statuses FCM answers with, and the failures without an answer.
const table: Array<[string, FcmFailure, PushOutcome]> = [
  [
    '404 UNREGISTERED',
    { httpStatus: 404, status: 'NOT_FOUND', fcmErrorCode: 'UNREGISTERED' },
    { kind: 'invalid-token', reason: 'UNREGISTERED', httpStatus: 404 },
  ],
  [
    '404 NOT_FOUND without detail',
    { httpStatus: 404, status: 'NOT_FOUND' },
    { kind: 'invalid-token', reason: 'NOT_FOUND', httpStatus: 404 },
  ],
  [
    '403 SENDER_ID_MISMATCH',
    { httpStatus: 403, status: 'PERMISSION_DENIED', fcmErrorCode: 'SENDER_ID_MISMATCH' },
    { kind: 'invalid-token', reason: 'SENDER_ID_MISMATCH', httpStatus: 403 },
  ],
  [
    '400 INVALID_ARGUMENT (payload)',
    {
      httpStatus: 400,
      status: 'INVALID_ARGUMENT',
      fcmErrorCode: 'INVALID_ARGUMENT',
      message: 'Message is too big',
    },
    { kind: 'rejected', reason: 'INVALID_ARGUMENT: Message is too big', httpStatus: 400 },
  ],
  [
    '400 INVALID_ARGUMENT (malformed token)',
    {
      httpStatus: 400,
      status: 'INVALID_ARGUMENT',
      fcmErrorCode: 'INVALID_ARGUMENT',
      message: 'The registration token is not a valid FCM registration token',
    },
    { kind: 'invalid-token', reason: 'INVALID_ARGUMENT: invalid registration token', httpStatus: 400 },
  ],
  [
    '429 QUOTA_EXCEEDED with Retry-After',
    { httpStatus: 429, status: 'RESOURCE_EXHAUSTED', fcmErrorCode: 'QUOTA_EXCEEDED', retryAfter: '7' },
    {
      kind: 'retry',
      reason: 'QUOTA_EXCEEDED',
      throttled: true,
      scope: 'fleet',
      httpStatus: 429,
      retryAfterMs: 7000,
    },
  ],
  [
    '429 RESOURCE_EXHAUSTED with an HTTP-date Retry-After',
    { httpStatus: 429, status: 'RESOURCE_EXHAUSTED', retryAfter: new Date(NOW + 30_000).toUTCString() },
    {
      kind: 'retry',
      reason: 'RESOURCE_EXHAUSTED',
      throttled: true,
      scope: 'fleet',
      httpStatus: 429,
      retryAfterMs: 30_000,
    },
  ],
  [
    '429 QUOTA_EXCEEDED for one device (its QuotaFailure says so): that device only',
    { httpStatus: 429, status: 'RESOURCE_EXHAUSTED', fcmErrorCode: 'QUOTA_EXCEEDED', quotaScope: 'device' },
    {
      kind: 'retry',
      reason: 'QUOTA_EXCEEDED: device message rate',
      throttled: true,
      scope: 'device',
      httpStatus: 429,
    },
  ],
  [
    "429 RESOURCE_EXHAUSTED with an absurd Retry-After (clamped to a timer's limit)",
    { httpStatus: 429, status: 'RESOURCE_EXHAUSTED', retryAfter: 'Fri, 31 Dec 9999 23:59:59 GMT' },
    {
      kind: 'retry',
      reason: 'RESOURCE_EXHAUSTED',
      throttled: true,
      scope: 'fleet',
      httpStatus: 429,
      retryAfterMs: 2_147_483_647,
    },
  ],
  [
    // FCM: "use exponential backoff with a minimum initial delay of 1 minute to retry rejected messages".
    '429 without Retry-After: retried after a minute at the earliest',
    { httpStatus: 429, status: 'RESOURCE_EXHAUSTED', fcmErrorCode: 'QUOTA_EXCEEDED' },
    {
      kind: 'retry',
      reason: 'QUOTA_EXCEEDED',
      throttled: true,
      scope: 'fleet',
      httpStatus: 429,
      backoffBaseMs: 60_000,
    },
  ],
  [
    "429 for one device without Retry-After: the device's pacing decides, no minute",
    { httpStatus: 429, status: 'RESOURCE_EXHAUSTED', fcmErrorCode: 'QUOTA_EXCEEDED', quotaScope: 'device' },
    {
      kind: 'retry',
      reason: 'QUOTA_EXCEEDED: device message rate',
      throttled: true,
      scope: 'device',
      httpStatus: 429,
    },
  ],
  [
    '400 INVALID_ARGUMENT whose BadRequest names message.token',
    {
      httpStatus: 400,
      status: 'INVALID_ARGUMENT',
      fcmErrorCode: 'INVALID_ARGUMENT',
      message: "Invalid value at 'message.token'",
      invalidFields: ['message.token'],
    },
    { kind: 'invalid-token', reason: 'INVALID_ARGUMENT: invalid registration token', httpStatus: 400 },
  ],
  [
    '400 INVALID_ARGUMENT whose BadRequest names another field, however the message reads',
    {
      httpStatus: 400,
      status: 'INVALID_ARGUMENT',
      fcmErrorCode: 'INVALID_ARGUMENT',
      message: 'Message to this registration token is too big',
      invalidFields: ['message.data'],
    },
    {
      kind: 'rejected',
      reason: 'INVALID_ARGUMENT: Message to this registration token is too big',
      httpStatus: 400,
    },
  ],
  [
    '503 UNAVAILABLE with Retry-After',
    { httpStatus: 503, status: 'UNAVAILABLE', fcmErrorCode: 'UNAVAILABLE', retryAfter: '3' },
    { kind: 'retry', reason: 'UNAVAILABLE', throttled: false, httpStatus: 503, retryAfterMs: 3000 },
  ],
  [
    '500 INTERNAL',
    { httpStatus: 500, status: 'INTERNAL', fcmErrorCode: 'INTERNAL' },
    { kind: 'retry', reason: 'INTERNAL', throttled: false, httpStatus: 500 },
  ],
  [
    'UNSPECIFIED_ERROR',
    { httpStatus: 500, fcmErrorCode: 'UNSPECIFIED_ERROR' },
    { kind: 'retry', reason: 'UNSPECIFIED_ERROR', throttled: false, httpStatus: 500 },
  ],
  [
    '401 THIRD_PARTY_AUTH_ERROR',
    {
      httpStatus: 401,
      status: 'UNAUTHENTICATED',
      fcmErrorCode: 'THIRD_PARTY_AUTH_ERROR',
      message: 'APNs auth key missing',
    },
    { kind: 'rejected', reason: 'THIRD_PARTY_AUTH_ERROR: APNs auth key missing', httpStatus: 401 },
  ],
  [
    'APNS_AUTH_ERROR',
    { httpStatus: 401, fcmErrorCode: 'APNS_AUTH_ERROR' },
    { kind: 'rejected', reason: 'APNS_AUTH_ERROR', httpStatus: 401 },
  ],
  [
    '401 UNAUTHENTICATED (our OAuth token)',
    { httpStatus: 401, status: 'UNAUTHENTICATED' },
    { kind: 'retry', reason: 'UNAUTHENTICATED', throttled: false, httpStatus: 401 },
  ],
  [
    '403 PERMISSION_DENIED',
    { httpStatus: 403, status: 'PERMISSION_DENIED' },
    { kind: 'rejected', reason: 'PERMISSION_DENIED', httpStatus: 403 },
  ],
  [
    'non-JSON 502',
    { httpStatus: 502 },
    { kind: 'retry', reason: 'HTTP 502', throttled: false, httpStatus: 502 },
  ],
  [
    'non-JSON 429',
    { httpStatus: 429, retryAfter: '2' },
    {
      kind: 'retry',
      reason: 'HTTP 429',
      throttled: true,
      scope: 'fleet',
      httpStatus: 429,
      retryAfterMs: 2000,
    },
  ],
  [
    'non-JSON 404 (a proxy, not FCM)',
    { httpStatus: 404 },
    { kind: 'retry', reason: 'HTTP 404', throttled: false, httpStatus: 404 },
  ],
  ['non-JSON 400', { httpStatus: 400 }, { kind: 'rejected', reason: 'HTTP 400', httpStatus: 400 }],
  [
    'unknown code on a 4xx',
    { httpStatus: 409, status: 'ALREADY_EXISTS' },
    { kind: 'rejected', reason: 'ALREADY_EXISTS', httpStatus: 409 },
  ],
  [
    'unknown code on a 5xx',
    { httpStatus: 504, status: 'SOMETHING_NEW' },
    { kind: 'retry', reason: 'SOMETHING_NEW', throttled: false, httpStatus: 504 },
  ],
  [
    'timeout',
    { clientCode: 'app/network-timeout', networkCode: 'ETIMEDOUT' },
    { kind: 'retry', reason: 'timeout', throttled: false },
  ],
  [
    'connection reset',
    { clientCode: 'app/network-error', networkCode: 'ECONNRESET' },
    { kind: 'retry', reason: 'network: ECONNRESET', throttled: false },
  ],
  [
    'connection refused',
    { clientCode: 'app/network-error', networkCode: 'ECONNREFUSED' },
    { kind: 'retry', reason: 'network: ECONNREFUSED', throttled: false },
  ],
  [
    'TLS trust failure',
    { clientCode: 'app/network-error', networkCode: 'DEPTH_ZERO_SELF_SIGNED_CERT' },
    { kind: 'retry', reason: 'network: DEPTH_ZERO_SELF_SIGNED_CERT', throttled: false },
  ],
  [
    'no access token',
    { clientCode: 'app/invalid-credential' },
    { kind: 'retry', reason: 'credential: could not get an access token', throttled: false },
  ],
  [
    "no access token, with firebase-admin's words for why",
    {
      clientCode: 'app/invalid-credential',
      message:
        'Credential implementation provided to initializeApp() via the "credential" property failed to fetch a valid Google OAuth2 access token with the following error: "invalid_grant: Invalid JWT Signature."',
    },
    {
      kind: 'retry',
      reason: 'credential: could not get an access token: "invalid_grant: Invalid JWT Signature."',
      throttled: false,
    },
  ],
  [
    'refused by firebase-admin before sending',
    { clientCode: 'messaging/invalid-payload', message: 'data must only contain string values' },
    { kind: 'rejected', reason: 'messaging/invalid-payload: data must only contain string values' },
  ],
  ['anything else', {}, { kind: 'retry', reason: 'unknown: error', throttled: false }],
];

describe('FCM classification', () => {
  it.each(table)('%s', (_name, failure, expected) => {
    expect(classifyFcmFailure(failure, NOW)).toEqual(expected);
  });

  it('reads the server code, status, message and Retry-After off a firebase-admin error', () => {
    // The shape firebase-admin 14 gives `SendResponse.error` (FirebaseMessagingError.httpResponse).
    const error = Object.assign(new Error('Quota exceeded'), {
      code: 'messaging/message-rate-exceeded',
      httpResponse: {
        status: 429,
        headers: { 'retry-after': '5', 'content-type': 'application/json' },
        data: {
          error: {
            code: 429,
            message: 'Quota exceeded',
            status: 'RESOURCE_EXHAUSTED',
            details: [
              { '@type': 'type.googleapis.com/google.rpc.QuotaFailure' },
              { '@type': 'type.googleapis.com/google.firebase.fcm.v1.FcmError', errorCode: 'QUOTA_EXCEEDED' },
            ],
          },
        },
      },
    });
    expect(describeFcmError(error)).toEqual({
      clientCode: 'messaging/message-rate-exceeded',
      httpStatus: 429,
      retryAfter: '5',
      status: 'RESOURCE_EXHAUSTED',
      fcmErrorCode: 'QUOTA_EXCEEDED',
      message: 'Quota exceeded',
    });
  });

  it('keeps no piece of a device token an answer quotes, even where the reason is cut', () => {
    const token = `cT0k3n:APA91b${'Hx_q7Zk2'.repeat(18)}`;
    const error = Object.assign(new Error('Request contains an invalid argument.'), {
      code: 'messaging/invalid-argument',
      httpResponse: {
        status: 400,
        headers: {},
        data: {
          error: {
            code: 400,
            // The token straddles the 160 characters a reason keeps.
            message: `Request contains an invalid argument for the message addressed to ${token} (it is not one)`,
            status: 'INVALID_ARGUMENT',
          },
        },
      },
    });
    const outcome = scrub(classifyFcmFailure(describeFcmError(error, token), NOW), token);
    expect(outcome).toMatchObject({ kind: 'rejected' });
    const reason = outcome.kind === 'rejected' ? outcome.reason : '';
    expect(reason).toContain('addressed to <token>');
    for (let i = 0; i + 16 <= token.length; i++) expect(reason).not.toContain(token.slice(i, i + 16));
  });

  it('reads a device message rate off the QuotaFailure detail; the project quota and overload stay project-wide', () => {
    const answer = (details: unknown[]) =>
      Object.assign(new Error('Quota exceeded'), {
        code: 'messaging/message-rate-exceeded',
        httpResponse: {
          status: 429,
          headers: {},
          data: { error: { code: 429, message: 'Quota exceeded', status: 'RESOURCE_EXHAUSTED', details } },
        },
      });
    const fcmError = {
      '@type': 'type.googleapis.com/google.firebase.fcm.v1.FcmError',
      errorCode: 'QUOTA_EXCEEDED',
    };
    const quota = (violation: Record<string, string>) => ({
      '@type': 'type.googleapis.com/google.rpc.QuotaFailure',
      violations: [violation],
    });
    const device = describeFcmError(
      answer([fcmError, quota({ subject: 'device', description: 'Device message rate exceeded.' })]),
    );
    expect(device.quotaScope).toBe('device');
    expect(classifyFcmFailure(device, NOW)).toMatchObject({ throttled: true, scope: 'device' });
    expect(
      describeFcmError(answer([fcmError, quota({ subject: 'message.token', description: 'per device' })]))
        .quotaScope,
    ).toBe('device');
    // A violation whose subject is the message's own device token names that device, however worded;
    // a mere substring of the subject does not.
    const token = 'cT0k3n:APA91bHx_q';
    const named = (subject: string) =>
      describeFcmError(answer([fcmError, quota({ subject, description: 'Rate exceeded.' })]), token)
        .quotaScope;
    expect(named(token)).toBe('device');
    expect(named(`projects/demo/registrations/${token}`)).toBe('device');
    expect(named(`registration_token:${token}`)).toBe('device');
    expect(named(`${token}-other`)).toBeUndefined();
    expect(named('project_number:123')).toBeUndefined();
    expect(
      describeFcmError(answer([fcmError, quota({ subject: token, description: 'Rate exceeded.' })]))
        .quotaScope,
    ).toBeUndefined();
    // The project's per-minute quota, as Google's quota system words it: project-wide.
    const project = describeFcmError(
      answer([
        fcmError,
        quota({ subject: 'project_number:123', description: 'Send requests per minute per project' }),
        {
          '@type': 'type.googleapis.com/google.rpc.ErrorInfo',
          reason: 'RATE_LIMIT_EXCEEDED',
          metadata: { quota_limit: 'SendsPerMinutePerProject' },
        },
      ]),
    );
    expect(project.quotaScope).toBeUndefined();
    expect(classifyFcmFailure(project, NOW)).toMatchObject({ throttled: true, scope: 'fleet' });
    // A "device" in an unrelated detail proves nothing.
    const elsewhere = describeFcmError(
      answer([fcmError, { '@type': 'type.googleapis.com/google.rpc.Help', description: 'device' }]),
    );
    expect(elsewhere.quotaScope).toBeUndefined();
    expect(
      describeFcmError(answer([fcmError, quota({ subject: 'devices-ish' })])).quotaScope,
    ).toBeUndefined();
  });

  it("reads a device's quota off the identifiers Google's quota errors carry: QuotaFailure's quota metric and ErrorInfo's metadata", () => {
    const answer = (details: unknown[]) =>
      describeFcmError(
        Object.assign(new Error('Quota exceeded'), {
          code: 'messaging/message-rate-exceeded',
          httpResponse: {
            status: 429,
            headers: {},
            data: { error: { code: 429, message: 'Quota exceeded', status: 'RESOURCE_EXHAUSTED', details } },
          },
        }),
      ).quotaScope;
    const quota = (violation: Record<string, unknown>) => ({
      '@type': 'type.googleapis.com/google.rpc.QuotaFailure',
      violations: [{ subject: 'project_number:123', description: 'Rate exceeded.', ...violation }],
    });
    const info = (metadata: Record<string, string>) => ({
      '@type': 'type.googleapis.com/google.rpc.ErrorInfo',
      reason: 'RATE_LIMIT_EXCEEDED',
      domain: 'googleapis.com',
      metadata: { service: 'fcm.googleapis.com', consumer: 'projects/123', ...metadata },
    });
    expect(answer([quota({ quota_metric: 'fcm.googleapis.com/device_message_rate' })])).toBe('device');
    expect(answer([quota({ quotaMetric: 'fcm.googleapis.com/device_message_rate' })])).toBe('device');
    expect(answer([quota({ quotaId: 'MessagesPerMinutePerDevice' })])).toBe('device');
    expect(answer([quota({ quotaDimensions: { device: 'abc' } })])).toBe('device');
    expect(answer([info({ quota_limit: 'DeviceMessagesPerMinute' })])).toBe('device');
    expect(answer([info({ quota_metric: 'fcm.googleapis.com/devices_messages' })])).toBe('device');
    expect(answer([quota({ quotaId: 'MessagesPerMinutePerRegistrationToken' })])).toBe('device');
    expect(answer([info({ quota_limit: 'messages_per_recipient' })])).toBe('device');
    // The project's quota, in the same places: the fleet's.
    expect(answer([quota({ quota_metric: 'fcm.googleapis.com/fcm_send_requests' })])).toBeUndefined();
    expect(answer([quota({ quotaId: 'SendRequestsPerMinutePerProject' })])).toBeUndefined();
    expect(
      answer([
        info({ quota_limit: 'SendRequestsPerMinutePerProject', quota_metric: 'fcm.googleapis.com/sends' }),
      ]),
    ).toBeUndefined();
    // Only quota identifiers count: a consumer named after devices is no device quota.
    expect(answer([info({ consumer: 'projects/device-lab' })])).toBeUndefined();
  });

  it('reads the fields a BadRequest detail names', () => {
    const failure = describeFcmError(
      Object.assign(new Error("Invalid value at 'message.token'"), {
        code: 'messaging/invalid-argument',
        httpResponse: {
          status: 400,
          headers: {},
          data: {
            error: {
              code: 400,
              message: "Invalid value at 'message.token'",
              status: 'INVALID_ARGUMENT',
              details: [
                {
                  '@type': 'type.googleapis.com/google.firebase.fcm.v1.FcmError',
                  errorCode: 'INVALID_ARGUMENT',
                },
                {
                  '@type': 'type.googleapis.com/google.rpc.BadRequest',
                  fieldViolations: [{ field: 'message.token', description: 'Invalid registration token' }],
                },
              ],
            },
          },
        },
      }),
    );
    expect(failure.invalidFields).toEqual(['message.token']);
    expect(classifyFcmFailure(failure, NOW)).toMatchObject({ kind: 'invalid-token' });
  });

  it("reads a device message rate off the error's message or the legacy device-rate code", () => {
    const answer = (message: string, errorCode = 'QUOTA_EXCEEDED') =>
      describeFcmError(
        Object.assign(new Error(message), {
          code: 'messaging/message-rate-exceeded',
          httpResponse: {
            status: 429,
            headers: {},
            data: {
              error: {
                code: 429,
                message,
                status: 'RESOURCE_EXHAUSTED',
                details: [{ '@type': 'type.googleapis.com/google.firebase.fcm.v1.FcmError', errorCode }],
              },
            },
          },
        }),
      );
    // FCM's ErrorCode reference names this cause "Device message rate exceeded".
    const device = answer('Device message rate exceeded.');
    expect(device.quotaScope).toBe('device');
    expect(classifyFcmFailure(device, NOW)).toMatchObject({
      kind: 'retry',
      reason: 'QUOTA_EXCEEDED: device message rate',
      throttled: true,
      scope: 'device',
    });
    expect(answer('Too many messages sent to this device.').quotaScope).toBe('device');
    // What FCM's API calls a device: its registration token, a message's recipient.
    expect(answer('Message rate exceeded for this registration token.').quotaScope).toBe('device');
    expect(answer('Too many messages to one recipient.').quotaScope).toBe('device');
    const legacy = answer('Rate exceeded.', 'DEVICE_MESSAGE_RATE_EXCEEDED');
    expect(classifyFcmFailure(legacy, NOW)).toMatchObject({
      kind: 'retry',
      throttled: true,
      scope: 'device',
    });
    // The project's quota, as Google's quota system words it, and overload: the fleet's.
    for (const message of [
      "Quota exceeded for quota metric 'Send requests' and limit 'Send requests per minute' of service 'fcm.googleapis.com' for consumer 'project_number:123'.",
      'Message rate exceeded.',
      'Topic message rate exceeded.',
      'The service is currently overloaded.',
      'Resource has been exhausted (e.g. check quota).',
    ]) {
      const failure = answer(message);
      expect(failure.quotaScope, message).toBeUndefined();
      expect(classifyFcmFailure(failure, NOW), message).toMatchObject({ throttled: true, scope: 'fleet' });
    }
  });

  it('finds the socket error code under a network failure', () => {
    const error = Object.assign(new Error('Error while making request: socket hang up'), {
      code: 'app/network-error',
      cause: Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }),
    });
    expect(describeFcmError(error)).toMatchObject({
      clientCode: 'app/network-error',
      networkCode: 'ECONNRESET',
    });
  });

  it('survives values that are not errors', () => {
    expect(classifyFcmFailure(describeFcmError(undefined)).kind).toBe('retry');
    expect(classifyFcmFailure(describeFcmError('boom')).kind).toBe('retry');
  });
});
