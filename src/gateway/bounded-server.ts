import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import { answerAndClose, answerClientError } from './client-errors.ts';
import { boundPipelining, DEFAULT_PIPELINING } from './pipelining.ts';
import {
  EXPECTATION_FAILED,
  endsChunked,
  expectations,
  framingProblem,
  HTTP_VERSION_NOT_SUPPORTED,
  unsupportedTransferCoding,
} from './request-framing.ts';

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
  /**
   * Most open connections; a further one takes the place of the oldest that holds no request received
   * whole, or is closed at once when all of them do.
   */
  maxConnections: number;
  /**
   * Most requests of one connection received and not yet answered; the one beyond is answered 429 and
   * the connection closed (see boundPipelining).
   */
  maxPipelined: number;
}

/** The settings' defaults (AQUEDUCT_GATEWAY_*_TIMEOUT_MS, AQUEDUCT_GATEWAY_MAX_CONNECTIONS, …_MAX_PIPELINED). */
export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = {
  requestTimeoutMs: 20_000,
  headersTimeoutMs: 10_000,
  keepAliveTimeoutMs: 5_000,
  connectionTimeoutMs: 30_000,
  maxConnections: 4096,
  maxPipelined: DEFAULT_PIPELINING.pending,
};

/** Options of {@link boundedFastify} besides its limits. */
export interface BoundedServerOptions {
  /** Largest body in bytes (fastify's `bodyLimit`). */
  bodyLimit?: number;
  /**
   * Told the status of every request refused before it reaches a route: broken framing (400), a missed
   * deadline (408), a request line (414) or headers (431) too large, a missing, repeated or invalid Host or a repeated
   * Content-Type (400), an unsupported transfer coding or method (501) or HTTP version (505), an
   * expectation other than 100-continue (417), CONNECT (405), too many pipelined requests waiting
   * (429, see boundPipelining), or a request that arrives while the app closes (503).
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
    // The connection closes after this answer: what the parser makes of bytes still arriving on it (an
    // unread body) is not another request to answer.
    answered.add(reply.request.raw.socket);
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
    // fastify's own answer to a target it cannot decode (`/v1/notifications%zz`) is in its shape, not
    // the API's, and quotes the target back.
    frameworkErrors: (error, _request, reply) => {
      if (error.code === 'FST_ERR_BAD_URL') {
        return refuse(reply, 400, {
          error: 'bad-request',
          message:
            'the request target is not a valid path: a "%" must be followed by two hex digits (RFC 3986 §2.1)',
        });
      }
      return refuse(reply, 500, { error: 'internal', message: 'internal error' });
    },
    // fastify hands every request Node parses to its handler at once; this server hands it a
    // connection's pipelined requests a few at a time (see boundPipelining).
    serverFactory: (handler) => {
      const server = createServer(
        {
          // Node would answer a missing Host with an empty 400; the hook below answers it in the API's shape.
          requireHostHeader: false,
          headersTimeout: l.headersTimeoutMs,
          requestTimeout: l.requestTimeoutMs,
          connectionsCheckingInterval: Math.max(
            50,
            Math.min(1000, Math.floor(Math.min(l.headersTimeoutMs, l.requestTimeoutMs) / 4)),
          ),
        },
        boundPipelining(handler, { pending: l.maxPipelined }, onRefused),
      );
      server.keepAliveTimeout = l.keepAliveTimeoutMs;
      server.setTimeout(l.connectionTimeoutMs);
      return server;
    },
  });
  // A client may send its requests and then half-close its side (FIN) while it waits for the answers.
  // Node's default drops what it has not yet answered at that FIN; with this set it answers them and
  // closes after the last (requests cut short by the FIN are still refused as broken framing).
  (app.server as { httpAllowHalfOpen?: boolean }).httpAllowHalfOpen = true;
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
  // A request asking to upgrade the connection is served as HTTP/1.1 (RFC 9110 §7.8 lets a server
  // ignore Upgrade), but Node's parser stops reading the connection after it: bytes already received
  // behind it are dropped, and the next read is parsed from wherever it starts, so a body could be run
  // as a request. Its answer therefore closes the connection, and nothing more is served on it.
  app.addHook('onRequest', (request, reply, done) => {
    const socket = request.raw.socket;
    if (upgradedSockets.has(socket)) {
      socket.destroy();
      return;
    }
    if (request.headers.upgrade !== undefined) {
      upgradedSockets.add(socket);
      reply.header('connection', 'close');
    }
    done();
  });
  // RFC 9112 §6.3: a request whose last transfer coding is not chunked has no length a server can
  // tell: 400, and the connection closed. RFC 9112 §6.1: "A server that receives a request message
  // with a transfer coding it does not understand SHOULD respond with 501". Node decodes chunked only
  // and would hand the rest on as it is.
  app.addHook('onRequest', (request, reply, done) => {
    const field = request.headers['transfer-encoding'];
    if (field !== undefined && !endsChunked(field)) {
      void refuse(reply, 400, {
        error: 'bad-request',
        message:
          'Transfer-Encoding must end in chunked (RFC 9112 §6.3): send the body chunked or with Content-Length',
      });
      return;
    }
    const coding = unsupportedTransferCoding(field);
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
    void refuse(reply, 505, HTTP_VERSION_NOT_SUPPORTED);
  });
  app.addHook('onRequest', (request, reply, done) => {
    const problem = framingProblem(request.raw);
    if (problem === undefined) return done();
    void refuse(reply, 400, { error: 'bad-request', message: problem });
  });
  // RFC 9110 §10.1.1: Expect is a list, and 100-continue (with no parameters) the only expectation
  // defined. Node hands any value that merely contains `100-continue` on as one to continue, and never
  // looks at an HTTP/1.0 request's (which a server must ignore), so the list is read here in full.
  app.addHook('onRequest', (request, reply, done) => {
    if (request.raw.httpVersion !== '1.1' || request.headers.expect === undefined) return done();
    if (expectations(request.headers.expect).every((member) => member === '100-continue')) return done();
    void refuse(reply, 417, EXPECTATION_FAILED);
  });
  // RFC 9110 §10.1.1: an expectation other than 100-continue is answered 417. Node does that itself
  // with an empty body and keeps the connection; this answers in the API's shape and closes it, as
  // the other refusals made before the body is read do.
  app.server.on('checkExpectation', (request: IncomingMessage, response: ServerResponse) => {
    // An Expect of empty list elements only (RFC 9110 §5.6.1: ignored) expects nothing.
    if (expectations(request.headers.expect ?? '').length === 0) {
      app.server.emit('request', request, response);
      return;
    }
    onRefused(417);
    const json = JSON.stringify(EXPECTATION_FAILED);
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
  // At the cap, a new connection takes the place of the oldest one that holds no request received
  // whole: a client that connects and sends nothing (held for the connection timeout), one that sends
  // its headers a byte at a time, or an idle kept-alive one would otherwise shut every new client out
  // for as long as it pleases. Only when every connection holds work is the new one closed.
  app.server.on('connection', (socket: Duplex) => {
    if (sockets.size >= l.maxConnections) {
      const idle = oldestWithoutWork(sockets);
      if (idle === undefined) {
        socket.destroy();
        return;
      }
      idle.destroy();
      sockets.delete(idle);
    }
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

/** The connection open longest (sets keep their order) that holds no work, if any. */
function oldestWithoutWork(sockets: Set<Duplex>): Duplex | undefined {
  for (const socket of sockets) if (!holdsWork(socket)) return socket;
  return undefined;
}

/** True when a connection has a request received whole whose answer is not yet written. */
function holdsWork(socket: Duplex): boolean {
  for (const response of inFlight.get(socket) ?? []) {
    if (response.req.complete && !response.writableFinished) return true;
  }
  return false;
}

/** Apps that are closing: their requests are answered 503 (see `boundedFastify`). */
const closingApps = new WeakSet<FastifyInstance>();
/** Each app's open connections. */
const openSockets = new WeakMap<FastifyInstance, Set<Duplex>>();
/** Each connection's responses not yet finished (pipelined requests are answered in order). */
const inFlight = new WeakMap<Duplex, Set<ServerResponse>>();
/** Connections a request asked to upgrade: nothing more is served on them (see `boundedFastify`). */
const upgradedSockets = new WeakSet<Duplex>();
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
