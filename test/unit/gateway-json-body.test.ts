import { gzipSync } from 'node:zlib';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { credentialFieldLines } from '../../src/gateway/api-keys.ts';
import { acceptUtf8Json, BODY_ERRORS, charsetOf } from '../../src/gateway/json-body.ts';

// The gateway's body parser on a bare fastify app whose one route echoes what it parsed (the whole
// gateway, on real Kafka, is test/integration/gateway.test.ts).

async function echoApp() {
  const app = Fastify();
  acceptUtf8Json(app);
  app.post('/', async (request) => ({ parsed: request.body }));
  app.setErrorHandler(async (error: Error & { code?: string; statusCode?: number }, _request, reply) =>
    reply.code(error.statusCode ?? 500).send({ code: error.code }),
  );
  await app.ready();
  return app;
}

const CAFE = JSON.stringify({ title: 'Café 🚚' });

describe('gateway: reading a JSON body', () => {
  it('reads UTF-8 JSON, with or without charset=utf-8 and a byte order mark', async () => {
    const app = await echoApp();
    const bodies: Array<[string, Buffer]> = [
      ['application/json', Buffer.from(CAFE)],
      ['application/json; charset=utf-8', Buffer.from(CAFE)],
      ['Application/JSON ; Charset="UTF-8"', Buffer.from(CAFE)],
      ['application/json;charset=utf8', Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(CAFE)])],
    ];
    for (const [contentType, payload] of bodies) {
      const answer = await app.inject({
        method: 'POST',
        url: '/',
        headers: { 'content-type': contentType },
        payload,
      });
      expect(answer.statusCode, contentType).toBe(200);
      expect(answer.json(), contentType).toEqual({ parsed: { title: 'Café 🚚' } });
    }
    await app.close();
  });

  it('refuses bytes that are not UTF-8, another charset and a compressed body, instead of reading them as UTF-8', async () => {
    const app = await echoApp();
    const cases: Array<[Record<string, string>, Buffer, number, string]> = [
      // Latin-1 é (0xE9) is not UTF-8: read as UTF-8 it would become U+FFFD and be pushed as "Caf�".
      [
        { 'content-type': 'application/json' },
        Buffer.from(CAFE.replace(' 🚚', ''), 'latin1'),
        400,
        BODY_ERRORS.notUtf8,
      ],
      [
        { 'content-type': 'application/json' },
        Buffer.from('{"a":"\xed\xa0\x80"}', 'latin1'),
        400,
        BODY_ERRORS.notUtf8,
      ],
      [
        { 'content-type': 'application/json; charset=iso-8859-1' },
        Buffer.from('{}'),
        415,
        BODY_ERRORS.unsupportedCharset,
      ],
      [
        { 'content-type': 'application/json; charset="utf-16le"' },
        Buffer.from('{}', 'utf16le'),
        415,
        BODY_ERRORS.unsupportedCharset,
      ],
      [
        { 'content-type': 'application/json', 'content-encoding': 'gzip' },
        gzipSync(CAFE),
        415,
        BODY_ERRORS.unsupportedEncoding,
      ],
      [
        { 'content-type': 'application/json', 'content-encoding': 'br' },
        Buffer.from(CAFE),
        415,
        BODY_ERRORS.unsupportedEncoding,
      ],
      [
        { 'content-type': 'application/json' },
        Buffer.from('{"__proto__": {"x": 1}}'),
        400,
        BODY_ERRORS.forbiddenKey,
      ],
      [{ 'content-type': 'application/json' }, Buffer.from('{"a": '), 400, 'FST_ERR_CTP_INVALID_JSON_BODY'],
    ];
    for (const [headers, payload, status, code] of cases) {
      const answer = await app.inject({ method: 'POST', url: '/', headers, payload });
      expect(answer.statusCode, code).toBe(status);
      expect(answer.json(), code).toEqual({ code });
    }
    const identity = await app.inject({
      method: 'POST',
      url: '/',
      headers: { 'content-type': 'application/json', 'content-encoding': 'identity' },
      payload: CAFE,
    });
    expect(identity.statusCode).toBe(200);
    await app.close();
  });

  it('finds the charset parameter by its name in any case, quoted or not', () => {
    expect(charsetOf('application/json')).toBeUndefined();
    expect(charsetOf('application/json; charset=UTF-8')).toBe('utf-8');
    expect(charsetOf('application/json;CHARSET = "Latin1" ; q=1')).toBe('latin1');
    expect(charsetOf('application/json; version=2; charset=utf8')).toBe('utf8');
  });
});

describe('gateway: credentials', () => {
  it('counts every Authorization and X-API-Key line of the raw headers', () => {
    expect(credentialFieldLines(['Host', 'x', 'Authorization', 'Bearer a'])).toBe(1);
    expect(credentialFieldLines(['authorization', 'Bearer a', 'AUTHORIZATION', 'Bearer b'])).toBe(2);
    expect(credentialFieldLines(['Authorization', 'Bearer a', 'X-Api-Key', 'a'])).toBe(2);
    expect(credentialFieldLines(['x-api-key', 'a', 'x-api-key', 'a'])).toBe(2);
    expect(credentialFieldLines(['Host', 'x'])).toBe(0);
  });
});

describe('gateway: an object with a key twice', () => {
  it('is refused, whichever object holds it and however the key is spelled', async () => {
    const app = await echoApp();
    const duplicated = [
      '{"tenant":"other","tenant":"acme"}',
      '{"events":[],"events":[{"a":1}]}',
      '{"events":[{"id":"a"},{"id":"b","id":"c"}]}',
      '{"data":{"k":"1","\\u006b":"2"}}',
      '{"a":{"x":1},"b":[{"y":2,"z":{"q":[1,{"r":1,"r":2}]}}]}',
    ];
    for (const payload of duplicated) {
      const answer = await app.inject({
        method: 'POST',
        url: '/',
        headers: { 'content-type': 'application/json' },
        payload,
      });
      expect([answer.statusCode, answer.json()], payload).toEqual([400, { code: BODY_ERRORS.duplicateKey }]);
    }
    // The same key in different objects, or a value equal to a key, is no duplicate.
    const distinct = [
      '{"a":{"a":{"a":"a"}},"b":["a","a",{"a":1}],"c":[{"a":1},{"a":2}]}',
      '{"k\\"":"k","k":"k\\""}',
      '{"x":"{\\"y\\":1,\\"y\\":2}"}',
    ];
    for (const payload of distinct) {
      const answer = await app.inject({
        method: 'POST',
        url: '/',
        headers: { 'content-type': 'application/json' },
        payload,
      });
      expect([answer.statusCode, answer.json()], payload).toEqual([200, { parsed: JSON.parse(payload) }]);
    }
    await app.close();
  });
});
