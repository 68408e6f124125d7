import { randomUUID } from 'node:crypto';
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import getPort from 'get-port';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeEvent } from '../../src/events/decode.ts';
import { LocalKafka } from '../../src/services/index.ts';
import { readTopic } from '../../testkit/topics.ts';
import { sampleEvent, startTestGateway, type TestGateway } from '../helpers/gateway.ts';

// A broker of this test's own, so that it can be stopped and started again (same data, same ports)
// while the gateway keeps taking requests.

const KEY = 'key-outage-0123456789';

describe('gateway while Kafka is down', () => {
  let dataDir: string;
  let ports: { port: number; controllerPort: number };
  let kafka: LocalKafka | undefined;
  let gw: TestGateway;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'aqueduct-gw-kafka-'));
    const port = await getPort({ host: '127.0.0.1' });
    ports = { port, controllerPort: await getPort({ host: '127.0.0.1', exclude: [port] }) };
    kafka = await LocalKafka.start({ dataDir, ...ports });
    gw = await startTestGateway({
      keys: { [KEY]: 'acme' },
      brokers: kafka.brokers,
      partitions: 3,
      env: { AQUEDUCT_GATEWAY_PRODUCE_TIMEOUT_MS: '3000', AQUEDUCT_GATEWAY_RETRY_AFTER_SECONDS: '3' },
    });
  });

  afterAll(async () => {
    await gw?.close();
    await kafka?.stop();
    await rm(dataDir, { recursive: true, force: true });
  });

  const batch = (phase: string, n = 25) => ({
    events: Array.from({ length: n }, (_, i) =>
      sampleEvent(`${phase}-${i}-${randomUUID().slice(0, 6)}`, { id: `${phase}-${i}` }),
    ),
  });

  it('answers 503 with Retry-After, never 202, and loses or half-writes nothing once the broker is back', async () => {
    const accepted: string[] = [];
    const refused: string[] = [];
    for (const phase of ['before-a', 'before-b']) {
      const answer = await gw.post(batch(phase), { key: KEY });
      expect(answer.status).toBe(202);
      accepted.push(...(answer.body.ids ?? []));
    }
    await kafka?.stop();
    kafka = undefined;
    for (const phase of ['down-a', 'down-b', 'down-c']) {
      const answer = await gw.post(batch(phase), { key: KEY });
      expect(answer.status, phase).toBe(503);
      expect(answer.headers.get('retry-after')).toBe('3');
      // Sent and unanswered, or never sent: either way the body lists the ids a retry may reuse.
      expect(['outcome-unknown', 'unavailable'], phase).toContain(answer.body.error);
      expect(answer.body.ids, phase).toHaveLength(25);
      refused.push(...batch(phase).events.map((e) => e.id as string));
    }
    expect((await fetch(`${gw.gateway.adminUrl}/readyz`)).status).toBe(503);

    // LocalKafka formats a data dir unless <dataDir>/meta.properties exists, but the broker keeps that file
    // in log.dirs (<dataDir>/logs): put a copy where LocalKafka looks, so the restart keeps the data.
    await copyFile(join(dataDir, 'logs', 'meta.properties'), join(dataDir, 'meta.properties'));
    kafka = await LocalKafka.start({ dataDir, ...ports });
    // The gateway reconnects by itself and says so through /readyz.
    for (let i = 0; i < 60 && (await fetch(`${gw.gateway.adminUrl}/readyz`)).status !== 200; i++)
      await sleep(500);
    expect((await fetch(`${gw.gateway.adminUrl}/readyz`)).status).toBe(200);
    for (const phase of ['after-a', 'after-b']) {
      const answer = await gw.post(batch(phase), { key: KEY });
      expect(answer.status, phase).toBe(202);
      accepted.push(...(answer.body.ids ?? []));
    }

    const onTopic = (await readTopic(gw.kafka, gw.topic)).map((message) => {
      const decoded = decodeEvent(message.value);
      expect(decoded.ok).toBe(true);
      return decoded.ok ? decoded.event.id : '';
    });
    // Every 202 is there exactly once; nothing answered 503 is (no batch half-written).
    expect([...onTopic].sort()).toEqual([...accepted].sort());
    expect(onTopic.filter((id) => refused.includes(id))).toEqual([]);
  });
});
