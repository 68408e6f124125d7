import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * How a connection's pipelined requests reach the app: one at a time, in order. Node parses every
 * request a read brings in at once (a 64 KiB read holds thousands of small ones), hands each to the app
 * at once, and keeps reading as long as the answers are written: a client pipelining without reading its
 * answers had thousands of requests in the works per connection (hundreds of MiB, and healthy clients
 * waiting seconds for the event loop). And a request behind one whose answer closes the connection (a
 * 401, a body that could not be read) was still worked on, its events written to Kafka, though its
 * answer was never sent: RFC 9112 §9.6 says a server closing the connection "MUST NOT process any
 * further requests received on that connection".
 */
export interface PipeliningLimits {
  /**
   * Requests of one connection received and not yet answered (the one in the app and those waiting).
   * The one beyond is answered 429 and the connection closed after it; later ones are not served.
   * Nothing is read from a connection while some of its requests wait, so only a single read can hold
   * this many.
   */
  pending: number;
}

/** What a pipelining client gets by default (AQUEDUCT_GATEWAY_MAX_PIPELINED): a few hundred requests waiting. */
export const DEFAULT_PIPELINING: PipeliningLimits = { pending: 256 };

type RequestHandler = (request: IncomingMessage, response: ServerResponse) => void;

/** One connection's requests: whether the app has one, and those waiting their turn. */
interface Lane {
  busy: boolean;
  waiting: Array<[IncomingMessage, ServerResponse]>;
  /**
   * Set once the connection is closing (an answer said so, or a request was refused): no request
   * received after that is served; with a refusal, those waiting before it still are.
   */
  over: boolean;
  /** Pauses the connection again whenever anything resumes it while the lane holds it. */
  hold: (() => void) | undefined;
}

/** The answer to the request beyond `pending`. */
export const TOO_MANY_PIPELINED = {
  error: 'too-many-pipelined',
  message:
    'too many requests on this connection are waiting for their answers: read the answers before sending more, or use another connection',
};

/**
 * Wraps a server's request handler so that each connection has one request in the app at a time and at
 * most `limits.pending` received but unanswered, and none is started once an answer closed the
 * connection; `onRefused` is told of each refusal.
 */
export function boundPipelining(
  handler: RequestHandler,
  limits: PipeliningLimits,
  onRefused: (status: number) => void,
): RequestHandler {
  const lanes = new WeakMap<object, Lane>();
  const start = (lane: Lane, request: IncomingMessage, response: ServerResponse) => {
    lane.busy = true;
    const socket = request.socket;
    let answered = false;
    const finished = () => {
      if (answered) return;
      answered = true;
      lane.busy = false;
      // Node ends the connection as an answer saying `Connection: close` finishes (its own listener
      // runs first), and destroys it when the answer could not be written.
      if (socket.writableEnded || socket.destroyed) {
        lane.over = true;
        return;
      }
      const next = lane.waiting.shift();
      // The last one waiting may not have its body yet: reading resumes as it starts (unless a
      // refusal ends the connection after it).
      if (lane.waiting.length === 0 && !lane.over) release(lane, socket);
      if (next !== undefined) start(lane, next[0], next[1]);
    };
    response.once('finish', finished);
    response.once('close', finished);
    handler(request, response);
  };
  return (request, response) => {
    const socket = request.socket;
    let lane = lanes.get(socket);
    if (lane === undefined) {
      lane = { busy: false, waiting: [], over: false, hold: undefined };
      lanes.set(socket, lane);
    }
    if (lane.over) return;
    // Received and not answered: the one in the app, those waiting, and this one.
    if ((lane.busy ? 1 : 0) + lane.waiting.length + 1 > limits.pending) {
      lane.over = true;
      hold(lane, socket);
      onRefused(429);
      const json = JSON.stringify(TOO_MANY_PIPELINED);
      response.writeHead(429, {
        'content-type': 'application/json; charset=utf-8',
        'content-length': Buffer.byteLength(json),
        'retry-after': '1',
        connection: 'close',
      });
      response.end(json);
      return;
    }
    if (!lane.busy) return start(lane, request, response);
    lane.waiting.push([request, response]);
    hold(lane, socket);
  };
}

/**
 * Stops reading a connection until {@link release}: Node resumes a socket whenever a request's body is
 * read or an answer is finished, so it is paused again each time. Requests already waiting have their
 * bytes in (they come after the one the app has), so nothing the app waits for is held back.
 */
function hold(lane: Lane, socket: Socket): void {
  if (lane.hold !== undefined) return;
  const again = () => socket.pause();
  lane.hold = again;
  socket.on('resume', again);
  socket.pause();
}

/** Reads the connection again once no request of it waits. */
function release(lane: Lane, socket: Socket): void {
  if (lane.hold === undefined) return;
  socket.removeListener('resume', lane.hold);
  lane.hold = undefined;
  socket.resume();
}
