import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { gzipSync } from 'node:zlib';
import { Validator } from '@seriousme/openapi-schema-validator';
import getPort from 'get-port';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { decodeEvent } from '../../src/events/decode.ts';
import { headerString } from '../../src/kafka/headers.ts';
import { messageKey } from '../../src/publish/publisher.ts';
import { countMessages, readTopic } from '../../testkit/topics.ts';
import { sampleEvent, sendRaw, startTestGateway, type TestGateway } from '../helpers/gateway.ts';

// The gateway in-process (what `aqueduct serve` runs) on the run's real Kafka broker and Redis.

const ACME = 'key-acme-0123456789';
const GLOBEX = 'key-globex-0123456789';
// Held to acme's limits but used by one check only, so its bucket is full when that check runs.
const INITECH = 'key-initech-0123456789';
const MAX_BODY_BYTES = 64 * 1024;

describe('gateway on real Kafka and Redis', () => {
  let gw: TestGateway;

  beforeAll(async () => {
    gw = await startTestGateway({
      keys: { [ACME]: 'acme', [GLOBEX]: 'globex', [INITECH]: 'initech' },
      env: {
        // Every tenant: 1000 events/s, burst 1000; acme and initech are held to 10/s, burst 20.
        AQUEDUCT_TENANT_RATE: '1000',
        AQUEDUCT_TENANT_BURST: '1000',
        AQUEDUCT_GATEWAY_TENANT_LIMITS: JSON.stringify({
          acme: { rate: 10, burst: 20 },
          initech: { rate: 10, burst: 20 },
        }),
        AQUEDUCT_GATEWAY_MAX_BATCH: '50',
        AQUEDUCT_GATEWAY_MAX_BODY_BYTES: String(MAX_BODY_BYTES),
      },
    });
  });

  afterAll(async () => {
    await gw?.close();
  });

  it('writes accepted events to the topic byte for byte as validated, keyed by device, with the trace context', async () => {
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const sent = [
      sampleEvent('tok-aaaa', {
        id: 'given-1',
        tenant: 'globex',
        data: { emoji: '🚚', quote: 'say "hi"\n' },
      }),
      sampleEvent('tok-bbbbb'),
      sampleEvent('tok-cccc', { priority: 'high', ttlSeconds: 60, collapseKey: 'orders' }),
    ];
    const batch = await gw.post({ events: sent }, { key: GLOBEX, headers: { traceparent } });
    expect(batch.status).toBe(202);
    const single = await gw.post(sampleEvent('tok-dddd', { id: 'given-2' }), { key: GLOBEX });
    expect(single.status).toBe(202);
    const ids = [...(batch.body.ids ?? []), ...(single.body.ids ?? [])];
    expect(ids[0]).toBe('given-1');
    expect(ids[1]).toMatch(/^[0-9a-f-]{36}$/);
    expect(ids[3]).toBe('given-2');

    // The documented construction: a missing id first, the key's tenant last, nothing else touched.
    const expected = new Map<string, string>();
    const expectedOf = (event: Record<string, unknown>, id: string) =>
      JSON.stringify({
        ...(event.id === undefined ? { id } : {}),
        ...event,
        tenant: event.tenant ?? 'globex',
      });
    [...sent, sampleEvent('tok-dddd', { id: 'given-2' })].forEach((event, i) => {
      expected.set(ids[i] as string, expectedOf(event, ids[i] as string));
    });

    const messages = await readTopic(gw.kafka, gw.topic);
    expect(messages).toHaveLength(4);
    for (const message of messages) {
      const value = message.value?.toString('utf8') ?? '';
      const id = (JSON.parse(value) as { id: string }).id;
      expect(value, id).toBe(expected.get(id));
      const decoded = decodeEvent(message.value);
      expect(decoded.ok, id).toBe(true);
      if (decoded.ok) expect(message.key?.toString()).toBe(messageKey(decoded.event));
      if (id !== 'given-2') {
        // Same trace as the caller's request (with an SDK the parent id is the gateway's publish span).
        expect(headerString(message.headers, 'traceparent')?.slice(0, 36)).toBe(traceparent.slice(0, 36));
      } else {
        expect(headerString(message.headers, 'traceparent')).toBeUndefined();
      }
    }
  });

  it('answers 429 with Retry-After to a tenant above its limit, admits it after that wait, and leaves other tenants alone', async () => {
    const events = (n: number, from: number) =>
      Array.from({ length: n }, (_, i) => sampleEvent(`acme-${from + i}`));
    const first = await gw.post({ events: events(20, 0) }, { key: ACME });
    expect(first.status).toBe(202);
    expect(first.headers.get('ratelimit-policy')).toBe('"tenant";q=20;w=2');
    expect(first.headers.get('ratelimit')).toMatch(/^"tenant";r=0;t=[12]$/);

    const throttled = await gw.post({ events: events(10, 20) }, { key: ACME });
    expect(throttled.status).toBe(429);
    expect(throttled.body.error).toBe('throttled');
    const retryAfter = Number(throttled.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(throttled.headers.get('ratelimit')).toMatch(/^"tenant";r=\d;t=\d+$/);

    // globex has its own bucket: unaffected.
    const other = await gw.post(
      { events: Array.from({ length: 50 }, (_, i) => sampleEvent(`globex-${i}`)) },
      { key: GLOBEX },
    );
    expect(other.status).toBe(202);
    expect(other.headers.get('ratelimit-policy')).toBe('"tenant";q=1000;w=1');

    await sleep(retryAfter * 1000);
    const again = await gw.post({ events: events(10, 20) }, { key: ACME });
    expect(again.status).toBe(202);
    expect(again.body.ids).toHaveLength(10);
  });

  it('refuses invalid and oversize bodies with 400/413/415 naming the problem, and writes nothing for them', async () => {
    const before = await countMessages(gw.kafka, gw.topic);
    const cases: Array<[unknown, number, string, string | RegExp]> = [
      [
        { events: [sampleEvent('x-1'), sampleEvent('x-2', { token: '' })] },
        400,
        'invalid-event',
        /^events\[1\]\.token: /,
      ],
      [
        sampleEvent('x-3', { notification: { title: 'no body' } }),
        400,
        'invalid-event',
        /^notification\.body: /,
      ],
      [sampleEvent('x-4', { ttlSeconds: -5 }), 400, 'invalid-event', /^ttlSeconds: /],
      [sampleEvent('crlf', { token: 'aa\r\nbb' }), 400, 'invalid-event', /^token: /],
      [sampleEvent('null', { token: 'aa\u0000bb' }), 400, 'invalid-event', /^token: /],
      [sampleEvent('path', { token: '../../3/device/bbbb' }), 400, 'invalid-event', /^token: /],
      [sampleEvent('apn', { token: 'abcd' }), 400, 'invalid-event', /^token: an APNs device token is hex/],
      [sampleEvent('coll', { collapseKey: 'x\r\napns-topic: evil' }), 400, 'invalid-event', /^collapseKey: /],
      [
        sampleEvent('surr', { notification: { title: 'Hi \ud83d', body: 'b' } }),
        400,
        'invalid-event',
        'notification.title: not well-formed Unicode (a lone surrogate)',
      ],
      ['{"events": [', 400, 'invalid-json', 'not valid JSON'],
      [
        '{"__proto__": {"admin": true}, "platform": "fcm"}',
        400,
        'invalid-body',
        'holds a "__proto__" key or a "constructor" key with "prototype" in it',
      ],
      [
        '{"events": [{"constructor": {"prototype": {"admin": true}}}]}',
        400,
        'invalid-body',
        'holds a "__proto__" key',
      ],
      // JSON.parse keeps the last tenant, a proxy or log in front may read the first.
      [
        `{"tenant": "globex", ${JSON.stringify(sampleEvent('dup')).slice(1, -1)}, "tenant": "acme"}`,
        400,
        'invalid-body',
        'an object with the same key twice',
      ],
      [[sampleEvent('x-5')], 400, 'invalid-body', 'one event (a JSON object) or {"events": [...]}'],
      [
        { events: Array.from({ length: 51 }, (_, i) => sampleEvent(`x-${i}`)) },
        413,
        'too-many-events',
        'limit 50',
      ],
      [
        {
          events: Array.from({ length: 50 }, (_, i) =>
            sampleEvent(`big-${i}`, { data: { pad: 'p'.repeat(1400) } }),
          ),
        },
        413,
        'body-too-large',
        'larger than 65536 bytes',
      ],
      [
        sampleEvent('x-6', {
          data: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'.repeat(1000)])),
        }),
        413,
        'event-too-large',
        'limit 16384',
      ],
    ];
    for (const [body, status, error, message] of cases) {
      const answer = await gw.post(body, { key: GLOBEX });
      expect(answer.status, error).toBe(status);
      expect(answer.body.error).toBe(error);
      expect(answer.body.message).toMatch(message);
      // The rate-limit fields are on refusals too.
      expect(answer.headers.get('ratelimit'), error).toMatch(/^"tenant";r=\d+;t=\d+$/);
    }
    // A tenant may send at most its burst (20) at once, even with its bucket full. (Not acme: the test
    // above leaves its bucket empty, and an empty bucket answers 429 before the body is read.)
    const aboveBurst = await gw.post(
      { events: Array.from({ length: 21 }, (_, i) => sampleEvent(`b-${i}`)) },
      { key: INITECH },
    );
    expect(aboveBurst.status).toBe(413);
    expect(aboveBurst.body.message).toContain('more than tenant "initech" may send at once (20)');

    const text = await fetch(`${gw.gateway.url}/v1/notifications`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain', 'x-api-key': GLOBEX },
      body: 'hello',
    });
    expect(text.status).toBe(415);

    // JSON is UTF-8 (RFC 8259): other bytes are refused, never read as UTF-8 with replacement characters.
    const cafe = JSON.stringify(sampleEvent('enc-1', { notification: { title: 'Café', body: 'b' } }));
    const encodings: Array<[Record<string, string>, Uint8Array, number, string]> = [
      [{}, Buffer.from(cafe, 'latin1'), 400, 'invalid-json'],
      [
        { 'content-type': 'application/json; charset=iso-8859-1' },
        Buffer.from(cafe, 'latin1'),
        415,
        'unsupported-media-type',
      ],
      [{ 'content-encoding': 'gzip' }, gzipSync(cafe), 415, 'unsupported-content-encoding'],
      // One byte order mark may be ignored (RFC 8259 §8.1); a second is not JSON whitespace.
      [{}, Buffer.from(`\uFEFF\uFEFF${cafe}`, 'utf8'), 400, 'invalid-json'],
    ];
    for (const [headers, body, status, error] of encodings) {
      const answer = await fetch(`${gw.gateway.url}/v1/notifications`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': GLOBEX, ...headers },
        body,
      });
      expect(answer.status, error).toBe(status);
      expect(((await answer.json()) as { error: string }).error).toBe(error);
      if (error === 'unsupported-content-encoding')
        expect(answer.headers.get('accept-encoding')).toBe('identity');
    }
    expect(await countMessages(gw.kafka, gw.topic)).toBe(before);
  });

  it('answers 401 to a missing or wrong API key and 403 to an event of another tenant', async () => {
    const missing = await gw.post(sampleEvent('k-1'));
    expect(missing.status).toBe(401);
    expect(missing.body.message).toContain('an API key is required');
    const wrong = await gw.post(sampleEvent('k-2'), { key: 'not-a-key' });
    expect(wrong.status).toBe(401);
    expect(wrong.body).toEqual({ error: 'unauthorized', message: 'the API key is not valid' });
    expect(wrong.headers.get('www-authenticate')).toBe('Bearer realm="aqueduct", error="invalid_token"');
    expect(missing.headers.get('www-authenticate')).toBe('Bearer realm="aqueduct"');
    // Two keys are one too many (RFC 6750 §3.1), even when one of them is valid: Node reads the first
    // of two Authorization lines, a proxy in front may read the last.
    const both = await gw.post(sampleEvent('k-5'), { key: GLOBEX, headers: { 'x-api-key': GLOBEX } });
    expect(both.status).toBe(400);
    expect(both.body.error).toBe('ambiguous-api-key');
    expect(both.headers.get('www-authenticate')).toContain('error="invalid_request"');
    const body = JSON.stringify(sampleEvent('k-6'));
    const twice = await sendRaw(
      gw.gateway.port,
      `POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${GLOBEX}\r\nAuthorization: Bearer not-a-key\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    );
    expect(twice).toMatch(/^HTTP\/1\.1 400 /);
    expect(JSON.parse(twice.split('\r\n\r\n')[1] ?? '')).toMatchObject({ error: 'ambiguous-api-key' });
    // A Bearer field that is not one key is malformed (RFC 6750 §3.1), not a missing key.
    const spaced = await gw.post(sampleEvent('k-7'), {
      headers: { authorization: `Bearer ${GLOBEX} extra` },
    });
    expect(spaced.status).toBe(400);
    expect(spaced.body.error).toBe('malformed-api-key');
    expect(spaced.headers.get('www-authenticate')).toBe('Bearer realm="aqueduct", error="invalid_request"');
    // Checked before the body is read: an unknown caller gets 401 even for an oversize body.
    const oversize = await gw.post('x'.repeat(100_000), { key: 'not-a-key' });
    expect(oversize.status).toBe(401);
    const foreign = await gw.post(
      { events: [sampleEvent('k-3'), sampleEvent('k-4', { tenant: 'acme' })] },
      { key: GLOBEX },
    );
    expect(foreign.status).toBe(403);
    expect(foreign.body.message).toMatch(/^events\[1\]\.tenant: this API key belongs to tenant "globex"/);
  });

  it('serves a valid OpenAPI 3.1 document, health, readiness and metrics on the admin port, and none of them on the API port (404; 405 for another method of the ingest path)', async () => {
    const admin = gw.gateway.adminUrl;
    expect(gw.gateway.adminPort).not.toBe(gw.gateway.port);
    const document = (await (await fetch(`${admin}/openapi.json`)).json()) as Record<string, unknown>;
    expect(document.openapi).toBe('3.1.0');
    expect((await new Validator().validate(document)).valid).toBe(true);
    expect(await (await fetch(`${admin}/healthz`)).json()).toEqual({ status: 'ok' });
    const ready = await fetch(`${admin}/readyz`);
    expect(ready.status).toBe(200);
    const metrics = await (await fetch(`${admin}/metrics`)).text();
    expect(metrics).toMatch(/^aqueduct_gateway_events_accepted_total \d+/m);
    expect(metrics).toMatch(/^aqueduct_gateway_requests_total\{status="429"\} [1-9]/m);
    expect(metrics).toMatch(/^aqueduct_gateway_kafka_write_duration_seconds_count\{outcome="ok"\} [1-9]/m);
    for (const path of ['/openapi.json', '/healthz', '/readyz', '/metrics']) {
      const answer = await fetch(`${gw.gateway.url}${path}`);
      expect(answer.status, path).toBe(404);
      expect(await answer.json()).toEqual({
        error: 'not-found',
        message: 'no such route; the API is POST /v1/notifications',
      });
    }
    for (const method of ['GET', 'PUT', 'DELETE', 'HEAD']) {
      const answer = await fetch(`${gw.gateway.url}/v1/notifications`, { method });
      expect(answer.status, method).toBe(405);
      expect(answer.headers.get('allow'), method).toBe('OPTIONS, POST');
    }
    // OPTIONS of the path or of the server (RFC 9110 §9.3.7) names the methods, with no key asked.
    const options = await fetch(`${gw.gateway.url}/v1/notifications`, { method: 'OPTIONS' });
    expect([options.status, options.headers.get('allow')]).toEqual([204, 'OPTIONS, POST']);
    const server = await sendRaw(
      gw.gateway.port,
      'OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
    );
    expect(server).toMatch(/^HTTP\/1\.1 204 /);
    expect(server.toLowerCase()).toContain('\r\nallow: options, post\r\n');
    // The absolute form of a request target (RFC 9112 §3.2.2), which a server must accept, too.
    const absolute = await sendRaw(
      gw.gateway.port,
      'GET http://gateway.example/v1/notifications HTTP/1.1\r\nHost: gateway.example\r\nConnection: close\r\n\r\n',
    );
    expect(absolute).toMatch(/^HTTP\/1\.1 405 /);
    // A POST to another spelling of the path is told there is no such route, not that POST is refused.
    // (fetch resolves dot segments itself, so the request goes raw.)
    const dotted = await sendRaw(
      gw.gateway.port,
      `POST /v1/../v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${ACME}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`,
    );
    expect(dotted).toMatch(/^HTTP\/1\.1 404 /);
    expect(dotted).toContain('"error":"not-found"');
    expect((await fetch(`${admin}/v1/notifications`, { method: 'POST' })).status).toBe(404);
    // Another route or method is answered at once, whatever its body: not read, not waited for after
    // `Expect: 100-continue`, and the connection closed rather than left to parse it as a request.
    const bodyHead = `Host: x\r\nAuthorization: Bearer ${ACME}\r\nContent-Type: application/json\r\n`;
    for (const [request, status] of [
      [`POST /nope HTTP/1.1\r\n${bodyHead}Content-Length: 2\r\nExpect: 100-continue\r\n\r\n`, 404],
      [
        `POST /v1/notifications/ HTTP/1.1\r\n${bodyHead}Content-Length: 2\r\nExpect: 100-continue\r\n\r\n`,
        404,
      ],
      [`PUT /v1/notifications HTTP/1.1\r\n${bodyHead}Content-Length: 2\r\nExpect: 100-continue\r\n\r\n`, 405],
      [`POST /nope HTTP/1.1\r\n${bodyHead}Content-Length: 3\r\n\r\n{x}`, 404],
      [`PATCH /v1/notifications HTTP/1.1\r\n${bodyHead}Content-Length: ${10 ** 9}\r\n\r\n`, 405],
      [`QUERY /v1/notifications HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}`, 405],
    ] as const) {
      const started = Date.now();
      const response = await sendRaw(gw.gateway.port, request);
      expect(response, request).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
      expect(response.toLowerCase(), request).toContain('connection: close');
      expect(Date.now() - started, request).toBeLessThan(5_000); // not the 20 s request timeout
    }
  });

  it('charges a unit per request before reading the body: a tenant flooding invalid requests gets 429s', async () => {
    const flood = await startTestGateway({
      keys: { [ACME]: 'acme' },
      env: {
        AQUEDUCT_TENANT_RATE: '2',
        AQUEDUCT_TENANT_BURST: '10',
        AQUEDUCT_GATEWAY_MAX_BODY_BYTES: '1024',
      },
    });
    try {
      // An invalid batch costs its events like a valid one: ten invalid events empty the burst of 10.
      const batch = await flood.post(
        { events: Array.from({ length: 10 }, () => ({ platform: 'fcm' })) },
        { key: ACME },
      );
      expect(batch.status).toBe(400);
      expect(batch.headers.get('ratelimit')).toMatch(/^"tenant";r=0;/);
      await sleep(5000); // the bucket fills again (2/s)
      const statuses: number[] = [];
      for (let i = 0; i < 30; i++) {
        statuses.push((await flood.post({ events: [{ platform: 'fcm' }] }, { key: ACME })).status);
      }
      const count = (list: number[], status: number) => list.filter((s) => s === status).length;
      // Burst 10 plus what trickles back at 2/s while the loop runs: the rest are throttled.
      expect(count(statuses, 400)).toBeGreaterThanOrEqual(10);
      expect(count(statuses, 429)).toBeGreaterThanOrEqual(15);
      expect(count(statuses, 400) + count(statuses, 429)).toBe(30);
      // Oversize bodies cost a unit too: once the few tokens that came back are spent, 429 before reading.
      await sleep(1000);
      const oversize: number[] = [];
      for (let i = 0; i < 10 && !oversize.includes(429); i++) {
        oversize.push((await flood.post('x'.repeat(4096), { key: ACME })).status);
      }
      expect(count(oversize, 413)).toBeGreaterThanOrEqual(1);
      expect(oversize.at(-1)).toBe(429);
      expect(await countMessages(flood.kafka, flood.topic)).toBe(0);
    } finally {
      await flood.close();
    }
  });

  it('closes the socket of a client sending its body or its headers too slowly', async () => {
    const slow = await startTestGateway({
      keys: { [ACME]: 'acme' },
      env: {
        AQUEDUCT_GATEWAY_REQUEST_TIMEOUT_MS: '1500',
        AQUEDUCT_GATEWAY_HEADERS_TIMEOUT_MS: '1000',
      },
    });
    try {
      const { port } = slow.gateway;
      const slowBody = await dripUntilClosed(
        port,
        `POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${ACME}\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n`,
        '{',
      );
      expect(slowBody.closedAfterMs).toBeLessThan(1500 + 1000);
      expect(slowBody.response).toMatch(/^HTTP\/1\.1 408/);
      expect(JSON.parse(slowBody.response.split('\r\n\r\n')[1] ?? '')).toMatchObject({
        error: 'request-timeout',
      });
      const slowHeaders = await dripUntilClosed(port, 'POST /v1/notifications HTTP/1.1\r\n', 'X-Slow: a\r\n');
      expect(slowHeaders.closedAfterMs).toBeLessThan(1000 + 1000);
    } finally {
      await slow.close();
    }
  });
  it('shuts down without waiting for clients still sending their headers or their body', async () => {
    const closing = await startTestGateway({ keys: { [ACME]: 'acme' } });
    const { port } = closing.gateway;
    // Node stops enforcing the header and request deadlines (10 s and 20 s here) once its server closes.
    const slowHeaders = dripUntilClosed(port, 'POST /v1/notifications HTTP/1.1\r\n', 'X-Slow: a\r\n');
    const slowBody = dripUntilClosed(
      port,
      `POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${ACME}\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n`,
      '{',
    );
    await sleep(500);
    await closing.close();
    for (const slow of await Promise.all([slowHeaders, slowBody])) {
      expect(slow.closedAfterMs).toBeLessThan(5_000);
    }
  });

  it('answers every request it received whole before it shuts down: 202 only for what Kafka has', async () => {
    const closing = await startTestGateway({ keys: { [ACME]: 'acme' } });
    const answers: { id: string; status: number }[] = [];
    let next = 0;
    let stopped = false;
    // Eight callers, each posting again as soon as it is answered, until the gateway is gone.
    const caller = async () => {
      while (!stopped) {
        const id = `closing-${next++}`;
        const status = await closing.post(sampleEvent(id, { id }), { key: ACME }).then(
          (answer) => answer.status,
          () => 0, // the connection was closed: the request had not arrived whole
        );
        answers.push({ id, status });
        if (status !== 202) return;
      }
    };
    const callers = Array.from({ length: 8 }, caller);
    await vi.waitFor(() => expect(answers.filter((a) => a.status === 202).length).toBeGreaterThan(40));
    await closing.close();
    stopped = true;
    await Promise.all(callers);
    const written = new Set(
      (await readTopic(closing.kafka, closing.topic)).map((m) => JSON.parse(String(m.value)).id as string),
    );
    for (const { id, status } of answers) {
      expect([0, 202, 503], id).toContain(status);
      expect(written.has(id), `${id} answered ${status}`).toBe(status === 202);
    }
  });

  it('says 100 Continue only to a caller whose key and admission unit pass, so a refused body is never sent', async () => {
    const event = JSON.stringify(sampleEvent('cont-1', { id: 'continued-1' }));
    const head = (key: string) =>
      `POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${event.length}\r\nExpect: 100-continue\r\n\r\n`;

    const refused = await sendRaw(gw.gateway.port, head('not-a-key'));
    expect(refused).toMatch(/^HTTP\/1\.1 401 /);
    expect(refused).not.toContain('100 Continue');

    const socket = connect(gw.gateway.port, '127.0.0.1');
    try {
      let received = '';
      socket.on('data', (chunk: Buffer) => {
        received += chunk.toString('utf8');
      });
      const readUntil = async (pattern: RegExp) => {
        const deadline = Date.now() + 10_000;
        while (!pattern.test(received) && Date.now() < deadline) await sleep(20);
        return received;
      };
      socket.write(head(GLOBEX));
      expect(await readUntil(/\r\n\r\n/)).toBe('HTTP/1.1 100 Continue\r\n\r\n');
      socket.write(event);
      const answers = await readUntil(/"ids":\["continued-1"\]/);
      expect(answers.slice('HTTP/1.1 100 Continue\r\n\r\n'.length)).toMatch(/^HTTP\/1\.1 202 /);
    } finally {
      socket.destroy();
    }

    // Empty list elements are ignored (RFC 9110 §5.6.1): an Expect of them alone expects nothing.
    const emptyExpect = JSON.stringify(sampleEvent('cont-3', { id: 'continued-3' }));
    const answerEmpty = await sendRaw(
      gw.gateway.port,
      `${head(GLOBEX).replace('Expect: 100-continue', 'Expect: ,').replace(`${event.length}`, `${emptyExpect.length}`).replace('HTTP/1.1\r\n', 'HTTP/1.1\r\nConnection: close\r\n')}${emptyExpect}`,
    );
    expect(answerEmpty).toMatch(/^HTTP\/1\.1 202 /);

    // An HTTP/1.0 client is never sent a 1xx answer, and its Expect is ignored (RFC 9110 §10.1.1, §15.2).
    const event10 = JSON.stringify(sampleEvent('cont-2', { id: 'continued-2' }));
    const answer10 = await sendRaw(
      gw.gateway.port,
      `${head(GLOBEX).replace('HTTP/1.1', 'HTTP/1.0').replace(`${event.length}`, `${event10.length}`)}${event10}`,
    );
    expect(answer10).toMatch(/^HTTP\/1\.1 202 /);
    expect(answer10).toContain('{"ids":["continued-2"]}');
  });

  it('closes a connection once it has answered a request asking to upgrade it, serving nothing after it', async () => {
    const post = (id: string, extra = '') => {
      const event = JSON.stringify(sampleEvent(id, { id }));
      return `POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${GLOBEX}\r\nContent-Type: application/json\r\n${extra}Content-Length: ${event.length}\r\n\r\n${event}`;
    };
    const upgrade = post('upgrade-1', 'Connection: Upgrade\r\nUpgrade: websocket\r\n');
    // Pipelined in the same write: Node's parser has stopped after the upgrade request.
    const pipelined = await sendRaw(gw.gateway.port, `${upgrade}${post('upgrade-pipelined-1')}`);
    const answers = pipelined.split(/(?=HTTP\/1\.1 \d{3} )/);
    expect(answers.map((answer) => answer.slice(0, 12))).toEqual(['HTTP/1.1 202']);
    expect(answers[0]?.toLowerCase()).toContain('connection: close');

    // Sent later: what follows on that connection is never read as a request.
    const socket = connect(gw.gateway.port, '127.0.0.1');
    let received = '';
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('utf8');
    });
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.on('error', () => {});
    socket.write(post('upgrade-2', 'Connection: Upgrade\r\nUpgrade: h2c\r\n'));
    await sleep(300);
    socket.write(post('upgrade-smuggled-1'));
    await closed;
    expect(received.split(/(?=HTTP\/1\.1 \d{3} )/).map((answer) => answer.slice(0, 12))).toEqual([
      'HTTP/1.1 202',
    ]);
    const ids = new Set(
      (await readTopic(gw.kafka, gw.topic))
        .map((m) => decodeEvent(m.value as Buffer))
        .flatMap((d) => (d.ok ? [d.event.id] : [])),
    );
    expect(ids.has('upgrade-1') && ids.has('upgrade-2')).toBe(true);
    expect(ids.has('upgrade-pipelined-1') || ids.has('upgrade-smuggled-1')).toBe(false);
  });

  it('refuses a body that comes in more pieces than its size allows, and takes one in a few', async () => {
    const event = JSON.stringify(sampleEvent('pieces-1', { id: 'pieces-1' }));
    const head = `POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${GLOBEX}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n`;
    const chunked = (body: string, size: number) => {
      let out = '';
      for (let i = 0; i < body.length; i += size) {
        const piece = body.slice(i, i + size);
        out += `${Buffer.byteLength(piece).toString(16)}\r\n${piece}\r\n`;
      }
      return `${out}0\r\n\r\n`;
    };
    // 1100 one-byte chunks of whitespace before the event: more than the 1024 pieces a body may take.
    const tooMany = await sendRaw(gw.gateway.port, `${head}${chunked(`${' '.repeat(1100)}${event}`, 1)}`);
    expect(tooMany).toMatch(/^HTTP\/1\.1 400 /);
    expect(tooMany).toContain('"error":"body-too-fragmented"');
    const few = await sendRaw(gw.gateway.port, `${head}${chunked(event, 16)}`);
    expect(few).toMatch(/^HTTP\/1\.1 202 /);
    expect(few).toContain('{"ids":["pieces-1"]}');
  });

  it('answers the requests a client sent before half-closing its side of the connection', async () => {
    const events = ['half-1', 'half-2'].map((id) => JSON.stringify(sampleEvent(id, { id })));
    const requests = events
      .map(
        (event) =>
          `POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${GLOBEX}\r\nContent-Type: application/json\r\nContent-Length: ${event.length}\r\n\r\n${event}`,
      )
      .join('');
    const response = await sendRaw(gw.gateway.port, requests, { halfClose: true });
    const answers = response.split(/(?=HTTP\/1\.1 \d{3} )/);
    expect(answers.map((answer) => answer.slice(0, 12))).toEqual(['HTTP/1.1 202', 'HTTP/1.1 202']);
    expect(answers[1]).toContain('{"ids":["half-2"]}');
  });

  it('refuses before 100 Continue a body its header fields already refuse: too large, not JSON or untyped, another charset, compressed', async () => {
    const head = (fields: string) =>
      `POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${GLOBEX}\r\n${fields}Expect: 100-continue\r\n\r\n`;
    const json = 'Content-Type: application/json\r\n';
    const cases: Array<[string, number, string]> = [
      [`${json}Content-Length: ${MAX_BODY_BYTES + 1}\r\n`, 413, 'body-too-large'],
      ['Content-Type: text/plain\r\nContent-Length: 2\r\n', 415, 'unsupported-media-type'],
      ['Content-Length: 2\r\n', 415, 'unsupported-media-type'],
      ['Transfer-Encoding: chunked\r\n', 415, 'unsupported-media-type'],
      [
        'Content-Type: application/json; charset=latin1\r\nContent-Length: 2\r\n',
        415,
        'unsupported-media-type',
      ],
      [`${json}Content-Encoding: gzip\r\nContent-Length: 22\r\n`, 415, 'unsupported-content-encoding'],
    ];
    for (const [fields, status, error] of cases) {
      const answer = await sendRaw(gw.gateway.port, head(fields));
      expect(answer, fields).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
      expect(answer, fields).not.toContain('100 Continue');
      expect(answer, fields).toContain(`"error":"${error}"`);
    }
    // The same fields with a body the limit takes are told to go on.
    const socket = connect(gw.gateway.port, '127.0.0.1');
    try {
      let received = '';
      socket.on('data', (chunk: Buffer) => {
        received += chunk.toString('utf8');
      });
      socket.write(head(`${json}Content-Length: ${MAX_BODY_BYTES}\r\n`));
      await vi.waitFor(() => expect(received).toBe('HTTP/1.1 100 Continue\r\n\r\n'), { timeout: 10_000 });
    } finally {
      socket.destroy();
    }
  });

  it('answers a request that breaks HTTP framing, lacks Host, uses a transfer coding other than chunked, names an HTTP version other than 1.x, expects what it cannot have or asks to CONNECT in its own error shape and closes the connection', async () => {
    const framed = await startTestGateway({ keys: { [ACME]: 'acme' } });
    try {
      const head = `POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${ACME}\r\nContent-Type: application/json\r\n`;
      const cases: Array<[string, number, string]> = [
        [`${head}Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}`, 400, 'bad-request'],
        [`${head}Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n`, 400, 'bad-request'],
        [`${head}Content-Length: -1\r\n\r\n`, 400, 'bad-request'],
        [`${head}X-Pad: ${'p'.repeat(20_000)}\r\n\r\n`, 431, 'headers-too-large'],
        // RFC 9110 §15.5.15: a target too long to read is a 414, whatever the headers hold.
        [`POST /v1/notifications?${'q'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 414, 'uri-too-long'],
        // A header value with spaces in it is still a header.
        [`${head}X-Pad: ${'p '.repeat(40_000)}\r\n\r\n`, 431, 'headers-too-large'],
        [
          `POST /v1/notifications HTTP/1.1\r\nAuthorization: Bearer ${ACME}\r\nContent-Length: 2\r\n\r\n{}`,
          400,
          'bad-request',
        ],
        // Node decodes chunked only: a body under another coding would be read as it is.
        [`${head}Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`, 501, 'not-implemented'],
        // Node would answer an unknown expectation with an empty 417 and keep the connection.
        [`${head}Expect: a-feature\r\nContent-Length: 2\r\n\r\n{}`, 417, 'expectation-failed'],
        // Node's parser takes any version in the request line.
        [
          `POST /v1/notifications HTTP/2.0\r\nHost: x\r\nAuthorization: Bearer ${ACME}\r\nContent-Length: 2\r\n\r\n{}`,
          505,
          'http-version-not-supported',
        ],
        // Node closes a CONNECT's socket unanswered unless told otherwise.
        ['CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n', 405, 'method-not-allowed'],
        // RFC 9112 §3.2: more than one Host, or one that is not host[:port], is a 400.
        [`${head}Host: y\r\nContent-Length: 2\r\n\r\n{}`, 400, 'bad-request'],
        [`${head.replace('Host: x', 'Host: a b/c')}Content-Length: 2\r\n\r\n{}`, 400, 'bad-request'],
        // Node reads the first Content-Type, a proxy in front may read the last.
        [`${head}Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}`, 400, 'bad-request'],
        // RFC 9112 §6.1: HTTP/1.0 has no Transfer-Encoding; a recipient that ignores it splits the bytes otherwise.
        [
          `${head.replace('HTTP/1.1', 'HTTP/1.0')}Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`,
          400,
          'bad-request',
        ],
        // Expect is a list (RFC 9110 §10.1.1): Node sees 100-continue in these and would wait for the body.
        [`${head}Expect: 100-continue, a-feature\r\nContent-Length: 2\r\n\r\n`, 417, 'expectation-failed'],
        [`${head}Expect: 100-continue;x=1\r\nContent-Length: 2\r\n\r\n`, 417, 'expectation-failed'],
        // Versions and methods Node's parser refuses itself.
        [
          `POST /v1/notifications HTTP/3.0\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}`,
          505,
          'http-version-not-supported',
        ],
        ['FOO /v1/notifications HTTP/1.1\r\nHost: x\r\n\r\n', 501, 'not-implemented'],
        ['PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 505, 'http-version-not-supported'],
        // RFC 9112 §6.3: a Transfer-Encoding that does not end in chunked leaves the length unknown.
        [`${head}Transfer-Encoding: gzip\r\n\r\n{}`, 400, 'bad-request'],
        // RFC 9112 §3.2: no fragment in a request target, and * is OPTIONS' alone.
        [
          `${head.replace('/v1/notifications', '/v1/notifications#f')}Content-Length: 2\r\n\r\n{}`,
          400,
          'bad-request',
        ],
        [`${head.replace('/v1/notifications', '*')}Content-Length: 2\r\n\r\n{}`, 400, 'bad-request'],
        // A target the router cannot percent-decode: fastify would answer in its own shape.
        [
          `${head.replace('/v1/notifications', '/v1/notifications%zz')}Content-Length: 2\r\n\r\n{}`,
          400,
          'bad-request',
        ],
      ];
      for (const [request, status, error] of cases) {
        const response = await sendRaw(framed.gateway.port, request);
        expect(response, error).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
        expect(response.toLowerCase()).toContain('connection: close');
        expect(response.toLowerCase(), error).toMatch(/\r\ndate: /); // RFC 9110 §6.6.1
        expect(JSON.parse(response.split('\r\n\r\n')[1] ?? '')).toMatchObject({ error });
      }
      // 4 KiB of headers, but more fields than Node reads: the answer does not blame their size alone.
      const fields = await sendRaw(framed.gateway.port, `${head}${'a:\r\n'.repeat(1001)}\r\n`);
      expect(fields).toMatch(/^HTTP\/1\.1 431 /);
      expect(JSON.parse(fields.split('\r\n\r\n')[1] ?? '')).toEqual({
        error: 'headers-too-large',
        message: 'the request headers are larger than 16 KiB, or more than 1000 fields',
      });
      expect(await countMessages(framed.kafka, framed.topic)).toBe(0);

      // A good request pipelined before the broken one is answered first: the client learns that it
      // was accepted (and its id), rather than reading the 400 as its answer.
      const event = JSON.stringify(sampleEvent('pipe-1', { id: 'pipelined-1' }));
      const response = await sendRaw(
        framed.gateway.port,
        `${head}Content-Length: ${event.length}\r\n\r\n${event}${head}Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}`,
      );
      const answers = response.split(/(?=HTTP\/1\.1 \d{3} )/);
      expect(answers.map((answer) => answer.slice(0, 12))).toEqual(['HTTP/1.1 202', 'HTTP/1.1 400']);
      expect(answers[0]).toContain('{"ids":["pipelined-1"]}');
      expect(await countMessages(framed.kafka, framed.topic)).toBe(1);

      // Refusals made before any route are counted by status, beside the API's own answers.
      const metrics = await (await fetch(`${framed.gateway.adminUrl}/metrics`)).text();
      const refused = Object.fromEntries(
        [...metrics.matchAll(/^aqueduct_gateway_protocol_refusals_total\{status="(\d+)"\} (\d+)$/gm)].map(
          ([, status, count]) => [status, Number(count)],
        ),
      );
      expect(refused).toEqual({ '400': 13, '405': 1, '414': 1, '417': 3, '431': 3, '501': 2, '505': 3 });
    } finally {
      await framed.close();
    }
  });

  it('answers 503 with Retry-After, writing nothing, when the admission limiter cannot reach Redis', async () => {
    const port = await getPort({ host: '127.0.0.1' }); // nothing listens there
    const noRedis = await startTestGateway({
      keys: { [ACME]: 'acme' },
      env: { REDIS_URL: `redis://127.0.0.1:${port}`, AQUEDUCT_TENANT_RATE: '100' },
    });
    try {
      const answer = await noRedis.post(sampleEvent('r-1'), { key: ACME });
      expect(answer.status).toBe(503);
      expect(answer.headers.get('retry-after')).toBe('2');
      expect(answer.headers.get('ratelimit-policy')).toBe('"tenant";q=100;w=1');
      expect(answer.body.message).toContain('nothing was accepted');
      expect((await fetch(`${noRedis.gateway.adminUrl}/readyz`)).status).toBe(503);
      expect(await countMessages(noRedis.kafka, noRedis.topic)).toBe(0);
    } finally {
      await noRedis.close();
    }
  });
});

/**
 * Opens a connection, sends `head`, then one `drip` every 200 ms until the server closes the socket
 * (giving up after 20 s); says how long that took from the first byte and what the server answered.
 */
function dripUntilClosed(
  port: number,
  head: string,
  drip: string,
): Promise<{ closedAfterMs: number; response: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const started = Date.now();
    let response = '';
    let timer: NodeJS.Timeout | undefined;
    const giveUp = setTimeout(() => {
      socket.destroy();
      reject(new Error('the server kept the slow connection open for 20 s'));
    }, 20_000);
    socket.on('connect', () => {
      socket.write(head);
      timer = setInterval(() => {
        if (!socket.destroyed) socket.write(drip);
      }, 200);
    });
    socket.on('data', (chunk) => {
      response += chunk.toString('latin1');
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      clearInterval(timer);
      clearTimeout(giveUp);
      resolve({ closedAfterMs: Date.now() - started, response });
    });
  });
}
