import type { IncomingMessage, ServerResponse } from 'node:http';
import http2, { type Http2ServerRequest, type Http2ServerResponse } from 'node:http2';
import { EVENT_ID_DATA_KEY } from '../events/payload.ts';
import { FCM_ERROR_TYPE, QUOTA_FAILURE_TYPE } from '../providers/fcm-classification.ts';
import { LOCAL_FCM_ACCESS_TOKEN } from '../providers/index.ts';
import { generateCertificate } from './certs.ts';
import { handleControl } from './control.ts';
import { coreControls, later, SimulatorCore } from './core.ts';
import { closeServer, listen, MAX_BODY_BYTES, readBody, urlHost } from './net.ts';
import type { RunningSimulator, SimulatorOptions } from './simulator.ts';

/** Options of {@link startFcmSimulator}. */
export interface FcmSimulatorOptions extends SimulatorOptions {
  /** Serve only this Firebase project; others get 403 PERMISSION_DENIED. Default: any project. */
  projectId?: string;
  /** With `verifyAuth`, the one bearer token accepted. Default: the token Aqueduct sends to a simulator. */
  accessToken?: string;
  /**
   * Whether HTTP/1.1 is served besides HTTP/2, as Google's endpoint does. Default true; false stands in
   * for a server that speaks HTTP/2 only (its TLS handshake refuses a client that offers only HTTP/1.1).
   */
  http1?: boolean;
}

/** A running FCM simulator. */
export interface FcmSimulator extends RunningSimulator {
  readonly kind: 'fcm';
  /** The project id to configure (FCM_PROJECT_ID): the one served, or `aqueduct-local`. */
  readonly projectId: string;
  /** TLS connections accepted so far (each one is a handshake a client paid for). */
  tlsConnections(): number;
}

const SEND_PATH = /^\/v1\/projects\/([^/?]+)\/messages:send(?:\?.*)?$/;
/** FCM's limit on a message's payload (notification plus data), in bytes. */
export const FCM_MAX_PAYLOAD_BYTES = 4096;
/** Data keys FCM reserves (HTTP v1 reference, `Message.data`): two words, and two prefixes. */
const RESERVED_DATA_KEY = /^(?:(?:from|message_type)$|google|gcm)/;

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

/**
 * Starts an FCM HTTP v1 simulator: `POST /v1/projects/{project}/messages:send` over HTTPS (HTTP/1.1 and
 * HTTP/2), answering like FCM: `{ name: "projects/{project}/messages/{id}" }`, or Google's JSON error
 * with `error.status` and an FcmError `details[].errorCode`. It enforces its own token bucket (429
 * RESOURCE_EXHAUSTED / QUOTA_EXCEEDED with Retry-After) and, with `deviceRate`, a bucket per device
 * token (429 RESOURCE_EXHAUSTED / QUOTA_EXCEEDED with a QuotaFailure naming the device message rate), injects faults on demand, validates messages
 * (4096-byte payload limit, one target, string data, reserved keys, Android options) and records every
 * accepted notification. GET /stats, POST /faults and POST /reset serve on the same port.
 */
export async function startFcmSimulator(options: FcmSimulatorOptions = {}): Promise<FcmSimulator> {
  const core = new SimulatorCore(options);
  const certificate = await generateCertificate(options.certHosts);
  const expectedToken = options.accessToken ?? LOCAL_FCM_ACCESS_TOKEN;
  const served = options.projectId;
  const idPrefix = `0:${Date.now().toString(36)}`;
  let sequence = 0;

  const handle = (req: Request, res: Response): void => {
    const arrivedAtMs = core.now();
    const match = SEND_PATH.exec(req.url ?? '');
    if (!match || req.method !== 'POST') {
      readRequest(req, (body) => {
        const control = handleControl(
          core,
          'fcm',
          req.method ?? 'GET',
          req.url ?? '/',
          body.toString('utf8'),
        );
        if (control) send(res, control.status, JSON.stringify(control.json));
        // Google answers unknown paths with an HTML 404, not with its JSON error (which would say NOT_FOUND).
        else send(res, 404, 'Not Found', { 'content-type': 'text/plain' });
      });
      return;
    }
    const project = decodeURIComponent(match[1] as string);
    const auth = checkBearer(req.headers.authorization, options.verifyAuth === true, expectedToken);
    readRequest(req, (body, tooLarge) => {
      if (auth !== undefined) {
        core.stats.requests += 1;
        core.stats.authFailures += 1;
        return send(res, 401, auth);
      }
      // Parsed before admission only for the device token the per-device limit needs; the order of the
      // answers stays: throttles first, then the project, then the message's own faults.
      const checked = tooLarge
        ? { ok: false as const, message: 'Request payload size exceeds the limit' }
        : validate(body);
      const admission = core.admit(checked.ok ? checked.token : undefined);
      switch (admission.kind) {
        case 'throttle':
          return send(res, 429, THROTTLED, { 'retry-after': String(admission.retryAfterSeconds) });
        case 'device-throttle':
          return send(res, 429, DEVICE_THROTTLED);
        case 'drop':
          return dropConnection(req);
        case 'error500':
          return later(core, () => send(res, 500, INTERNAL));
        case 'error503':
          return later(core, () => send(res, 503, UNAVAILABLE));
      }
      if (served !== undefined && project !== served) {
        core.stats.authFailures += 1;
        return send(res, 403, PERMISSION_DENIED);
      }
      if (!checked.ok) {
        core.stats.rejected += 1;
        return later(core, () =>
          send(res, 400, fcmError(400, 'INVALID_ARGUMENT', checked.message, 'INVALID_ARGUMENT')),
        );
      }
      if (checked.token !== undefined) {
        const state = core.tokenState(checked.token);
        if (state !== 'ok') {
          core.stats.invalidTokens += 1;
          return later(core, () =>
            send(res, state === 'dead' ? 404 : 400, state === 'dead' ? UNREGISTERED : BAD_TOKEN),
          );
        }
      }
      sequence += 1;
      const name = `projects/${project}/messages/${idPrefix}${sequence.toString(36)}`;
      core.accept(name, checked.eventId, arrivedAtMs, core.keepPayloads ? checked.message : undefined);
      later(core, () => send(res, 200, `{"name":${JSON.stringify(name)}}`));
    });
  };

  const server = http2.createSecureServer(
    {
      key: certificate.keyPem,
      cert: certificate.certPem,
      allowHTTP1: options.http1 ?? true,
      settings: { maxConcurrentStreams: 1000 },
    },
    handle,
  );
  // Keep-alive connections outlive a consumer's pause: fewer reconnects, fewer handshakes. (The HTTP/1.1
  // side of an allowHTTP1 server has this property; @types/node does not know it.)
  (server as unknown as { keepAliveTimeout: number }).keepAliveTimeout = 65_000;
  let tlsConnections = 0;
  server.on('secureConnection', () => {
    tlsConnections += 1;
  });
  const host = options.host ?? '127.0.0.1';
  const port = await listen(server, host, options.port ?? 0);
  const url = `https://${urlHost(host)}:${port}`;
  const projectId = served ?? 'aqueduct-local';

  return {
    kind: 'fcm',
    url,
    host,
    port,
    projectId,
    caPem: certificate.certPem,
    statsUrl: `${url}/stats`,
    ...coreControls(core),
    tlsConnections: () => tlsConnections,
    env: (caFile) => ({ FCM_ENDPOINT: url, FCM_CA_FILE: caFile, FCM_PROJECT_ID: projectId }),
    close: () => closeServer(server),
  };
}

/** 401 body when the bearer token is missing or (with verification) wrong; undefined when fine. */
function checkBearer(header: string | undefined, verify: boolean, expected: string): string | undefined {
  const match = header === undefined ? null : /^Bearer\s+(\S+)$/i.exec(header);
  if (!match) return MISSING_CREDENTIAL;
  if (verify && match[1] !== expected) return INVALID_CREDENTIAL;
  return undefined;
}

type Validation =
  | { ok: true; token: string | undefined; eventId: string | undefined; message: Record<string, unknown> }
  | { ok: false; message: string };

/** Validates a send request the way FCM does, as far as a simulator can tell. */
function validate(body: Buffer): Validation {
  let request: unknown;
  try {
    request = JSON.parse(body.toString('utf8'));
  } catch {
    return { ok: false, message: 'Invalid JSON payload received.' };
  }
  const message = isObject(request) ? request.message : undefined;
  if (!isObject(message)) return { ok: false, message: "Invalid value at 'message': required" };
  const targets = ['token', 'topic', 'condition'].filter(
    (key) => typeof message[key] === 'string' && message[key] !== '',
  );
  if (targets.length !== 1)
    return { ok: false, message: 'Exactly one of token, topic or condition must be set' };

  const data = message.data;
  let eventId: string | undefined;
  if (data !== undefined) {
    if (!isObject(data)) return { ok: false, message: "Invalid value at 'message.data'" };
    for (const [key, value] of Object.entries(data)) {
      if (typeof value !== 'string')
        return { ok: false, message: `Invalid value at 'message.data[${key}].value'` };
      if (RESERVED_DATA_KEY.test(key))
        return { ok: false, message: `Invalid data payload key: ${key} is reserved` };
    }
    const id = data[EVENT_ID_DATA_KEY];
    if (typeof id === 'string') eventId = id;
  }
  const notification = message.notification;
  if (notification !== undefined) {
    if (!isObject(notification)) return { ok: false, message: "Invalid value at 'message.notification'" };
    for (const key of ['title', 'body', 'image']) {
      if (notification[key] !== undefined && typeof notification[key] !== 'string') {
        return { ok: false, message: `Invalid value at 'message.notification.${key}'` };
      }
    }
  }
  const android = message.android;
  if (android !== undefined) {
    if (!isObject(android)) return { ok: false, message: "Invalid value at 'message.android'" };
    const { priority, ttl, collapse_key: collapseKey } = android;
    if (priority !== undefined && !(typeof priority === 'string' && /^(normal|high)$/i.test(priority))) {
      return { ok: false, message: "Invalid value at 'message.android.priority'" };
    }
    if (ttl !== undefined && !(typeof ttl === 'string' && /^\d+(\.\d{1,9})?s$/.test(ttl))) {
      return { ok: false, message: "Invalid value at 'message.android.ttl' (Duration)" };
    }
    if (collapseKey !== undefined && typeof collapseKey !== 'string') {
      return { ok: false, message: "Invalid value at 'message.android.collapse_key'" };
    }
  }
  // Counted as FCM's "message too big" error describes it: the keys and the values of the payload.
  const payloadBytes = keysAndValuesBytes(data) + keysAndValuesBytes(notification);
  if (payloadBytes > FCM_MAX_PAYLOAD_BYTES) {
    return {
      ok: false,
      message: `Message is too big: ${payloadBytes} bytes, the limit is ${FCM_MAX_PAYLOAD_BYTES}`,
    };
  }
  const token = typeof message.token === 'string' ? message.token : undefined;
  return { ok: true, token, eventId, message };
}

function keysAndValuesBytes(fields: Record<string, unknown> | undefined): number {
  let bytes = 0;
  for (const [key, value] of Object.entries(fields ?? {})) {
    bytes += Buffer.byteLength(key) + (typeof value === 'string' ? Buffer.byteLength(value) : 0);
  }
  return bytes;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Google's error body; FCM adds an FcmError detail naming its own code, and any further details. */
function fcmError(
  code: number,
  status: string,
  message: string,
  errorCode?: string,
  more: unknown[] = [],
): string {
  const details = errorCode === undefined ? [] : [{ '@type': FCM_ERROR_TYPE, errorCode }];
  return JSON.stringify({ error: { code, message, status, details: [...details, ...more] } });
}

// The bodies that do not depend on the request, built once.
const THROTTLED = fcmError(
  429,
  'RESOURCE_EXHAUSTED',
  'Quota exceeded for sending messages (simulated).',
  'QUOTA_EXCEEDED',
);
/**
 * Too many messages to one device: FCM's ErrorCode reference gives the device message rate as one cause
 * of 429 QUOTA_EXCEEDED and says a google.rpc.QuotaFailure detail specifies which quota was exceeded.
 * Google fixes no wording for the violation; this one names the device's message rate in both fields
 * (without the token).
 */
const DEVICE_THROTTLED = fcmError(
  429,
  'RESOURCE_EXHAUSTED',
  'Device message rate exceeded.',
  'QUOTA_EXCEEDED',
  [
    {
      '@type': QUOTA_FAILURE_TYPE,
      violations: [
        {
          subject: 'device',
          description: 'Device message rate exceeded: the rate of messages to this device is too high.',
        },
      ],
    },
  ],
);
const INTERNAL = fcmError(500, 'INTERNAL', 'Internal error encountered.', 'INTERNAL');
const UNAVAILABLE = fcmError(503, 'UNAVAILABLE', 'The service is currently unavailable.', 'UNAVAILABLE');
const UNREGISTERED = fcmError(404, 'NOT_FOUND', 'Requested entity was not found.', 'UNREGISTERED');
const BAD_TOKEN = fcmError(
  400,
  'INVALID_ARGUMENT',
  'The registration token is not a valid FCM registration token',
  'INVALID_ARGUMENT',
);
const PERMISSION_DENIED = fcmError(
  403,
  'PERMISSION_DENIED',
  "Permission 'cloudmessaging.messages.create' denied on resource.",
);
const MISSING_CREDENTIAL = fcmError(
  401,
  'UNAUTHENTICATED',
  'Request is missing required authentication credential.',
);
const INVALID_CREDENTIAL = fcmError(
  401,
  'UNAUTHENTICATED',
  'Request had invalid authentication credentials.',
);

/** What both response flavours (HTTP/1.1 and HTTP/2 compatibility) have in common. */
interface Reply {
  readonly destroyed: boolean;
  writeHead(status: number, headers: Record<string, string>): unknown;
  end(body: string): unknown;
}

function send(res: Response, status: number, body: string, headers: Record<string, string> = {}): void {
  const reply = res as unknown as Reply;
  if (reply.destroyed) return;
  reply.writeHead(status, { 'content-type': 'application/json; charset=UTF-8', ...headers });
  reply.end(body);
}

/** Drops the connection under the request without answering: the client sees a reset. */
function dropConnection(req: Request): void {
  if (req.httpVersionMajor === 2) (req as Http2ServerRequest).stream.session?.destroy();
  else req.socket.destroy();
}

function readRequest(req: Request, done: (body: Buffer, tooLarge: boolean) => void): void {
  readBody(req, (body, size) => done(body, size > MAX_BODY_BYTES));
  req.on('error', () => {});
}
