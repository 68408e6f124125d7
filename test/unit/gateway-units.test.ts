import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { propagation, ROOT_CONTEXT, SpanKind, TraceFlags, trace } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, SamplingDecision, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { decodeEvent } from '../../src/events/decode.ts';
import { EVENT_LIMITS } from '../../src/events/event.ts';
import { admissionBucketName, policyHeaders, rateLimitHeaders } from '../../src/gateway/admission.ts';
import { ApiKeys, hashApiKey } from '../../src/gateway/api-keys.ts';
import {
  apiKeyHashes,
  defaultTenantLimit,
  gatewayConfigMarkdown,
  loadGatewayConfig,
  redactGatewayConfig,
  tenantLimitOverrides,
} from '../../src/gateway/config.ts';
import { prepareBody } from '../../src/gateway/events.ts';
import { openApiDocument } from '../../src/gateway/openapi.ts';
import {
  callerContext,
  endRequestTrace,
  gatewaySampler,
  startRequestTrace,
  w3cTraceContext,
} from '../../src/gateway/tracing.ts';
import { bucketTag } from '../../src/limiter/keys.ts';
import { messageKey } from '../../src/publish/publisher.ts';
import { startTracing } from '../../src/telemetry/tracing.ts';

const event = (extra: Record<string, unknown> = {}) => ({
  platform: 'fcm',
  token: 'device-token-1',
  notification: { title: 'Hi', body: 'there' },
  ...extra,
});

describe('gateway: preparing a body', () => {
  const options = { tenant: 'acme', maxBatch: 3, newId: () => 'assigned-1' };

  it('gives an event without an id one, stamps the key tenant, and writes exactly the validated JSON', () => {
    const prepared = prepareBody(event({ data: { k: 'é"\n' } }), options);
    expect(prepared.ok).toBe(true);
    if (!prepared.ok) return;
    const [only] = prepared.events;
    expect(only?.id).toBe('assigned-1');
    expect(only?.value).toBe(
      JSON.stringify({ id: 'assigned-1', ...event({ data: { k: 'é"\n' } }), tenant: 'acme' }),
    );
    expect(only?.key).toBe(messageKey({ platform: 'fcm', token: 'device-token-1' }));
    // What the consumer decodes is the same event.
    const decoded = decodeEvent(Buffer.from(only?.value ?? ''));
    expect(decoded.ok && decoded.event.tenant).toBe('acme');
  });

  it("keeps the caller's id, field order and tenant", () => {
    const sent = { tenant: 'acme', id: 'mine-7', ...event() };
    const prepared = prepareBody({ events: [sent] }, options);
    expect(prepared.ok && prepared.events.map((e) => [e.id, e.value])).toEqual([
      ['mine-7', JSON.stringify(sent)],
    ]);
  });

  it.each([
    ['a body that is not an object', 'text', 400, 'invalid-body', 'the body must be one event'],
    ['an empty batch', { events: [] }, 400, 'invalid-body', 'events: must hold at least one event'],
    ['a batch with extra keys', { events: [event()], more: 1 }, 400, 'invalid-body', 'unexpected: more'],
    ['a missing field', event({ token: undefined }), 400, 'invalid-event', 'token: '],
    [
      'a bad field in a batch',
      { events: [event(), event({ platform: 'sms' })] },
      400,
      'invalid-event',
      'events[1].platform: ',
    ],
    [
      'a nested bad field',
      { events: [event({ notification: { title: 1, body: '' } })] },
      400,
      'invalid-event',
      'events[0].notification.title: ',
    ],
    ['an unknown field', event({ colour: 'red' }), 400, 'invalid-event', 'colour'],
    [
      'a data key FCM reserves',
      { events: [event(), event({ data: { from: 'shop' } })] },
      400,
      'invalid-event',
      'events[1].data.from: reserved by FCM (from, message_type, and keys starting with google or gcm)',
    ],
    [
      'a duplicate id',
      { events: [event({ id: 'x' }), event({ id: 'x' })] },
      400,
      'duplicate-id',
      'events[1].id: the same id as events[0]',
    ],
    [
      'another tenant',
      { events: [event(), event({ tenant: 'globex' })] },
      403,
      'tenant-mismatch',
      'events[1].tenant: ',
    ],
    // A tenant that is no tenant name is a malformed event, not a request for another tenant.
    [
      'a null tenant',
      { events: [event(), event({ tenant: null })] },
      400,
      'invalid-event',
      'events[1].tenant: ',
    ],
    ['a numeric tenant', event({ tenant: 7 }), 400, 'invalid-event', 'tenant: '],
    [
      'too many events',
      { events: [event(), event(), event(), event()] },
      413,
      'too-many-events',
      'events: 4 events in one request, limit 3',
    ],
    [
      'an event above the message size limit',
      {
        events: [
          event({
            data: Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`k${i}`, 'v'.repeat(1000)])),
          }),
        ],
      },
      413,
      'event-too-large',
      `events[0]: `,
    ],
    [
      "an event whose push would be above the providers' 4096-byte payload limit",
      {
        events: [
          event({
            data: Object.fromEntries(Array.from({ length: 5 }, (_, i) => [`k${i}`, 'v'.repeat(1000)])),
          }),
        ],
      },
      413,
      'payload-too-large',
      "events[0]: FCM's payload (keys and values) would be 5",
    ],
    [
      'an event nested deeper than JSON.stringify can write back (a 1 MiB body can nest 500 000 levels)',
      {
        events: [event(), event({ data: { k: JSON.parse(`${'['.repeat(200_000)}${']'.repeat(200_000)}`) } })],
      },
      400,
      'invalid-event',
      'events[1]: JSON nested too deeply',
    ],
  ])('refuses %s, naming the problem', (_name, body, status, error, message) => {
    const prepared = prepareBody(body, options);
    expect(prepared.ok).toBe(false);
    if (prepared.ok) return;
    expect(prepared.status).toBe(status);
    expect(prepared.error).toBe(error);
    expect(prepared.message).toContain(message);
    expect(prepared.message).not.toContain('device-token-1');
  });

  it('states the event size limit in bytes', () => {
    const big = event({
      data: Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`k${i}`, 'v'.repeat(1000)])),
    });
    const prepared = prepareBody(big, options);
    expect(!prepared.ok && prepared.message).toMatch(
      new RegExp(`^\\(event\\): \\d+ bytes as JSON, limit ${EVENT_LIMITS.maxMessageBytes}$`),
    );
  });
});

describe('gateway: docs/gateway.md', () => {
  it('keeps the settings table of docs/gateway.md what src/gateway/config.ts says', () => {
    const page = readFileSync(new URL('../../docs/gateway.md', import.meta.url), 'utf8');
    const begin = '<!-- gateway-config:begin -->\n';
    const table = page.slice(
      page.indexOf(begin) + begin.length,
      page.indexOf('\n<!-- gateway-config:end -->'),
    );
    expect(table).toBe(gatewayConfigMarkdown());
  });
});

describe('gateway: API keys', () => {
  it('finds the tenant of a key by its SHA-256, from either header, and only that way', () => {
    expect(hashApiKey('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    const keys = new ApiKeys(new Map([[hashApiKey('k-acme'), 'acme']]));
    expect(keys.authenticate({ authorization: 'Bearer k-acme' })).toEqual({ ok: true, tenant: 'acme' });
    expect(keys.authenticate({ 'x-api-key': 'k-acme' })).toEqual({ ok: true, tenant: 'acme' });
    expect(keys.authenticate({ authorization: `Bearer ${hashApiKey('k-acme')}` })).toMatchObject({
      ok: false,
      reason: 'unknown',
    });
    expect(keys.authenticate({ authorization: 'Basic k-acme' })).toMatchObject({
      ok: false,
      reason: 'missing',
    });
    expect(keys.authenticate({})).toMatchObject({ ok: false, reason: 'missing' });
  });

  it('reads a Bearer field without exactly one key as malformed, never as no key (RFC 6750 §2.1, §3.1)', () => {
    const keys = new ApiKeys(new Map([[hashApiKey('k-acme'), 'acme']]));
    for (const authorization of ['Bearer', 'Bearer ', 'bearer k-acme extra', 'Bearer k-acme k-acme']) {
      expect(keys.authenticate({ authorization, 'x-api-key': 'k-acme' }), authorization).toMatchObject({
        ok: false,
        reason: 'malformed',
      });
    }
    expect(keys.authenticate({ authorization: 'BEARER  k-acme ' })).toEqual({ ok: true, tenant: 'acme' });
    // Another scheme carries no Bearer key (beside X-API-Key the app refuses the two as ambiguous first).
    expect(keys.authenticate({ authorization: 'Bearerish k-acme' })).toMatchObject({
      ok: false,
      reason: 'missing',
    });
  });
});

describe('gateway: configuration', () => {
  const hash = hashApiKey('k');

  it('reads keys, limits and overrides from the environment and masks the keys', () => {
    const config = loadGatewayConfig({
      AQUEDUCT_GATEWAY_API_KEYS: JSON.stringify({ [hash]: 'acme' }),
      AQUEDUCT_TENANT_RATE: '50',
      AQUEDUCT_GATEWAY_TENANT_LIMITS: '{"big": {"rate": 1000, "burst": 5000}, "small": {"rate": 0.5}}',
    });
    expect(config.AQUEDUCT_GATEWAY_PORT).toBe(8080);
    expect(config.AQUEDUCT_GATEWAY_MAX_PIPELINED).toBe(256);
    expect(config.AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES).toBeUndefined();
    expect([...apiKeyHashes(config)]).toEqual([[hash, 'acme']]);
    expect(defaultTenantLimit(config)).toEqual({ rate: 50, burst: 50 });
    expect([...tenantLimitOverrides(config)]).toEqual([
      ['big', { rate: 1000, burst: 5000 }],
      ['small', { rate: 0.5, burst: 1 }],
    ]);
    expect(JSON.stringify(redactGatewayConfig(config))).not.toContain(hash);
  });

  it('reads the keys from AQUEDUCT_GATEWAY_API_KEYS_FILE (as any setting from X_FILE), and refuses none or both', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'aqueduct-keys-')), 'keys.json');
    writeFileSync(file, `${JSON.stringify({ [hashApiKey('other')]: 'globex' })}\n`);
    const config = loadGatewayConfig({ AQUEDUCT_GATEWAY_API_KEYS_FILE: file });
    expect([...apiKeyHashes(config)]).toEqual([[hashApiKey('other'), 'globex']]);
    expect(() => apiKeyHashes(loadGatewayConfig({}))).toThrow(
      /AQUEDUCT_GATEWAY_API_KEYS: no API key configured/,
    );
    expect(() =>
      loadGatewayConfig({
        AQUEDUCT_GATEWAY_API_KEYS: JSON.stringify({ [hash]: 'acme' }),
        AQUEDUCT_GATEWAY_API_KEYS_FILE: file,
      }),
    ).toThrow(/AQUEDUCT_GATEWAY_API_KEYS and AQUEDUCT_GATEWAY_API_KEYS_FILE are both set/);
  });

  it.each([
    [
      { AQUEDUCT_GATEWAY_API_KEYS: '{"raw-secret-key": "acme"}' },
      /^(?!.*raw-secret-key).*AQUEDUCT_GATEWAY_API_KEYS: a key is not a lower-case hex SHA-256/,
    ],
    [{ AQUEDUCT_GATEWAY_API_KEYS: 'nope' }, /AQUEDUCT_GATEWAY_API_KEYS: not JSON/],
    [
      { AQUEDUCT_GATEWAY_API_KEYS: `{"${hashApiKey('k')}": "a b"}` },
      /AQUEDUCT_GATEWAY_API_KEYS\.[0-9a-f]{8}…: letters/,
    ],
    [
      { AQUEDUCT_GATEWAY_TENANT_LIMITS: '{"acme": {"rate": -1}}' },
      /AQUEDUCT_GATEWAY_TENANT_LIMITS\.acme\.rate: /,
    ],
    [{ AQUEDUCT_GATEWAY_MAX_BATCH: '0' }, /AQUEDUCT_GATEWAY_MAX_BATCH: /],
    [{ AQUEDUCT_GATEWAY_MAX_PIPELINED: '0' }, /AQUEDUCT_GATEWAY_MAX_PIPELINED: /],
    [{ AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES: '1.5' }, /AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES: /],
    [
      { AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES: '1000', AQUEDUCT_GATEWAY_MAX_BODY_BYTES: '2000' },
      /AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES: must be at least AQUEDUCT_GATEWAY_MAX_BODY_BYTES/,
    ],
    [{ AQUEDUCT_TENANT_RATE: 'fast' }, /AQUEDUCT_TENANT_RATE: /],
  ])('names the bad field of %j', (env, message) => {
    expect(() => loadGatewayConfig(env)).toThrow(message);
  });
});

describe('gateway: rate-limit fields', () => {
  const limit = { rate: 50, burst: 200 };

  it('writes the draft-ietf-httpapi-ratelimit-headers policy and state as structured fields', () => {
    expect(rateLimitHeaders({ kind: 'admitted', limit, remaining: 120, resetSeconds: 2 })).toEqual({
      'ratelimit-policy': '"tenant";q=200;w=4',
      ratelimit: '"tenant";r=120;t=2',
    });
    expect(
      rateLimitHeaders({
        kind: 'throttled',
        limit,
        remaining: 3,
        resetSeconds: 4,
        retryAfterSeconds: 1,
        waitMs: 800,
      }).ratelimit,
    ).toBe('"tenant";r=3;t=4');
    expect(policyHeaders({ rate: 1000, burst: 10 })).toEqual({ 'ratelimit-policy': '"tenant";q=10;w=1' });
    expect(rateLimitHeaders({ kind: 'unlimited' })).toEqual({});
    expect(policyHeaders(null)).toEqual({});
  });

  it("keeps each tenant's admission bucket under a hash tag of its own, apart from the providers", () => {
    expect(admissionBucketName('acme')).toBe('gateway.acme');
    expect(bucketTag(admissionBucketName('acme'))).toBe('gateway.acme');
    expect(bucketTag(admissionBucketName('globex'))).not.toBe(bucketTag(admissionBucketName('acme')));
  });
});

describe("gateway: the caller's trace context", () => {
  const getter = {
    keys: (c: Record<string, string>) => Object.keys(c),
    get: (c: Record<string, string>, k: string) => c[k],
  };
  const setter = {
    set: (c: Record<string, string>, k: string, v: string) => {
      c[k] = v;
    },
  };

  it("is @opentelemetry/core's W3C propagator, which ignores malformed traceparents", () => {
    expect(w3cTraceContext).toBeInstanceOf(W3CTraceContextPropagator);
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const ctx = w3cTraceContext.extract(ROOT_CONTEXT, { traceparent }, getter);
    expect(trace.getSpanContext(ctx)?.traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    for (const bad of [
      '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
      'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra',
      'garbage',
    ]) {
      expect(trace.getSpanContext(callerContext({ traceparent: bad })), bad).toBeUndefined();
    }
  });

  it('keeps the trace and span ids, drops baggage and clears every flag', () => {
    const ctx = callerContext({
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      baggage: 'userId=alice,isAdmin=true',
    });
    expect(propagation.getBaggage(ctx)).toBeUndefined();
    const out: Record<string, string> = {};
    w3cTraceContext.inject(ctx, out, setter);
    expect(out).toEqual({ traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00' });
    // Flags W3C has not defined are not passed on either (the propagator would write `-010`).
    for (const flags of ['10', '80', 'ff', '03']) {
      const written: Record<string, string> = {};
      w3cTraceContext.inject(
        callerContext({ traceparent: `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-${flags}` }),
        written,
        setter,
      );
      expect(written.traceparent, flags).toBe('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00');
    }
  });

  it("samples a request with a caller's parent as one without: the caller's flag decides nothing", async () => {
    const sampler = await gatewaySampler({
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0',
    });
    const sampled = trace.setSpanContext(ROOT_CONTEXT, {
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      spanId: '00f067aa0ba902b7',
      traceFlags: TraceFlags.SAMPLED,
      isRemote: true,
    });
    const decision = sampler?.shouldSample(
      sampled,
      '4bf92f3577b34da6a3ce929d0e0e4736',
      'POST',
      SpanKind.SERVER,
      {},
      [],
    );
    expect(decision?.decision).toBe(SamplingDecision.NOT_RECORD);
    const always = await gatewaySampler({ OTEL_TRACES_SAMPLER: 'parentbased_always_on' });
    const unsampled = trace.setSpanContext(ROOT_CONTEXT, {
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      spanId: '00f067aa0ba902b7',
      traceFlags: TraceFlags.NONE,
      isRemote: true,
    });
    expect(
      always?.shouldSample(unsampled, '4bf92f3577b34da6a3ce929d0e0e4736', 'POST', SpanKind.SERVER, {}, [])
        .decision,
    ).toBe(SamplingDecision.RECORD_AND_SAMPLED);
    expect(await gatewaySampler({ OTEL_TRACES_SAMPLER: 'jaeger_remote' })).toBeUndefined();
  });
});

describe("gateway: the request's SERVER span", () => {
  it('carries what the HTTP server conventions require, and is an error (with error.type) only for a 5xx', async () => {
    const memory = new InMemorySpanExporter();
    const processor = new SimpleSpanProcessor({ exporter: memory });
    const tracing = await startTracing('aqueduct-test', { spanProcessors: [processor] });
    try {
      for (const status of [202, 400, 503])
        endRequestTrace(startRequestTrace({}, { 'aqueduct.tenant': 't' }), status);
      await processor.forceFlush();
      const spans = memory.getFinishedSpans();
      expect(spans.map((s) => s.kind)).toEqual([SpanKind.SERVER, SpanKind.SERVER, SpanKind.SERVER]);
      for (const span of spans) {
        expect(span.attributes).toMatchObject({
          'http.request.method': 'POST',
          'http.route': '/v1/notifications',
          'url.path': '/v1/notifications',
          'url.scheme': 'http',
        });
      }
      expect(spans.map((s) => s.attributes['error.type'])).toEqual([undefined, undefined, '503']);
      expect(spans.map((s) => s.status.code)).toEqual([0, 0, 2]);
    } finally {
      await tracing.shutdown();
    }
  });
});

describe('gateway: OpenAPI document', () => {
  const document = openApiDocument({ version: '0.1.0', maxBatch: 500, maxBodyBytes: 1 << 20 });

  it('is a valid OpenAPI 3.1 document', async () => {
    const result = await new Validator().validate(document);
    expect(result.errors).toBeUndefined();
    expect(result.valid).toBe(true);
  });

  it("describes the contract's event (id optional) and every answer of the ingest route", () => {
    const ajv = new Ajv2020({ strict: false });
    const schemas = (document.components as { schemas: Record<string, object> }).schemas;
    const validateEvent = ajv.compile(schemas.NotificationEvent as object);
    expect(validateEvent(event())).toBe(true);
    expect(validateEvent(event({ platform: 'sms' }))).toBe(false);
    const post = (document.paths as Record<string, { post?: { responses: object } }>)['/v1/notifications']
      ?.post;
    expect(Object.keys(post?.responses ?? {}).sort()).toEqual([
      '202',
      '400',
      '401',
      '403',
      '404',
      '405',
      '408',
      '413',
      '414',
      '415',
      '417',
      '429',
      '431',
      '500',
      '501',
      '503',
      '505',
    ]);
    // The admin routes are served on the admin port, so the API's document does not list them.
    expect(Object.keys(document.paths as object)).toEqual(['/v1/notifications']);
  });

  type Json = Record<string, unknown>;
  /** Each error answer's status and the `error` values the document gives it. */
  const documentedErrors = (): Array<[string, string]> => {
    const responses = (document.paths as Record<string, { post: { responses: Record<string, Json> } }>)[
      '/v1/notifications'
    ]?.post.responses;
    return Object.entries(responses ?? {}).flatMap(([status, response]) => {
      const schema = (response.content as Json | undefined)?.['application/json'] as Json | undefined;
      const allOf = ((schema?.schema as Json | undefined)?.allOf ?? []) as Json[];
      const types = allOf.flatMap(
        (part) => ((part.properties as Json | undefined)?.error as Json)?.enum ?? [],
      );
      return (types as string[]).map((type): [string, string] => [status, type]);
    });
  };

  it("lists every `error` the gateway's code answers with, and no other", () => {
    // Every `error: '…'` of an answer, and every refusal of a body (`reject(status, '…', …)`); the admin
    // app's routes are not in this document.
    const dir = new URL('../../src/gateway/', import.meta.url);
    const inCode = new Set<string>();
    for (const file of readdirSync(dir)) {
      if (!file.endsWith('.ts') || file === 'openapi.ts' || file === 'admin-app.ts') continue;
      const source = readFileSync(new URL(file, dir), 'utf8');
      for (const match of source.matchAll(/\berror: '([^']+)'|\breject\(\s*\d{3},\s*'([^']+)'/g)) {
        inCode.add(match[1] ?? match[2] ?? '');
      }
    }
    expect(inCode.size).toBeGreaterThan(20);
    const inDocument = new Set(documentedErrors().map(([, type]) => type));
    expect([...inDocument].sort()).toEqual([...inCode].sort());
  });

  it("names every status and `error` of the document in docs/gateway.md's table of answers", () => {
    const page = readFileSync(new URL('../../docs/gateway.md', import.meta.url), 'utf8');
    const table = page.slice(page.indexOf('| answer | when |'));
    const answers = table
      .slice(0, table.indexOf('\n\n'))
      .split('\n')
      .map((row) => row.slice(0, row.indexOf(' | ')));
    const missing = documentedErrors().filter(
      ([status, type]) =>
        !answers.some((answer) => answer.includes(`\`${status}\``) && answer.includes(`\`${type}\``)),
    );
    expect(missing).toEqual([]);
  });
});
