import http from 'node:http';
import http2 from 'node:http2';
import type { Socket } from 'node:net';
import { type Duplex, duplexPair } from 'node:stream';

/**
 * HTTP/1.1 requests carried as HTTP/2 streams, inside the process. firebase-admin can be pointed at
 * another server only through its HTTP/1.1 transport (its HTTP/2 transport dials fcm.googleapis.com
 * itself), and Google's endpoint speaks both; a server standing in for it may speak HTTP/2 only. For
 * such a server the FCM agent connects with TLS ALPN `h2` (or, to an `http://` override, in cleartext
 * with prior knowledge) and hands firebase-admin a socket from
 * {@link bridgeToHttp2}: one end of an in-memory pipe whose other end an HTTP/1.1 parser (a Node
 * `http.Server` that listens on nothing) reads, sending each request on as a stream of an HTTP/2
 * session over that TLS connection and the answer back. Each bridged socket has its own session, and
 * carries one request at a time as any HTTP/1.1 connection does, so the agent's `maxSockets` still
 * bounds the requests in flight.
 */

/** Hop-by-hop headers of HTTP/1.1 that HTTP/2 forbids (RFC 9113 §8.2.2); `host` becomes `:authority`. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'te',
  'host',
]);

const sessions = new WeakMap<Duplex, http2.ClientHttp2Session>();

let parser: http.Server | undefined;

/** The HTTP/1.1 parser of every bridge: a server that listens on nothing and is fed pipes. */
function bridgeParser(): http.Server {
  if (parser) return parser;
  parser = http.createServer((request, response) => forward(request, response));
  // A pipe is closed by its client end; the parser must not close it on a timer of its own.
  parser.keepAliveTimeout = 0;
  parser.requestTimeout = 0;
  parser.headersTimeout = 0;
  return parser;
}

/**
 * A socket for an HTTP/1.1 client whose requests travel as HTTP/2 streams over `connection`: a TLS
 * connection offering ALPN `h2` with an `https://` authority, or a plain one with an `http://`
 * authority (still connecting, or connected). Closing either side closes the other;
 * the session's error (a certificate the client does not trust, a reset connection) becomes the
 * socket's, so the client reports what went wrong as it would on a connection of its own.
 */
export function bridgeToHttp2(connection: Duplex, authority: string): Socket {
  const [outside, inside] = duplexPair();
  const session = http2.connect(authority, { createConnection: () => connection });
  sessions.set(inside, session);
  const closeAll = (error?: Error) => {
    outside.destroy(error);
    inside.destroy();
    if (!session.destroyed) session.destroy();
  };
  session.once('close', () => closeAll());
  session.on('error', closeAll);
  outside.once('close', () => closeAll());
  bridgeParser().emit('connection', asSocket(inside));
  return asSocket(outside);
}

function forward(request: http.IncomingMessage, response: http.ServerResponse): void {
  const session = sessions.get(request.socket as unknown as Duplex);
  if (!session || session.destroyed || session.closed) {
    request.socket.destroy();
    return;
  }
  const headers: http2.OutgoingHttpHeaders = {
    ':method': request.method ?? 'GET',
    ':path': request.url ?? '/',
    ':authority': request.headers.host ?? '',
  };
  for (const [name, value] of Object.entries(request.headers)) {
    if (!HOP_BY_HOP.has(name) && value !== undefined) headers[name] = value;
  }
  const stream = session.request(headers);
  stream.once('response', (answer) => {
    const out: http.OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(answer)) {
      if (!name.startsWith(':') && value !== undefined) out[name] = value;
    }
    response.writeHead(Number(answer[':status']), out);
    stream.pipe(response);
  });
  // A reset stream or a failed session ends the bridged connection, which the client sees as a
  // connection error (a retry), as it would on a real HTTP/1.1 connection.
  stream.once('error', () => request.socket.destroy());
  stream.once('close', () => {
    if (!response.headersSent) request.socket.destroy();
  });
  request.pipe(stream);
}

/**
 * The parts of `net.Socket` that Node's HTTP client, agent and server call on a connection they did not
 * open themselves: keep-alive and Nagle settings (meaningless on a pipe) and the idle timeout, whose
 * `timeout` event the request timeout of firebase-admin listens for.
 */
function asSocket(end: Duplex): Socket {
  let timer: NodeJS.Timeout | undefined;
  const socket = end as Duplex & Partial<Socket>;
  const self = () => socket as Socket;
  socket.setKeepAlive = self;
  socket.setNoDelay = self;
  socket.ref = self;
  socket.unref = self;
  socket.destroySoon = () => {
    end.end();
  };
  // As net.Socket's: 0 turns the timer off and takes the callback back off (a kept-alive socket is
  // set again for every request it carries), and `timeout` tells the agent what is set.
  socket.setTimeout = (ms: number, callback?: () => void) => {
    if (timer) clearTimeout(timer);
    timer = undefined;
    (socket as { timeout?: number }).timeout = ms;
    if (ms > 0) {
      timer = setTimeout(() => end.emit('timeout'), ms);
      timer.unref();
      if (callback) end.once('timeout', callback);
    } else if (callback) {
      end.removeListener('timeout', callback);
    }
    return socket as Socket;
  };
  end.once('close', () => {
    if (timer) clearTimeout(timer);
  });
  return socket as Socket;
}
