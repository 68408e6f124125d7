import { EVENT_LIMITS, eventJsonSchema } from '../events/event.ts';
import { PROVIDER_PAYLOAD_LIMIT_BYTES } from '../events/payload.ts';

/** Options of {@link openApiDocument}: the limits the document states. */
export interface OpenApiOptions {
  version: string;
  maxBatch: number;
  maxBodyBytes: number;
}

type Json = Record<string, unknown>;

/**
 * Every `error` the ingest API answers with, by status, and when. The answers written before any route
 * (framing, deadlines, headers, `CONNECT`) are src/gateway/bounded-server.ts'; a unit test keeps this
 * table equal to the `error` values in the gateway's code.
 */
function errorTypes(options: OpenApiOptions) {
  const beforeBody = 'checked before the body is read, and the connection is closed';
  return {
    '400': {
      'invalid-json': 'the body is not JSON, or not UTF-8 (never read with replacement characters).',
      'invalid-body':
        'the body is empty, is neither one event nor a batch `{"events": [...]}` of at least one event, holds a `__proto__` key or a `constructor` key holding `prototype` (JSON that could poison prototypes), or holds an object with the same key twice (parsers disagree on which one counts).',
      'invalid-event':
        'an event breaks the contract; `message` names the field: `events[2].token: Too small: expected string to have >=1 characters`.',
      'duplicate-id': 'two events of the request have one id.',
      'body-too-fragmented':
        'the body came in more pieces (chunks, or packets) than its size allows: more than the body limit / 256, at least 1024; the connection is closed.',
      'ambiguous-api-key': `more than one API key: two \`Authorization\` fields (of any scheme), two \`X-API-Key\` fields, or one of each (\`WWW-Authenticate\` says \`error="invalid_request"\`); ${beforeBody}.`,
      'malformed-api-key': `an \`Authorization: Bearer\` field with no key or more than one word (\`WWW-Authenticate\` says \`error="invalid_request"\`); ${beforeBody}.`,
      'bad-request':
        'the request breaks HTTP/1.1 framing (two different `Content-Length`s, `Transfer-Encoding` with `Content-Length` or not ending in `chunked`, a bad chunk, `Transfer-Encoding` in HTTP/1.0, a target with a fragment or a `%` not followed by two hex digits), has no `Host` field in HTTP/1.1, more than one or an invalid one, or more than one `Content-Type`; answered before any route, and the connection is closed.',
    },
    '401': {
      unauthorized: `no API key (\`Authorization: Bearer <key>\` or \`X-API-Key: <key>\`), or an unknown one (\`WWW-Authenticate\` then says \`error="invalid_token"\`); ${beforeBody}.`,
    },
    '403': { 'tenant-mismatch': "an event names a tenant other than the API key's." },
    '404': {
      'not-found': 'any other path, another spelling of this one (`/v1/../v1/notifications`) included.',
    },
    '405': {
      'method-not-allowed':
        'any method but POST and OPTIONS on this path (`Allow: OPTIONS, POST`), and `CONNECT` to any target (nothing here tunnels; the connection is closed; `Allow: POST`).',
    },
    '408': {
      'request-timeout': 'the headers and body did not all arrive in time; the connection is closed.',
    },
    '413': {
      'body-too-large': `the body is larger than ${options.maxBodyBytes} bytes.`,
      'too-many-events': `a batch has more than ${options.maxBatch} events.`,
      'event-too-large': `an event is larger than ${EVENT_LIMITS.maxMessageBytes} bytes as JSON (the contract's limit).`,
      'payload-too-large': `an event's push would be larger than the providers' ${PROVIDER_PAYLOAD_LIMIT_BYTES} bytes.`,
      'batch-above-burst':
        "a batch has more events than the tenant's burst, so it could never be admitted: split it.",
    },
    '415': {
      'unsupported-media-type':
        'the body is not `application/json`, or declares a `charset` other than `utf-8`.',
      'unsupported-content-encoding':
        'the body has a `Content-Encoding` such as `gzip` (the answer says `Accept-Encoding: identity`): send it uncompressed.',
    },
    '417': { 'expectation-failed': `an \`Expect\` other than \`100-continue\`; ${beforeBody}.` },
    '414': {
      'uri-too-long':
        'the request line (method, target and version) is longer than 16 KiB; answered before any route, and the connection is closed.',
    },
    '429': {
      throttled:
        'the tenant is above its admission limit (every request costs one unit before its body is read, invalid ones included); retry after `Retry-After` seconds.',
      'too-many-pipelined':
        'more than 256 requests pipelined on one connection are waiting for their answers: those before it are answered, those after it are not read, and the connection is closed. Read the answers before sending more.',
    },
    '431': {
      'headers-too-large':
        'the request headers are larger than 16 KiB (names and values), or more than 1000 fields; answered before any route, and the connection is closed.',
    },
    '500': { internal: 'a fault of the gateway, which it logs.' },
    '501': {
      'not-implemented': `a \`Transfer-Encoding\` coding other than \`chunked\` (\`gzip, chunked\`); ${beforeBody}. Send the body uncoded, chunked or with \`Content-Length\`.`,
    },
    '503': {
      unavailable:
        "Kafka (or the limiter's Redis) could not be reached, Kafka refused the write outright (the topic does not exist, or the gateway may not write to it), or the large bodies being read at once already hold all the memory they may (the connection is then closed); nothing was accepted.",
      'outcome-unknown':
        'the events were sent but Kafka did not acknowledge them (an error answer after retries, or none in time), so they may or may not have been written; retrying with the same event ids (listed in `ids`) is safe, an id is pushed at most once.',
      'shutting-down':
        'the gateway is shutting down and took nothing (`Retry-After: 1`; the connection is closed): send the request again, another instance takes it.',
    },
    '505': {
      'http-version-not-supported': `the request line names an HTTP version other than 1.x (\`HTTP/2.0\`); ${beforeBody}. Speak HTTP/1.1.`,
    },
  } satisfies Record<string, Record<string, string>>;
}

/**
 * The OpenAPI 3.1 document of the gateway, served at `/openapi.json`. The event's schema is the
 * contract's own JSON Schema (generated from the zod definition, `z.toJSONSchema`), so the document and
 * the validation cannot drift apart; in a request `id` and `tenant` may be left out (the gateway fills
 * them in).
 */
export function openApiDocument(options: OpenApiOptions): Json {
  const { $id: _id, $schema: _schema, title: _title, ...contract } = eventJsonSchema();
  const required = Array.isArray(contract.required) ? (contract.required as string[]) : [];
  const event: Json = {
    ...contract,
    title: 'Notification event (contract v1)',
    description:
      "An event of contract v1. `id` may be left out (the gateway assigns a UUID and returns it); `tenant` may be left out (the API key's tenant is used) and must otherwise be the key's tenant.",
    required: required.filter((name) => name !== 'id'),
  };
  const rateLimitHeaders = {
    RateLimit: { $ref: '#/components/headers/RateLimit' },
    'RateLimit-Policy': { $ref: '#/components/headers/RateLimit-Policy' },
  };
  const errors = errorTypes(options);
  /**
   * An error answer: its `error` values, each with when it is given, and its headers (the RateLimit
   * fields only on answers to a known tenant).
   */
  const problem = (status: keyof typeof errors, summary: string, headers: Json = {}) => {
    const types: Record<string, string> = errors[status];
    return {
      description: [summary, ...Object.entries(types).map(([type, when]) => `\`${type}\`: ${when}`)].join(
        '\n\n',
      ),
      headers,
      content: {
        'application/json': {
          schema: {
            allOf: [
              { $ref: '#/components/schemas/Error' },
              { type: 'object', properties: { error: { enum: Object.keys(types) } } },
            ],
          },
        },
      },
    };
  };
  return {
    openapi: '3.1.0',
    info: {
      title: 'Aqueduct ingest gateway',
      version: options.version,
      description:
        'Admits push notifications into Aqueduct: validates them against event contract v1, writes them to Kafka and answers once Kafka has acknowledged them. Each tenant has an admission limit in events per second (one token per event). This document, `/healthz`, `/readyz` and `/metrics` are served on the admin port (`AQUEDUCT_GATEWAY_ADMIN_PORT`), never on the API port.',
    },
    servers: [{ url: '/' }],
    security: [{ bearer: [] }, { apiKey: [] }],
    paths: {
      '/v1/notifications': {
        options: {
          operationId: 'notificationsOptions',
          summary: 'The methods this path takes',
          description:
            'Answered before authentication, for this path and for the server as a whole (`OPTIONS *`). No CORS fields: the API is for servers.',
          security: [],
          responses: {
            '204': {
              description: 'No content; `Allow` lists the methods.',
              headers: { Allow: { description: '`OPTIONS, POST`', schema: { type: 'string' } } },
            },
          },
        },
        post: {
          operationId: 'submitNotifications',
          summary: 'Submit one notification or a batch',
          description: `One event (a JSON object) or a batch \`{"events": [...]}\` of at most ${options.maxBatch} events; the body is at most ${options.maxBodyBytes} bytes. All events of a request are accepted together or none is. 202 means Kafka acknowledged every event (all in-sync replicas). Give events your own \`id\`s to make retries after a 503 safe: an id is delivered once.`,
          parameters: [
            {
              name: 'traceparent',
              in: 'header',
              required: false,
              description: 'W3C trace context; continued into the Kafka headers of every event.',
              schema: { type: 'string' },
            },
          ],
          requestBody: {
            required: true,
            content: {
              'application/json': {
                schema: {
                  oneOf: [
                    { $ref: '#/components/schemas/NotificationEvent' },
                    { $ref: '#/components/schemas/Batch' },
                  ],
                },
              },
            },
          },
          responses: {
            '202': {
              description:
                "Written to Kafka. `ids` are the events' ids in request order (assigned ones included).",
              headers: rateLimitHeaders,
              content: { 'application/json': { schema: { $ref: '#/components/schemas/Accepted' } } },
            },
            '400': problem('400', 'The request or its body is malformed; `message` says how.', {
              ...rateLimitHeaders,
              'WWW-Authenticate': { $ref: '#/components/headers/WWW-Authenticate' },
            }),
            '401': problem('401', 'No API key, or one that is not valid.', {
              'WWW-Authenticate': { $ref: '#/components/headers/WWW-Authenticate' },
            }),
            '403': problem('403', "An event names a tenant other than the API key's.", rateLimitHeaders),
            '404': problem('404', 'No such route.'),
            '405': problem('405', 'A method this path does not take.', {
              Allow: {
                description: 'The methods the path takes: `OPTIONS, POST` (`POST` for a `CONNECT`).',
                schema: { type: 'string' },
              },
            }),
            '408': problem('408', 'The request did not arrive in time; the connection is closed.'),
            '413': problem('413', 'The body, the batch or one event is too large.', rateLimitHeaders),
            '415': problem('415', 'The body is not uncompressed `application/json` in UTF-8.', {
              ...rateLimitHeaders,
              'Accept-Encoding': {
                description: 'With `unsupported-content-encoding`: `identity`.',
                schema: { type: 'string' },
              },
            }),
            '417': problem('417', 'An expectation this API does not meet; the connection is closed.'),
            '414': problem('414', 'The request target is too long; the connection is closed.'),
            '429': problem(
              '429',
              'The tenant is above its admission limit, or the connection has too many requests waiting.',
              {
                ...rateLimitHeaders,
                'Retry-After': { $ref: '#/components/headers/Retry-After' },
              },
            ),
            '431': problem('431', 'The request headers are too large; the connection is closed.'),
            '500': problem('500', 'A fault of the gateway; it is logged.', rateLimitHeaders),
            '501': problem('501', 'A transfer coding the gateway does not decode; the connection is closed.'),
            '503': problem('503', 'The gateway cannot take the request now; retry after `Retry-After`.', {
              ...rateLimitHeaders,
              'Retry-After': { $ref: '#/components/headers/Retry-After' },
            }),
            '505': problem('505', 'An HTTP version other than 1.x; the connection is closed.'),
          },
        },
      },
    },
    components: {
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', description: 'Authorization: Bearer <API key>' },
        apiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key' },
      },
      headers: {
        RateLimit: {
          description:
            'draft-ietf-httpapi-ratelimit-headers: `"tenant";r=<events left>;t=<seconds until the bucket is full>`.',
          schema: { type: 'string' },
        },
        'RateLimit-Policy': {
          description:
            'draft-ietf-httpapi-ratelimit-headers: `"tenant";q=<burst in events>;w=<seconds the rate takes to refill it>`.',
          schema: { type: 'string' },
        },
        'Retry-After': {
          description: 'Seconds to wait before retrying.',
          schema: { type: 'integer', minimum: 1 },
        },
        'WWW-Authenticate': {
          description:
            'RFC 6750: `Bearer realm="aqueduct"`, with `error="invalid_token"` for a key that is not valid (401) and `error="invalid_request"` for more than one key (400).',
          schema: { type: 'string' },
        },
      },
      schemas: {
        NotificationEvent: event,
        Batch: {
          type: 'object',
          properties: {
            events: {
              type: 'array',
              minItems: 1,
              maxItems: options.maxBatch,
              items: { $ref: '#/components/schemas/NotificationEvent' },
            },
          },
          required: ['events'],
          additionalProperties: false,
        },
        Accepted: {
          type: 'object',
          properties: { ids: { type: 'array', items: { type: 'string' } } },
          required: ['ids'],
        },
        Error: {
          type: 'object',
          properties: {
            error: {
              type: 'string',
              description: 'Machine-readable kind; each answer lists the ones it is given with.',
            },
            message: {
              type: 'string',
              description: 'What is wrong, naming the field (never quoting values).',
            },
            ids: {
              type: 'array',
              items: { type: 'string' },
              description: "On a 503: the request's event ids (generated ones included), to retry with.",
            },
          },
          required: ['error', 'message'],
        },
      },
    },
  };
}
