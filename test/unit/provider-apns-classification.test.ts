import { describe, expect, it } from 'vitest';
import {
  type ApnsFailure,
  classifyApnsFailure,
  describeApnsFailure,
} from '../../src/providers/apns-classification.ts';
import type { PushOutcome } from '../../src/providers/types.ts';

const NOW = Date.parse('2025-01-01T00:00:00Z');
const invalid = (reason: string, httpStatus: number): PushOutcome => ({
  kind: 'invalid-token',
  reason,
  httpStatus,
});
const rejected = (reason: string, httpStatus: number): PushOutcome => ({
  kind: 'rejected',
  reason,
  httpStatus,
});
const retry = (
  reason: string,
  httpStatus: number,
  extra: {
    throttled?: boolean;
    scope?: 'fleet' | 'device' | 'credentials';
    deviceScopeAssumed?: boolean;
    retryAfterMs?: number;
  } = {},
): PushOutcome => ({
  kind: 'retry',
  reason,
  httpStatus,
  throttled: extra.throttled === true,
  ...(extra.scope === undefined ? {} : { scope: extra.scope }),
  ...(extra.deviceScopeAssumed === undefined ? {} : { deviceScopeAssumed: extra.deviceScopeAssumed }),
  ...(extra.retryAfterMs === undefined ? {} : { retryAfterMs: extra.retryAfterMs }),
});

// Every status and reason of Apple's table
// (https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns).
const table: Array<[ApnsFailure, PushOutcome]> = [
  [{ status: 400, reason: 'BadDeviceToken' }, invalid('BadDeviceToken', 400)],
  [{ status: 400, reason: 'DeviceTokenNotForTopic' }, invalid('DeviceTokenNotForTopic', 400)],
  [{ status: 400, reason: 'BadCollapseId' }, rejected('BadCollapseId', 400)],
  [{ status: 400, reason: 'BadExpirationDate' }, rejected('BadExpirationDate', 400)],
  [{ status: 400, reason: 'BadMessageId' }, rejected('BadMessageId', 400)],
  [{ status: 400, reason: 'BadPriority' }, rejected('BadPriority', 400)],
  [{ status: 400, reason: 'BadTopic' }, rejected('BadTopic', 400)],
  [{ status: 400, reason: 'DuplicateHeaders' }, rejected('DuplicateHeaders', 400)],
  [{ status: 400, reason: 'IdleTimeout' }, retry('IdleTimeout', 400)],
  [{ status: 400, reason: 'InvalidPushType' }, rejected('InvalidPushType', 400)],
  [{ status: 400, reason: 'MissingDeviceToken' }, rejected('MissingDeviceToken', 400)],
  [{ status: 400, reason: 'MissingTopic' }, rejected('MissingTopic', 400)],
  [{ status: 400, reason: 'PayloadEmpty' }, rejected('PayloadEmpty', 400)],
  [{ status: 400, reason: 'TopicDisallowed' }, rejected('TopicDisallowed', 400)],
  [{ status: 400, reason: 'SomethingNew' }, rejected('SomethingNew', 400)],
  [{ status: 403, reason: 'BadCertificate' }, rejected('BadCertificate', 403)],
  [{ status: 403, reason: 'BadCertificateEnvironment' }, rejected('BadCertificateEnvironment', 403)],
  [{ status: 403, reason: 'ExpiredProviderToken' }, retry('ExpiredProviderToken', 403)],
  [{ status: 403, reason: 'Forbidden' }, rejected('Forbidden', 403)],
  [{ status: 403, reason: 'InvalidProviderToken' }, rejected('InvalidProviderToken', 403)],
  [{ status: 403, reason: 'MissingProviderToken' }, rejected('MissingProviderToken', 403)],
  [{ status: 403, reason: 'UnrelatedKeyIdInToken' }, rejected('UnrelatedKeyIdInToken', 403)],
  [{ status: 403, reason: 'BadEnvironmentKeyInToken' }, rejected('BadEnvironmentKeyInToken', 403)],
  [{ status: 404, reason: 'BadPath' }, rejected('BadPath', 404)],
  [{ status: 405, reason: 'MethodNotAllowed' }, rejected('MethodNotAllowed', 405)],
  [{ status: 410, reason: 'Unregistered' }, invalid('Unregistered', 410)],
  [{ status: 410, reason: 'ExpiredToken' }, invalid('ExpiredToken', 410)],
  [{ status: 410 }, invalid('HTTP 410', 410)],
  [{ status: 413, reason: 'PayloadTooLarge' }, rejected('PayloadTooLarge', 413)],
  [
    { status: 429, reason: 'TooManyProviderTokenUpdates' },
    // The provider token refreshed too often: a credentials problem, not the send rate.
    retry('TooManyProviderTokenUpdates', 429, { throttled: true, scope: 'credentials' }),
  ],
  // Too many requests to the same device token: that device only.
  [
    { status: 429, reason: 'TooManyRequests' },
    retry('TooManyRequests', 429, { throttled: true, scope: 'device', deviceScopeAssumed: true }),
  ],
  [
    { status: 429, reason: 'TooManyRequests', retryAfter: '9' },
    retry('TooManyRequests', 429, {
      throttled: true,
      scope: 'device',
      deviceScopeAssumed: true,
      retryAfterMs: 9000,
    }),
  ],
  [
    { status: 429, reason: 'TooManyRequests', retryAfter: '99999999' },
    retry('TooManyRequests', 429, {
      throttled: true,
      scope: 'device',
      deviceScopeAssumed: true,
      retryAfterMs: 2_147_483_647,
    }),
  ],
  // A 429 Apple does not document: assumed to be about the sender as a whole.
  [{ status: 429 }, retry('HTTP 429', 429, { throttled: true, scope: 'fleet' })],
  [{ status: 429, reason: 'SomethingNew' }, retry('SomethingNew', 429, { throttled: true, scope: 'fleet' })],
  [{ status: 500, reason: 'InternalServerError' }, retry('InternalServerError', 500)],
  [
    { status: 503, reason: 'ServiceUnavailable', retryAfter: '2' },
    retry('ServiceUnavailable', 503, { retryAfterMs: 2000 }),
  ],
  [{ status: 503, reason: 'Shutdown' }, retry('Shutdown', 503)],
  [{ status: 502 }, retry('HTTP 502', 502)],
  [{ transportError: 'timeout' }, { kind: 'retry', reason: 'network: timeout', throttled: false }],
  [
    { transportError: 'connection closed' },
    { kind: 'retry', reason: 'network: connection closed', throttled: false },
  ],
  [{}, { kind: 'retry', reason: 'network: no answer', throttled: false }],
];

describe('APNs classification', () => {
  it.each(table)('%o', (failure, expected) => {
    expect(classifyApnsFailure(failure, NOW)).toEqual(expected);
  });

  // The shapes of @parse/node-apn 8's `failed` entries (lib/client.js), each carrying the device token.
  it('reads an answer with a reason, and keeps nothing of the token', () => {
    const failed = {
      device: 'secret-token',
      'apns-id': 'x',
      status: 410,
      response: { reason: 'Unregistered', timestamp: 1 },
    };
    const failure = describeApnsFailure(failed, { status: 410, retryAfter: '4' });
    expect(failure).toEqual({ status: 410, reason: 'Unregistered', retryAfter: '4' });
    expect(JSON.stringify(failure)).not.toContain('secret-token');
  });

  it("carries a 410's timestamp (when APNs confirmed the token dead) into the invalid-token outcome", () => {
    const at = Date.parse('2026-11-30T12:00:00Z');
    for (const timestamp of [at, String(at)]) {
      const failure = describeApnsFailure({
        device: 't',
        status: 410,
        response: { reason: 'Unregistered', timestamp },
      });
      expect(failure.timestamp).toBe(at);
      expect(classifyApnsFailure(failure, NOW)).toEqual({
        kind: 'invalid-token',
        reason: 'Unregistered',
        httpStatus: 410,
        invalidSinceMs: at,
      });
    }
    // Not milliseconds of this era (seconds, garbage): not kept.
    for (const timestamp of [at / 1000, 'yesterday', -1, 1e20]) {
      const failure = describeApnsFailure({ status: 410, response: { reason: 'Unregistered', timestamp } });
      expect(failure.timestamp, String(timestamp)).toBeUndefined();
    }
  });

  it('restores the reason node-apn drops on a 500, and reads an expired provider token', () => {
    expect(
      describeApnsFailure({
        device: 't',
        status: 500,
        error: new Error('Error 500, stream ended unexpectedly'),
      }),
    ).toEqual({
      status: 500,
      reason: 'InternalServerError',
    });
    expect(
      describeApnsFailure({ device: 't', status: 403, error: new Error('ExpiredProviderToken') }),
    ).toEqual({
      status: 403,
      reason: 'ExpiredProviderToken',
    });
  });

  it('takes the status the http2 channel saw when node-apn lost it (an answer on a session it is closing)', () => {
    const failed = { device: 't', error: new Error('client session is either closed or destroyed') };
    expect(classifyApnsFailure(describeApnsFailure(failed, { status: 429, retryAfter: '2' }), NOW)).toEqual(
      retry('HTTP 429', 429, { throttled: true, scope: 'fleet', retryAfterMs: 2000 }),
    );
    expect(describeApnsFailure(failed, { status: 500 })).toEqual({
      status: 500,
      reason: 'InternalServerError',
    });
    expect(describeApnsFailure(failed)).toEqual({ transportError: 'connection closed' });
  });

  it('names what went wrong when there was no answer', () => {
    const cases: Array<[string, string]> = [
      ['apn write timeout', 'timeout'],
      ['stream ended unexpectedly with status null and empty body', 'connection closed'],
      ['apn write failed: read ECONNRESET', 'ECONNRESET'],
      ['apn write failed: ERR_HTTP2_STREAM_CANCEL', 'ERR_HTTP2_STREAM_CANCEL'],
      ['apn write failed: Stream closed with error code NGHTTP2_INTERNAL_ERROR', 'NGHTTP2_INTERNAL_ERROR'],
      ['something odd', 'error'],
    ];
    for (const [message, expected] of cases) {
      expect(describeApnsFailure({ device: 't', error: new Error(message) }).transportError).toBe(expected);
    }
  });
});
