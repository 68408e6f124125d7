import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { generateEvents } from '../../src/publish/generate.ts';
import { publishEvents } from '../../src/publish/publisher.ts';
import { type ConsumerProcess, spawnConsumer } from '../../testkit/fleet.ts';
import { readTopic } from '../../testkit/topics.ts';
import { type Rig, startRig } from '../helpers/pipeline.ts';
import {
  OTLP_KIND,
  type OtlpReceiver,
  type ReceivedSpan,
  startOtlpReceiver,
} from '../helpers/telemetry-otlp.ts';

/**
 * The observability of real `aqueduct consume` and `aqueduct publish` processes: spans over OTLP/HTTP to
 * a receiver started here (the consumer in http/json, the publisher in http/protobuf), /metrics scraped
 * during and after a throttled run with dead tokens, retries and a poison message, /readyz around the
 * group join, and a scan of everything they emitted for device tokens.
 */

const CLI = fileURLToPath(new URL('../../bin/aqueduct.js', import.meta.url));
const run = promisify(execFile);

let rig: Rig | undefined;
let receiver: OtlpReceiver | undefined;
afterEach(async () => {
  await rig?.close();
  await receiver?.close();
  rig = undefined;
  receiver = undefined;
});

/** One Prometheus sample: name, labels, value. */
interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/.exec(line);
    if (!match) throw new Error(`not a Prometheus sample: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, key, value] of (match[3] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[key as string] = value as string;
    }
    samples.push({ name: match[1] as string, labels, value: Number(match[4]) });
  }
  return samples;
}

/** The sum of a metric's samples whose labels include `where`. */
function total(samples: Sample[], name: string, where: Record<string, string> = {}): number {
  return samples
    .filter((s) => s.name === name && Object.entries(where).every(([k, v]) => s.labels[k] === v))
    .reduce((sum, s) => sum + s.value, 0);
}

function httpPortOf(consumer: ConsumerProcess): number {
  const line = consumer.logs.find((l) => l.msg === 'health server listening');
  if (typeof line?.httpPort !== 'number') throw new Error('no health server port in the log');
  return line.httpPort;
}

async function get(port: number, path: string): Promise<{ status: number; text: string }> {
  const response = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: response.status, text: await response.text() };
}

async function until<T>(what: string, read: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${what}`);
    await sleep(50);
  }
}

describe('observability of the consumer and publisher processes', () => {
  it('exports spans over OTLP/HTTP, serves sane /metrics during and after a run, and never emits a device token', async () => {
    receiver = await startOtlpReceiver();
    const otlp = receiver;
    rig = await startRig({
      partitions: 2,
      rate: 50,
      burst: 20,
      simulator: { faults: { error503: 0.05 }, seed: 11 },
    });
    const r = rig;
    const consumer = await r.startConsumer('traced', {
      OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_SERVICE_NAME: 'aqueduct-consumer',
      // Batches leave when 512 spans are queued, the rest only when the process shuts down: every span
      // arriving proves the flush on SIGTERM.
      OTEL_BSP_SCHEDULE_DELAY: '600000',
      LOG_LEVEL: 'debug',
    });
    const port = httpPortOf(consumer);

    // Scraped all through the run, from before the first event.
    const scrapes: string[] = [];
    const scrape = async () => {
      const { status, text } = await get(port, '/metrics');
      expect(status).toBe(200);
      scrapes.push(text);
      return parseMetrics(text);
    };
    const duringRun: Sample[][] = [];
    let running = true;
    const poller = (async () => {
      while (running) {
        duringRun.push(await scrape());
        await sleep(50);
      }
    })();

    // Published by `aqueduct publish` (its PRODUCER spans go out in http/protobuf), plus one poison message.
    const events = [...generateEvents({ count: 300, deadTokenRatio: 0.1, tenants: ['acme', 'globex'] })];
    const file = join(r.logDir, 'events.jsonl');
    await writeFile(file, `${events.map((e) => JSON.stringify(e)).join('\n')}\n`);
    const published = await run(process.execPath, [CLI, 'publish', file, '--topic', r.topic], {
      env: {
        ...process.env,
        KAFKA_BROKERS: r.env.KAFKA_BROKERS,
        OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
        OTEL_SERVICE_NAME: 'aqueduct-publish',
      },
    });
    expect(JSON.parse(published.stdout.trim().split('\n').at(-1) ?? '{}')).toMatchObject({ published: 300 });
    await publishEvents(r.kafka, ['{"this is": not json'], { topic: r.topic, validate: false });
    const ledger = await r.settle(events.map((e) => e.id));
    running = false;
    await poller;
    // During the run (throttled: 300 events at 2 × 50/s): partitions were paused at times, lag was shown
    // (on the topic, or on its deferred topic where the tenants' excess over their fair share waits), and
    // no value was out of range.
    expect(duringRun.some((samples) => total(samples, 'aqueduct_partitions_paused') >= 1)).toBe(true);
    const backlog = (samples: Sample[]) =>
      total(samples, 'aqueduct_consumer_lag', { topic: r.topic }) +
      total(samples, 'aqueduct_consumer_lag', { topic: `${r.topic}.deferred` });
    expect(duringRun.some((samples) => backlog(samples) > 0)).toBe(true);
    for (const samples of duringRun) {
      // 2 partitions each of the topic, its retry topic and its deferred topic.
      expect(total(samples, 'aqueduct_partitions_paused')).toBeLessThanOrEqual(6);
      for (const lag of samples.filter((s) => s.name === 'aqueduct_consumer_lag')) {
        // The series itself in the failure message: which partition, which value.
        expect({
          lag,
          inRange: Number.isInteger(lag.value) && lag.value >= 0 && lag.value <= events.length + 1,
        }).toEqual({ lag, inRange: true });
      }
    }
    // After the run: the counters agree with what the simulators and the topics recorded.
    const after = await until('the lag to fall to 0', async () => {
      const samples = await scrape();
      return backlog(samples) === 0 && total(samples, 'aqueduct_dead_letters_total') === 1
        ? samples
        : undefined;
    });
    expect(total(after, 'aqueduct_pushes_total', { outcome: 'delivered' })).toBe(ledger.delivered.size);
    expect(ledger.acceptedTotal).toBe(ledger.delivered.size);
    expect(total(after, 'aqueduct_pushes_total', { outcome: 'invalid_token' })).toBe(
      ledger.invalidTokens.size,
    );
    expect(total(after, 'aqueduct_pushes_total', { provider: 'fcm', outcome: 'delivered' })).toBeGreaterThan(
      0,
    );
    expect(total(after, 'aqueduct_pushes_total', { provider: 'apns', outcome: 'delivered' })).toBeGreaterThan(
      0,
    );
    expect(total(after, 'aqueduct_dead_letters_total', { reason: 'invalid-json' })).toBe(1);
    // Retries counted against the retry topic as it is now, with everything drained: the settling ledger
    // read the retry topic before the simulators' acceptances, so a retry written and delivered in
    // between is in its deliveries but not in its retries.
    const drained = await r.ledger();
    expect(total(after, 'aqueduct_retries_total')).toBe(drained.retried);
    expect(drained.retried).toBeGreaterThan(0);
    expect(drained.acceptedTotal).toBe(drained.delivered.size);
    const pushes = total(after, 'aqueduct_pushes_total');
    const requested = total(after, 'aqueduct_tokens_requested_total');
    const granted = total(after, 'aqueduct_tokens_granted_total');
    expect(granted).toBeLessThanOrEqual(requested);
    expect(granted).toBeGreaterThanOrEqual(pushes); // every push spent a token
    expect(total(after, 'aqueduct_bucket_acquires_total')).toBeGreaterThan(0);
    expect(total(after, 'aqueduct_bucket_rate', { provider: 'fcm' })).toBe(50);
    expect(total(after, 'aqueduct_bucket_rate', { provider: 'apns' })).toBe(50);
    for (const s of after.filter((s) => s.name === 'aqueduct_bucket_tokens')) {
      expect(s.value).toBeGreaterThanOrEqual(0);
      expect(s.value).toBeLessThanOrEqual(20);
    }
    expect(total(after, 'aqueduct_partition_pauses_total')).toBeGreaterThan(0);
    expect(total(after, 'aqueduct_throttled_seconds_total')).toBeGreaterThan(0);
    for (const provider of ['fcm', 'apns']) {
      expect(total(after, 'aqueduct_provider_send_duration_seconds_count', { provider })).toBeGreaterThan(0);
      expect(total(after, 'aqueduct_provider_send_duration_seconds_sum', { provider })).toBeGreaterThan(0);
    }
    expect(after.some((s) => s.name === 'process_cpu_user_seconds_total')).toBe(true);
    expect(await consumer.stop()).toBe(0); // flushes the last spans

    // Over the wire, one trace per event: PRODUCER (publisher, protobuf) → CONSUMER → acquire, CLIENT
    // (consumer, json).
    expect(otlp.requests['application/json']).toBeGreaterThan(0);
    expect(otlp.requests['application/x-protobuf']).toBeGreaterThan(0);
    const byParent = new Map<string, ReceivedSpan[]>();
    for (const span of otlp.spans) {
      const list = byParent.get(span.parentSpanId) ?? [];
      list.push(span);
      byParent.set(span.parentSpanId, list);
    }
    for (const event of events) {
      const producer = otlp.spans.find(
        (s) => s.kind === OTLP_KIND.producer && s.attributes['aqueduct.event.id'] === event.id,
      );
      expect(producer, `PRODUCER span of ${event.id}`).toMatchObject({
        service: 'aqueduct-publish',
        encoding: 'protobuf',
        name: `send ${r.topic}`,
      });
      if (!producer) continue;
      const readings = (byParent.get(producer.spanId) ?? []).filter((s) => s.kind === OTLP_KIND.consumer);
      expect(readings.length, `CONSUMER spans of ${event.id}`).toBeGreaterThanOrEqual(1);
      for (const reading of readings) {
        expect(reading).toMatchObject({
          service: 'aqueduct-consumer',
          encoding: 'json',
          traceId: producer.traceId,
        });
        expect(reading.attributes).toMatchObject({
          'aqueduct.event.id': event.id,
          'aqueduct.platform': event.platform,
          'aqueduct.tenant': event.tenant,
        });
      }
      const children = readings.flatMap((reading) => byParent.get(reading.spanId) ?? []);
      expect(children.some((s) => s.name === 'acquire tokens' && s.kind === OTLP_KIND.internal)).toBe(true);
      const sends = children.filter((s) => s.kind === OTLP_KIND.client);
      expect(sends.length).toBeGreaterThanOrEqual(1);
      expect(
        sends.every(
          (s) => s.traceId === producer.traceId && s.attributes['aqueduct.provider'] === event.platform,
        ),
      ).toBe(true);
    }
    const pausedWaits = otlp.spans.filter((s) => s.events.some((e) => e.name === 'partition paused'));
    expect(pausedWaits.length).toBeGreaterThan(0);

    // No device token in any log line, exported span, metric or publisher output.
    const logText = await readFile(join(r.logDir, 'traced.log'), 'utf8');
    expect(logText.split('\n').length).toBeGreaterThan(10);
    const emitted: Array<{ what: string; data: Buffer }> = [
      { what: 'consumer log', data: Buffer.from(logText) },
      { what: 'publisher output', data: Buffer.from(published.stdout + published.stderr) },
      ...scrapes.map((text) => ({ what: '/metrics', data: Buffer.from(text) })),
      ...otlp.bodies.map((body) => ({ what: 'OTLP body', data: body })),
    ];
    for (const event of events) {
      for (const { what, data } of emitted) {
        expect(data.includes(event.token), `token of ${event.id} in ${what}`).toBe(false);
      }
    }
    // The scan can find a token where one belongs: the invalid-tokens topic carries them for upstream.
    const reports = Buffer.concat(
      (await readTopic(r.kafka, `${r.topic}.invalid-tokens`)).map((m) => m.value ?? Buffer.alloc(0)),
    );
    const dead = events.filter((e) => e.token.startsWith('dead-'));
    expect(dead.length).toBeGreaterThan(0);
    expect(dead.every((e) => reports.includes(e.token))).toBe(true);
  });

  it('answers /healthz at once and /readyz only after the consumer group is joined', async () => {
    rig = await startRig({ partitions: 1, rate: 1000, burst: 1000 });
    const r = rig;
    const groupId = r.env.AQUEDUCT_GROUP_ID as string;
    await publishEvents(r.kafka, [...generateEvents({ count: 1 })], { topic: r.topic });
    // A member of the same group that is stuck in its handler: a joining member waits for it to rejoin,
    // which it cannot do until it is let go.
    const blocker = r.kafka.consumer({
      groupId,
      sessionTimeout: 30_000,
      rebalanceTimeout: 30_000,
      heartbeatInterval: 500,
    });
    let letGo: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      letGo = resolve;
    });
    let stuck: () => void = () => {};
    const isStuck = new Promise<void>((resolve) => {
      stuck = resolve;
    });
    await blocker.connect();
    await blocker.subscribe({ topic: r.topic, fromBeginning: true });
    await blocker.run({
      autoCommit: false,
      eachMessage: async () => {
        stuck();
        await held;
      },
    });
    await isStuck;

    const consumer = spawnConsumer(
      'joining',
      { ...r.env, AQUEDUCT_HTTP_PORT: '0' },
      join(r.logDir, `ready-${randomUUID()}.log`),
    );
    r.consumers.push(consumer);
    const port = await until('the health server', async () =>
      consumer.logs.some((l) => l.msg === 'health server listening') ? httpPortOf(consumer) : undefined,
    );
    // Alive, not ready: the join is held back by the stuck member.
    for (let i = 0; i < 5; i++) {
      expect((await get(port, '/healthz')).status).toBe(200);
      const ready = await get(port, '/readyz');
      expect(ready.status).toBe(503);
      expect(JSON.parse(ready.text)).toEqual({ status: 'not ready' });
      await sleep(100);
    }
    expect(consumer.logs.some((l) => l.msg === 'joined the consumer group')).toBe(false);

    letGo();
    await blocker.disconnect();
    await consumer.joined();
    const ready = await until('/readyz to answer 200', async () => {
      const answer = await get(port, '/readyz');
      return answer.status === 200 ? answer : undefined;
    });
    expect(JSON.parse(ready.text)).toEqual({ status: 'ready' });
    expect(await consumer.stop()).toBe(0);
  });
});
