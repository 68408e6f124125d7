import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Message } from 'kafkajs';
import { LimiterUnavailableError } from '../limiter/index.ts';
import type { Logger } from '../log.ts';
import { jsonErrorWithoutInput } from '../redact.ts';
import { type Admission, policyHeaders, rateLimitHeaders, type TenantAdmission } from './admission.ts';
import { answerUnrouted, bodyRefusalAnswers, type ErrorBody, INGEST, throttledBody } from './answers.ts';
import { type ApiKeys, credentialFieldLines } from './api-keys.ts';
import { boundedFastify, type ConnectionLimits } from './bounded-server.ts';
import { prepareBody } from './events.ts';
import { acceptUtf8Json, announcesBody, refusalBeforeBody } from './json-body.ts';
import { KafkaUnavailableError } from './kafka-unavailable.ts';
import type { GatewayMetrics } from './metrics.ts';
import { expectsContinue } from './request-framing.ts';
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
  /** Most events per request (413 beyond). */
  maxBatch: number;
  /** Largest body in bytes (413 beyond). */
  maxBodyBytes: number;
  /**
   * Bytes all bodies being read may hold together beyond each one's first event's worth (503 beyond;
   * default: 64 bodies of `maxBodyBytes`, see BodyMemory).
   */
  bodyMemoryBytes?: number;
  /** Retry-After of a 503 (seconds). */
  retryAfterSeconds: number;
  /** How long slow clients may hold a connection (defaults: DEFAULT_CONNECTION_LIMITS in bounded-server.ts). */
  connections?: Partial<ConnectionLimits>;
  /** Makes the id of an event that has none (default: a random UUID). */
  newId?: () => string;
}

/** A refusal answered before the body is read: the connection is closed so the unread body costs nothing. */
const BEFORE_BODY = { connection: 'close' };

/**
 * The gateway's API app (not yet listening): `POST /v1/notifications` and nothing else (the admin routes
 * are {@link buildAdminApp}'s, on their own port). Order of checks for an ingest request: API key (401),
 * one admission unit of the tenant's bucket for the request itself (429), both before the body is even
 * read; then body size and JSON (413/415/400), the events (400/403/413), the rest of the events'
 * admission units (429), Kafka (503). So an invalid or oversize request costs its tenant a unit like
 * any other (an invalid batch costs its events, taken as far as the bucket holds them), and a tenant
 * flooding them is throttled. Every answer to a known tenant with a limit
 * carries the `RateLimit` and `RateLimit-Policy` fields.
 */
export function buildGatewayApp(options: GatewayAppOptions): FastifyInstance {
  const { sink, admission, apiKeys, metrics, logger } = options;
  const app = boundedFastify(options.connections ?? {}, {
    bodyLimit: options.maxBodyBytes,
    onRefused: (status) => metrics.protocolRefusals.inc({ status }),
  });
  // Only JSON is an event; fastify would otherwise hand a text/plain body over as a string.
  app.removeContentTypeParser('text/plain');
  acceptUtf8Json(app, options.bodyMemoryBytes);
  // A client that asks `Expect: 100-continue` is told to send its body only once its key and its
  // request's admission unit are checked (Node would say "continue" to everyone at once): a refused
  // caller's body never crosses the network.
  app.server.on('checkContinue', (request, response) => app.server.emit('request', request, response));
  const bodyRefusals = bodyRefusalAnswers(options.maxBodyBytes, options.retryAfterSeconds);
  const tenants = new WeakMap<FastifyRequest, string>();
  const started = new WeakMap<FastifyRequest, bigint>();

  /** The rate-limit fields of a tenant's answer that spent nothing more (reads the bucket). */
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

  const limiterUnavailable = (
    request: FastifyRequest,
    reply: FastifyReply,
    tenant: string,
    error: LimiterUnavailableError,
    events: number,
    onAnswer: (status: number, body: ErrorBody) => void = () => {},
  ): FastifyReply => {
    logger.warn(
      { err: { name: error.name, message: error.message } },
      'admission limiter unavailable; answering 503',
    );
    metrics.eventsRefused.inc({ reason: 'limiter-unavailable' }, events);
    const body = {
      error: 'unavailable',
      message: 'the admission limiter cannot be reached; nothing was accepted',
    };
    onAnswer(503, body);
    return answer(request, reply, 503, body, {
      ...policyHeaders(admission.limitOf(tenant)),
      'retry-after': options.retryAfterSeconds,
    });
  };

  // Any other route or method is answered before its body is read, so that neither a body nor a wait
  // for `100 Continue` decides the answer; a body announced and left unread closes the connection.
  app.addHook('onRequest', async (request, reply) => {
    if (request.routeOptions.url === INGEST) return;
    if (announcesBody(request)) reply.headers(BEFORE_BODY);
    return answerUnrouted(request, reply);
  });

  // Authentication first, then the request's own admission unit: an unknown caller learns nothing
  // about the body rules, and neither it nor a throttled tenant costs any reading or parsing.
  app.addHook('onRequest', async (request, reply) => {
    if (request.routeOptions.url !== INGEST) return;
    started.set(request, process.hrtime.bigint());
    if (credentialFieldLines(request.raw.rawHeaders) > 1) {
      return answer(
        request,
        reply,
        400,
        {
          error: 'ambiguous-api-key',
          message: 'send one API key, in one "Authorization: Bearer <key>" or one "X-API-Key: <key>" field',
        },
        { 'www-authenticate': 'Bearer realm="aqueduct", error="invalid_request"', ...BEFORE_BODY },
      );
    }
    const auth = apiKeys.authenticate(request.headers);
    if (!auth.ok && auth.reason === 'malformed') {
      return answer(
        request,
        reply,
        400,
        { error: 'malformed-api-key', message: auth.message },
        { 'www-authenticate': 'Bearer realm="aqueduct", error="invalid_request"', ...BEFORE_BODY },
      );
    }
    if (!auth.ok) {
      // RFC 6750 §3.1: no error code when no credentials were sent, `invalid_token` for an unknown one.
      const challenge =
        auth.reason === 'unknown'
          ? 'Bearer realm="aqueduct", error="invalid_token"'
          : 'Bearer realm="aqueduct"';
      return answer(
        request,
        reply,
        401,
        { error: 'unauthorized', message: auth.message },
        { 'www-authenticate': challenge, ...BEFORE_BODY },
      );
    }
    const tenant = auth.tenant;
    tenants.set(request, tenant);
    let admitted: Admission;
    try {
      admitted = await admission.admitRequest(tenant);
    } catch (error) {
      if (!(error instanceof LimiterUnavailableError)) throw error;
      reply.headers(BEFORE_BODY);
      return limiterUnavailable(request, reply, tenant, error, 1);
    }
    if (admitted.kind === 'throttled') {
      metrics.eventsRefused.inc({ reason: 'throttled' }, 1);
      return answer(request, reply, 429, throttledBody(tenant, admitted.limit, admitted.retryAfterSeconds), {
        ...rateLimitHeaders(admitted),
        'retry-after': admitted.retryAfterSeconds,
        ...BEFORE_BODY,
      });
    }
    if (expectsContinue(request.raw)) {
      // What the header fields already refuse is answered now, so that body is never sent either.
      const code = refusalBeforeBody(request, options.maxBodyBytes);
      const refusal = code === undefined ? undefined : bodyRefusals.get(code);
      if (refusal) {
        return answer(request, reply, refusal.status, refusal.body, {
          ...rateLimitHeaders(admitted),
          ...refusal.headers,
          ...BEFORE_BODY,
        });
      }
      reply.raw.writeContinue();
    }
  });

  app.setErrorHandler(async (error: FastifyError, request, reply) => {
    const headers = await currentLimitHeaders(tenants.get(request));
    const refusal = bodyRefusals.get(error.code);
    if (refusal)
      return answer(request, reply, refusal.status, refusal.body, { ...headers, ...refusal.headers });
    if (error.statusCode === 400 || error instanceof SyntaxError) {
      return answer(
        request,
        reply,
        400,
        { error: 'invalid-json', message: `the body is not valid JSON: ${jsonErrorWithoutInput(error)}` },
        headers,
      );
    }
    logger.error({ err: { name: error.name, message: error.message } }, 'gateway request failed');
    return answer(request, reply, 500, { error: 'internal', message: 'internal error' }, headers);
  });

  // The first hook answers these; the handler keeps fastify's own 404 shape from ever showing.
  app.setNotFoundHandler(async (request, reply) => answerUnrouted(request, reply));

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
      // The request's first unit was taken at the door; the rest of its events cost the same refused.
      const counted = eventCountOf(request.body);
      if (counted > 1) await admission.charge(tenant, counted - 1).catch(() => {});
      return respond(
        prepared.status,
        { error: prepared.error, message: prepared.message },
        await currentLimitHeaders(tenant),
        { reason: prepared.error, events: counted },
      );
    }
    const events = prepared.events;

    const limit = admission.limitOf(tenant);
    if (limit !== null && events.length > limit.burst) {
      return respond(
        413,
        {
          error: 'batch-above-burst',
          message: `events: ${events.length} events in one request, more than tenant "${tenant}" may send at once (${limit.burst}); split the batch`,
        },
        await currentLimitHeaders(tenant),
        { reason: 'batch-above-burst', events: events.length },
      );
    }
    // The request's first unit was taken at the door; the rest of its events now.
    let admitted: Admission;
    try {
      admitted = await admission.admit(tenant, events.length - 1);
    } catch (error) {
      if (!(error instanceof LimiterUnavailableError)) throw error;
      return limiterUnavailable(request, reply, tenant, error, events.length, (status, body) =>
        endRequestTrace(requestTrace, status, { 'aqueduct.error': body.error }),
      );
    }
    const limitHeaders = rateLimitHeaders(admitted);
    if (admitted.kind === 'throttled' || admitted.kind === 'too-large') {
      const retryAfter = admitted.kind === 'throttled' ? admitted.retryAfterSeconds : 1;
      return respond(
        429,
        throttledBody(tenant, admitted.limit, retryAfter),
        { ...limitHeaders, 'retry-after': retryAfter },
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
      // Not acknowledged, so the tenant is not charged for the events (the request's own unit stays spent).
      if (admitted.kind === 'admitted') await admission.giveBack(tenant, events.length - 1).catch(() => {});
      const ids = events.map((event) => event.id);
      return respond(
        503,
        error.outcomeUnknown
          ? {
              error: 'outcome-unknown',
              message:
                'Kafka did not acknowledge the events (it answered with an error, or not in time): they may or may not have been written. Retrying with the same event ids (listed in ids) is safe: an id is pushed at most once',
              ids,
            }
          : {
              error: 'unavailable',
              message: `${error.refusal ? `Kafka refused the write: ${error.refusal}` : 'Kafka could not be reached'}; nothing was written. Retry after Retry-After`,
              ids,
            },
        { ...limitHeaders, 'retry-after': options.retryAfterSeconds },
        {
          reason: error.outcomeUnknown ? 'kafka-outcome-unknown' : 'kafka-unavailable',
          events: events.length,
        },
      );
    }
    metrics.eventsAccepted.inc(events.length);
    return respond(202, { ids: events.map((event) => event.id) }, limitHeaders);
  });
  return app;
}

/** How many events a parsed body holds: a batch's array length, else one. */
function eventCountOf(body: unknown): number {
  if (typeof body === 'object' && body !== null && 'events' in body && Array.isArray(body.events)) {
    return Math.max(1, body.events.length);
  }
  return 1;
}
