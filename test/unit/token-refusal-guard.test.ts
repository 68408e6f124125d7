import { describe, expect, it } from 'vitest';
import { TokenRefusalGuard } from '../../src/providers/token-refusal-guard.ts';
import type { PushOutcome } from '../../src/providers/types.ts';

const delivered: PushOutcome = { kind: 'delivered', messageId: 'm', httpStatus: 200 };
const refused = (reason: string): PushOutcome => ({ kind: 'invalid-token', reason, httpStatus: 400 });

describe('token refusal guard', () => {
  it('passes dead tokens on until a run without deliveries is too long to be them, then retries', () => {
    const guard = new TokenRefusalGuard('APNS_PRODUCTION', 3);
    const kinds = Array.from({ length: 5 }, () => guard.check(refused('BadDeviceToken')).kind);
    expect(kinds).toEqual(['invalid-token', 'invalid-token', 'invalid-token', 'retry', 'retry']);
    expect(guard.check(refused('DeviceTokenNotForTopic'))).toEqual({
      kind: 'retry',
      reason: 'DeviceTokenNotForTopic for over 3 tokens in a row, none delivered: check APNS_PRODUCTION',
      throttled: false,
      httpStatus: 400,
    });
    expect(guard.check(delivered)).toBe(delivered);
    expect(guard.check(refused('BadDeviceToken')).kind).toBe('invalid-token');
  });

  it('leaves unambiguous answers alone, and they do not end a run', () => {
    const guard = new TokenRefusalGuard('FCM_PROJECT_ID', 1);
    expect(guard.check(refused('SENDER_ID_MISMATCH')).kind).toBe('invalid-token');
    // A 410 Unregistered, an FCM UNREGISTERED: the token is dead whatever the configuration.
    for (const reason of ['Unregistered', 'UNREGISTERED'])
      expect(guard.check(refused(reason))).toEqual(refused(reason));
    const retry: PushOutcome = { kind: 'retry', reason: 'INTERNAL', throttled: false };
    expect(guard.check(retry)).toBe(retry);
    expect(guard.check(refused('SENDER_ID_MISMATCH')).kind).toBe('retry');
  });
});
