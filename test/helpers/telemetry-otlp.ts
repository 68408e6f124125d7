import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';

/**
 * A tiny OTLP/HTTP trace receiver for tests: accepts POST /v1/traces in `http/json` and in
 * `http/protobuf` (decoded by the small wire-format reader below), keeps every raw body (to scan for
 * what must never be exported) and the decoded spans.
 */

/** A span as received, in one shape for both encodings. */
export interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, unknown>;
  events: Array<{ name: string; attributes: Record<string, unknown> }>;
  /** The encoding it came in. */
  encoding: 'json' | 'protobuf';
}

export const OTLP_KIND = { internal: 1, server: 2, client: 3, producer: 4, consumer: 5 } as const;

export interface OtlpReceiver {
  /** Base URL for OTEL_EXPORTER_OTLP_ENDPOINT (the exporters append /v1/traces). */
  url: string;
  spans: ReceivedSpan[];
  /** Every request body as it arrived (after gunzip). */
  bodies: Buffer[];
  /** Requests per content type. */
  requests: Record<string, number>;
  close(): Promise<void>;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const bodies: Buffer[] = [];
  const requests: Record<string, number> = {};
  const server = createServer((request, response) => {
    void readBody(request).then((body) => {
      const type = (request.headers['content-type'] ?? '').split(';')[0]?.trim() ?? '';
      requests[type] = (requests[type] ?? 0) + 1;
      if (request.method !== 'POST' || request.url !== '/v1/traces') {
        response.writeHead(404).end();
        return;
      }
      bodies.push(body);
      try {
        if (type === 'application/json') {
          spans.push(...decodeJson(JSON.parse(body.toString('utf8'))));
          response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        } else if (type === 'application/x-protobuf') {
          spans.push(...decodeProtobuf(body));
          response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
        } else {
          response.writeHead(415).end();
        }
      } catch (error) {
        response.writeHead(400).end(String(error));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    bodies,
    requests,
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

// ---- http/json ----

interface JsonKeyValue {
  key: string;
  value: JsonAnyValue;
}
interface JsonAnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number | string;
  doubleValue?: number;
  arrayValue?: { values?: JsonAnyValue[] };
}
interface JsonSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: JsonKeyValue[];
  events?: Array<{ name: string; attributes?: JsonKeyValue[] }>;
}
interface JsonRequest {
  resourceSpans?: Array<{
    resource?: { attributes?: JsonKeyValue[] };
    scopeSpans?: Array<{ spans?: JsonSpan[] }>;
  }>;
}

function jsonValue(value: JsonAnyValue): unknown {
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.arrayValue) return (value.arrayValue.values ?? []).map(jsonValue);
  return undefined;
}

function jsonAttributes(list: JsonKeyValue[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((kv) => [kv.key, jsonValue(kv.value)]));
}

function decodeJson(request: JsonRequest): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const resourceSpans of request.resourceSpans ?? []) {
    const service = String(jsonAttributes(resourceSpans.resource?.attributes)['service.name'] ?? '');
    for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
      for (const span of scopeSpans.spans ?? []) {
        out.push({
          service,
          traceId: span.traceId,
          spanId: span.spanId,
          parentSpanId: span.parentSpanId ?? '',
          name: span.name,
          kind: span.kind,
          attributes: jsonAttributes(span.attributes),
          events: (span.events ?? []).map((event) => ({
            name: event.name,
            attributes: jsonAttributes(event.attributes),
          })),
          encoding: 'json',
        });
      }
    }
  }
  return out;
}

// ---- http/protobuf: just enough of the wire format for ExportTraceServiceRequest ----

type Field = { no: number; wire: number; int: bigint; bytes: Buffer };

/** The fields of one protobuf message: varints, fixed64/32 as integers, length-delimited as bytes. */
function fields(buffer: Buffer): Field[] {
  const out: Field[] = [];
  let at = 0;
  const varint = (): bigint => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      const byte = buffer[at++];
      if (byte === undefined) throw new Error('truncated varint');
      result |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return result;
      shift += 7n;
    }
  };
  while (at < buffer.length) {
    const tag = Number(varint());
    const no = tag >>> 3;
    const wire = tag & 7;
    if (wire === 0) out.push({ no, wire, int: varint(), bytes: Buffer.alloc(0) });
    else if (wire === 1) {
      out.push({ no, wire, int: buffer.readBigUInt64LE(at), bytes: Buffer.alloc(0) });
      at += 8;
    } else if (wire === 5) {
      out.push({ no, wire, int: BigInt(buffer.readUInt32LE(at)), bytes: Buffer.alloc(0) });
      at += 4;
    } else if (wire === 2) {
      const length = Number(varint());
      out.push({ no, wire, int: 0n, bytes: buffer.subarray(at, at + length) });
      at += length;
    } else throw new Error(`unsupported wire type ${wire}`);
  }
  return out;
}

const all = (list: Field[], no: number) => list.filter((f) => f.no === no);
const one = (list: Field[], no: number) => list.find((f) => f.no === no);

function protoValue(bytes: Buffer): unknown {
  const value = fields(bytes)[0];
  if (!value) return undefined;
  switch (value.no) {
    case 1:
      return value.bytes.toString('utf8');
    case 2:
      return value.int !== 0n;
    case 3:
      return Number(BigInt.asIntN(64, value.int));
    case 4: {
      const double = Buffer.alloc(8);
      double.writeBigUInt64LE(value.int);
      return double.readDoubleLE(0);
    }
    case 5:
      return all(fields(value.bytes), 1).map((f) => protoValue(f.bytes));
    default:
      return undefined;
  }
}

function protoAttributes(list: Field[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of list) {
    const kv = fields(field.bytes);
    const key = one(kv, 1)?.bytes.toString('utf8') ?? '';
    const value = one(kv, 2);
    out[key] = value ? protoValue(value.bytes) : undefined;
  }
  return out;
}

function decodeProtobuf(body: Buffer): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const resourceSpans of all(fields(body), 1)) {
    const rs = fields(resourceSpans.bytes);
    const resource = one(rs, 1);
    const service = String(
      protoAttributes(resource ? all(fields(resource.bytes), 1) : [])['service.name'] ?? '',
    );
    for (const scopeSpans of all(rs, 2)) {
      for (const spanField of all(fields(scopeSpans.bytes), 2)) {
        const span = fields(spanField.bytes);
        out.push({
          service,
          traceId: one(span, 1)?.bytes.toString('hex') ?? '',
          spanId: one(span, 2)?.bytes.toString('hex') ?? '',
          parentSpanId: one(span, 4)?.bytes.toString('hex') ?? '',
          name: one(span, 5)?.bytes.toString('utf8') ?? '',
          kind: Number(one(span, 6)?.int ?? 0n),
          attributes: protoAttributes(all(span, 9)),
          events: all(span, 11).map((eventField) => {
            const event = fields(eventField.bytes);
            return {
              name: one(event, 2)?.bytes.toString('utf8') ?? '',
              attributes: protoAttributes(all(event, 3)),
            };
          }),
          encoding: 'protobuf',
        });
      }
    }
  }
  return out;
}
