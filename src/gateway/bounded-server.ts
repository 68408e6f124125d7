import { type IncomingMessage, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';

/** What bounds a client's hold on the server: every timeout in milliseconds. */
export interface ConnectionLimits {
  /** Headers and body must all have arrived within this time (408 and closed otherwise). */
  requestTimeoutMs: number;
  /** Headers must all have arrived within this time (closed otherwise). */
  headersTimeoutMs: number;
  /** An idle kept-alive connection is closed after this time. */
  keepAliveTimeoutMs: number;
  /** A connection with no traffic at all is closed after this time. */
  connectionTimeoutMs: number;
  /** Most open connections; further ones are closed at once. */
  maxConnections: number;
}

/** The settings' defaults (AQUEDUCT_GATEWAY_*_TIMEOUT_MS, AQUEDUCT_GATEWAY_MAX_CONNECTIONS). */
export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = {
  requestTimeoutMs: 20_000,
  headersTimeoutMs: 10_000,
  keepAliveTimeoutMs: 5_000,
  connectionTimeoutMs: 30_000,
  maxConnections: 4096,
};

/** Options of {@link boundedFastify} besides its limits. */
export interface BoundedServerOptions {
  /** Largest body in bytes (fastify's `bodyLimit`). */
  bodyLimit?: number;
  /**
   * Told the status of every request refused before it reaches a route: broken framing (400), a missed
   * deadline (408), headers too large (431), a missing Host (400), an unsupported transfer coding (501)
   * or HTTP version (505), an expectation other than 100-continue (417), CONNECT (405), or a request
   * that arrives while the app closes (503).
   */
  onRefused?: (status: number) => void;
}

/**
 * A fastify instance whose server drops slow and idle clients: Node checks the header and request
 * deadlines only every `connectionsCheckingInterval` (30 s by default), so the check runs often enough
 * for a deadline to be kept within a fraction of itself.
 */
export function boundedFastify(
  limits: Partial<ConnectionLimits>,
  options: BoundedServerOptions = {},
): FastifyInstance {
  const l = { ...DEFAULT_CONNECTION_LIMITS, ...limits };
  const { onRefused = () => {}, ...fastifyOptions } = options;
  const refuse = (reply: FastifyReply, status: number, body: { error: string; message: string }) => {
    onRefused(status);
    return reply.code(status).header('connection', 'close').send(body);
  };
  const app = Fastify({
    logger: false,
    // Answered by the hook below instead, in the API's shape.
    return503OnClosing: false,
    ...fastifyOptions,
    requestTimeout: l.requestTimeoutMs,
    keepAliveTimeout: l.keepAliveTimeoutMs,
    connectionTimeout: l.connectionTimeoutMs,
    clientErrorHandler: (error, socket) => {
      if (answered.has(socket)) return;
      answered.add(socket);
      // A client may pipeline a good request and then break the framing: its earlier requests are
      // answered first, in order, so that it learns what became of them.
      socket.pause();
      void responsesInFlight(socket, l.requestTimeoutMs).then(() => {
        const status = answerClientError(error, socket, l);
        if (status !== undefined) onRefused(status);
      });
    },
    http: {
      // Node would answer a missing Host with an empty 400; the hook below answers it in the API's shape.
      requireHostHeader: false,
      headersTimeout: l.headersTimeoutMs,
      requestTimeout: l.requestTimeoutMs,
      connectionsCheckingInterval: Math.max(
        50,
        Math.min(1000, Math.floor(Math.min(l.headersTimeoutMs, l.requestTimeoutMs) / 4)),
      ),
    },
  });
  app.server.maxConnections = l.maxConnections;
  // A request arriving while the app closes (on a kept-alive connection: the server takes no new
  // ones) is not served: it may not be written to Kafka by a process on its way out.
  app.addHook('onRequest', (_request, reply, done) => {
    if (!closingApps.has(app)) return done();
    void refuse(reply.header('retry-after', '1'), 503, {
      error: 'shutting-down',
      message:
        'the gateway is shutting down and took nothing: send the request again (another instance takes it)',
    });
  });
  // RFC 9112 §3.2: "A server MUST respond with a 400 (Bad Request) status code to any HTTP/1.1 request
  // message that lacks a Host header field".
  // RFC 9112 §6.1: "A server that receives a request message with a transfer coding it does not
  // understand SHOULD respond with 501". Node decodes chunked only and would hand the rest on as it is.
  app.addHook('onRequest', (request, reply, done) => {
    const coding = unsupportedTransferCoding(request.headers['transfer-encoding']);
    if (coding === undefined) return done();
    void refuse(reply, 501, {
      error: 'not-implemented',
      message: `transfer coding "${coding}" is not supported: send the body as it is, chunked or with Content-Length`,
    });
  });
  // RFC 9110 §15.6.6: 505 for a major version the server does not support. Node's parser reads any
  // `HTTP/x.y` in the request line (an `HTTP/2.0` one included) and would answer it in HTTP/1.1 as if
  // the client spoke that.
  app.addHook('onRequest', (request, reply, done) => {
    if (request.raw.httpVersionMajor === 1) return done();
    void refuse(reply, 505, {
      error: 'http-version-not-supported',
      message: `HTTP/${request.raw.httpVersion} is not supported: this API speaks HTTP/1.1 (and 1.0)`,
    });
  });
  app.addHook('onRequest', (request, reply, done) => {
    if (request.raw.httpVersion !== '1.1' || request.headers.host !== undefined) return done();
    void refuse(reply, 400, {
      error: 'bad-request',
      message: 'an HTTP/1.1 request needs a Host header field (RFC 9112 §3.2)',
    });
  });
  // RFC 9110 §10.1.1: an expectation other than 100-continue is answered 417. Node does that itself
  // with an empty body and keeps the connection; this answers in the API's shape and closes it, as
  // the other refusals made before the body is read do.
  app.server.on('checkExpectation', (_request: IncomingMessage, response: ServerResponse) => {
    onRefused(417);
    const json = JSON.stringify({
      error: 'expectation-failed',
      message: 'the only expectation this API meets is "Expect: 100-continue"',
    });
    response.writeHead(417, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(json),
      connection: 'close',
    });
    response.end(json);
  });
  // Node hands the socket of a CONNECT request to a 'connect' listener and, with none, closes it without
  // a word. Nothing here tunnels, so the method is refused like any other this API does not take.
  app.server.on('connect', (_request: IncomingMessage, socket: Duplex) => {
    socket.on('error', () => socket.destroy());
    if (answered.has(socket)) return;
    answered.add(socket);
    socket.pause();
    void responsesInFlight(socket, l.requestTimeoutMs).then(() => {
      onRefused(405);
      answerAndClose(
        socket,
        405,
        { error: 'method-not-allowed', message: 'CONNECT is not supported: this API takes POST only' },
        { Allow: 'POST' },
      );
    });
  });
  const sockets = new Set<Duplex>();
  app.server.on('connection', (socket: Duplex) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  openSockets.set(app, sockets);
  app.server.on('request', (request, response: ServerResponse) => {
    const socket = request.socket;
    let responses = inFlight.get(socket);
    if (responses === undefined) {
      responses = new Set();
      inFlight.set(socket, responses);
    }
    responses.add(response);
    const done = responses;
    response.once('close', () => done.delete(response));
  });
  return app;
}

/**
 * Closes the app (no new connections; requests arriving meanwhile answered 503) and, until it is closed,
 * every connection that holds no work: idle ones, and ones whose request has not arrived whole. Node
 * stops checking the header and request deadlines once its server is closing, so a client sending its
 * headers a byte at a time would otherwise hold the shutdown until the process's bound. A request
 * received whole is answered first: it may have been written to Kafka.
 */
export async function closeGently(app: FastifyInstance, everyMs = 100): Promise<void> {
  const sockets = openSockets.get(app) ?? new Set<Duplex>();
  closingApps.add(app);
  const dropIdle = () => {
    for (const socket of sockets) if (!holdsWork(socket)) socket.destroy();
  };
  const closed = app.close();
  dropIdle();
  const timer = setInterval(dropIdle, everyMs);
  try {
    await closed;
  } finally {
    clearInterval(timer);
  }
}

/** True when a connection has a request received whole whose answer is not yet written. */
function holdsWork(socket: Duplex): boolean {
  for (const response of inFlight.get(socket) ?? []) {
    if (response.req.complete && !response.writableFinished) return true;
  }
  return false;
}

/**
 * The first coding other than `chunked` in a Transfer-Encoding field, if any (empty list elements are
 * ignored, RFC 9110 §5.6.1); named only when it is a short token, so an answer never echoes odd bytes.
 */
function unsupportedTransferCoding(field: string | undefined): string | undefined {
  if (field === undefined) return undefined;
  for (const coding of field.split(',')) {
    const name = coding.trim().toLowerCase();
    if (name === '' || name === 'chunked') continue;
    return /^[a-z0-9!#$%&'*+.^_`|~-]{1,32}$/.test(name) ? name : '(unnamed)';
  }
  return undefined;
}

/** Apps that are closing: their requests are answered 503 (see `boundedFastify`). */
const closingApps = new WeakSet<FastifyInstance>();
/** Each app's open connections. */
const openSockets = new WeakMap<FastifyInstance, Set<Duplex>>();
/** Each connection's responses not yet finished (pipelined requests are answered in order). */
const inFlight = new WeakMap<Duplex, Set<ServerResponse>>();
/** Connections whose broken framing is already being answered (Node reports it again on more data). */
const answered = new WeakSet<Duplex>();

/**
 * Resolves once every response of a connection to a request received whole is finished or closed, or
 * after `limitMs`. A request still arriving (the one that missed its deadline) gets no answer of its own.
 */
function responsesInFlight(socket: Duplex, limitMs: number): Promise<void> {
  const responses = [...(inFlight.get(socket) ?? [])].filter(
    (response) => response.req.complete && !response.writableFinished,
  );
  if (responses.length === 0) return Promise.resolve();
  return new Promise((resolve) => {
    const giveUp = setTimeout(resolve, limitMs);
    giveUp.unref();
    let open = responses.length;
    for (const response of responses) {
      response.once('close', () => {
        open -= 1;
        if (open === 0) {
          clearTimeout(giveUp);
          resolve();
        }
      });
    }
  });
}

/**
 * What Node refuses before a request reaches a route (a deadline missed, headers over Node's 16 KiB, a
 * request that is not HTTP/1.1 as RFC 9112 writes it: conflicting lengths, a bad chunk) is answered in
 * the API's own error shape, `{error, message}`, and the connection closed: a client that broke the
 * framing cannot be trusted to delimit its next request.
 */
function answerClientError(
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
        ? [431, { error: 'headers-too-large', message: 'the request headers are larger than 16 KiB' }]
        : [400, { error: 'bad-request', message: 'not a well-formed HTTP/1.1 request' }];
  answerAndClose(socket, status, body, {}, error);
  return status;
}

/** Writes one answer in the API's error shape straight to the socket, then closes the connection. */
function answerAndClose(
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
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n${extra}Content-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(json)}\r\nConnection: close\r\n\r\n${json}`,
    );
  }
  socket.destroy(error);
}
