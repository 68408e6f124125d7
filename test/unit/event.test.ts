import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { acceptedEvent, decodeEvent } from '../../src/events/decode.ts';
import {
  EVENT_LIMITS,
  eventJsonSchema,
  idempotencyKey,
  notificationEventSchema,
} from '../../src/events/event.ts';
import { payloadBytes } from '../../src/events/payload.ts';
import { toApnsNotification } from '../../src/providers/apns.ts';
import { generateEvents } from '../../src/publish/generate.ts';

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
const APNS_TOKEN = 'a1b2c3d4'.repeat(8);

/** How a reason starts for a change to each field (a refused data key is named quoted and escaped). */
const REASON_BY_FIELD: Record<string, RegExp> = {
  token: /^token: /,
  collapseKey: /^collapseKey: /,
  notification: /^notification\.(title|body): not well-formed Unicode/,
  data: /^data\.(k: not well-formed Unicode|"k\\udfff": key not well-formed Unicode|[\w.]+: reserved by (FCM|APNs)|aqueduct_id: key reserved: every push carries the event id)/,
};

describe('event contract v1', () => {
  it('accepts a full event and applies defaults to a minimal one', () => {
    const full = decodeEvent(encode(valid));
    expect(full).toEqual({ ok: true, event: valid });
    const minimal = decodeEvent(
      encode({ id: 'e', platform: 'apns', token: APNS_TOKEN, notification: { title: '', body: 'b' } }),
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

  it.each([
    ['an APNs token that is not hex', { platform: 'apns', token: `${APNS_TOKEN.slice(0, 62)}zz` }],
    ['an APNs token of odd length', { platform: 'apns', token: `${APNS_TOKEN}a` }],
    ['an APNs token shorter than 64', { platform: 'apns', token: APNS_TOKEN.slice(0, 62) }],
    ['an APNs token longer than 200', { platform: 'apns', token: 'ab'.repeat(101) }],
    ['an APNs token that is an FCM token', { platform: 'apns', token: 'device-token-abc' }],
    ['a token with CR LF', { token: 'aa\r\nbb' }],
    ['a token with NUL', { token: 'aa\u0000bb' }],
    ['a token that is a path', { token: '../../3/device/bbbb' }],
    ['an FCM token with a space', { token: 'abc def' }],
    ['a token above the length bound', { token: 'a'.repeat(EVENT_LIMITS.tokenLength + 1) }],
    ['a collapse key with CR LF', { collapseKey: 'x\r\napns-topic: evil' }],
    ['a collapse key with a control character', { collapseKey: 'x\u0007' }],
    // A lone surrogate (JSON.stringify writes it as a \uXXXX escape: valid UTF-8 and valid JSON) has no
    // UTF-8 form for the provider.
    ['a title with a lone surrogate', { notification: { title: 'Hi \ud83d', body: 'b' } }],
    ['a body with a lone surrogate', { notification: { title: 't', body: '\udc00 there' } }],
    ['a data value with a lone surrogate', { data: { k: 'v\ud800' } }],
    ['a data key with a lone surrogate', { data: { 'k\udfff': 'v' } }],
    // Keys FCM refuses (HTTP v1 Message.data), APNs' own dictionary, and the key the event id travels in.
    ['a data key FCM reserves: from', { data: { from: 'x' } }],
    ['a data key FCM reserves: message_type', { data: { message_type: 'x' } }],
    ['a data key FCM reserves: google…', { data: { 'google.c.a.e': '1' } }],
    ['a data key FCM reserves: gcm…', { data: { gcm_notification: 'x' } }],
    ['the data key APNs reserves: aps', { platform: 'apns', token: APNS_TOKEN, data: { aps: 'x' } }],
    ["the data key of Aqueduct's event id", { data: { aqueduct_id: 'forged' } }],
  ])('dead-letters %s, naming the field', (_name, change) => {
    const text = JSON.stringify({ ...valid, ...change });
    expect(acceptedEvent(JSON.parse(text))).toBeUndefined();
    const result = decodeEvent(Buffer.from(text));
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.kind).toBe('invalid-event');
      // A field without an entry matches nothing: the row must name its reason.
      expect(result.reason).toMatch(REASON_BY_FIELD[Object.keys(change).at(-1) ?? ''] ?? /(?!)/);
      if ('token' in change) expect(result.reason).not.toContain(change.token);
    }
  });

  it('names a data key in a reason as one bounded, escaped line', () => {
    const data = { [`a\r\nb${'x'.repeat(100)}`]: 'v' };
    const result = decodeEvent(encode({ ...valid, data }));
    expect(result.ok).toBe(false);
    if (!result.ok)
      expect(result.reason).toBe(
        `data."a\\r\\nb${'x'.repeat(60)}…": key Too big: expected string to have <=64 characters`,
      );
  });

  it("accepts data keys that only resemble reserved ones, and another platform's reserved keys", () => {
    const data = { fromCity: 'x', message_types: 'x', APS: 'x', my_gcm: 'x', Google: 'x', aqueduct: 'x' };
    expect(decodeEvent(encode({ ...valid, data }))).toEqual({ ok: true, event: { ...valid, data } });
    const fcm = { ...valid, data: { aps: 'x' } };
    expect(decodeEvent(encode(fcm))).toEqual({ ok: true, event: fcm });
    const apns = {
      ...valid,
      platform: 'apns',
      token: APNS_TOKEN,
      data: { from: 'x', gcm: 'y', 'google.a': 'z' },
    };
    expect(decodeEvent(encode(apns))).toEqual({ ok: true, event: apns });
  });

  describe("the providers' 4096-byte payload limit", () => {
    const base = (platform: 'fcm' | 'apns') => ({
      ...valid,
      platform,
      token: platform === 'apns' ? APNS_TOKEN : valid.token,
      notification: { title: 'Hello', body: '' },
    });
    /** An event whose body (é: 2 bytes, never escaped) makes its push payload exactly `bytes`. */
    const sized = (platform: 'fcm' | 'apns', bytes: number) => {
      const rest = bytes - payloadBytes(base(platform));
      const body = 'é'.repeat(Math.floor(rest / 2)) + 'x'.repeat(rest % 2);
      return { ...base(platform), notification: { title: 'Hello', body } };
    };

    it.each(['fcm', 'apns'] as const)(
      '%s: takes a payload of 4096 bytes, refuses 4097 naming the size',
      (platform) => {
        const fits = sized(platform, 4096);
        expect(payloadBytes(fits)).toBe(4096);
        expect(decodeEvent(encode(fits)).ok).toBe(true);
        expect(acceptedEvent(fits)).toBeDefined();
        const over = sized(platform, 4097);
        expect(acceptedEvent(over)).toBeUndefined();
        const result = decodeEvent(encode(over));
        expect(result).toMatchObject({ ok: false, kind: 'invalid-event' });
        if (!result.ok)
          expect(result.reason).toMatch(/^\(event\): .* would be 4097 bytes, the provider's limit is 4096/);
      },
    );

    it('counts APNs as the bytes of the JSON body node-apn sends, escapes included', () => {
      for (const pad of ['é', '"', '\n', '\u0001', '😀', 'a']) {
        const event = { ...base('apns'), notification: { title: pad, body: pad.repeat(300) } };
        const decoded = decodeEvent(encode(event));
        expect(decoded.ok, JSON.stringify(pad)).toBe(true);
        if (!decoded.ok) continue;
        const sent = JSON.stringify(toApnsNotification(decoded.event, 'dev.app').rawPayload);
        expect(Buffer.byteLength(sent)).toBe(payloadBytes(event));
      }
    });
  });

  it('accepts a surrogate pair (one character) in free text', () => {
    expect(decodeEvent(encode({ ...valid, notification: { title: '\ud83d\ude00', body: 'b' } })).ok).toBe(
      true,
    );
  });

  it('accepts APNs tokens of 64 to 200 hex digits in either case, and FCM tokens with : _ -', () => {
    for (const token of [APNS_TOKEN, APNS_TOKEN.toUpperCase(), 'ab'.repeat(100)]) {
      expect(decodeEvent(encode({ ...valid, platform: 'apns', token })).ok, token).toBe(true);
    }
    const fcm = 'dXJ0aGlz_c2hvdWxk-Ym:APA91bHun4MxP5egoKMwt2KZFBaFUH-1RYqx';
    expect(decodeEvent(encode({ ...valid, token: fcm })).ok).toBe(true);
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

  it("lets a JSON Schema validator refuse what the decoder refuses of each platform's rules", () => {
    const validate = new Ajv2020({ strict: false }).compile(eventJsonSchema());
    const apns = { ...valid, platform: 'apns', token: APNS_TOKEN };
    const cases: Array<[string, Record<string, unknown>]> = [
      ['an FCM event', valid],
      ['an APNs event', apns],
      ['an APNs event with an FCM token', { ...apns, token: valid.token }],
      ['an FCM data key from', { ...valid, data: { from: 'x' } }],
      ['an FCM data key gcm…', { ...valid, data: { gcm_x: 'x' } }],
      ['an FCM data key aps', { ...valid, data: { aps: 'x' } }],
      ['an APNs data key aps', { ...apns, data: { aps: 'x' } }],
      ['an APNs data key from', { ...apns, data: { from: 'x' } }],
      ['a data key aqueduct_id', { ...valid, data: { aqueduct_id: 'x' } }],
      // Only parsed JSON holds __proto__ as a key of its own.
      ['a data key __proto__', { ...valid, data: JSON.parse('{"__proto__":"x","a":"b"}') }],
      [
        '33 data entries',
        { ...valid, data: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, 'v'])) },
      ],
      [
        '32 data entries',
        { ...valid, data: Object.fromEntries(Array.from({ length: 32 }, (_, i) => [`k${i}`, 'v'])) },
      ],
    ];
    for (const [name, event] of cases) {
      expect(validate(event), name).toBe(decodeEvent(encode(event)).ok);
    }
  });

  it('refuses a data key __proto__ with a reason rather than losing the entry on the way', () => {
    const decoded = decodeEvent(
      Buffer.from(
        JSON.stringify({ ...valid, data: { a: 'b' } }).replace('"data":{', '"data":{"__proto__":"x",'),
      ),
    );
    expect(decoded).toMatchObject({ ok: false, kind: 'invalid-event' });
    expect(decoded.ok ? '' : decoded.reason).toContain('data.__proto__: not a data key');
  });
});

/**
 * The decoder checks valid events by hand (acceptedEvent) and leaves everything else to the zod schema:
 * the hand check must never accept what the schema refuses, and must build exactly the schema's value.
 */
describe('the hand-written check of a valid event', () => {
  const L = EVENT_LIMITS;
  const strings = (min: number, max: number) =>
    fc.oneof(
      { weight: 6, arbitrary: fc.string({ minLength: min, maxLength: Math.min(max, 40) }) },
      { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 8 }) },
      {
        weight: 2,
        arbitrary: fc.constantFrom(
          '',
          ' ',
          'a b',
          'é',
          '\u{1F600}',
          'x'.repeat(max),
          'x'.repeat(max + 1),
          '\u{1F600}'.repeat(max / 2),
          '\ud800',
          'a\udfffb',
        ),
      },
    );
  const otherJson = fc.oneof(
    fc.constantFrom(null, true, 0, -1, 1.5, '', [], {}, ['x'], { title: 't' }),
    fc.integer(),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
  );
  /** Mostly values of the right kind (at, under and over the limits), sometimes anything at all. */
  const field = <T>(valid: fc.Arbitrary<T>) =>
    fc.oneof({ weight: 12, arbitrary: valid }, { weight: 1, arbitrary: otherJson });
  /** Usually present (undefined leaves the key out of the JSON). */
  const often = <T>(arbitrary: fc.Arbitrary<T>) => fc.option(arbitrary, { nil: undefined, freq: 25 });
  const sometimes = <T>(arbitrary: fc.Arbitrary<T>) => fc.option(arbitrary, { nil: undefined, freq: 2 });
  const rarely = <T>(arbitrary: fc.Arbitrary<T>) =>
    fc.oneof({ weight: 24, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary });
  const dates = fc.oneof(
    fc
      .date({ noInvalidDate: true, min: new Date(0), max: new Date('9999-12-31') })
      .map((d) => d.toISOString()),
    fc.constantFrom(
      '2026-11-29T08:00:00Z',
      '2026-11-29T08:00:00+02:00',
      '2026-11-29T08:00:00.123456-05:30',
      '2026-11-29T08:00:00',
      '2026-11-29 08:00:00Z',
      '2026-02-29T00:00:00Z',
      '2028-02-29T00:00:00Z',
      '2026-13-01T00:00:00Z',
      '2026-11-29',
    ),
  );
  /** Device tokens near the per-platform rules: hex of every length around APNs' bounds, FCM-like ones. */
  const hexDigits = fc.constantFrom(...'0123456789abcdefABCDEF'.split(''));
  const tokens = fc.oneof(
    { weight: 3, arbitrary: fc.string({ unit: hexDigits, minLength: 64, maxLength: 64 }) },
    { weight: 2, arbitrary: fc.string({ unit: hexDigits, minLength: 60, maxLength: 204 }) },
    {
      weight: 1,
      arbitrary: fc.string({
        unit: fc.constantFrom(...'abcXYZ019_-:'.split('')),
        minLength: 1,
        maxLength: 80,
      }),
    },
    {
      weight: 1,
      arbitrary: fc.string({
        unit: fc.constantFrom(...'abcXYZ019_-:.\r\n/ '.split('')),
        minLength: 1,
        maxLength: 80,
      }),
    },
  );
  const data = fc.dictionary(strings(0, L.dataKeyLength), strings(0, L.dataValueLength), {
    maxKeys: L.maxDataEntries + 2,
  });
  const candidate = fc.record({
    schemaVersion: rarely(fc.constantFrom(1, 2, '1', null)),
    id: often(field(fc.oneof(strings(1, L.idLength), fc.uuid()))),
    platform: often(field(fc.constantFrom('fcm', 'apns', 'apns', 'fcm', 'sms', 'FCM'))),
    token: often(
      field(fc.oneof({ weight: 1, arbitrary: strings(1, L.tokenLength) }, { weight: 8, arbitrary: tokens })),
    ),
    notification: often(
      field(
        fc.record({
          title: often(field(strings(0, L.titleLength))),
          body: often(field(strings(0, L.bodyLength))),
          extra: rarely(fc.string()),
        }),
      ),
    ),
    data: sometimes(field(data)),
    tenant: sometimes(field(fc.oneof(strings(1, L.tenantLength), fc.constantFrom('acme', 'a.b-c_d', 'a/b')))),
    priority: sometimes(field(fc.constantFrom('high', 'normal', 'low'))),
    ttlSeconds: sometimes(
      field(fc.oneof(fc.integer({ min: -1, max: L.maxTtlSeconds + 1 }), fc.constantFrom(-0, 0.5, 1e21))),
    ),
    collapseKey: sometimes(
      field(fc.oneof(strings(1, L.collapseKeyLength), fc.constantFrom('orders', 'a\r\nb', 'x\u0000', 'k~!'))),
    ),
    createdAt: sometimes(field(dates)),
    unknown: rarely(fc.string()),
  });
  /** JSON text, sometimes with a `__proto__` key at the top or in `data` (only JSON text can carry one). */
  const texts = fc.tuple(candidate, fc.constantFrom('', '', '', '', 'top', 'data')).map(([value, proto]) => {
    const object = (...members: string[]) => `{${members.filter(Boolean).join(',')}}`;
    const members = (json: unknown) => JSON.stringify(json).slice(1, -1);
    if (proto === 'top') return object('"__proto__":{}', members(value));
    const { data, ...rest } = value;
    if (proto !== 'data' || typeof data !== 'object' || data === null || Array.isArray(data))
      return JSON.stringify(value);
    return object(members(rest), `"data":${object('"__proto__":"x"', members(data))}`);
  });

  it('accepts nothing the schema refuses, and builds the same value (fields, order, defaults)', () => {
    let accepted = 0;
    fc.assert(
      fc.property(texts, (text) => {
        const reference = notificationEventSchema.safeParse(JSON.parse(text));
        const fast = acceptedEvent(JSON.parse(text));
        if (fast !== undefined) {
          accepted++;
          expect(reference.success).toBe(true);
          expect(JSON.stringify(fast)).toBe(JSON.stringify(reference.data));
          expect(fast).toStrictEqual(reference.data);
        }
        const decoded = decodeEvent(Buffer.from(text));
        // One verdict is the decoder's alone: a data key __proto__, which zod's record skips unread.
        const json = JSON.parse(text);
        const protoDataKey =
          typeof json?.data === 'object' && json.data !== null && Object.hasOwn(json.data, '__proto__');
        expect(decoded.ok).toBe(reference.success && !protoDataKey);
        if (decoded.ok && reference.success) expect(decoded.event).toStrictEqual(reference.data);
      }),
      { numRuns: 5000 },
    );
    // The generator makes about 2.3% valid events (about 115 of 5000, standard deviation about 11): the
    // bound is what a generator that stopped producing valid events would break, six deviations down.
    expect(accepted).toBeGreaterThan(50);
  });

  it('takes the hand-written path for valid events, such as the generated ones', () => {
    for (const event of generateEvents({ count: 50, tenants: ['acme'] }))
      expect(acceptedEvent(JSON.parse(JSON.stringify(event)))).toStrictEqual(event);
    expect(acceptedEvent(JSON.parse(JSON.stringify(valid)))).toStrictEqual(valid);
    expect(acceptedEvent({ ...valid, schemaVersion: 1 })).toStrictEqual({ schemaVersion: 1, ...valid });
  });
});

describe('idempotencyKey', () => {
  it('keys an event without a tenant by its id alone, as before tenants were scoped', () => {
    expect(idempotencyKey({ id: 'order-42' })).toBe('order-42');
  });

  it('never gives two different (tenant, id) pairs the same key, whatever ids and tenants the contract allows', () => {
    const tenant = fc.option(fc.stringMatching(/^[A-Za-z0-9._-]{1,64}$/), { nil: undefined });
    const id = fc.stringMatching(/^[\x21-\x7e]{1,128}$/);
    fc.assert(
      fc.property(tenant, id, tenant, id, (t1, i1, t2, i2) => {
        const same = t1 === t2 && i1 === i2;
        const a = idempotencyKey({ id: i1, ...(t1 === undefined ? {} : { tenant: t1 }) });
        const b = idempotencyKey({ id: i2, ...(t2 === undefined ? {} : { tenant: t2 }) });
        expect(a === b).toBe(same);
      }),
    );
  });

  it('tells a tenant-less id that looks like a pair from the pair itself', () => {
    expect(idempotencyKey({ id: 'acme/order-42' })).not.toBe(
      idempotencyKey({ tenant: 'acme', id: 'order-42' }),
    );
    expect(idempotencyKey({ id: 'acme:order-42' })).not.toBe(
      idempotencyKey({ tenant: 'acme', id: 'order-42' }),
    );
  });
});
