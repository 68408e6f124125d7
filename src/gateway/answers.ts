import type { FastifyReply, FastifyRequest } from 'fastify';
import type { TenantLimit } from './config.ts';
import { BODY_ERRORS } from './json-body.ts';

/** The gateway API's fixed answers: to another route, to a throttled tenant, to a body it cannot read. */

/** The one route of the API. */
export const INGEST = '/v1/notifications';
/** The methods the ingest route answers (its Allow field). */
const INGEST_METHODS = 'OPTIONS, POST';

/** A JSON error answer: a machine-readable kind and a message that names the problem. */
export interface ErrorBody {
  error: string;
  message: string;
  /** The request's event ids, on a 503 (a retry with the same ids is safe). */
  ids?: string[];
}

/** A refusal of a request's body: its status, its answer and any field the answer adds. */
export interface BodyRefusal {
  status: 400 | 413 | 415 | 503;
  body: ErrorBody;
  headers?: Record<string, string>;
}

/** The answer to each error reading a body may end in, by the error's code. */
export function bodyRefusalAnswers(
  maxBodyBytes: number,
  retryAfterSeconds: number,
): Map<string, BodyRefusal> {
  return new Map(
    Object.entries<BodyRefusal>({
      FST_ERR_CTP_BODY_TOO_LARGE: {
        status: 413,
        body: {
          error: 'body-too-large',
          message: `the body is larger than ${maxBodyBytes} bytes; send fewer events per request`,
        },
      },
      FST_ERR_CTP_INVALID_MEDIA_TYPE: {
        status: 415,
        body: { error: 'unsupported-media-type', message: 'the body must be application/json' },
      },
      [BODY_ERRORS.unsupportedCharset]: {
        status: 415,
        body: {
          error: 'unsupported-media-type',
          message: 'the body must be application/json in UTF-8: no charset parameter, or charset=utf-8',
        },
      },
      [BODY_ERRORS.unsupportedEncoding]: {
        status: 415,
        body: {
          error: 'unsupported-content-encoding',
          message: 'the body must not be compressed: send it without Content-Encoding',
        },
        headers: { 'accept-encoding': 'identity' },
      },
      [BODY_ERRORS.tooFragmented]: {
        status: 400,
        body: {
          error: 'body-too-fragmented',
          message:
            'the body came in too many pieces (chunks or packets of a few bytes each): send it in fewer, larger ones',
        },
        // The rest of the body is left unread.
        headers: { connection: 'close' },
      },
      [BODY_ERRORS.noMemory]: {
        status: 503,
        body: {
          error: 'unavailable',
          message:
            'the gateway is reading as many large bodies as it may hold at once; nothing was accepted. Retry after Retry-After',
        },
        // The rest of the body is left unread.
        headers: { 'retry-after': String(retryAfterSeconds), connection: 'close' },
      },
      [BODY_ERRORS.notUtf8]: {
        status: 400,
        body: {
          error: 'invalid-json',
          message: 'the body is not valid UTF-8 (JSON between systems is UTF-8, RFC 8259)',
        },
      },
      [BODY_ERRORS.forbiddenKey]: {
        status: 400,
        body: {
          error: 'invalid-body',
          message:
            'the body holds a "__proto__" key or a "constructor" key with "prototype" in it; neither is accepted',
        },
      },
      [BODY_ERRORS.duplicateKey]: {
        status: 400,
        body: {
          error: 'invalid-body',
          message:
            'the body holds an object with the same key twice; parsers disagree on which one counts, so neither is accepted',
        },
      },
      FST_ERR_CTP_INVALID_JSON_BODY: {
        status: 400,
        body: { error: 'invalid-json', message: 'the body is not valid JSON (UTF-8 text, RFC 8259)' },
      },
      FST_ERR_CTP_EMPTY_JSON_BODY: {
        status: 400,
        body: { error: 'invalid-body', message: 'the body is empty' },
      },
    }),
  );
}

/**
 * The answer to a request for anything but the ingest route, in the API's own error shape. The ingest
 * path names the methods it takes, and OPTIONS of it or of the server (`*`) is answered with them. A POST gets a 404 only on another spelling of the path
 * (`/v1/../v1/notifications`, which the router does not resolve): the method is right and the route
 * is not.
 */
export function answerUnrouted(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  // RFC 9110 §9.3.7: OPTIONS asks what a resource (or, for `*`, the server) takes; its answer is the
  // Allow field. No CORS fields: the API is for servers, and a browser's preflight fails as it should.
  if (request.method === 'OPTIONS' && (request.url === '*' || pathOf(request.url) === INGEST))
    return reply.code(204).header('allow', INGEST_METHODS).send();
  if (request.method !== 'POST' && pathOf(request.url) === INGEST) {
    return reply
      .code(405)
      .header('allow', INGEST_METHODS)
      .send({ error: 'method-not-allowed', message: `${INGEST} takes POST only` });
  }
  return reply.code(404).send({ error: 'not-found', message: `no such route; the API is POST ${INGEST}` });
}

/** The path of a request target, origin-form (`/p?q`) or absolute-form (`http://host/p`). */
function pathOf(target: string): string | undefined {
  try {
    return new URL(target, 'http://gateway').pathname;
  } catch {
    return undefined;
  }
}

/** The 429 body of a throttled tenant. */
export function throttledBody(tenant: string, limit: TenantLimit, retryAfterSeconds: number): ErrorBody {
  return {
    error: 'throttled',
    message: `tenant "${tenant}" is above its limit of ${limit.rate} events/s (burst ${limit.burst}); retry after ${retryAfterSeconds} s`,
  };
}
