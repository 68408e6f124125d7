import { STATUS_CODES } from 'node:http';
import { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { ConnectionLimits } from './bounded-server.ts';
import { HTTP_VERSION_NOT_SUPPORTED } from './request-framing.ts';

/**
 * What Node refuses before a request reaches a route (a deadline missed, a request line or headers over
 * Node's 16 KiB, a
 * request that is not HTTP/1.1 as RFC 9112 writes it: conflicting lengths, a bad chunk) is answered in
 * the API's own error shape, `{error, message}`, and the connection closed: a client that broke the
 * framing cannot be trusted to delimit its next request.
 */
export function answerClientError(
  error: Error & { code?: string },
  socket: Duplex,
  limits: ConnectionLimits,
): number | undefined {
  if (error.code === 'ECONNRESET' || socket.destroyed) return undefined;
  const [status, body] =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [
          408,
          {
            error: 'request-timeout',
            message: `the request did not arrive in time (headers within ${limits.headersTimeoutMs} ms, all of it within ${limits.requestTimeoutMs} ms)`,
          },
        ]
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? overflowedInRequestLine(error, socket)
          ? // RFC 9110 §15.5.15: a target longer than the server will read is a 414, not a header fault.
            [414, { error: 'uri-too-long', message: 'the request line is longer than 16 KiB' }]
          : [
              431,
              {
                error: 'headers-too-large',
                // Node refuses either with the same error.
                message: 'the request headers are larger than 16 KiB, or more than 1000 fields',
              },
            ]
        : error.code === 'HPE_PAUSED_H2_UPGRADE' || isOtherMajorVersion(requestLineMajorVersion(error))
          ? // The HTTP/2 preface (`PRI * HTTP/2.0`), `HTTP/3.0`: whatever else the parser disliked.
            [505, HTTP_VERSION_NOT_SUPPORTED]
          : error.code === 'HPE_INVALID_METHOD'
            ? // RFC 9110 §9.1: a method the server does not recognize SHOULD be answered 501.
              [501, { error: 'not-implemented', message: 'unknown request method: this API takes POST' }]
            : [400, { error: 'bad-request', message: 'not a well-formed HTTP/1.1 request' }];
  answerAndClose(socket, status, body, {}, error);
  return status;
}

/**
 * Whether the parser ran out of room inside a request line (`POST /aaaa…`): the line holding the
 * failure starts with a method and a space, which no header line can (a field name ends at its colon,
 * with no space before it). A line that began in an earlier chunk cannot be told apart from the middle
 * of a header value, so unless the chunk is the connection's first, that stays a 431.
 */
function overflowedInRequestLine(
  error: Error & { rawPacket?: unknown; bytesParsed?: unknown },
  socket: Duplex,
): boolean {
  const packet = error.rawPacket;
  if (!Buffer.isBuffer(packet) || typeof error.bytesParsed !== 'number') return false;
  const text = packet.toString('latin1', 0, Math.min(error.bytesParsed, packet.length));
  const lineStart = text.lastIndexOf('\n') + 1;
  const firstChunk = socket instanceof Socket && socket.bytesRead === packet.length;
  if (lineStart === 0 && !firstChunk) return false;
  return /^[!#$%&'*+.^_`|~0-9A-Za-z-]+ /.test(text.slice(lineStart));
}

function isOtherMajorVersion(major: string | undefined): boolean {
  return major !== undefined && major !== '1';
}

/**
 * The major version named by the request line the parser failed in (`HTTP/3.0`: "3"), or undefined
 * when the line cannot be told. A minor version the parser does not know (`HTTP/1.2`) stays a 400.
 */
function requestLineMajorVersion(error: Error & { rawPacket?: unknown; bytesParsed?: unknown }) {
  if (!Buffer.isBuffer(error.rawPacket) || typeof error.bytesParsed !== 'number') return undefined;
  const text = error.rawPacket.toString('latin1');
  const start = text.lastIndexOf('\n', error.bytesParsed - 1) + 1;
  const line = /^[^\r\n]*/.exec(text.slice(start))?.[0] ?? '';
  return / HTTP\/(\d+)\.\d+$/.exec(line)?.[1];
}

/** Writes one answer in the API's error shape straight to the socket, then closes the connection. */
export function answerAndClose(
  socket: Duplex,
  status: number,
  body: { error: string; message: string },
  headers: Record<string, string>,
  error?: Error,
): void {
  const json = JSON.stringify(body);
  const extra = Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nDate: ${new Date().toUTCString()}\r\n${extra}Content-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(json)}\r\nConnection: close\r\n\r\n${json}`,
    );
  }
  socket.destroy(error);
}
