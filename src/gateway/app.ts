import Fastify, {
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import type { Message } from 'kafkajs';
import { LimiterUnavailableError } from '../limiter/index.ts';
import type { Logger } from '../log.ts';
import { type Admission, policyHeaders, rateLimitHeaders, type TenantAdmission } from './admission.ts';
import type { ApiKeys } from './api-keys.ts';
import { prepareBody } from './events.ts';
import { KafkaUnavailableError } from './kafka-unavailable.ts';
import type { GatewayMetrics } from './metrics.ts';
import { openApiDocument } from './openapi.ts';
import { endRequestTrace, startPublishTrace, startRequestTrace } from './tracing.ts';

/** Where accepted events go: {@link KafkaWriter} in production. */
export interface EventSink {
  readonly topic: string;
  /** Resolves once Kafka acknowledged every message; rejects with {@link KafkaUnavailableError}. */
  write(messages: Message[]): Promise<void>;
}

/** What {@link buildGatewayApp} needs. */
export interface GatewayAppOptions {
  sink: EventSink;
  admission: TenantAdmission;
  apiKeys: ApiKeys;
  metrics: GatewayMetrics;
  logger: Logger;
  /** `/readyz` answers 200 only while this returns true. */
  isReady: () => boolean;
  /** Most events per request (413 beyond). */
  maxBatch: number;
  /** Largest body in bytes (413 beyond). */
  maxBodyBytes: number;
  /** Retry-After of a 503 (seconds). */
  retryAfterSeconds: number;
  /** Version shown in the OpenAPI document. */
  version: string;
  /** Makes the id of an event that has none (default: a random UUID). */
  newId?: () => string;
}

/** A JSON error answer: a machine-readable kind and a message that names the problem. */
interface ErrorBody {
  error: string;
  message: string;
}

const INGEST = '/v1/notifications';

/**
 * The gateway's HTTP app (not yet listening): `POST /v1/notifications`, `/openapi.json`, `/healthz`,
 * `/readyz` and `/metrics`, all on one port. Order of checks for an ingest request: API key (401, before
 * the body is even read), body size and JSON (413/415/400), the events (400/403/413), the tenant's
 * admission bucket (429), Kafka (503). Every answer to a known tenant with a limit carries the
 * `RateLimit` and `RateLimit-Policy` fields.
 */
export function buildGatewayApp(options: GatewayAppOptions): FastifyInstance {
  const { sink, admission, apiKeys, metrics, logger } = options;
  const app = Fastify({ logger: false, bodyLimit: options.maxBodyBytes, return503OnClosing: true });
  // Only JSON is an event; fastify would otherwise hand a text/plain body over as a string.
  app.removeContentTypeParser('text/plain');
  const tenants = new WeakMap<FastifyRequest, string>();
  const started = new WeakMap<FastifyRequest, bigint>();
  const document = openApiDocument({
    version: options.version,
    maxBatch: options.maxBatch,
    maxBodyBytes: options.maxBodyBytes,
  });

  /** The rate-limit fields of a tenant's answer that spent nothing (reads the bucket). */
  const currentLimitHeaders = async (tenant: string | undefined): Promise<Record<string, string>> => {
    if (tenant === undefined) return {};
    try {
      return rateLimitHeaders(await admission.admit(tenant, 0));
    } catch {
      return policyHeaders(admission.limitOf(tenant));
    }
  };

  const answer = (
    request: FastifyRequest,
    reply: FastifyReply,
    status: number,
    body: ErrorBody | { ids: string[] },
    headers: Record<string, string | number>,
  ): FastifyReply => {
    if (request.routeOptions.url === INGEST) {
      metrics.requests.inc({ status });
      const start = started.get(request);
      if (start !== undefined) {
        metrics.requestSeconds.observe({ status }, Number(process.hrtime.bigint() - start) / 1e9);
      }
    }
    return reply.code(status).headers(headers).send(body);
  };

  // Authentication first: an unknown caller learns nothing about the body rules and costs no parsing.
  app.addHook('onRequest', async (request, reply) => {
    if (request.routeOptions.url !== INGEST) return;
    started.set(request, process.hrtime.bigint());
    const auth = apiKeys.authenticate(request.headers);
    if (!auth.ok) {
      return answer(
        request,
        reply,
        401,
        { error: 'unauthorized', message: auth.message },
        {
          'www-authenticate': 'Bearer realm="aqueduct"',
        },
      );
    }
    tenants.set(request, auth.tenant);
  });

  app.setErrorHandler(async (error: FastifyError, request, reply) => {
    const headers = await currentLimitHeaders(tenants.get(request));
    switch (error.code) {
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
        return answer(
          request,
          reply,
          413,
          {
            error: 'body-too-large',
            message: `the body is larger than ${options.maxBodyBytes} bytes; send fewer events per request`,
          },
          headers,
        );
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
        return answer(
          request,
          reply,
          415,
          {
            error: 'unsupported-media-type',
            message: 'the body must be application/json',
          },
          headers,
        );
      case 'FST_ERR_CTP_EMPTY_JSON_BODY':
        return answer(request, reply, 400, { error: 'invalid-body', message: 'the body is empty' }, headers);
      default:
        if (error.statusCode === 400 || error instanceof SyntaxError) {
          return answer(
            request,
            reply,
            400,
            {
              error: 'invalid-json',
              message: `the body is not valid JSON: ${error.message.slice(0, 160)}`,
            },
            headers,
          );
        }
        logger.error({ err: { name: error.name, message: error.message } }, 'gateway request failed');
        return answer(request, reply, 500, { error: 'internal', message: 'internal error' }, headers);
    }
  });

  app.post(INGEST, async (request, reply) => {
    const tenant = tenants.get(request) as string;
    const requestTrace = startRequestTrace(request.headers, { 'aqueduct.tenant': tenant });
    const respond = async (
      status: number,
      body: ErrorBody | { ids: string[] },
      headers: Record<string, string | number>,
      refused?: { reason: string; events: number },
    ) => {
      if (refused) metrics.eventsRefused.inc({ reason: refused.reason }, refused.events);
      endRequestTrace(requestTrace, status, 'error' in body ? { 'aqueduct.error': body.error } : {});
      return answer(request, reply, status, body, headers);
    };

    const prepared = prepareBody(request.body, {
      tenant,
      maxBatch: options.maxBatch,
      ...(options.newId ? { newId: options.newId } : {}),
    });
    if (!prepared.ok) {
      return respond(
        prepared.status,
        { error: prepared.error, message: prepared.message },
        await currentLimitHeaders(tenant),
        { reason: prepared.error, events: 1 },
      );
    }
    const events = prepared.events;

    let admitted: Admission;
    try {
      admitted = await admission.admit(tenant, events.length);
    } catch (error) {
      if (!(error instanceof LimiterUnavailableError)) throw error;
      logger.warn(
        { err: { name: error.name, message: error.message } },
        'admission limiter unavailable; answering 503',
      );
      return respond(
        503,
        { error: 'unavailable', message: 'the admission limiter cannot be reached; nothing was accepted' },
        { ...policyHeaders(admission.limitOf(tenant)), 'retry-after': options.retryAfterSeconds },
        { reason: 'limiter-unavailable', events: events.length },
      );
    }
    const limitHeaders = rateLimitHeaders(admitted);
    if (admitted.kind === 'too-large') {
      return respond(
        413,
        {
          error: 'batch-above-burst',
          message: `events: ${events.length} events in one request, more than tenant "${tenant}" may send at once (${admitted.limit.burst}); split the batch`,
        },
        limitHeaders,
        { reason: 'batch-above-burst', events: events.length },
      );
    }
    if (admitted.kind === 'throttled') {
      return respond(
        429,
        {
          error: 'throttled',
          message: `tenant "${tenant}" is above its limit of ${admitted.limit.rate} events/s (burst ${admitted.limit.burst}); retry after ${admitted.retryAfterSeconds} s`,
        },
        { ...limitHeaders, 'retry-after': admitted.retryAfterSeconds },
        { reason: 'throttled', events: events.length },
      );
    }

    try {
      const publishTrace = startPublishTrace(
        requestTrace,
        sink.topic,
        events.map((e) => e.event),
      );
      try {
        await sink.write(
          events.map((event, i) => ({
            key: event.key,
            value: event.value,
            headers: publishTrace.headersOf(i),
          })),
        );
        publishTrace.end();
      } catch (error) {
        publishTrace.end(error);
        throw error;
      }
    } catch (error) {
      if (!(error instanceof KafkaUnavailableError)) throw error;
      // Nothing was accepted, so the tenant is not charged for it.
      if (admitted.kind === 'admitted') await admission.giveBack(tenant, events.length).catch(() => {});
      return respond(
        503,
        {
          error: 'unavailable',
          message: 'Kafka did not acknowledge the events in time; nothing was accepted',
        },
        { ...limitHeaders, 'retry-after': options.retryAfterSeconds },
        { reason: 'kafka-unavailable', events: events.length },
      );
    }
    metrics.eventsAccepted.inc(events.length);
    return respond(202, { ids: events.map((event) => event.id) }, limitHeaders);
  });

  app.get('/openapi.json', async (_request, reply) => reply.send(document));
  app.get('/healthz', async (_request, reply) => reply.send({ status: 'ok' }));
  app.get('/readyz', async (_request, reply) => {
    const ready = options.isReady();
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not ready' });
  });
  app.get('/metrics', async (_request, reply) =>
    reply.type(metrics.registry.contentType).send(await metrics.registry.metrics()),
  );
  return app;
}
