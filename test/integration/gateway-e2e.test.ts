import { afterEach, describe, expect, it } from 'vitest';
import { hashApiKey } from '../../src/gateway/api-keys.ts';
import { headerString } from '../../src/kafka/headers.ts';
import { readTopic } from '../../testkit/topics.ts';
import { type GatewayProcess, sampleEvent, spawnGateway } from '../helpers/gateway.ts';
import { type Rig, startRig } from '../helpers/pipeline.ts';
import {
  OTLP_KIND,
  type OtlpReceiver,
  type ReceivedSpan,
  startOtlpReceiver,
} from '../helpers/telemetry-otlp.ts';

// The whole way, as deployed: a caller POSTs to `aqueduct serve`, an `aqueduct consume` process reads
// the topic and pushes to the provider simulators; both processes export their spans over OTLP to a
// receiver in this test, which must find ONE trace from the caller's request to the provider's answer.

const KEY = 'key-e2e-0123456789';
const CALLER_TRACE = '5b8efff798038103d269b633813fc60c';
const CALLER_SPAN = 'eee19b7ec3c1b174';

let rig: Rig | undefined;
let gateway: GatewayProcess | undefined;
let receiver: OtlpReceiver | undefined;
afterEach(async () => {
  await gateway?.stop();
  await rig?.close();
  await receiver?.close();
  gateway = undefined;
  rig = undefined;
  receiver = undefined;
});

describe('gateway end to end', () => {
  it('takes events from HTTP to the provider simulator through the consumer, in one trace from the request to the provider answer', async () => {
    receiver = await startOtlpReceiver();
    const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '200' };
    rig = await startRig({ partitions: 2, rate: 1000, burst: 1000, env: otel });
    gateway = await spawnGateway({
      ...rig.env,
      AQUEDUCT_GATEWAY_API_KEYS: JSON.stringify({ [hashApiKey(KEY)]: 'acme' }),
      AQUEDUCT_TENANT_RATE: '100',
    });
    const consumer = await rig.startConsumer();

    const events = Array.from({ length: 12 }, (_, i) => sampleEvent(`e2e-device-${i}`, { id: `e2e-${i}` }));
    const response = await fetch(`${gateway.url}/v1/notifications`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${KEY}`,
        traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01`,
      },
      body: JSON.stringify({ events }),
    });
    expect(response.status).toBe(202);
    const ids = ((await response.json()) as { ids: string[] }).ids;
    const ledger = await rig.settle(ids, 60_000);
    expect([...ledger.delivered].filter((id) => ids.includes(id)).sort()).toEqual([...ids].sort());

    // What the consumer read: every message carries the caller's trace.
    for (const message of await readTopic(rig.kafka, rig.topic)) {
      expect(headerString(message.headers, 'traceparent')).toMatch(
        new RegExp(`^00-${CALLER_TRACE}-[0-9a-f]{16}-01$`),
      );
    }

    // Both processes flush their spans when they stop.
    expect(await consumer.stop()).toBe(0);
    expect(await gateway.stop()).toBe(0);
    gateway = undefined;
    const spans = receiver.spans.filter((span) => span.traceId === CALLER_TRACE);
    const byId = new Map(spans.map((span) => [span.spanId, span]));
    const parentOf = (span: ReceivedSpan) => byId.get(span.parentSpanId);

    const request = spans.find(
      (span) => span.kind === OTLP_KIND.server && span.service === 'aqueduct-gateway',
    );
    expect(request?.name).toBe('POST /v1/notifications');
    expect(request?.parentSpanId).toBe(CALLER_SPAN);
    expect(request?.attributes['http.response.status_code']).toBe(202);
    for (const id of ids) {
      const producer = spans.find(
        (s) => s.kind === OTLP_KIND.producer && s.attributes['aqueduct.event.id'] === id,
      );
      expect(producer?.service, `PRODUCER span of ${id}`).toBe('aqueduct-gateway');
      expect(producer && parentOf(producer)).toBe(request);
      const reading = spans.find(
        (s) => s.kind === OTLP_KIND.consumer && s.attributes['aqueduct.event.id'] === id,
      );
      expect(reading?.service, `CONSUMER span of ${id}`).toBe('aqueduct-consumer');
      expect(reading && parentOf(reading)).toBe(producer);
      const push = spans.find((s) => s.kind === OTLP_KIND.client && s.parentSpanId === reading?.spanId);
      expect(push?.attributes['aqueduct.outcome'], `CLIENT span of ${id}`).toBe('delivered');
      expect(push?.attributes['http.response.status_code']).toBe(200);
    }
  });
});
