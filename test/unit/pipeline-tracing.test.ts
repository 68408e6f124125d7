import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import type { KafkaMessage } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import type { NotificationEvent } from '../../src/events/event.ts';
import type { TokenPool } from '../../src/limiter/token-pool.ts';
import { IdempotencyKey } from '../../src/pipeline/idempotency-key.ts';
import type { Item } from '../../src/pipeline/item.ts';
import { PipelineTracing } from '../../src/telemetry/pipeline-tracing.ts';
import { startTracing, type Tracing } from '../../src/telemetry/tracing.ts';

let tracing: Tracing | undefined;
afterEach(async () => {
  await tracing?.shutdown();
  tracing = undefined;
});

const TOPIC = 'notifications';
const event = {
  id: 'e-1',
  tenant: 'acme',
  platform: 'fcm',
  priority: 'normal',
  token: 't',
} as NotificationEvent;

function itemAt(offset: number): Item {
  const message = {
    offset: String(offset),
    headers: {},
    timestamp: '0',
    key: null,
    value: null,
  } as KafkaMessage;
  return {
    offset: String(offset),
    message,
    decoded: { ok: true, event } as Item['decoded'],
    attempt: 1,
    fromRetryTopic: false,
    throttles: 0,
    notBefore: 0,
    publishedAtMs: 0,
    dedupeKey: new IdempotencyKey(`acme:${offset}`),
  };
}

async function tracingInMemory(): Promise<{
  finished(): Promise<ReturnType<InMemorySpanExporter['getFinishedSpans']>>;
}> {
  const memory = new InMemorySpanExporter();
  const processor = new SimpleSpanProcessor({ exporter: memory });
  tracing = await startTracing('aqueduct-test', { spanProcessors: [processor] });
  return {
    async finished() {
      await processor.forceFlush();
      return memory.getFinishedSpans();
    },
  };
}

describe('PipelineTracing', () => {
  it("makes a message's creation context both the parent and a link of its CONSUMER span", async () => {
    const memory = await tracingInMemory();
    const tracer = new PipelineTracing({ groupId: 'g' });
    const creation = { traceId: '1'.repeat(32), spanId: '2'.repeat(16) };
    const item = itemAt(3);
    item.message.headers = { traceparent: Buffer.from(`00-${creation.traceId}-${creation.spanId}-01`) };
    tracer.received(item, TOPIC, 0);
    tracer.settled([item], TOPIC, 0);
    const [span] = await memory.finished();
    expect(span?.parentSpanContext).toMatchObject(creation);
    expect(span?.links.map((link) => link.context)).toEqual([expect.objectContaining(creation)]);
    expect(span?.spanContext().traceId).toBe(creation.traceId);
  });

  it('names the group that read the message: the read-back group for the deferred topic', async () => {
    const memory = await tracingInMemory();
    const tracer = new PipelineTracing({ groupId: 'g', deferredTopic: `${TOPIC}.deferred` });
    const [main, retry, deferred] = [itemAt(1), itemAt(2), itemAt(3)];
    tracer.received(main, TOPIC, 0);
    tracer.received(retry, `${TOPIC}.retry`, 0);
    tracer.received(deferred, `${TOPIC}.deferred`, 0);
    tracer.settled([main], TOPIC, 0);
    tracer.settled([retry], `${TOPIC}.retry`, 0);
    tracer.settled([deferred], `${TOPIC}.deferred`, 0);
    const spans = await memory.finished();
    expect(spans.map((s) => [s.name, s.attributes['messaging.consumer.group.name']])).toEqual([
      [`process ${TOPIC}`, 'g'],
      [`process ${TOPIC}.retry`, 'g'],
      [`process ${TOPIC}.deferred`, 'g.deferred'],
    ]);
  });

  it('names a parked or deferred event so on its CONSUMER span, and ends an acquire span left without a token', async () => {
    const memory = await tracingInMemory();
    const tracer = new PipelineTracing({ groupId: 'g' });
    const [parked, deferred] = [itemAt(7), itemAt(8)];
    for (const item of [parked, deferred]) tracer.received(item, TOPIC, 0);
    const pool = { buckets: [{ name: 'fcm' }] } as unknown as TokenPool;
    // Both wait for a token; none comes before the one is parked and the other held for its device.
    await tracer.acquire(pool, 2, async () => 0, { topic: TOPIC, partition: 0, items: [parked, deferred] });
    tracer.parked(event, parked);
    tracer.deferred(event, deferred);
    tracer.settled([parked, deferred], TOPIC, 0);

    const spans = await memory.finished();
    const consumers = spans.filter((s) => s.name === `process ${TOPIC}`);
    expect(consumers.map((s) => s.attributes['aqueduct.outcome'])).toEqual(['parked', 'deferred']);
    expect(consumers.map((s) => s.attributes['messaging.kafka.offset'])).toEqual([7, 8]);
    expect(consumers.map((s) => s.attributes['kafka.offset'])).toEqual([7, 8]);
    const acquires = spans.filter((s) => s.name === 'acquire tokens');
    expect(acquires).toHaveLength(2);
    for (const acquire of acquires) {
      expect(acquire.events.map((e) => e.name)).toEqual(['tokens short', 'ended without a token']);
    }
  });
});
