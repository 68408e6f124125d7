import {
  type Context,
  context,
  isSpanContextValid,
  propagation,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TextMapPropagator,
  TraceFlags,
  trace,
} from '@opentelemetry/api';

/**
 * The gateway's tracing, kept in this one module so that it can move onto the project's telemetry setup
 * unchanged: spans go through `@opentelemetry/api` (no-ops until an SDK is registered), and the W3C
 * trace context of the request is continued into the Kafka headers of every event it wrote, so a trace
 * starts at the caller and runs on through the consumer.
 *
 * Propagation uses the globally registered propagator when there is one; otherwise the small W3C
 * `traceparent`/`tracestate` propagator below (the API package ships none). Without an SDK the spans
 * are non-recording and carry the caller's span context, so the caller's `traceparent` reaches Kafka as
 * it came; with an SDK the gateway's own spans sit in between.
 */

const TRACER = 'aqueduct-gateway';
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** W3C Trace Context, level 1: `traceparent` and `tracestate`, nothing else. */
export const w3cTraceContext: TextMapPropagator = {
  inject(ctx, carrier, setter) {
    const spanContext = trace.getSpanContext(ctx);
    if (!spanContext || !isSpanContextValid(spanContext)) return;
    const flags = (spanContext.traceFlags & TraceFlags.SAMPLED).toString(16).padStart(2, '0');
    setter.set(carrier, 'traceparent', `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`);
    const state = spanContext.traceState?.serialize();
    if (state) setter.set(carrier, 'tracestate', state);
  },
  extract(ctx, carrier, getter) {
    const header = getter.get(carrier, 'traceparent');
    const value = (Array.isArray(header) ? header[0] : header)?.trim().toLowerCase();
    const match = value ? TRACEPARENT.exec(value) : null;
    // Version ff is invalid; version 00 has exactly four fields.
    if (!match || match[1] === 'ff' || (match[1] === '00' && match[5] !== undefined)) return ctx;
    const spanContext = {
      traceId: match[2] as string,
      spanId: match[3] as string,
      traceFlags: Number.parseInt(match[4] as string, 16) & TraceFlags.SAMPLED,
      isRemote: true,
    };
    if (!isSpanContextValid(spanContext)) return ctx;
    return trace.setSpanContext(ctx, spanContext);
  },
  fields: () => ['traceparent', 'tracestate'],
};

function activePropagator(): TextMapPropagator {
  if (propagation.fields().length === 0) return w3cTraceContext;
  return {
    inject: (ctx, carrier, setter) => propagation.inject(ctx, carrier, setter),
    extract: (ctx, carrier, getter) => propagation.extract(ctx, carrier, getter),
    fields: () => propagation.fields(),
  };
}

type HeaderBag = Record<string, string | string[] | undefined>;

const headerGetter = {
  keys: (carrier: HeaderBag) => Object.keys(carrier),
  get: (carrier: HeaderBag, key: string) => carrier[key.toLowerCase()],
};

/** The span of one ingest request and the context its children and Kafka headers descend from. */
export interface RequestTrace {
  span: Span;
  context: Context;
}

/** Starts the server span of a request, continuing the caller's `traceparent` when it sent one. */
export function startRequestTrace(headers: HeaderBag, attributes: Record<string, string>): RequestTrace {
  const parent = activePropagator().extract(ROOT_CONTEXT, headers, headerGetter);
  const span = trace.getTracer(TRACER).startSpan(
    'POST /v1/notifications',
    {
      kind: SpanKind.SERVER,
      attributes: { 'http.request.method': 'POST', 'http.route': '/v1/notifications', ...attributes },
    },
    parent,
  );
  return { span, context: trace.setSpan(parent, span) };
}

/**
 * Runs a Kafka write inside a producer span and gives it the headers that carry that span's context,
 * which every message of the write gets.
 */
export async function tracedPublish<T>(
  parent: RequestTrace,
  topic: string,
  events: number,
  write: (headers: Record<string, string>) => Promise<T>,
): Promise<T> {
  const span = trace.getTracer(TRACER).startSpan(
    `publish ${topic}`,
    {
      kind: SpanKind.PRODUCER,
      attributes: {
        'messaging.system': 'kafka',
        'messaging.operation.type': 'publish',
        'messaging.destination.name': topic,
        'messaging.batch.message_count': events,
      },
    },
    parent.context,
  );
  const headers: Record<string, string> = {};
  activePropagator().inject(trace.setSpan(parent.context, span), headers, {
    set: (carrier, key, value) => {
      carrier[key] = value;
    },
  });
  try {
    return await context.with(trace.setSpan(parent.context, span), () => write(headers));
  } catch (error) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error).message });
    throw error;
  } finally {
    span.end();
  }
}

/** Ends a request span with its HTTP status. */
export function endRequestTrace(
  requestTrace: RequestTrace,
  status: number,
  attributes: Record<string, string | number> = {},
): void {
  requestTrace.span.setAttributes({ 'http.response.status_code': status, ...attributes });
  if (status >= 500) requestTrace.span.setStatus({ code: SpanStatusCode.ERROR });
  requestTrace.span.end();
}
