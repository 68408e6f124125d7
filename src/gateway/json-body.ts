import type { FastifyError, FastifyInstance, FastifyRequest } from 'fastify';
import { EVENT_LIMITS } from '../events/event.ts';
import { BodyMemory } from './body-memory.ts';
import { hasDuplicateKey } from './json-duplicates.ts';

/**
 * How the gateway reads a body: JSON in UTF-8 (RFC 8259 §8.1: JSON exchanged between systems is UTF-8),
 * uncompressed. fastify would otherwise decode any bytes as UTF-8 with replacement characters, so a
 * Latin-1 `Café` or a stray byte would be accepted and pushed as `Caf�`, and a gzip body would be
 * answered as "not JSON".
 */

/** The codes of the errors the parser gives; `buildGatewayApp` answers each of them. */
export const BODY_ERRORS = {
  /** Valid JSON holding a `__proto__` key or a `constructor.prototype` (secure-json-parse refuses it). */
  forbiddenKey: 'AQUEDUCT_FORBIDDEN_JSON_KEY',
  /** Valid JSON holding an object with the same key twice (see hasDuplicateKey). */
  duplicateKey: 'AQUEDUCT_DUPLICATE_JSON_KEY',
  /** The bytes are not UTF-8. */
  notUtf8: 'AQUEDUCT_BODY_NOT_UTF8',
  /** `Content-Type: application/json; charset=…` naming another charset. */
  unsupportedCharset: 'AQUEDUCT_UNSUPPORTED_CHARSET',
  /** A `Content-Encoding` (gzip, br, …): the gateway reads only uncompressed bodies. */
  unsupportedEncoding: 'AQUEDUCT_UNSUPPORTED_CONTENT_ENCODING',
  /** A body that arrived in more pieces than its size allows (see readBody). */
  tooFragmented: 'AQUEDUCT_BODY_TOO_FRAGMENTED',
  /** The bodies being read hold all the memory they may (see BodyMemory). */
  noMemory: 'AQUEDUCT_BODY_MEMORY_FULL',
} as const;

/**
 * How many bodies of the largest size may be read at once (beyond each one's first event's worth),
 * unless AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES says otherwise.
 */
export const BODIES_READ_AT_ONCE = 64;

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Replaces fastify's `application/json` parser by one that refuses a body that is compressed, declared
 * in another charset or not UTF-8, and then parses it with fastify's own parser (secure-json-parse,
 * refusing prototype-poisoning keys), telling such a refusal of valid JSON apart from invalid JSON.
 * The text is parsed a second time only on that error path.
 */
export function acceptUtf8Json(app: FastifyInstance, bodyMemoryBytes?: number): void {
  const secureParse = app.getDefaultJsonParser('error', 'error');
  const appLimit = app.initialConfig.bodyLimit ?? 1_048_576;
  const memory = new BodyMemory(
    bodyMemoryBytes ?? BODIES_READ_AT_ONCE * appLimit,
    EVENT_LIMITS.maxMessageBytes,
  );
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', (request, payload, done) => {
    const limit = request.routeOptions.bodyLimit ?? appLimit;
    // A declared length over the limit is refused before a byte is read.
    if (Number(request.headers['content-length']) > limit) {
      done(bodyError('FST_ERR_CTP_BODY_TOO_LARGE', 413, 'body too large'));
      return;
    }
    readBody(payload, limit, memory).then(
      (body) => parseBody(request, body, done),
      (error: unknown) => done(error as Error),
    );
  });

  const parseBody = (
    request: FastifyRequest,
    body: Buffer,
    done: (error: Error | null, value?: unknown) => void,
  ): void => {
    const refusal = encodingRefusal(request);
    if (refusal) {
      done(refusal);
      return;
    }
    let text: string;
    try {
      text = utf8.decode(body);
    } catch {
      done(bodyError(BODY_ERRORS.notUtf8, 400, 'the body is not UTF-8'));
      return;
    }
    // The decoder drops one byte order mark (RFC 8259 §8.1 lets a parser ignore it) and
    // secure-json-parse would drop a second: a U+FEFF left after the first is not JSON whitespace.
    if (text.charCodeAt(0) === 0xfeff) {
      done(bodyError('FST_ERR_CTP_INVALID_JSON_BODY', 400, 'a second byte order mark at position 0'));
      return;
    }
    secureParse(request, text, (error, value) => {
      if ((error as FastifyError | null)?.code === 'FST_ERR_CTP_INVALID_JSON_BODY' && isJson(text)) {
        done(bodyError(BODY_ERRORS.forbiddenKey, 400, 'forbidden key in the JSON body'));
        return;
      }
      if (!error && hasDuplicateKey(text)) {
        done(bodyError(BODY_ERRORS.duplicateKey, 400, 'a key twice in one object of the JSON body'));
        return;
      }
      done(error, value);
    });
  };
}

/** The smallest number of pieces a body is allowed to arrive in, whatever its limit. */
const MIN_BODY_PIECES = 1024;

/**
 * Reads a body of at most `limit` bytes into one buffer. fastify's own reader keeps every piece the
 * parser hands over until the end, a Buffer each: a body sent as chunks of one byte each (6 bytes of
 * framing per byte of body) held a million of them, about 460 MiB for one request of 1 MiB. Here each
 * piece is copied as it comes, and a body in more than `limit / 256` pieces (at least 1024; a client
 * writing whole buffers sends a 1 MiB body in a few dozen, and TCP segments of 536 bytes make about
 * 2000) is refused: each piece costs a parser callback. Bytes beyond a body's first event's worth are
 * taken from `memory`, shared by every body being read, and a body that finds it full is refused.
 */
function readBody(payload: NodeJS.ReadableStream, limit: number, memory: BodyMemory): Promise<Buffer> {
  const maxPieces = Math.max(MIN_BODY_PIECES, Math.floor(limit / 256));
  return new Promise((resolve, reject) => {
    let body = Buffer.allocUnsafe(Math.min(limit, 16 * 1024));
    let length = 0;
    let pieces = 0;
    const stop = (error?: Error) => {
      memory.release(length);
      payload.removeListener('data', onData);
      payload.removeListener('end', onEnd);
      payload.removeListener('error', onError);
      if (error) reject(error);
      else resolve(body.subarray(0, length));
    };
    const onData = (chunk: Buffer | string) => {
      const piece = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      if (length + piece.length > limit) {
        stop(bodyError('FST_ERR_CTP_BODY_TOO_LARGE', 413, 'body too large'));
        return;
      }
      if (++pieces > maxPieces) {
        stop(bodyError(BODY_ERRORS.tooFragmented, 400, `body in more than ${maxPieces} pieces`));
        return;
      }
      if (!memory.take(length, piece.length)) {
        stop(bodyError(BODY_ERRORS.noMemory, 503, 'the bodies being read hold all the memory they may'));
        return;
      }
      if (length + piece.length > body.length) {
        const grown = Buffer.allocUnsafe(Math.min(limit, Math.max(body.length * 2, length + piece.length)));
        body.copy(grown, 0, 0, length);
        body = grown;
      }
      piece.copy(body, length);
      length += piece.length;
    };
    const onEnd = () => stop();
    const onError = (error: Error & { statusCode?: number }) => {
      if (!(typeof error.statusCode === 'number' && error.statusCode >= 400)) error.statusCode = 400;
      stop(error);
    };
    payload.on('data', onData);
    payload.on('end', onEnd);
    payload.on('error', onError);
    payload.resume();
  });
}

/**
 * The code of the error that reading the body would end in, as far as the request's header fields tell
 * it before a byte of the body is read: a declared `Content-Length` above `maxBodyBytes`
 * (`FST_ERR_CTP_BODY_TOO_LARGE`, as fastify gives it), a media type other than JSON or none for a body
 * (`FST_ERR_CTP_INVALID_MEDIA_TYPE`), a charset or a content coding the parser refuses. For a caller
 * that waits for `100 Continue` before it sends its body.
 */
export function refusalBeforeBody(request: FastifyRequest, maxBodyBytes: number): string | undefined {
  const length = Number(request.headers['content-length']);
  if (Number.isFinite(length) && length > maxBodyBytes) return 'FST_ERR_CTP_BODY_TOO_LARGE';
  const contentType = request.headers['content-type'];
  if (contentType === undefined ? announcesBody(request) : mediaTypeOf(contentType) !== 'application/json')
    return 'FST_ERR_CTP_INVALID_MEDIA_TYPE';
  return (encodingRefusal(request) as { code?: string } | undefined)?.code;
}

/**
 * Whether the request says a body follows (RFC 9112 §6.3: a `Transfer-Encoding`, or a `Content-Length`
 * other than 0). fastify refuses such a body without a `Content-Type` as of no media type it parses.
 */
export function announcesBody(request: FastifyRequest): boolean {
  const length = request.headers['content-length'];
  return request.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/** The lower-case `type/subtype` of a Content-Type field value (RFC 9110 §8.3.1), without parameters. */
function mediaTypeOf(contentType: string): string {
  return (contentType.split(';', 1)[0] ?? '').trim().toLowerCase();
}

/** Why the body cannot be read as it is declared, if it cannot. */
function encodingRefusal(request: FastifyRequest): Error | undefined {
  const encoding = request.headers['content-encoding']?.trim().toLowerCase();
  if (encoding !== undefined && encoding !== '' && encoding !== 'identity') {
    return bodyError(BODY_ERRORS.unsupportedEncoding, 415, 'compressed body');
  }
  const charset = charsetOf(request.headers['content-type'] ?? '');
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
    return bodyError(BODY_ERRORS.unsupportedCharset, 415, 'body charset other than UTF-8');
  }
  return undefined;
}

/**
 * The lower-case `charset` parameter of a Content-Type field value (RFC 9110 §8.3: parameters are
 * `; name=value`, the name case-insensitive, the value a token or a quoted string), if it has one.
 */
export function charsetOf(contentType: string): string | undefined {
  const match = /;\s*charset\s*=\s*(?:"([^"]*)"|([^;\s]*))/i.exec(contentType);
  if (!match) return undefined;
  return (match[1] ?? match[2] ?? '').toLowerCase();
}

function bodyError(code: string, statusCode: number, message: string): Error {
  return Object.assign(new Error(message), { code, statusCode });
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}
