import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
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
