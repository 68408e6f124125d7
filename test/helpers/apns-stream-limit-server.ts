import { randomUUID } from 'node:crypto';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { generateCertificate } from '../../src/simulators/certs.ts';

/**
 * An APNs HTTP/2 endpoint that allows `maxConcurrentStreams` streams per connection (its SETTINGS, sent
 * at once and never raised) and answers each push (`POST /3/device/<hex token>`) with 200 and its
 * `apns-id` after `answerAfterMs`: a server that takes fewer streams than a client's concurrency, which
 * is what Apple's allows on a connection until a provider token is accepted. It counts what it
 * received, and the most streams it had open at once.
 */
export interface StreamLimitServer {
  url: string;
  caPem: string;
  /** Pushes answered, and the most streams open at once. */
  stats(): { answered: number; peakOpenStreams: number };
  close(): Promise<void>;
}

export async function startStreamLimitServer(options: {
  maxConcurrentStreams: number;
  answerAfterMs: number;
}): Promise<StreamLimitServer> {
  const { certPem, keyPem } = await generateCertificate();
  let open = 0;
  let peak = 0;
  let answered = 0;
  const server = http2.createSecureServer({
    key: keyPem,
    cert: certPem,
    settings: { maxConcurrentStreams: options.maxConcurrentStreams },
  });
  server.on('session', (session) => session.on('error', () => {}));
  server.on('stream', (stream, headers) => {
    open += 1;
    peak = Math.max(peak, open);
    stream.on('close', () => {
      open -= 1;
    });
    stream.on('error', () => {});
    stream.resume();
    stream.on('end', () => {
      const path = String(headers[':path'] ?? '');
      const apnsId = String(headers['apns-id'] ?? randomUUID());
      const timer = setTimeout(() => {
        if (stream.closed) return;
        if (headers[':method'] !== 'POST' || !/^\/3\/device\/[0-9a-f]+$/i.test(path)) {
          stream.respond({ ':status': 404, 'apns-id': apnsId, 'content-type': 'application/json' });
          stream.end(JSON.stringify({ reason: 'BadPath' }));
          return;
        }
        answered += 1;
        stream.respond({ ':status': 200, 'apns-id': apnsId });
        stream.end();
      }, options.answerAfterMs);
      stream.on('close', () => clearTimeout(timer));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    caPem: certPem,
    stats: () => ({ answered, peakOpenStreams: peak }),
    async close() {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
