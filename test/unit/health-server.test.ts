import net from 'node:net';
import { Gauge, Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { type HealthServer, startHealthServer } from '../../src/telemetry/http-server.ts';

/** A client that sends a request line and then one header line a second, never finishing. */
function slowClient(port: number): { socket: net.Socket; closed: Promise<void>; stop(): void } {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => {});
  socket.write('GET /healthz HTTP/1.1\r\nHost: probe\r\n');
  const drip = setInterval(() => socket.write('X-Slow: 1\r\n'), 1000);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return { socket, closed, stop: () => clearInterval(drip) };
}

describe("the consumer's health and metrics server", () => {
  let server: HealthServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  it('answers the probes and the scrape, 405 for other methods, 404 elsewhere', async () => {
    let ready = false;
    const registry = new Registry();
    server = await startHealthServer({ port: 0, host: '127.0.0.1', isReady: () => ready, registry });
    const url = (path: string) => `http://127.0.0.1:${server?.port}${path}`;
    expect((await fetch(url('/healthz'))).status).toBe(200);
    expect((await fetch(url('/readyz'))).status).toBe(503);
    ready = true;
    expect(await (await fetch(url('/readyz?verbose'))).json()).toEqual({ status: 'ready' });
    expect((await fetch(url('/metrics'))).headers.get('content-type')).toBe(registry.contentType);
    const post = await fetch(url('/healthz'), { method: 'POST', body: 'x' });
    expect([post.status, post.headers.get('allow')]).toEqual([405, 'GET, HEAD']);
    expect((await fetch(url('/nothing'))).status).toBe(404);
  });

  it('answers a scrape whose collection failed with 500 and a typed body', async () => {
    const registry = new Registry();
    new Gauge({
      name: 'aqueduct_failing_collect',
      help: 'a gauge whose collection throws',
      registers: [registry],
      collect() {
        throw new Error('collection failed');
      },
    });
    server = await startHealthServer({ port: 0, host: '127.0.0.1', isReady: () => true, registry });
    const answer = await fetch(`http://127.0.0.1:${server.port}/metrics`);
    expect(answer.status).toBe(500);
    expect(answer.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(await answer.text()).toBe('collection failed');
  });

  it('closes at once although a client is still sending its headers', async () => {
    server = await startHealthServer({ port: 0, host: '127.0.0.1', isReady: () => true });
    const client = slowClient(server.port);
    await new Promise((resolve) => setTimeout(resolve, 200));
    try {
      // With Node's defaults close() waits for that request: up to its 60 s header deadline.
      await server.close();
      await client.closed;
    } finally {
      client.stop();
      server = undefined;
    }
  });

  it('drops a client that does not finish its headers within the deadline', async () => {
    server = await startHealthServer({ port: 0, host: '127.0.0.1', isReady: () => true });
    const client = slowClient(server.port);
    try {
      // The deadline is 5 s, checked every second; Node's default would keep the client for 60 s.
      await client.closed;
    } finally {
      client.stop();
    }
  }, 15_000);
});
