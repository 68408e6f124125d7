import { randomUUID } from 'node:crypto';
import http from 'node:http';
import http2, { type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import { type ProviderTokenOptions, providerTokenChecker } from './apns-auth.ts';
import { APNS_ID, validatePush } from './apns-validation.ts';
import { generateCertificate } from './certs.ts';
import { handleControl } from './control.ts';
import { coreControls, later, SimulatorCore } from './core.ts';
import { closeServer, listen, readBody, urlHost } from './net.ts';
import type { RunningSimulator, SimulatorOptions } from './simulator.ts';

/** Options of {@link startApnsSimulator}. */
export interface ApnsSimulatorOptions extends SimulatorOptions, ProviderTokenOptions {
  /**
   * Port of a plain-HTTP server for GET /stats, POST /faults and POST /reset (the main port speaks only
   * HTTP/2 over TLS, which curl and browsers handle less easily). Undefined: none; 0: a free port.
   * GET /stats also answers on the main port.
   */
  statsPort?: number;
}

/** A running APNs simulator. */
export interface ApnsSimulator extends RunningSimulator {
  readonly kind: 'apns';
  /** The plain-HTTP control port, when `statsPort` was given. */
  readonly statsPort: number | undefined;
  /** TLS connections accepted so far (each one is a handshake a client paid for). */
  tlsConnections(): number;
}

/** Concurrent streams a connection may open once a request carried a valid provider token. */
const AUTHENTICATED_MAX_STREAMS = 1000;

/**
 * Starts an APNs simulator: `POST /3/device/{token}` over HTTP/2 + TLS, answering like APNs: `:status`,
 * an `apns-id` header and, for errors, `{"reason": …}` (410 adds `timestamp`). It enforces its own token
 * bucket (429 TooManyRequests with Retry-After) and, with `deviceRate`, a bucket per device token (429
 * TooManyRequests, without Retry-After, as Apple answers too many requests to one device), injects faults on demand, validates requests (4096-byte
 * payload → 413 PayloadTooLarge, topic, priority, expiration, collapse id, push type, apns-id) and
 * records every accepted notification. Provider tokens must be structurally valid ES256 JWTs; with
 * `verifyAuth`, signed by `authKeyPem` and younger than an hour.
 */
export async function startApnsSimulator(options: ApnsSimulatorOptions = {}): Promise<ApnsSimulator> {
  const core = new SimulatorCore(options);
  const certificate = await generateCertificate(options.certHosts);
  const checkToken = providerTokenChecker(options);

  // Apple: "APNs allows only one stream until you post a request with a valid authentication token".
  // A connection starts at one concurrent stream and is raised once a request's provider token passes.
  const server = http2.createSecureServer({
    key: certificate.keyPem,
    cert: certificate.certPem,
    settings: { maxConcurrentStreams: 1 },
  });
  const authenticated = new WeakSet<http2.Http2Session>();
  const raiseStreamLimit = (session: http2.Http2Session | undefined) => {
    if (session === undefined || session.destroyed || authenticated.has(session)) return;
    authenticated.add(session);
    session.settings({ maxConcurrentStreams: AUTHENTICATED_MAX_STREAMS });
  };
  server.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
    const arrivedAtMs = core.now();
    stream.on('error', () => {});
    const path = headers[':path'] ?? '/';
    const method = headers[':method'] ?? 'GET';
    if (!path.startsWith('/3/device/')) {
      readStream(stream, (body) => {
        const control = handleControl(core, 'apns', method, path, body.toString('utf8'));
        if (control) {
          respond(stream, control.status, undefined, JSON.stringify(control.json));
        } else {
          core.stats.requests += 1;
          core.stats.rejected += 1;
          respond(stream, 404, randomUUID(), BAD_PATH);
        }
      });
      return;
    }
    const requested = headers['apns-id'];
    const apnsId =
      typeof requested === 'string' && APNS_ID.test(requested) ? requested.toLowerCase() : randomUUID();
    const authProblem = checkToken(headers.authorization);
    readStream(stream, (body, size) => {
      if (method !== 'POST') {
        core.stats.requests += 1;
        core.stats.rejected += 1;
        return respond(stream, 405, apnsId, reasonBody('MethodNotAllowed'));
      }
      if (authProblem !== undefined) {
        core.stats.requests += 1;
        core.stats.authFailures += 1;
        const status = authProblem === 'TooManyProviderTokenUpdates' ? 429 : 403;
        return respond(stream, status, apnsId, reasonBody(authProblem));
      }
      raiseStreamLimit(stream.session);
      const token = path.slice('/3/device/'.length).split('?')[0] ?? '';
      const admission = core.admit(token);
      switch (admission.kind) {
        case 'throttle':
          return respond(stream, 429, apnsId, TOO_MANY_REQUESTS, String(admission.retryAfterSeconds));
        case 'device-throttle':
          // Apple's answer to too many requests for one device token: 429 TooManyRequests. Apple
          // documents no Retry-After for it, so none is sent.
          return respond(stream, 429, apnsId, TOO_MANY_REQUESTS);
        case 'drop':
          // One request's worth of failure: its stream is reset. (Dropping the whole HTTP/2 connection
          // would fail every request in flight on it, and the share would not mean what it says.)
          stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
          return;
        case 'error500':
          return later(core, () => respond(stream, 500, apnsId, INTERNAL_SERVER_ERROR));
        case 'error503':
          return later(core, () => respond(stream, 503, apnsId, SERVICE_UNAVAILABLE));
      }
      const checked = validatePush(token, requested, headers, body, size);
      if (!checked.ok) {
        core.stats.rejected += 1;
        return later(core, () => respond(stream, checked.status, apnsId, reasonBody(checked.reason)));
      }
      const state = core.tokenState(token);
      if (state === 'dead') {
        core.stats.invalidTokens += 1;
        const answer = JSON.stringify({ reason: 'Unregistered', timestamp: Date.now() });
        return later(core, () => respond(stream, 410, apnsId, answer));
      }
      if (state === 'bad') {
        core.stats.invalidTokens += 1;
        return later(core, () => respond(stream, 400, apnsId, reasonBody('BadDeviceToken')));
      }
      const payload = core.keepPayloads
        ? { headers: deliveryHeaders(headers), body: checked.payload }
        : undefined;
      core.accept(apnsId, checked.eventId, arrivedAtMs, payload);
      later(core, () => respond(stream, 200, apnsId));
    });
  });

  let tlsConnections = 0;
  server.on('secureConnection', () => {
    tlsConnections += 1;
  });
  const host = options.host ?? '127.0.0.1';
  const port = await listen(server, host, options.port ?? 0);
  let statsServer: http.Server | undefined;
  let statsPort: number | undefined;
  if (options.statsPort !== undefined) {
    statsServer = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const control = handleControl(
          core,
          'apns',
          req.method ?? 'GET',
          req.url ?? '/',
          Buffer.concat(chunks).toString(),
        );
        res.writeHead(control?.status ?? 404, { 'content-type': 'application/json' });
        res.end(control ? JSON.stringify(control.json) : '{"error":"not found"}');
      });
    });
    try {
      statsPort = await listen(statsServer, host, options.statsPort);
    } catch (error) {
      await closeServer(server);
      throw error;
    }
  }
  const url = `https://${urlHost(host)}:${port}`;

  return {
    kind: 'apns',
    url,
    host,
    port,
    statsPort,
    caPem: certificate.certPem,
    statsUrl: statsPort === undefined ? `${url}/stats` : `http://${urlHost(host)}:${statsPort}/stats`,
    ...coreControls(core),
    tlsConnections: () => tlsConnections,
    env: (caFile) => ({ APNS_ENDPOINT: url, APNS_CA_FILE: caFile }),
    close: async () => {
      await Promise.all([closeServer(server), statsServer ? closeServer(statsServer) : undefined]);
    },
  };
}

/** The apns-* headers of a request, for records. */
function deliveryHeaders(headers: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(headers)) {
    if (key.startsWith('apns-') && typeof value === 'string') out[key] = value;
  }
  return out;
}

function reasonBody(reason: string): string {
  return `{"reason":"${reason}"}`;
}

const TOO_MANY_REQUESTS = reasonBody('TooManyRequests');
const INTERNAL_SERVER_ERROR = reasonBody('InternalServerError');
const SERVICE_UNAVAILABLE = reasonBody('ServiceUnavailable');
const BAD_PATH = reasonBody('BadPath');

function respond(
  stream: ServerHttp2Stream,
  status: number,
  apnsId: string | undefined,
  body?: string,
  retryAfter?: string,
): void {
  if (stream.destroyed || stream.closed) return;
  const headers: http2.OutgoingHttpHeaders = { ':status': status };
  if (apnsId !== undefined) headers['apns-id'] = apnsId;
  if (retryAfter !== undefined) headers['retry-after'] = retryAfter;
  if (body === undefined) {
    stream.respond(headers, { endStream: true });
    return;
  }
  headers['content-type'] = 'application/json';
  stream.respond(headers);
  stream.end(body);
}

function readStream(stream: ServerHttp2Stream, done: (body: Buffer, size: number) => void): void {
  readBody(stream, (body, size) => {
    // A stream cut off by its client or a lost connection has no request to answer or count.
    if (stream.aborted || stream.destroyed) return;
    done(body, size);
  });
}
