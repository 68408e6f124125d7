import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, vi } from 'vitest';
import { boundedFastify, closeGently } from '../../src/gateway/bounded-server.ts';

describe('bounded server: shutting down', () => {
  it("answers a request that arrives while it closes with 503 in the API's shape, after the one it was serving", async () => {
    const refused: number[] = [];
    const app = boundedFastify({}, { onRefused: (status) => refused.push(status) });
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    app.get('/slow', async () => {
      await held;
      return { ok: true };
    });
    app.get('/fast', async () => ({ ok: true }));
    await app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = app.server.address() as { port: number };

    const socket = connect(port, '127.0.0.1');
    let received = '';
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('utf8');
    });
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.write('GET /slow HTTP/1.1\r\nHost: x\r\n\r\n');
    await sleep(100);
    const closing = closeGently(app);
    // A second request on the kept-alive connection that is still being served.
    socket.write('GET /fast HTTP/1.1\r\nHost: x\r\n\r\n');
    await sleep(100);
    release();
    await closing;
    await closed;

    const answers = received.split(/(?=HTTP\/1\.1 \d{3} )/);
    expect(answers.map((answer) => answer.slice(0, 12))).toEqual(['HTTP/1.1 200', 'HTTP/1.1 503']);
    expect(answers[1]?.toLowerCase()).toContain('retry-after: 1');
    expect(JSON.parse(answers[1]?.split('\r\n\r\n')[1] ?? '')).toMatchObject({ error: 'shutting-down' });
    expect(refused).toEqual([503]);
  });
});

describe('bounded server: pipelining', () => {
  it.each([
    ['by default', {}, 256],
    ['with maxPipelined (AQUEDUCT_GATEWAY_MAX_PIPELINED)', { maxPipelined: 10 }, 10],
    ['with maxPipelined 1: no pipelining, one request at a time', { maxPipelined: 1 }, 1],
  ])(
    'works on the pipelined requests of a connection one at a time, answers them in order, and refuses those beyond what may wait with 429 before closing, %s',
    async (_name, limits, pending) => {
      const refused: number[] = [];
      const app = boundedFastify(limits, { onRefused: (status) => refused.push(status) });
      let release: () => void = () => {};
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      let inApp = 0;
      let mostInApp = 0;
      let handled = 0;
      app.get('/held/:n', async (request) => {
        inApp += 1;
        handled += 1;
        mostInApp = Math.max(mostInApp, inApp);
        await held;
        inApp -= 1;
        return { n: Number((request.params as { n: string }).n) };
      });
      await app.listen({ host: '127.0.0.1', port: 0 });
      const { port } = app.server.address() as { port: number };
      try {
        const socket = connect(port, '127.0.0.1');
        let received = '';
        socket.on('data', (chunk: Buffer) => {
          received += chunk.toString('utf8');
        });
        const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
        // 300 requests in one write: Node parses all that one read brings in at once.
        socket.write(
          Array.from({ length: 300 }, (_, n) => `GET /held/${n} HTTP/1.1\r\nHost: x\r\n\r\n`).join(''),
        );
        await vi.waitFor(() => expect(handled).toBe(1));
        release();
        await closed;

        expect(mostInApp).toBe(1);
        const answers = received.split(/(?=HTTP\/1\.1 \d{3} )/);
        expect(answers).toHaveLength(pending + 1);
        expect(
          answers.slice(0, pending).map((answer) => JSON.parse(answer.split('\r\n\r\n')[1] ?? '')),
        ).toEqual(Array.from({ length: pending }, (_, n) => ({ n })));
        const last = answers[pending] ?? '';
        expect(last.slice(0, 12)).toBe('HTTP/1.1 429');
        expect(last.toLowerCase()).toContain('connection: close');
        expect(JSON.parse(last.split('\r\n\r\n')[1] ?? '')).toMatchObject({ error: 'too-many-pipelined' });
        expect(handled).toBe(pending);
        expect(refused).toEqual([429]);
      } finally {
        release();
        await app.close();
      }
    },
  );
});

describe('bounded server: the connection cap', () => {
  it('makes room for a new client by closing the oldest connection that holds no request, never one that does', async () => {
    const app = boundedFastify({ maxConnections: 4 });
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    app.get('/held', async () => {
      await held;
      return { held: true };
    });
    app.get('/fast', async () => ({ fast: true }));
    await app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = app.server.address() as { port: number };
    const open = (first?: string) => {
      const socket = connect(port, '127.0.0.1');
      const client = { socket, received: '', closed: false };
      socket.on('data', (chunk: Buffer) => {
        client.received += chunk.toString('utf8');
      });
      socket.on('error', () => {});
      socket.on('close', () => {
        client.closed = true;
      });
      if (first !== undefined) socket.write(first);
      return client;
    };
    const clients: Array<ReturnType<typeof open>> = [];
    try {
      // One connection waits for its answer; three send nothing, or their headers only in part.
      const busy = open('GET /held HTTP/1.1\r\nHost: x\r\n\r\n');
      clients.push(busy);
      const silent = [open(), open('GET /fast HTTP/1.1\r\nHo'), open()];
      clients.push(...silent);
      await vi.waitFor(async () => {
        const count = await new Promise<number>((resolve, reject) =>
          app.server.getConnections((error, n) => (error ? reject(error) : resolve(n))),
        );
        expect(count).toBe(4);
      });
      // Two new clients (kept alive): each is served, in the place of the oldest connection without work.
      for (const n of [0, 1]) {
        const client = open('GET /fast HTTP/1.1\r\nHost: x\r\n\r\n');
        clients.push(client);
        await vi.waitFor(() => expect(client.received).toContain('{"fast":true}'));
        await vi.waitFor(() => expect(silent[n]?.closed).toBe(true));
      }
      expect(silent[2]?.closed).toBe(false);
      expect(busy.closed).toBe(false);
      release();
      await vi.waitFor(() => expect(busy.received).toContain('{"held":true}'));
    } finally {
      release();
      for (const { socket } of clients) socket.destroy();
      await app.close();
    }
  });
});
