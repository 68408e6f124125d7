import { randomUUID, sign } from 'node:crypto';
import http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApnsProvider, parseEndpoint, throwAwaySigningKey } from '../../src/providers/index.ts';
import { type ApnsSimulator, startApnsSimulator } from '../../src/simulators/index.ts';
import { pushRequest } from '../helpers/provider-fixtures.ts';

interface Answer {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: string;
}

/** An ES256 provider token, signed with `keyPem`, issued `ageSeconds` ago. */
function providerToken(keyPem: string, ageSeconds = 0): string {
  const part = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const head = `${part({ alg: 'ES256', kid: 'KEY1234567' })}.${part({ iss: 'TEAM123456', iat: Math.floor(Date.now() / 1000) - ageSeconds })}`;
  const signature = sign('sha256', Buffer.from(head), { key: keyPem, dsaEncoding: 'ieee-p1363' }).toString(
    'base64url',
  );
  return `${head}.${signature}`;
}

/** One raw HTTP/2 request, as any APNs client would send it. */
function request(
  session: http2.ClientHttp2Session,
  headers: http2.OutgoingHttpHeaders,
  body?: string,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':method': 'POST', ...headers });
    let text = '';
    let responseHeaders: http2.IncomingHttpHeaders = {};
    stream.on('response', (h) => {
      responseHeaders = h;
    });
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      text += chunk;
    });
    stream.on('end', () =>
      resolve({ status: Number(responseHeaders[':status']), headers: responseHeaders, body: text }),
    );
    stream.on('error', reject);
    if (!stream.writableEnded) stream.end(body);
  });
}

describe('APNs simulator: the wire protocol', () => {
  const keyPem = throwAwaySigningKey();
  let sim: ApnsSimulator;
  let session: http2.ClientHttp2Session;
  let push: (token: string, headers?: http2.OutgoingHttpHeaders, body?: string) => Promise<Answer>;

  beforeAll(async () => {
    sim = await startApnsSimulator({
      statsPort: 0,
      verifyAuth: true,
      authKeyPem: keyPem,
      keyId: 'KEY1234567',
    });
    session = http2.connect(sim.url, { ca: sim.caPem });
    push = (token, headers = {}, body = '{"aps":{"alert":"hi"},"aqueduct_id":"e1"}') =>
      request(
        session,
        {
          ':path': `/3/device/${token}`,
          authorization: `bearer ${providerToken(keyPem)}`,
          'apns-topic': 'dev.app',
          ...headers,
        },
        body,
      );
  });
  afterAll(async () => {
    session.close();
    await sim.close();
  });

  it('accepts a push with 200 and the apns-id it was given, and counts it on the stats port', async () => {
    const id = randomUUID();
    const answer = await push('abc', { 'apns-id': id });
    expect(answer).toMatchObject({ status: 200, body: '' });
    expect(answer.headers['apns-id']).toBe(id);
    const stats = (await (await fetch(sim.statsUrl)).json()) as Record<string, unknown>;
    expect(sim.statsUrl).toMatch(/^http:\/\//);
    expect(stats).toMatchObject({ simulator: 'apns', accepted: 1, distinctEventIds: 1 });
  });

  it('refuses what APNs refuses, with the reason Apple documents', async () => {
    const cases: Array<[Promise<Answer>, number, string]> = [
      [push('abc', { 'apns-topic': '' }), 400, 'MissingTopic'],
      [push('abc', { 'apns-priority': '7' }), 400, 'BadPriority'],
      [push('abc', { 'apns-expiration': 'tomorrow' }), 400, 'BadExpirationDate'],
      [push('abc', { 'apns-collapse-id': 'c'.repeat(65) }), 400, 'BadCollapseId'],
      [push('abc', { 'apns-id': 'not-a-uuid' }), 400, 'BadMessageId'],
      [push('abc', { 'apns-push-type': 'shout' }), 400, 'InvalidPushType'],
      [push('abc', {}, ''), 400, 'PayloadEmpty'],
      [push('abc', {}, JSON.stringify({ aps: { alert: 'x'.repeat(4096) } })), 413, 'PayloadTooLarge'],
      [push('', {}), 400, 'MissingDeviceToken'],
      [push('bad-1'), 400, 'BadDeviceToken'],
      [push('abc', { ':method': 'GET' }), 405, 'MethodNotAllowed'],
      [request(session, { ':path': '/4/nothing' }), 404, 'BadPath'],
      [push('abc', { authorization: '' }), 403, 'MissingProviderToken'],
      [push('abc', { authorization: 'bearer not.a.jwt!' }), 403, 'InvalidProviderToken'],
      [
        push('abc', { authorization: `bearer ${providerToken(throwAwaySigningKey())}` }),
        403,
        'InvalidProviderToken',
      ],
      [push('abc', { authorization: `bearer ${providerToken(keyPem, 7200)}` }), 403, 'ExpiredProviderToken'],
    ];
    for (const [pending, status, reason] of cases) {
      const answer = await pending;
      expect({ status: answer.status, body: JSON.parse(answer.body) as unknown }, reason).toEqual({
        status,
        body: { reason },
      });
      expect(answer.headers['apns-id']).toMatch(/^[0-9a-f-]{36}$/);
    }
  });

  it('answers dead tokens 410 Unregistered with a timestamp, and a storm 429 TooManyRequests with Retry-After', async () => {
    const dead = await push('dead-1');
    expect(dead.status).toBe(410);
    expect(JSON.parse(dead.body)).toEqual({ reason: 'Unregistered', timestamp: expect.any(Number) });

    const set = await fetch(sim.statsUrl.replace(/stats$/, 'faults'), {
      method: 'POST',
      body: JSON.stringify({ storm: { retryAfterSeconds: 3 } }),
    });
    expect(set.status).toBe(200);
    const throttled = await push('abc');
    expect(throttled.status).toBe(429);
    expect(throttled.headers['retry-after']).toBe('3');
    expect(JSON.parse(throttled.body)).toEqual({ reason: 'TooManyRequests' });
    sim.setFaults({ storm: null });
  });
});

describe('APNs simulator: rate limit and counts, through the real client', () => {
  it('answers 429 for exactly the requests beyond its bucket', async () => {
    // Refill of 0.01 token/s adds no whole token within the test: exactly `burst` requests get through.
    const sim = await startApnsSimulator({ rate: 0.01, burst: 50 });
    const apns = new ApnsProvider({
      keyPem: throwAwaySigningKey(),
      keyId: 'KEY1234567',
      teamId: 'TEAM123456',
      topic: 'dev.app',
      production: false,
      endpoint: parseEndpoint('apns', sim.url, 'APNS_ENDPOINT'),
      caPem: sim.caPem,
      maxInFlight: 64,
    });
    try {
      const batch = Array.from({ length: 150 }, () => pushRequest({ platform: 'apns' }));
      const outcomes = await apns.send(batch);
      const delivered = outcomes.filter((o) => o.kind === 'delivered');
      const throttled = outcomes.filter((o) => o.kind === 'retry' && o.throttled);
      expect(delivered).toHaveLength(50);
      expect(throttled).toHaveLength(100);
      for (const outcome of throttled) {
        expect(outcome).toMatchObject({ reason: 'TooManyRequests', httpStatus: 429 });
        expect(outcome.kind === 'retry' && outcome.retryAfterMs).toBeGreaterThan(90_000);
      }
      expect(sim.stats()).toMatchObject({
        requests: 150,
        accepted: 50,
        throttled: 100,
        distinctEventIds: 50,
        duplicates: 0,
      });
      const accepted = new Set(sim.records().map((r) => r.eventId));
      for (const [i, outcome] of outcomes.entries()) {
        expect(accepted.has(batch[i]?.event.id)).toBe(outcome.kind === 'delivered');
      }
    } finally {
      await apns.close();
      await sim.close();
    }
  });
});
