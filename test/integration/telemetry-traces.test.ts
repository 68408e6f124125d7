import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { SpanKind } from '@opentelemetry/api';
import { InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { type ConsumerApp, startConsumerApp } from '../../src/consume/command.ts';
import type { NotificationEventInput } from '../../src/events/event.ts';
import { createLogger } from '../../src/log.ts';
import { generateEvents } from '../../src/publish/generate.ts';
import { publishEvents } from '../../src/publish/publisher.ts';
import { startTracing, type Tracing } from '../../src/telemetry/tracing.ts';
import { type Rig, startRig } from '../helpers/pipeline.ts';

/**
 * The trace of an event from publish to provider answer, with the consumer assembled in-process exactly
 * as `aqueduct consume` assembles it (startConsumerApp), so that an in-memory exporter sees every span:
 * real Kafka, a private redis-server, both provider simulators.
 */

let rig: Rig | undefined;
let app: ConsumerApp | undefined;
let tracing: Tracing | undefined;
afterEach(async () => {
  await app?.stop();
  await tracing?.shutdown();
  await rig?.close();
  app = undefined;
  tracing = undefined;
  rig = undefined;
});

/** Tracing into memory; `finished()` waits for the exports in flight, then lists every span. */
async function startTracingInMemory(): Promise<{ finished(): Promise<ReadableSpan[]> }> {
  const memory = new InMemorySpanExporter();
  const processor = new SimpleSpanProcessor({ exporter: memory });
  tracing = await startTracing('aqueduct-test', { spanProcessors: [processor] });
  expect(tracing.enabled).toBe(true);
  return {
    async finished() {
      await processor.forceFlush();
      return memory.getFinishedSpans();
    },
  };
}

/** Log lines of the in-process consumer, kept for the scan. */
function captureLogs(): { lines: string[]; logger: ReturnType<typeof createLogger> } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      done();
    },
  });
  return { lines, logger: createLogger('debug', 'aqueduct', stream) };
}

/** Polls until `read` is positive (at most 30 s). */
async function waitFor(read: () => number): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (read() <= 0) {
    if (Date.now() > deadline) throw new Error('waited 30 s in vain');
    await sleep(20);
  }
}

function must<T>(value: T | undefined): T {
  expect(value).toBeDefined();
  return value as T;
}

function attr(span: ReadableSpan, name: string): unknown {
  return span.attributes[name];
}

function childrenOf(spans: readonly ReadableSpan[], parent: ReadableSpan): ReadableSpan[] {
  const { traceId, spanId } = parent.spanContext();
  return spans.filter((s) => s.spanContext().traceId === traceId && s.parentSpanContext?.spanId === spanId);
}

/** Every string in every attribute and event attribute of every span. */
function spanStrings(spans: readonly ReadableSpan[]): string[] {
  const out: string[] = [];
  const add = (attributes: Record<string, unknown> | undefined) => {
    for (const value of Object.values(attributes ?? {})) out.push(JSON.stringify(value));
  };
  for (const span of spans) {
    out.push(span.name, span.status.message ?? '');
    add(span.attributes);
    for (const event of span.events) {
      out.push(event.name);
      add(event.attributes);
    }
  }
  return out;
}

describe('tracing an event from publish to provider answer (in-memory exporter)', () => {
  it('puts PRODUCER, CONSUMER, acquire and CLIENT spans of each event in ONE trace, with their attributes', async () => {
    const memory = await startTracingInMemory();
    // 503s now and then (retries), and FCM answering 429 with Retry-After until the first one is seen.
    rig = await startRig({
      partitions: 2,
      rate: 1000,
      burst: 1000,
      simulator: { faults: { error503: 0.2 }, seed: 7 },
    });
    rig.simulators.fcm.setFaults({ storm: { retryAfterSeconds: 1 } });
    // A fixed sequence in place of Math.random: 5 dead tokens of 40, 20 events per platform, every run
    // (with chance, none of 40 was dead in 1.5% of runs, and the test found no invalid-token span).
    let draw = 0;
    const random = () => (draw++ * 0.618033988749895) % 1;
    const events: NotificationEventInput[] = [
      ...generateEvents({ count: 40, deadTokenRatio: 0.1, tenants: ['acme', 'globex'], random }),
    ];
    await publishEvents(rig.kafka, events, { topic: rig.topic });
    const logs = captureLogs();
    app = await startConsumerApp(loadConfig({ ...rig.env, AQUEDUCT_HTTP_PORT: '0' }), {
      logger: logs.logger,
    });
    await waitFor(() => rig?.simulators.fcm.stats().throttled ?? 0);
    rig.simulators.fcm.setFaults({ storm: null });
    await rig.settle(events.map((e) => e.id));
    await app.stop();
    app = undefined;
    const spans = await memory.finished();

    for (const event of events) {
      const producer = spans.find(
        (s) => s.kind === SpanKind.PRODUCER && attr(s, 'aqueduct.event.id') === event.id,
      );
      expect(producer, `PRODUCER span of ${event.id}`).toBeDefined();
      if (!producer) continue;
      expect(producer.name).toBe(`send ${rig.topic}`);
      expect(attr(producer, 'messaging.destination.name')).toBe(rig.topic);
      // Every reading of the event (attempt 1 from the topic, later ones from the retry topic) is a
      // CONSUMER span parented by the producer's context from the headers: one trace.
      const readings = childrenOf(spans, producer).filter((s) => s.kind === SpanKind.CONSUMER);
      expect(readings.length, `CONSUMER spans of ${event.id}`).toBeGreaterThanOrEqual(1);
      const sends = readings.flatMap((r) => childrenOf(spans, r).filter((s) => s.kind === SpanKind.CLIENT));
      const acquires = readings.flatMap((r) =>
        childrenOf(spans, r).filter((s) => s.name === 'acquire tokens'),
      );
      expect(acquires.length, `acquire spans of ${event.id}`).toBeGreaterThanOrEqual(1);
      expect(sends.length, `CLIENT spans of ${event.id}`).toBeGreaterThanOrEqual(1);

      for (const reading of readings) {
        expect(reading.spanContext().traceId).toBe(producer.spanContext().traceId);
        expect(attr(reading, 'messaging.system')).toBe('kafka');
        expect([rig.topic, `${rig.topic}.retry`]).toContain(attr(reading, 'messaging.destination.name'));
        expect(['0', '1']).toContain(attr(reading, 'messaging.destination.partition.id'));
        expect(attr(reading, 'kafka.offset')).toBeTypeOf('number');
        expect(attr(reading, 'aqueduct.event.id')).toBe(event.id);
        expect(attr(reading, 'aqueduct.tenant')).toBe(event.tenant);
        expect(attr(reading, 'aqueduct.platform')).toBe(event.platform);
        expect(attr(reading, 'messaging.consumer.group.name')).toBe(rig.env.AQUEDUCT_GROUP_ID);
        expect(attr(reading, 'aqueduct.device.token_id')).toMatch(/^[A-Za-z0-9_-]{22}$/);
        expect(['delivered', 'invalid-token', 'retry', 'dead-lettered']).toContain(
          attr(reading, 'aqueduct.outcome'),
        );
      }
      for (const acquire of acquires) {
        expect(acquire.kind).toBe(SpanKind.INTERNAL);
        expect(attr(acquire, 'aqueduct.tokens.requested')).toBeGreaterThanOrEqual(1);
        expect(attr(acquire, 'aqueduct.tokens.granted')).toBeGreaterThanOrEqual(1);
        expect(attr(acquire, 'aqueduct.tokens.wait_ms')).toBeGreaterThanOrEqual(0);
        expect(attr(acquire, 'aqueduct.buckets')).toContain(event.platform);
      }
      for (const send of sends) {
        expect(attr(send, 'aqueduct.provider')).toBe(event.platform);
        expect(attr(send, 'http.request.method')).toBe('POST');
        expect(attr(send, 'server.address')).toBeTypeOf('string');
        expect(attr(send, 'aqueduct.attempt')).toBeGreaterThanOrEqual(1);
        expect(['delivered', 'invalid-token', 'retry']).toContain(attr(send, 'aqueduct.outcome'));
      }
      // One final answer (or, after too many retries, a dead letter), and it is the right one.
      const final = sends.filter((s) => attr(s, 'aqueduct.outcome') !== 'retry');
      expect(final.length).toBeLessThanOrEqual(1);
      if (final[0]) {
        const dead = event.token.startsWith('dead-');
        expect(attr(final[0], 'aqueduct.outcome')).toBe(dead ? 'invalid-token' : 'delivered');
      } else {
        expect(readings.map((r) => attr(r, 'aqueduct.outcome'))).toContain('dead-lettered');
      }
    }

    const clients = spans.filter((s) => s.kind === SpanKind.CLIENT);
    const delivered = must(clients.find((s) => attr(s, 'aqueduct.outcome') === 'delivered'));
    expect(attr(delivered, 'http.response.status_code')).toBe(200);
    expect(delivered.status.code).toBe(0); // unset: fine
    const invalid = must(clients.find((s) => attr(s, 'aqueduct.outcome') === 'invalid-token'));
    expect([404, 410]).toContain(attr(invalid, 'http.response.status_code'));
    expect(attr(invalid, 'error.type')).toBe(String(attr(invalid, 'http.response.status_code')));
    // 429s with Retry-After, and the retry that followed: attempt 2, resend count 1, same trace.
    const throttled = must(clients.find((s) => attr(s, 'aqueduct.throttled') === true));
    expect(attr(throttled, 'http.response.status_code')).toBe(429);
    expect(attr(throttled, 'aqueduct.retry_after_ms')).toBeGreaterThanOrEqual(1000);
    const resent = must(clients.find((s) => attr(s, 'aqueduct.attempt') === 2));
    expect(attr(resent, 'http.request.resend_count')).toBe(1);

    // No device token in any span or log line.
    const exported = spanStrings(spans).join('\n');
    const logged = logs.lines.join('\n');
    expect(logs.lines.length).toBeGreaterThan(3);
    for (const event of events) {
      expect(exported.includes(event.token), `token of ${event.id} in a span`).toBe(false);
      expect(logged.includes(event.token), `token of ${event.id} in a log line`).toBe(false);
    }
  });

  it('keeps every reading of an event in one trace when its producer sent no valid traceparent', async () => {
    const memory = await startTracingInMemory();
    // Half the pushes answered 503: most events are read again from the retry topic.
    rig = await startRig({
      partitions: 1,
      rate: 1000,
      burst: 1000,
      simulator: { faults: { error503: 0.5 }, seed: 3 },
    });
    const events = [...generateEvents({ count: 20, apnsRatio: 0.5 })];
    // As Kafka's console producer writes them: no traceparent at all, or one W3C refuses (upper case).
    const invalid = `00-${'AB'.repeat(16)}-${'CD'.repeat(8)}-01`;
    const producer = rig.kafka.producer();
    await producer.connect();
    await producer.send({
      topic: rig.topic,
      messages: events.map((event, i) => ({
        value: JSON.stringify(event),
        ...(i % 2 === 1 ? { headers: { traceparent: invalid, tracestate: 'x=1' } } : {}),
      })),
    });
    await producer.disconnect();
    app = await startConsumerApp(loadConfig({ ...rig.env, AQUEDUCT_HTTP_PORT: '0' }), {
      logger: createLogger('silent'),
    });
    await rig.settle(events.map((e) => e.id));
    await app.stop();
    app = undefined;
    const spans = await memory.finished();

    let retried = 0;
    for (const event of events) {
      const readings = spans
        .filter((s) => s.kind === SpanKind.CONSUMER && attr(s, 'aqueduct.event.id') === event.id)
        .sort((a, b) => Number(attr(a, 'aqueduct.attempt')) - Number(attr(b, 'aqueduct.attempt')));
      expect(readings.length, `CONSUMER spans of ${event.id}`).toBeGreaterThanOrEqual(1);
      const [first, ...later] = readings;
      if (!first) continue;
      // The first reading starts the trace; each later one, from the retry topic, continues it.
      expect(first.parentSpanContext).toBeUndefined();
      expect(first.spanContext().traceId).not.toBe('ab'.repeat(16));
      for (const reading of later) {
        retried++;
        expect(
          reading.spanContext().traceId,
          `trace of ${event.id}, attempt ${attr(reading, 'aqueduct.attempt')}`,
        ).toBe(first.spanContext().traceId);
        expect(reading.spanContext().traceState?.get('x')).toBeUndefined();
      }
    }
    expect(retried).toBeGreaterThan(0);
  });

  it('shows a throttled wait as pause and resume events on the acquire span', async () => {
    const memory = await startTracingInMemory();
    rig = await startRig({ partitions: 1, rate: 40, burst: 10 });
    const events = [...generateEvents({ count: 60, apnsRatio: 0 })];
    await publishEvents(rig.kafka, events, { topic: rig.topic });
    app = await startConsumerApp(loadConfig({ ...rig.env, AQUEDUCT_HTTP_PORT: '0' }), {
      logger: createLogger('silent'),
    });
    await rig.settle(events.map((e) => e.id));
    await app.stop();
    app = undefined;

    const acquires = (await memory.finished()).filter((s) => s.name === 'acquire tokens');
    expect(acquires.length).toBe(events.length);
    const waited = acquires.filter((s) => s.events.some((e) => e.name === 'partition paused'));
    expect(waited.length).toBeGreaterThan(0);
    for (const span of waited) {
      const names = span.events.map((e) => e.name);
      expect(names).toContain('tokens short');
      expect(names).toContain('partition resumed');
      expect(names.indexOf('partition paused')).toBeLessThan(names.indexOf('partition resumed'));
      const resumed = span.events.find((e) => e.name === 'partition resumed');
      expect(resumed?.attributes?.['aqueduct.paused_ms']).toBeGreaterThanOrEqual(0);
      expect(attr(span, 'aqueduct.tokens.takes')).toBeGreaterThan(1);
      expect(attr(span, 'aqueduct.tokens.wait_ms')).toBeGreaterThan(0);
    }
  });
});
