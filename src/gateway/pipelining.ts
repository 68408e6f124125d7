import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * How much of one connection's pipelined requests the app works on. Node parses every request a read
 * brings in at once (a 64 KiB read holds thousands of small ones), hands each to the app at once, and
 * keeps reading as long as the answers are written: a client pipelining without reading its answers
 * had thousands of requests in the works per connection (hundreds of MiB, and healthy clients waiting
 * seconds for the event loop), and once the gateway stopped answering it, a queue of every request it
 * sent.
 */
export interface PipeliningLimits {
  /** Requests of one connection handed to the app at once; the others wait their turn, in order. */
  concurrent: number;
  /**
   * Requests of one connection received and not yet answered (handed to the app or waiting). The one
   * beyond is answered 429 and the connection closed after it; later ones are not served. Nothing is
   * read from a connection while some of its requests wait, so only a single read can hold this many.
   */
  pending: number;
}

/** What a pipelining client gets by default: a few at once, a few hundred waiting. */
export const DEFAULT_PIPELINING: PipeliningLimits = { concurrent: 8, pending: 256 };

type RequestHandler = (request: IncomingMessage, response: ServerResponse) => void;

/** One connection's requests: how many the app has, and those waiting their turn. */
interface Lane {
  active: number;
  waiting: Array<[IncomingMessage, ServerResponse]>;
  /** Set once a request was refused: the connection closes after its answer, nothing more is served. */
  refused: boolean;
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
 * Wraps a server's request handler so that each connection has at most `limits.concurrent` requests in
 * the app and `limits.pending` received but unanswered; `onRefused` is told of each refusal. Answers
 * stay in request order (Node writes a pipelined answer only after the ones before it).
 */
export function boundPipelining(
  handler: RequestHandler,
  limits: PipeliningLimits,
  onRefused: (status: number) => void,
): RequestHandler {
  const lanes = new WeakMap<object, Lane>();
  const start = (lane: Lane, request: IncomingMessage, response: ServerResponse) => {
    lane.active += 1;
    let over = false;
    const finished = () => {
      if (over) return;
      over = true;
      lane.active -= 1;
      while (lane.active < limits.concurrent && lane.waiting.length > 0) {
        const [next, nextResponse] = lane.waiting.shift() as [IncomingMessage, ServerResponse];
        start(lane, next, nextResponse);
      }
      if (lane.waiting.length === 0 && !lane.refused) release(lane, request.socket);
    };
    response.once('finish', finished);
    response.once('close', finished);
    handler(request, response);
  };
  return (request, response) => {
    const socket = request.socket;
    let lane = lanes.get(socket);
    if (lane === undefined) {
      lane = { active: 0, waiting: [], refused: false, hold: undefined };
      lanes.set(socket, lane);
    }
    if (lane.refused) return;
    if (lane.active + lane.waiting.length >= limits.pending) {
      lane.refused = true;
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
    if (lane.active < limits.concurrent) return start(lane, request, response);
    lane.waiting.push([request, response]);
    hold(lane, socket);
  };
}

/**
 * Stops reading a connection until {@link release}: Node resumes a socket whenever a request's body is
 * read or an answer is finished, so it is paused again each time. Requests already waiting have their
 * bytes in (they come after those the app has), so nothing the app waits for is held back.
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
