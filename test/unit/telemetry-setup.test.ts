import { Writable } from 'node:stream';
import { trace } from '@opentelemetry/api';
import { ExportResultCode } from '@opentelemetry/core';
import { BatchSpanProcessor, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import type { IHeaders } from 'kafkajs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { headerNumber, headerString } from '../../src/kafka/headers.ts';
import { createLogger } from '../../src/log.ts';
import type { PipelineObserver } from '../../src/pipeline/observer.ts';
import { extractTraceContext, injectTraceContext } from '../../src/telemetry/kafka-context.ts';
import { combineObservers } from '../../src/telemetry/observers.ts';
import { startProducerSpan } from '../../src/telemetry/producer-tracing.ts';
import {
  isTracingEnabled,
  startTracing,
  type Tracing,
  tracingConfigured,
} from '../../src/telemetry/tracing.ts';

let tracing: Tracing | undefined;
afterEach(async () => {
  await tracing?.shutdown();
  tracing = undefined;
});

function capture(): { lines: () => Array<Record<string, unknown>>; stream: Writable } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk.toString('utf8'));
      done();
    },
  });
  return {
    stream,
    lines: () =>
      chunks
        .join('')
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as Record<string, unknown>),
  };
}

describe('when tracing is on', () => {
  it('is on only when OTEL_* names somewhere to send spans', () => {
    expect(tracingConfigured({})).toBe(false);
    expect(tracingConfigured({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on' })).toBe(false);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' })).toBe(false);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toBe(true);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' })).toBe(true);
    expect(tracingConfigured({ OTEL_TRACES_EXPORTER: 'console' })).toBe(true);
    expect(tracingConfigured({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c' })).toBe(
      false,
    );
    expect(tracingConfigured({ OTEL_SDK_DISABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c' })).toBe(
      false,
    );
    // An exporter the SDK does not have is no exporter: the SDK would build none.
    expect(
      tracingConfigured({ OTEL_TRACES_EXPORTER: 'jaeger', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c' }),
    ).toBe(false);
    expect(tracingConfigured({ OTEL_TRACES_EXPORTER: 'jaeger, otlp' })).toBe(true);
  });

  it('names every OTEL_* value the SDK would set aside, in a warning of its own', async () => {
    const out = capture();
    const logger = createLogger('info', 'aqueduct', out.stream);
    tracing = await startTracing('aqueduct-test', {
      spanProcessors: [new SimpleSpanProcessor({ exporter: new InMemorySpanExporter() })],
      logger,
      env: {
        OTEL_TRACES_EXPORTER: 'otlp,jaeger',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/xml',
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: 'half',
        OTEL_PROPAGATORS: 'tracecontext,xray',
        OTEL_BSP_SCHEDULE_DELAY: '-5',
      },
    });
    const warnings = out
      .lines()
      .filter((line) => line.otel === true && line.level === 40)
      .map((line) => String(line.msg));
    expect(warnings).toEqual([
      expect.stringMatching(/^OTEL_TRACES_EXPORTER="jaeger" is not one of otlp, console, none: left out$/),
      expect.stringMatching(
        /^OTEL_EXPORTER_OTLP_PROTOCOL="http\/xml" is not one of .*: using http\/protobuf$/,
      ),
      expect.stringMatching(/^OTEL_TRACES_SAMPLER_ARG="half" is not a ratio from 0 to 1: using 1$/),
      expect.stringMatching(/^OTEL_PROPAGATORS="xray" is not one of .*: left out$/),
      expect.stringMatching(/^OTEL_BSP_SCHEDULE_DELAY="-5" is not a number greater than 0/),
    ]);
    await tracing.shutdown();
    tracing = undefined;

    // Tracing off because of an exporter the SDK does not have: said, not silent.
    const off = capture();
    const none = await startTracing('aqueduct-test', {
      logger: createLogger('info', 'aqueduct', off.stream),
      env: { OTEL_TRACES_EXPORTER: 'jaeger', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' },
    });
    expect(none.enabled).toBe(false);
    expect(off.lines().map((line) => line.msg)).toEqual([
      'OTEL_TRACES_EXPORTER="jaeger" is not one of otlp, console, none: no spans are exported',
    ]);
    // Nothing to say when all is well.
    const quiet = capture();
    await startTracing('aqueduct-test', {
      logger: createLogger('info', 'aqueduct', quiet.stream),
      env: { OTEL_TRACES_SAMPLER: 'always_on', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' },
    });
    expect(quiet.lines()).toEqual([]);
  });

  it('starts nothing when not configured, and starts, restarts and stops when given span processors', async () => {
    const off = await startTracing('aqueduct-test', { env: {} });
    expect(off.enabled).toBe(false);
    expect(isTracingEnabled()).toBe(false);
    expect(
      injectTraceContext(
        {},
        trace.setSpan(
          extractTraceContext(undefined),
          trace.wrapSpanContext({ traceId: 'a'.repeat(32), spanId: 'b'.repeat(16), traceFlags: 1 }),
        ),
      ),
    ).toEqual({});

    for (let round = 0; round < 2; round++) {
      const memory = new InMemorySpanExporter();
      const processor = new SimpleSpanProcessor({ exporter: memory });
      tracing = await startTracing('aqueduct-test', { spanProcessors: [processor] });
      expect(isTracingEnabled()).toBe(true);
      await expect(startTracing('again', { spanProcessors: [] })).rejects.toThrow(/already started/);
      trace.getTracer('t').startSpan('one').end();
      await processor.forceFlush();
      // (The in-memory exporter forgets its spans when shut down.)
      expect(memory.getFinishedSpans().map((s) => s.name)).toEqual(['one']);
      expect(memory.getFinishedSpans()[0]?.resource.attributes['service.name']).toBe('aqueduct-test');
      await tracing.shutdown();
      tracing = undefined;
      expect(isTracingEnabled()).toBe(false);
      trace.getTracer('t').startSpan('after shutdown').end();
      expect(memory.getFinishedSpans()).toEqual([]);
    }
  });

  it('shuts down without an error when the collector took no spans, and says the spans are lost', async () => {
    const out = capture();
    // What the OTLP exporter's batch processor does with a collector down: its shutdown rejects.
    const refusing = new SimpleSpanProcessor({ exporter: new InMemorySpanExporter() });
    refusing.shutdown = () => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:4318'));
    tracing = await startTracing('aqueduct-test', {
      spanProcessors: [refusing],
      logger: createLogger('info', 'aqueduct', out.stream),
    });
    trace.getTracer('t').startSpan('lost').end();
    await expect(tracing.shutdown()).resolves.toBeUndefined();
    tracing = undefined;
    expect(isTracingEnabled()).toBe(false);
    expect(out.lines()).toEqual([
      expect.objectContaining({
        level: 40,
        otel: true,
        msg: 'trace export failed at shutdown; the last spans are lost',
        detail: 'connect ECONNREFUSED 127.0.0.1:4318',
      }),
    ]);
  });

  it('logs batches the collector refuses while running as one short line, not one serialized error per batch', async () => {
    const out = capture();
    let attempts = 0;
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:4318'), {
      code: 'ECONNREFUSED',
      address: '127.0.0.1',
    });
    const processor = new BatchSpanProcessor({
      exporter: {
        export: (_spans, done) => {
          attempts++;
          done({ code: ExportResultCode.FAILED, error: refused });
        },
        shutdown: async () => {},
      },
      maxExportBatchSize: 1,
      scheduledDelayMillis: 1,
    });
    tracing = await startTracing('aqueduct-test', {
      spanProcessors: [processor],
      logger: createLogger('info', 'aqueduct', out.stream),
    });
    for (let i = 0; i < 5; i++) trace.getTracer('t').startSpan(`lost ${i}`).end();
    await vi.waitFor(() => expect(attempts).toBe(5));
    expect(out.lines()).toEqual([
      {
        level: 50,
        time: expect.any(Number),
        pid: process.pid,
        name: 'aqueduct',
        otel: true,
        detail: 'connect ECONNREFUSED 127.0.0.1:4318',
        msg: 'telemetry export failed: spans lost; the next failures are summarized every 30 s',
      },
    ]);
  });

  it('records a failed send on its PRODUCER span: error status, error.type and the exception', async () => {
    const memory = new InMemorySpanExporter();
    const processor = new SimpleSpanProcessor({ exporter: memory });
    tracing = await startTracing('aqueduct-test', { spanProcessors: [processor] });
    const failure = new Error('This server does not host this topic-partition');
    failure.name = 'KafkaJSProtocolError';
    startProducerSpan('notifications', { id: 'e-1', platform: 'fcm', token: 'secret-token' }).end(failure);
    await processor.forceFlush();
    const [span] = memory.getFinishedSpans();
    expect(span?.status.code).toBe(2);
    expect(span?.attributes['error.type']).toBe('KafkaJSProtocolError');
    expect(
      span?.events.map((e) => [
        e.name,
        e.attributes?.['exception.type'],
        e.attributes?.['exception.message'],
      ]),
    ).toEqual([['exception', 'KafkaJSProtocolError', failure.message]]);
    expect(JSON.stringify(span?.attributes)).not.toContain('secret-token');
  });

  it('carries W3C trace context through Kafka headers (strings in, Buffers out as kafkajs gives them)', async () => {
    tracing = await startTracing('aqueduct-test', {
      spanProcessors: [new SimpleSpanProcessor({ exporter: new InMemorySpanExporter() })],
    });
    const span = trace.getTracer('t').startSpan('producer');
    const headers = injectTraceContext({}, trace.setSpan(extractTraceContext(undefined), span));
    const { traceId, spanId } = span.spanContext();
    expect(headers.traceparent).toBe(`00-${traceId}-${spanId}-01`);
    const fromKafka = { traceparent: Buffer.from(headers.traceparent ?? '') };
    expect(trace.getSpanContext(extractTraceContext(fromKafka))).toMatchObject({
      traceId,
      spanId,
      isRemote: true,
    });
    // Kafka header values may be null (a Java producer's `headers.add(name, null)`), alone or repeated:
    // such a header is absent, and the trace starts anew.
    const nulls = [{ traceparent: null }, { traceparent: [null, null] }] as unknown as IHeaders[];
    for (const headers of nulls) expect(trace.getSpanContext(extractTraceContext(headers))).toBeUndefined();
    expect(
      headerString({ 'aqueduct-attempt': null } as unknown as IHeaders, 'aqueduct-attempt'),
    ).toBeUndefined();
    expect(headerNumber({ 'aqueduct-attempt': [null] } as unknown as IHeaders, 'aqueduct-attempt', 1)).toBe(
      1,
    );
    span.end();
  });

  it('starts a new trace for a message with two traceparent headers, and combines repeated tracestate headers', async () => {
    tracing = await startTracing('aqueduct-test', {
      spanProcessors: [new SimpleSpanProcessor({ exporter: new InMemorySpanExporter() })],
    });
    const first = `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`;
    const second = `00-${'3'.repeat(32)}-${'4'.repeat(16)}-01`;
    // As kafkajs gives a repeated header: an array of Buffers, in the record's order.
    for (const traceparent of [
      [first, second],
      [first, first],
    ]) {
      const headers = { traceparent: traceparent.map((value) => Buffer.from(value)) };
      expect(trace.getSpanContext(extractTraceContext(headers))).toBeUndefined();
    }
    const combined = trace.getSpanContext(
      extractTraceContext({
        traceparent: [Buffer.from(first)],
        tracestate: [Buffer.from('a=1'), Buffer.from('b=2')],
      }),
    );
    expect(combined?.traceId).toBe('1'.repeat(32));
    expect(combined?.traceState?.serialize()).toBe('a=1,b=2');
  });
});

describe('logs', () => {
  it('carry trace_id and span_id inside an active span, and nothing of the kind outside one', async () => {
    tracing = await startTracing('aqueduct-test', {
      spanProcessors: [new SimpleSpanProcessor({ exporter: new InMemorySpanExporter() })],
    });
    const out = capture();
    const logger = createLogger('info', 'aqueduct', out.stream);
    logger.info('outside');
    const ids = trace.getTracer('t').startActiveSpan('work', (span) => {
      logger.info('inside');
      span.end();
      return span.spanContext();
    });
    const [outside, inside] = out.lines();
    expect(outside).not.toHaveProperty('trace_id');
    expect(inside).toMatchObject({
      msg: 'inside',
      trace_id: ids.traceId,
      span_id: ids.spanId,
      trace_flags: '01',
    });
  });

  it('redact token, credential and notification fields even when someone logs them', () => {
    const out = capture();
    const logger = createLogger('debug', 'aqueduct', out.stream);
    const token = 'f00d'.repeat(16);
    logger.info(
      {
        token,
        event: { token, notification: { title: 'secret sale' } },
        headers: { authorization: 'Bearer x' },
      },
      'oops',
    );
    const text = JSON.stringify(out.lines());
    expect(text).not.toContain(token);
    expect(text).not.toContain('secret sale');
    expect(text).not.toContain('Bearer x');
    expect(text).toContain('[redacted]');
  });

  it('honour the level', () => {
    const out = capture();
    const logger = createLogger('warn', 'aqueduct', out.stream);
    logger.info('quiet');
    logger.warn('loud');
    expect(out.lines().map((l) => l.msg)).toEqual(['loud']);
  });
});

describe('combineObservers', () => {
  it('nests the wrappers (first outermost), calls each notification of each observer, and leaves unused hooks undefined', async () => {
    const calls: string[] = [];
    const a: Partial<PipelineObserver> = {
      async acquire(_pool, _n, take) {
        calls.push('a>');
        const granted = await take();
        calls.push('<a');
        return granted;
      },
      paused: () => calls.push('a paused'),
    };
    const b: Partial<PipelineObserver> = {
      async send(_context, send) {
        calls.push('b>');
        return send();
      },
      paused: () => calls.push('b paused'),
    };
    const c: Partial<PipelineObserver> = {
      async acquire(_pool, _n, take) {
        calls.push('c>');
        return take();
      },
    };
    const combined = combineObservers(a, b, c);
    const granted = await combined.acquire(
      {} as never,
      3,
      async () => {
        calls.push('take');
        return 2;
      },
      { topic: 't', partition: 0, items: [] },
    );
    expect(granted).toBe(2);
    expect(await combined.send({ platform: 'fcm', requests: [], items: [] }, async () => [])).toEqual([]);
    combined.paused?.('t', 0, 10);
    expect(calls).toEqual(['a>', 'c>', 'take', '<a', 'b>', 'a paused', 'b paused']);
    expect(combined.received).toBeUndefined();
    expect(combined.settled).toBeUndefined();
  });
});
