import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { countMessages, readTopic } from '../../testkit/topics.ts';
import { sampleEvent, sendRaw, startTestGateway, type TestGateway } from '../helpers/gateway.ts';

// The gateway in-process on the run's real Kafka and Redis, against clients that hold its memory.

const KEY = 'key-hostile-0123456789';
const MAX_BODY_BYTES = 64 * 1024;

/**
 * `count` clients that each send the head of a request with the largest body and most of that body
 * (60 012 of its 64 KiB), then stall; each one's answer collects as it comes.
 */
function stallLargeBodies(port: number, count: number): Array<{ socket: Socket; answer: string }> {
  const head = `POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: ${MAX_BODY_BYTES}\r\n\r\n`;
  return Array.from({ length: count }, () => {
    const socket = connect(port, '127.0.0.1');
    const client = { socket, answer: '' };
    socket.on('data', (chunk: Buffer) => {
      client.answer += chunk.toString('utf8');
    });
    socket.on('error', () => {});
    socket.write(`${head}{"events": [${' '.repeat(60_000)}`);
    return client;
  });
}

describe('gateway against clients holding its memory', () => {
  let gw: TestGateway;

  beforeAll(async () => {
    gw = await startTestGateway({
      keys: { [KEY]: 'acme' },
      env: { AQUEDUCT_GATEWAY_MAX_BODY_BYTES: String(MAX_BODY_BYTES) },
    });
  });

  afterAll(async () => {
    await gw?.close();
  });

  it('refuses with 503 the large bodies beyond what may be read at once, and still takes a single event meanwhile', async () => {
    // 64 bodies of the largest size may be read at once (beyond each one's first 16 KiB); 150 clients
    // each send most of a large body and then stall.
    const stalled = stallLargeBodies(gw.gateway.port, 150);
    try {
      const refused = () => stalled.filter((client) => client.answer.startsWith('HTTP/1.1 503 '));
      // At most 64 × 64 KiB / (60 000 - 16 KiB) = 96 of them fit.
      await vi.waitFor(() => expect(refused().length).toBeGreaterThanOrEqual(54), { timeout: 15_000 });
      const answer = refused()[0]?.answer ?? '';
      expect(answer.toLowerCase()).toContain('connection: close');
      expect(answer.toLowerCase()).toContain('retry-after: 2');
      expect(JSON.parse(answer.split('\r\n\r\n')[1] ?? '')).toMatchObject({ error: 'unavailable' });

      const single = await gw.post(sampleEvent('held-1', { id: 'while-held-1' }), { key: KEY });
      expect([single.status, single.body]).toEqual([202, { ids: ['while-held-1'] }]);
      expect(await countMessages(gw.kafka, gw.topic)).toBe(1);
    } finally {
      for (const { socket } of stalled) socket.destroy();
    }
  });

  it('holds the bodies being read to AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES when it is set', async () => {
    // Two large bodies' worth: 2 × 64 KiB / (60 012 - 16 KiB) = 3.004, so at most 3 of 10 stalled bodies
    // fit (the default, 64 large bodies, holds all 10).
    const small = await startTestGateway({
      keys: { [KEY]: 'acme' },
      env: {
        AQUEDUCT_GATEWAY_MAX_BODY_BYTES: String(MAX_BODY_BYTES),
        AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES: String(2 * MAX_BODY_BYTES),
      },
    });
    const stalled = stallLargeBodies(small.gateway.port, 10);
    try {
      const refused = () => stalled.filter((client) => client.answer.startsWith('HTTP/1.1 503 '));
      await vi.waitFor(() => expect(refused().length).toBeGreaterThanOrEqual(7), { timeout: 15_000 });
    } finally {
      for (const { socket } of stalled) socket.destroy();
      await small.close();
    }
  });

  it('serves nothing pipelined behind a request whose answer closes the connection', async () => {
    const before = await countMessages(gw.kafka, gw.topic);
    const head = `POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n`;
    const event = JSON.stringify(sampleEvent('behind-1', { id: 'behind-close-1' }));
    const refused: Array<[string, string]> = [
      [`${head}Content-Length: 1\r\n\r\n{`, 'invalid-json'],
      [`${head}Content-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}`, 'unsupported-content-encoding'],
    ];
    for (const [first, error] of refused) {
      const response = await sendRaw(
        gw.gateway.port,
        `${first}${head}Content-Length: ${event.length}\r\n\r\n${event}`,
      );
      const answers = response.split(/(?=HTTP\/1\.1 \d{3} )/);
      expect(answers, error).toHaveLength(1);
      expect(answers[0]?.toLowerCase()).toContain('connection: close');
      expect(JSON.parse(answers[0]?.split('\r\n\r\n')[1] ?? '')).toMatchObject({ error });
    }
    // Unanswered, so unwritten: a client retrying it would otherwise have it pushed twice.
    const written = await readTopic(gw.kafka, gw.topic);
    expect(written.map((message) => JSON.parse(String(message.value)).id)).not.toContain('behind-close-1');
    expect(written).toHaveLength(before);
  });
});
