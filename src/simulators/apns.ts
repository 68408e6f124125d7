import { createPublicKey, type KeyObject, randomUUID, verify as verifySignature } from 'node:crypto';
import http from 'node:http';
import http2, { type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import { EVENT_ID_DATA_KEY } from '../providers/types.ts';
import { generateCertificate } from './certs.ts';
import { closeServer, listen, urlHost } from './net.ts';
import {
  handleControl,
  later,
  type RunningSimulator,
  SimulatorCore,
  type SimulatorOptions,
} from './shared.ts';

/** Options of {@link startApnsSimulator}. */
export interface ApnsSimulatorOptions extends SimulatorOptions {
  /**
   * Port of a plain-HTTP server for GET /stats, POST /faults and POST /reset (the main port speaks only
   * HTTP/2 over TLS, which curl and browsers handle less easily). Undefined: none; 0: a free port.
   * GET /stats also answers on the main port.
   */
  statsPort?: number;
  /** With `verifyAuth`: the .p8 key (PEM; private or public) whose signature provider tokens must carry. */
  authKeyPem?: string;
  /** With `verifyAuth`: the key id (`kid`) tokens must name. Default: any. */
  keyId?: string;
  /** With `verifyAuth`: the team id (`iss`) tokens must name. Default: any. */
  teamId?: string;
}

/** A running APNs simulator. */
export interface ApnsSimulator extends RunningSimulator {
  readonly kind: 'apns';
  /** The plain-HTTP control port, when `statsPort` was given. */
  readonly statsPort: number | undefined;
}

/** APNs' limit on a notification's payload, in bytes. */
export const APNS_MAX_PAYLOAD_BYTES = 4096;
/** Apple refuses provider tokens older than an hour. */
const TOKEN_MAX_AGE_SECONDS = 3600;
const MAX_BODY_BYTES = 64 * 1024;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const PUSH_TYPES = new Set([
  'alert',
  'background',
  'location',
  'voip',
  'complication',
  'fileprovider',
  'mdm',
  'liveactivity',
  'pushtotalk',
  'widgets',
]);
const PRIORITIES = new Set(['10', '5', '1']);

/**
 * Starts an APNs simulator: `POST /3/device/{token}` over HTTP/2 + TLS, answering like APNs: `:status`,
 * an `apns-id` header and, for errors, `{"reason": …}` (410 adds `timestamp`). It enforces its own token
 * bucket (429 TooManyRequests with Retry-After), injects faults on demand, validates requests (4096-byte
 * payload → 413 PayloadTooLarge, topic, priority, expiration, collapse id, push type, apns-id) and
 * records every accepted notification. Provider tokens must be structurally valid ES256 JWTs; with
 * `verifyAuth`, signed by `authKeyPem` and younger than an hour.
 */
export async function startApnsSimulator(options: ApnsSimulatorOptions = {}): Promise<ApnsSimulator> {
  const core = new SimulatorCore(options);
  const certificate = await generateCertificate(options.certHosts);
  const checkToken = providerTokenChecker(options);

  const server = http2.createSecureServer({
    key: certificate.keyPem,
    cert: certificate.certPem,
    settings: { maxConcurrentStreams: 1000 },
  });
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
      typeof requested === 'string' && UUID.test(requested) ? requested.toLowerCase() : randomUUID();
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
        return respond(stream, 403, apnsId, reasonBody(authProblem));
      }
      const admission = core.admit();
      switch (admission.kind) {
        case 'throttle':
          return respond(stream, 429, apnsId, TOO_MANY_REQUESTS, String(admission.retryAfterSeconds));
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
      const token = path.slice('/3/device/'.length).split('?')[0] ?? '';
      const checked = validate(token, requested, headers, body, size);
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
    stats: () => ({ ...core.stats }),
    records: () => core.records(),
    admissions: () => core.admissions(),
    faults: () => core.faults,
    setFaults: (update) => core.setFaults(update),
    reset: (limits) => core.reset(limits),
    env: (caFile) => ({ APNS_ENDPOINT: url, APNS_CA_FILE: caFile }),
    close: async () => {
      await Promise.all([closeServer(server), statsServer ? closeServer(statsServer) : undefined]);
    },
  };
}

type Validation =
  | { ok: true; eventId: string | undefined; payload: unknown }
  | { ok: false; status: number; reason: string };

/** Validates a push the way APNs does (headers first, then the payload). */
function validate(
  token: string,
  requestedId: string | string[] | undefined,
  headers: IncomingHttpHeaders,
  body: Buffer,
  size: number,
): Validation {
  if (token === '') return { ok: false, status: 400, reason: 'MissingDeviceToken' };
  if (requestedId !== undefined && !(typeof requestedId === 'string' && UUID.test(requestedId))) {
    return { ok: false, status: 400, reason: 'BadMessageId' };
  }
  const topic = headers['apns-topic'];
  if (typeof topic !== 'string' || topic === '') return { ok: false, status: 400, reason: 'MissingTopic' };
  const priority = headers['apns-priority'];
  if (priority !== undefined && !(typeof priority === 'string' && PRIORITIES.has(priority))) {
    return { ok: false, status: 400, reason: 'BadPriority' };
  }
  const expiration = headers['apns-expiration'];
  if (expiration !== undefined && !(typeof expiration === 'string' && /^\d+$/.test(expiration))) {
    return { ok: false, status: 400, reason: 'BadExpirationDate' };
  }
  const collapseId = headers['apns-collapse-id'];
  if (collapseId !== undefined && !(typeof collapseId === 'string' && Buffer.byteLength(collapseId) <= 64)) {
    return { ok: false, status: 400, reason: 'BadCollapseId' };
  }
  const pushType = headers['apns-push-type'];
  if (pushType !== undefined && !(typeof pushType === 'string' && PUSH_TYPES.has(pushType))) {
    return { ok: false, status: 400, reason: 'InvalidPushType' };
  }
  if (size === 0) return { ok: false, status: 400, reason: 'PayloadEmpty' };
  if (size > APNS_MAX_PAYLOAD_BYTES) return { ok: false, status: 413, reason: 'PayloadTooLarge' };
  let payload: unknown;
  try {
    payload = JSON.parse(body.toString('utf8'));
  } catch {
    payload = undefined;
  }
  // Apple's table has no reason for a payload that is not a JSON object; this is the simulator's word.
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) {
    return { ok: false, status: 400, reason: 'BadPayload' };
  }
  const eventId = (payload as Record<string, unknown>)[EVENT_ID_DATA_KEY];
  return { ok: true, eventId: typeof eventId === 'string' ? eventId : undefined, payload };
}

/** The apns-* headers of a request, for records. */
function deliveryHeaders(headers: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(headers)) {
    if (key.startsWith('apns-') && typeof value === 'string') out[key] = value;
  }
  return out;
}

interface Jwt {
  iat: number;
}

/**
 * Checks the `authorization: bearer <jwt>` of a request; returns the APNs reason when it fails. A token
 * is reused for up to an hour, so the last good one is remembered and only its age is checked again.
 */
function providerTokenChecker(
  options: ApnsSimulatorOptions,
): (header: string | string[] | undefined) => string | undefined {
  const verify = options.verifyAuth === true;
  let publicKey: KeyObject | undefined;
  if (verify) {
    if (!options.authKeyPem)
      throw new RangeError('verifyAuth needs authKeyPem (the .p8 key or its public key)');
    publicKey = createPublicKey(options.authKeyPem);
  }
  let lastToken = '';
  let lastIat = 0;
  return (header) => {
    if (typeof header !== 'string' || header === '') return 'MissingProviderToken';
    const match = /^bearer\s+(\S+)$/i.exec(header);
    if (!match) return 'InvalidProviderToken';
    const token = match[1] as string;
    if (token !== lastToken) {
      const parsed = parseJwt(token, publicKey, options);
      if (typeof parsed === 'string') return parsed;
      lastToken = token;
      lastIat = parsed.iat;
    }
    if (verify && Date.now() / 1000 - lastIat > TOKEN_MAX_AGE_SECONDS) return 'ExpiredProviderToken';
    return undefined;
  };
}

function parseJwt(
  token: string,
  publicKey: KeyObject | undefined,
  options: ApnsSimulatorOptions,
): Jwt | string {
  const parts = token.split('.');
  if (parts.length !== 3 || parts.some((part) => !/^[A-Za-z0-9_-]+$/.test(part)))
    return 'InvalidProviderToken';
  const [head, claims, signature] = parts as [string, string, string];
  let header: Record<string, unknown>;
  let payload: Record<string, unknown>;
  try {
    header = JSON.parse(Buffer.from(head, 'base64url').toString('utf8')) as Record<string, unknown>;
    payload = JSON.parse(Buffer.from(claims, 'base64url').toString('utf8')) as Record<string, unknown>;
  } catch {
    return 'InvalidProviderToken';
  }
  if (header.alg !== 'ES256' || typeof header.kid !== 'string') return 'InvalidProviderToken';
  if (typeof payload.iss !== 'string' || typeof payload.iat !== 'number') return 'InvalidProviderToken';
  if (publicKey) {
    const signed = verifySignature(
      'sha256',
      Buffer.from(`${head}.${claims}`),
      { key: publicKey, dsaEncoding: 'ieee-p1363' },
      Buffer.from(signature, 'base64url'),
    );
    if (!signed) return 'InvalidProviderToken';
    if (options.keyId !== undefined && header.kid !== options.keyId) return 'InvalidProviderToken';
    if (options.teamId !== undefined && payload.iss !== options.teamId) return 'InvalidProviderToken';
  }
  return { iat: payload.iat };
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
  const chunks: Buffer[] = [];
  let size = 0;
  stream.on('data', (chunk: Buffer) => {
    size += chunk.length;
    if (size <= MAX_BODY_BYTES) chunks.push(chunk);
  });
  stream.on('end', () => {
    // A stream cut off by its client or a lost connection has no request to answer or count.
    if (stream.aborted || stream.destroyed) return;
    done(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks), size);
  });
}
