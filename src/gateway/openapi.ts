import { eventJsonSchema } from '../events/event.ts';

/** Options of {@link openApiDocument}: the limits the document states. */
export interface OpenApiOptions {
  version: string;
  maxBatch: number;
  maxBodyBytes: number;
}

type Json = Record<string, unknown>;

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
  const problem = (description: string, extraHeaders: Json = {}) => ({
    description,
    headers: { ...rateLimitHeaders, ...extraHeaders },
    content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
  });
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
            '400': problem(
              'Not UTF-8 JSON, not an event or batch, or an event that breaks the contract: `message` names the field. `error: ambiguous-api-key`: more than one API key (two `Authorization` fields, or `Authorization` and `X-API-Key`).',
            ),
            '401': problem(
              'No API key, or one that is not valid (`WWW-Authenticate` then says `error="invalid_token"`).',
            ),
            '403': problem("An event names a tenant other than the API key's."),
            '413': problem(
              "The body, the batch, or one event is larger than allowed (or than the tenant's burst).",
            ),
            '415': problem(
              'The body is not `application/json` in UTF-8 (a `charset` other than `utf-8`), or it is compressed (`error: unsupported-content-encoding`, with `Accept-Encoding: identity`): send it uncompressed.',
            ),
            '408': problem('The headers and body did not all arrive in time; the connection is closed.'),
            '501': problem(
              'A `Transfer-Encoding` coding other than `chunked` (`gzip, chunked`); the connection is closed. Send the body uncoded, chunked or with `Content-Length`.',
            ),
            '505': problem(
              'The request line names an HTTP version other than 1.x (`HTTP/2.0`); the connection is closed. Speak HTTP/1.1.',
            ),
            '417': problem('An `Expect` other than `100-continue`; the connection is closed.'),
            '429': problem(
              'The tenant is above its admission limit (every request costs one unit before its body is read, invalid ones included); retry after `Retry-After` seconds.',
              { 'Retry-After': { $ref: '#/components/headers/Retry-After' } },
            ),
            '503': problem(
              "`error: unavailable`: Kafka (or the limiter's Redis) could not be reached, or Kafka refused the write outright (the topic does not exist, or the gateway may not write to it); nothing was accepted. `error: outcome-unknown`: the events were sent but Kafka did not acknowledge them (an error answer after retries, or none in time), so they may or may not have been written; retrying with the same event ids (listed in `ids`) is safe, an id is pushed at most once.",
              { 'Retry-After': { $ref: '#/components/headers/Retry-After' } },
            ),
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
            error: { type: 'string', description: 'Machine-readable kind, e.g. invalid-event, throttled.' },
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
