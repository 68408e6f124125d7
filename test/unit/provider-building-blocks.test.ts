import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { EVENT_ID_DATA_KEY } from '../../src/events/payload.ts';
import { ConcurrencyLimit, mapBounded } from '../../src/providers/concurrency.ts';
import { isHttp2Preface } from '../../src/providers/endpoint.ts';
import {
  createProviders,
  ProviderConfigError,
  parseEndpoint,
  toApnsNotification,
  toFcmMessage,
  UnconfiguredProvider,
} from '../../src/providers/index.ts';
import { parseRetryAfterMs } from '../../src/providers/retry-after.ts';
import { providersOptions } from '../../src/settings-options.ts';
import { MAX_TIMER_MS, timerDelayMs } from '../../src/timer-delay.ts';
import { apnsFromSettings, fcmFromSettings, pushRequest, tempFiles } from '../helpers/provider-fixtures.ts';

describe('event → push mapping', () => {
  // The contract refuses these two data keys; an event built in code, past the contract, still cannot
  // forge the event id or replace APNs' dictionary.
  const contractual = pushRequest({ data: { a: '1' }, priority: 'high', ttlSeconds: 0, collapseKey: 'k' });
  const full = {
    ...contractual.event,
    data: { a: '1', [EVENT_ID_DATA_KEY]: 'forged', aps: 'not an aps' },
  };

  it('FCM: the event id always wins over a data key of the same name; TTL 0 stays 0', () => {
    expect(toFcmMessage(full)).toEqual({
      token: full.token,
      notification: { title: 'Hello', body: 'World' },
      data: { a: '1', aps: 'not an aps', [EVENT_ID_DATA_KEY]: full.id },
      android: { priority: 'high', ttl: 0, collapseKey: 'k' },
    });
  });

  it('APNs: aps is ours, TTL 0 means expiration 0 ("now or never"), a TTL is counted from now', () => {
    const note = toApnsNotification(full, 'dev.app', 1_700_000_000_500);
    expect(note.rawPayload).toEqual({
      a: '1',
      [EVENT_ID_DATA_KEY]: full.id,
      aps: { alert: { title: 'Hello', body: 'World' } },
    });
    expect([note.priority, note.expiry, note.collapseId, note.topic, note.pushType]).toEqual([
      10,
      0,
      'k',
      'dev.app',
      'alert',
    ]);
    const later = toApnsNotification(pushRequest({ ttlSeconds: 60 }).event, 'dev.app', 1_700_000_000_500);
    expect(later.expiry).toBe(1_700_000_060);
    expect(later.priority).toBe(5);
    expect(later.id).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('counts a TTL from when the event was published, however late the push: what is left of it, for both', () => {
    const { event } = pushRequest({ ttlSeconds: 60 });
    const now = 1_700_000_000_500;
    // Published 45 s ago: 15 s are left.
    const expiresAt = now - 45_000 + 60_000;
    expect(toFcmMessage(event, expiresAt, now).android?.ttl).toBe(15_000);
    expect(toApnsNotification(event, 'dev.app', now, expiresAt).expiry).toBe(Math.floor(expiresAt / 1000));
    // Past it (sent a moment after the check): nothing left, never a negative TTL.
    expect(toFcmMessage(event, now - 1, now).android?.ttl).toBe(0);
  });
});

describe('Retry-After', () => {
  it.each([
    ['7', 7000],
    [' 0 ', 0],
    ['1.5', 1500],
    [['3', '9'], 3000],
    ['Wed, 01 Jan 2025 00:00:30 GMT', 30_000],
    ['Tue, 31 Dec 2024 23:00:00 GMT', 0],
    ['soon', undefined],
    ['', undefined],
    [undefined, undefined],
    ['-5', undefined],
    ['-0.5', undefined],
    ['0.0004', 0],
    ['1e3', undefined],
    ['12abc', undefined],
    ['NaN', undefined],
    ['Infinity', undefined],
    [-3, undefined],
    [Number.NaN, undefined],
    [2.25, 2250],
  ])('%j → %j ms', (value, expected) => {
    expect(parseRetryAfterMs(value, Date.parse('2025-01-01T00:00:00Z'))).toBe(expected);
  });

  it.each([
    ['99999999', MAX_TIMER_MS],
    ['9'.repeat(400), MAX_TIMER_MS],
    ['Fri, 31 Dec 9999 23:59:59 GMT', MAX_TIMER_MS],
    [1e15, MAX_TIMER_MS],
    [Number.POSITIVE_INFINITY, undefined],
  ])('%j is clamped to what a Node timer can wait: %j ms', (value, expected) => {
    expect(parseRetryAfterMs(value, Date.parse('2025-01-01T00:00:00Z'))).toBe(expected);
  });

  it('reads each of the three HTTP-date forms as GMT, whatever the time zone of the machine', () => {
    const now = Date.parse('1994-11-06T08:49:00Z');
    const zone = process.env.TZ;
    process.env.TZ = 'America/New_York';
    try {
      for (const date of [
        'Sun, 06 Nov 1994 08:49:37 GMT',
        'Sunday, 06-Nov-94 08:49:37 GMT',
        'Sun Nov  6 08:49:37 1994',
      ]) {
        expect(parseRetryAfterMs(date, now), date).toBe(37_000);
      }
    } finally {
      if (zone === undefined) delete process.env.TZ;
      else process.env.TZ = zone;
    }
  });

  it("clamps to the caller's own limit, and never below 0", () => {
    const now = Date.parse('2025-01-01T00:00:00Z');
    expect(parseRetryAfterMs('120', now, 60_000)).toBe(60_000);
    expect(parseRetryAfterMs('Wed, 01 Jan 2025 01:00:00 GMT', now, 60_000)).toBe(60_000);
    expect(parseRetryAfterMs('30', now, 60_000)).toBe(30_000);
    expect(parseRetryAfterMs('Tue, 31 Dec 2024 23:00:00 GMT', now, 60_000)).toBe(0);
    expect(parseRetryAfterMs('30', now, -5)).toBe(0);
  });

  it('timerDelayMs never hands setTimeout more than 2^31 - 1 ms, nor a negative or NaN delay', () => {
    expect(timerDelayMs(1e15)).toBe(MAX_TIMER_MS);
    expect(timerDelayMs(Number.POSITIVE_INFINITY)).toBe(MAX_TIMER_MS);
    expect(timerDelayMs(-1)).toBe(0);
    expect(timerDelayMs(Number.NaN)).toBe(0);
    expect(timerDelayMs(1500.5)).toBe(1500.5);
  });
});

describe('ConcurrencyLimit', () => {
  it('never runs more than its limit, keeps the order of results, and lets every task finish', async () => {
    const limit = new ConcurrencyLimit(3);
    let running = 0;
    let peak = 0;
    const results = await mapBounded(
      Array.from({ length: 40 }, (_, i) => i),
      limit,
      async (n) => {
        running += 1;
        peak = Math.max(peak, running);
        await new Promise((resolve) => setTimeout(resolve, (n * 7) % 5));
        running -= 1;
        return n * 2;
      },
    );
    expect(results).toEqual(Array.from({ length: 40 }, (_, i) => i * 2));
    expect(peak).toBe(3);
    expect(limit.inFlight).toBe(0);
  });

  it('frees the slot of a task that throws', async () => {
    const limit = new ConcurrencyLimit(1);
    await expect(limit.run(async () => Promise.reject(new Error('x')))).rejects.toThrow('x');
    await expect(limit.run(async () => 'next')).resolves.toBe('next');
  });

  it('takes a new bound: a higher one starts waiting tasks at once, a lower one starts none until under it', async () => {
    const limit = new ConcurrencyLimit(4);
    let running = 0;
    const started: number[] = [];
    const finish: Array<() => void> = [];
    const tasks = Array.from({ length: 8 }, (_, i) =>
      limit.run(async () => {
        running += 1;
        started.push(i);
        await new Promise<void>((resolve) => finish.push(resolve));
        running -= 1;
      }),
    );
    await Promise.resolve();
    expect(running).toBe(4);
    limit.resize(1);
    for (const done of finish.splice(0, 3)) done();
    await new Promise((resolve) => setImmediate(resolve));
    expect(running).toBe(1); // three finished, none started: one still runs, the bound
    finish.splice(0, 1)[0]?.();
    await new Promise((resolve) => setImmediate(resolve));
    expect(running).toBe(1);
    expect(started).toEqual([0, 1, 2, 3, 4]);
    limit.resize(3);
    await new Promise((resolve) => setImmediate(resolve));
    expect(started).toEqual([0, 1, 2, 3, 4, 5, 6]);
    while (finish.length > 0) {
      for (const done of finish.splice(0)) done();
      await new Promise((resolve) => setImmediate(resolve));
    }
    await Promise.all(tasks);
    expect(limit.inFlight).toBe(0);
    expect(() => limit.resize(0)).toThrow(RangeError);
  });

  it('bounds concurrent callers together', async () => {
    const limit = new ConcurrencyLimit(2);
    let running = 0;
    let peak = 0;
    const task = async () => {
      running += 1;
      peak = Math.max(peak, running);
      await new Promise((resolve) => setTimeout(resolve, 2));
      running -= 1;
    };
    await Promise.all([mapBounded([1, 2, 3], limit, task), mapBounded([4, 5, 6], limit, task)]);
    expect(peak).toBe(2);
  });
});

describe('endpoint override', () => {
  it('parses https://host:port, IPv4, IPv6 and the default port', () => {
    expect(parseEndpoint('fcm', 'https://fcm-sim:8443', 'FCM_ENDPOINT')).toEqual({
      scheme: 'https',
      host: 'fcm-sim',
      port: 8443,
      servername: 'fcm-sim',
    });
    expect(parseEndpoint('fcm', 'https://127.0.0.1:9', 'FCM_ENDPOINT')).toEqual({
      scheme: 'https',
      host: '127.0.0.1',
      port: 9,
      servername: undefined,
    });
    expect(parseEndpoint('apns', 'https://[::1]:8444/', 'APNS_ENDPOINT')).toEqual({
      scheme: 'https',
      host: '::1',
      port: 8444,
      servername: undefined,
    });
    expect(parseEndpoint('apns', 'https://example.test', 'APNS_ENDPOINT').port).toBe(443);
  });

  it('parses a plain-text http://host:port (a TLS-originating sidecar), port 80 by default', () => {
    expect(parseEndpoint('fcm', 'http://127.0.0.1:15001', 'FCM_ENDPOINT')).toEqual({
      scheme: 'http',
      host: '127.0.0.1',
      port: 15001,
      servername: undefined,
    });
    expect(parseEndpoint('apns', 'http://localhost', 'APNS_ENDPOINT').port).toBe(80);
  });

  it('tells an HTTP/2 server preface from an HTTP/1.1 answer in the first bytes of a connection', () => {
    // A SETTINGS frame with two settings (12 bytes), as an HTTP/2 server sends first.
    const settings = Buffer.from([0, 0, 12, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100, 0, 4, 0, 0, 255, 255]);
    expect(isHttp2Preface(settings)).toBe(true);
    expect(isHttp2Preface(Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]))).toBe(true); // empty SETTINGS
    expect(isHttp2Preface(Buffer.from('HTTP/1.1 400 Bad Request\r\n\r\n'))).toBe(false);
    expect(isHttp2Preface(Buffer.from([0, 0, 0, 4, 1, 0, 0, 0, 0]))).toBe(false); // a SETTINGS ack
    expect(isHttp2Preface(Buffer.from([0, 0, 8, 7, 0, 0, 0, 0, 0]))).toBe(false); // GOAWAY
    expect(isHttp2Preface(Buffer.from([0, 0, 7, 4, 0, 0, 0, 0, 0]))).toBe(false); // not whole settings
    expect(isHttp2Preface(Buffer.from([0, 0, 0, 4]))).toBe(false);
  });

  it.each([
    'ftp://fcm-sim:8443',
    'fcm-sim:8443',
    'http://host:1/v1',
    'https://host:1/v1',
    'https://u:p@host:1',
    'not a url',
  ])('refuses %s', (value) => {
    expect(() => parseEndpoint('fcm', value, 'FCM_ENDPOINT')).toThrow(ProviderConfigError);
  });
});

describe('createProviders from the settings', () => {
  it('leaves APNs unconfigured (every push rejected, saying what to set) when nothing is set', async () => {
    const providers = createProviders(
      providersOptions(loadConfig({ FCM_ENDPOINT: 'https://127.0.0.1:1', FCM_PROJECT_ID: 'p' })),
    );
    try {
      expect(providers.apns).toBeInstanceOf(UnconfiguredProvider);
      const outcomes = await providers.apns.send([pushRequest({ platform: 'apns' })]);
      expect(outcomes).toEqual([{ kind: 'rejected', reason: expect.stringMatching(/APNS_KEY_FILE/) }]);
    } finally {
      await providers.fcm.close();
      await providers.apns.close();
    }
  });

  it('names the missing half of an APNs key', () => {
    const error = (() => {
      try {
        apnsFromSettings({ APNS_KEY_FILE: '/nowhere.p8', APNS_KEY_ID: 'K' });
      } catch (caught) {
        return caught;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(ProviderConfigError);
    expect(error).toMatchObject({ setting: 'APNS_TEAM_ID', retriable: false, platform: 'apns' });
  });

  it('refuses unreadable or non-PEM files, without quoting them', () => {
    const files = tempFiles();
    try {
      expect(() => fcmFromSettings({ FCM_ENDPOINT: 'https://h:1', FCM_CA_FILE: '/no/such.pem' })).toThrow(
        /FCM_CA_FILE cannot be read/,
      );
      const junk = files.write('junk.pem', 'secret-looking junk');
      let message = '';
      try {
        apnsFromSettings({ APNS_ENDPOINT: 'https://h:1', APNS_CA_FILE: junk });
      } catch (error) {
        message = (error as Error).message;
      }
      expect(message).toMatch(/APNS_CA_FILE is not a PEM file/);
      expect(message).not.toContain('secret-looking');
      expect(() => apnsFromSettings({ APNS_KEY_FILE: junk, APNS_KEY_ID: 'K', APNS_TEAM_ID: 'T' })).toThrow(
        ProviderConfigError,
      );
      expect(() => apnsFromSettings({ APNS_ENDPOINT: 'https://h:1', APNS_PRODUCTION: 'maybe' })).toThrow(
        /APNS_PRODUCTION/,
      );
    } finally {
      files.cleanup();
    }
  });

  it('keeps a fixed access token away from the real FCM', () => {
    expect(() => fcmFromSettings({ FCM_ENDPOINT: 'ftp://x' })).toThrow(ProviderConfigError);
    expect(() =>
      fcmFromSettings({ GOOGLE_APPLICATION_CREDENTIALS: '/no/such/service-account.json' }),
    ).toThrow(/GOOGLE_APPLICATION_CREDENTIALS/);
  });
});
