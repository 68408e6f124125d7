import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';

/**
 * A local OTLP/HTTP receiver for fault runs: accepts every POST (traces, in JSON or protobuf) and
 * keeps the raw bodies, so that they can be scanned for what must never be exported. It decodes
 * nothing: a device token in a protobuf string field is the same bytes as in JSON.
 */
export interface OtlpSink {
  /** Base URL for OTEL_EXPORTER_OTLP_ENDPOINT. */
  url: string;
  /** Every request body received (gunzipped). */
  bodies(): Buffer[];
  /** Spans are in these requests; a run that exported nothing has a count of 0. */
  requests(): number;
  /** The environment that points a process's tracing here (every span sampled, short batch delay). */
  env(): Record<string, string>;
  close(): Promise<void>;
}

export async function startOtlpSink(): Promise<OtlpSink> {
  const bodies: Buffer[] = [];
  const server = createServer((request, response) => {
    void readBody(request).then(
      (body) => {
        if (request.method === 'POST') bodies.push(body);
        response.writeHead(request.method === 'POST' ? 200 : 404, { 'content-type': 'application/json' });
        response.end('{}');
      },
      () => response.writeHead(400).end(),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    bodies: () => bodies,
    requests: () => bodies.length,
    env: () => ({
      OTEL_EXPORTER_OTLP_ENDPOINT: url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_TRACES_SAMPLER: 'always_on',
      OTEL_BSP_SCHEDULE_DELAY: '500',
    }),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function readBody(request: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  const body = Buffer.concat(chunks);
  return request.headers['content-encoding'] === 'gzip' ? gunzipSync(body) : body;
}
