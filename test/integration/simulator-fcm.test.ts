import http2 from 'node:http2';
import https from 'node:https';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FcmSimulator, startFcmSimulator } from '../../src/simulators/index.ts';
import { fcmTo, pushRequest } from '../helpers/provider-fixtures.ts';

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One raw HTTPS request (HTTP/1.1), as any FCM client would send it. */
function request(
  sim: FcmSimulator,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      `${sim.url}${path}`,
      { method, ca: sim.caPem, agent: false, headers: { 'content-type': 'application/json', ...headers } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body));
  });
}

const send = (
  sim: FcmSimulator,
  message: unknown,
  headers: Record<string, string> = { authorization: 'Bearer anything' },
) => request(sim, 'POST', '/v1/projects/demo/messages:send', { message }, headers);
const errorOf = (answer: Answer) => (JSON.parse(answer.body) as { error: Record<string, unknown> }).error;

describe('FCM simulator: the wire protocol', () => {
  let sim: FcmSimulator;
  beforeAll(async () => {
    sim = await startFcmSimulator({ rate: 1000, burst: 1000 });
  });
  afterAll(async () => {
    await sim.close();
  });

  it('answers a send with the message name and serves the counts on /stats', async () => {
    const answer = await send(sim, {
      token: 't1',
      notification: { title: 'a', body: 'b' },
      data: { aqueduct_id: 'e1' },
    });
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toEqual({
      name: expect.stringMatching(/^projects\/demo\/messages\/0:.+/),
    });
    const stats = await request(sim, 'GET', '/stats');
    expect(JSON.parse(stats.body)).toMatchObject({
      simulator: 'fcm',
      accepted: 1,
      distinctEventIds: 1,
      rate: 1000,
      burst: 1000,
    });
  });

  it("refuses what FCM refuses, with Google's JSON error and an FcmError detail", async () => {
    const cases: Array<[unknown, string]> = [
      [{ notification: { title: 'no target' } }, 'Exactly one of token, topic or condition'],
      [{ token: 't', topic: 'x' }, 'Exactly one of token, topic or condition'],
      [{ token: 't', data: { n: 1 } }, 'message.data[n].value'],
      [{ token: 't', data: { 'google.sent_time': 'x' } }, 'reserved'],
      [{ token: 't', data: { from: 'x' } }, 'reserved'],
      [{ token: 't', android: { ttl: '3600' } }, 'message.android.ttl'],
      [{ token: 't', android: { priority: 'urgent' } }, 'message.android.priority'],
      [{ token: 't', notification: { title: 'x'.repeat(4097) } }, 'Message is too big'],
    ];
    for (const [message, text] of cases) {
      const answer = await send(sim, message);
      expect(answer.status, JSON.stringify(message).slice(0, 80)).toBe(400);
      expect(errorOf(answer)).toEqual({
        code: 400,
        status: 'INVALID_ARGUMENT',
        message: expect.stringContaining(text),
        details: [
          { '@type': 'type.googleapis.com/google.firebase.fcm.v1.FcmError', errorCode: 'INVALID_ARGUMENT' },
        ],
      });
    }
    const notJson = await request(sim, 'POST', '/v1/projects/demo/messages:send', '{"message":', {
      authorization: 'Bearer x',
    });
    expect(errorOf(notJson).status).toBe('INVALID_ARGUMENT');
  });

  it('asks for a bearer token (401 UNAUTHENTICATED) and answers unknown paths like Google (plain 404)', async () => {
    const unauthenticated = await send(sim, { token: 't' }, {});
    expect(unauthenticated.status).toBe(401);
    expect(errorOf(unauthenticated).status).toBe('UNAUTHENTICATED');
    const unknown = await request(sim, 'GET', '/v1/somewhere');
    expect(unknown.status).toBe(404);
    expect(unknown.headers['content-type']).toBe('text/plain');
  });

  it('answers dead tokens 404 UNREGISTERED and a storm 429 QUOTA_EXCEEDED with Retry-After, set through /faults', async () => {
    const dead = await send(sim, { token: 'dead-1' });
    expect(dead.status).toBe(404);
    expect(errorOf(dead)).toMatchObject({ status: 'NOT_FOUND', details: [{ errorCode: 'UNREGISTERED' }] });

    const set = await request(sim, 'POST', '/faults', { storm: { retryAfterSeconds: 12 } });
    expect(JSON.parse(set.body)).toMatchObject({ storm: { retryAfterSeconds: 12 } });
    const throttled = await send(sim, { token: 't' });
    expect(throttled.status).toBe(429);
    expect(throttled.headers['retry-after']).toBe('12');
    expect(errorOf(throttled)).toMatchObject({
      code: 429,
      status: 'RESOURCE_EXHAUSTED',
      details: [{ errorCode: 'QUOTA_EXCEEDED' }],
    });
    expect((await request(sim, 'POST', '/faults', { storm: 'yes' })).status).toBe(400);
    sim.setFaults({ storm: null });
  });

  it('speaks HTTP/2 too (firebase-admin’s default transport)', async () => {
    const session = http2.connect(sim.url, { ca: sim.caPem });
    try {
      const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const stream = session.request({
          ':method': 'POST',
          ':path': '/v1/projects/demo/messages:send',
          authorization: 'Bearer x',
          'content-type': 'application/json',
        });
        let body = '';
        let status = 0;
        stream.on('response', (headers) => {
          status = Number(headers[':status']);
        });
        stream.setEncoding('utf8');
        stream.on('data', (chunk: string) => {
          body += chunk;
        });
        stream.on('end', () => resolve({ status, body }));
        stream.on('error', reject);
        stream.end(JSON.stringify({ message: { token: 'h2' } }));
      });
      expect(answer.status).toBe(200);
      expect(answer.body).toMatch(/"name":"projects\/demo\/messages\//);
    } finally {
      session.close();
    }
  });

  it('serves only its project when given one (403 PERMISSION_DENIED otherwise)', async () => {
    const strict = await startFcmSimulator({ projectId: 'mine' });
    try {
      const other = await send(strict, { token: 't' });
      expect(other.status).toBe(403);
      expect(errorOf(other).status).toBe('PERMISSION_DENIED');
    } finally {
      await strict.close();
    }
  });
});

describe('FCM simulator: rate limit and counts, through the real client', () => {
  it('answers 429 for exactly the requests beyond its bucket', async () => {
    // Refill of 0.01 token/s adds no whole token within the test: exactly `burst` requests get through.
    const sim = await startFcmSimulator({ rate: 0.01, burst: 50 });
    const fcm = fcmTo(sim, { maxInFlight: 64 });
    try {
      const batch = Array.from({ length: 150 }, () => pushRequest());
      const outcomes = await fcm.send(batch);
      const delivered = outcomes.filter((o) => o.kind === 'delivered');
      const throttled = outcomes.filter((o) => o.kind === 'retry' && o.throttled);
      expect(delivered).toHaveLength(50);
      expect(throttled).toHaveLength(100);
      for (const outcome of throttled) {
        expect(outcome).toMatchObject({ httpStatus: 429, retryAfterMs: expect.any(Number) });
        // One token takes 100 s at 0.01/s.
        expect(outcome.kind === 'retry' && outcome.retryAfterMs).toBeGreaterThan(90_000);
      }
      expect(sim.stats()).toMatchObject({
        requests: 150,
        accepted: 50,
        throttled: 100,
        distinctEventIds: 50,
      });
      // The accepted ones are exactly the pushes that came back delivered.
      const accepted = new Set(sim.records().map((r) => r.eventId));
      for (const [i, outcome] of outcomes.entries()) {
        expect(accepted.has(batch[i]?.event.id)).toBe(outcome.kind === 'delivered');
      }
    } finally {
      await fcm.close();
      await sim.close();
    }
  });

  it('counts duplicates by event id and records arrival times', async () => {
    const sim = await startFcmSimulator();
    const fcm = fcmTo(sim);
    try {
      const once = pushRequest();
      const before = Date.now();
      await fcm.send([once, pushRequest()]);
      await fcm.send([{ ...once, attempt: 2 }]);
      expect(sim.stats()).toMatchObject({ accepted: 3, distinctEventIds: 2, duplicates: 1 });
      const records = sim.records();
      expect(records.filter((r) => r.eventId === once.event.id)).toHaveLength(2);
      for (const record of records) {
        expect(record.arrivedAtMs).toBeGreaterThanOrEqual(before - 1);
        expect(record.arrivedAtMs).toBeLessThanOrEqual(Date.now() + 1);
      }
      sim.reset();
      expect(sim.stats().accepted).toBe(0);
      expect(sim.records()).toEqual([]);
    } finally {
      await fcm.close();
      await sim.close();
    }
  });
});
