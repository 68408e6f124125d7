import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { decodeEvent } from '../../src/events/decode.ts';
import { EVENT_LIMITS, eventJsonSchema } from '../../src/events/event.ts';

const valid = {
  id: 'evt-1',
  platform: 'fcm',
  token: 'device-token-abc',
  notification: { title: 'Hello', body: 'World' },
  data: { orderId: '42' },
  tenant: 'acme',
  priority: 'high',
  ttlSeconds: 3600,
  collapseKey: 'orders',
  createdAt: '2026-11-29T08:00:00.000Z',
};
const encode = (value: unknown) => Buffer.from(JSON.stringify(value));

describe('event contract v1', () => {
  it('accepts a full event and applies defaults to a minimal one', () => {
    const full = decodeEvent(encode(valid));
    expect(full).toEqual({ ok: true, event: valid });
    const minimal = decodeEvent(
      encode({ id: 'e', platform: 'apns', token: 't', notification: { title: '', body: 'b' } }),
    );
    expect(minimal.ok && minimal.event.priority).toBe('normal');
  });

  it.each([
    ['empty', null, 'empty'],
    ['not JSON', Buffer.from('{nope'), 'invalid-json'],
    ['invalid UTF-8', Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), 'invalid-utf8'],
    ['too large', Buffer.alloc(EVENT_LIMITS.maxMessageBytes + 1, 0x20), 'too-large'],
    ['unknown schema version', encode({ ...valid, schemaVersion: 2 }), 'unknown-schema-version'],
    ['unknown platform', encode({ ...valid, platform: 'sms' }), 'invalid-event'],
    ['wrong type', encode({ ...valid, ttlSeconds: '60' }), 'invalid-event'],
    ['missing token', encode({ ...valid, token: undefined }), 'invalid-event'],
    ['unknown field', encode({ ...valid, extra: 1 }), 'invalid-event'],
    ['a JSON array', encode([valid]), 'invalid-event'],
    [
      'too many data entries',
      encode({ ...valid, data: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, 'v'])) }),
      'invalid-event',
    ],
  ])('rejects %s with a reason', (_name, value, kind) => {
    const result = decodeEvent(value);
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.kind).toBe(kind);
      expect(result.reason.length).toBeGreaterThan(0);
    }
  });

  it('names the offending field but never echoes the token', () => {
    const result = decodeEvent(encode({ ...valid, token: 'secret-device-token', platform: 7 }));
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.reason).toMatch(/^platform: /);
      expect(result.reason).not.toContain('secret-device-token');
      expect(result.eventId).toBe('evt-1');
    }
  });

  it('matches the committed JSON Schema (npm run schema regenerates it)', () => {
    const committed = JSON.parse(
      readFileSync(new URL('../../schemas/event-v1.schema.json', import.meta.url), 'utf8'),
    );
    expect(committed).toEqual(eventJsonSchema());
  });
});
