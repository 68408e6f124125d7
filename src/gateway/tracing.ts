import {
  type Context,
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
import type { EventLike } from '../telemetry/attributes.ts';
import { startProducerSpan } from '../telemetry/producer-tracing.ts';
import { isTracingEnabled } from '../telemetry/tracing.ts';

/**
 * The gateway's tracing, all in this module: a SERVER span per ingest request that continues the
 * caller's W3C `traceparent`, and the trace context of every event it writes in the event's Kafka
 * headers, so that a trace starts at the caller and runs on through the consumer to the provider.
 *
 * With tracing on (`startTracing`, OTEL_* variables) the SDK's propagator and the project's PRODUCER
 * spans are used. With tracing off no span records anything, and the small W3C propagator below
 * (`@opentelemetry/api` ships none) carries the caller's `traceparent` through unchanged.
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

/** The trace context of each message of one Kafka write, and how to close its spans. */
export interface PublishTrace {
  /** Kafka headers of the i-th event. */
  headersOf(index: number): Record<string, string>;
  /** The write was acknowledged, or failed with `error`. */
  end(error?: unknown): void;
}

/**
 * The trace context of the messages a request writes. With tracing on, every event gets a PRODUCER
 * span (`send <topic>`, the project's {@link startProducerSpan}, as `aqueduct publish` makes them) under
 * the request's span, and its headers carry that span: the consumer's CONSUMER span of the event hangs
 * below it. With tracing off, no span is made and every message carries the caller's own
 * `traceparent`, so a consumer that traces still joins the caller's trace.
 */
export function startPublishTrace(
  parent: RequestTrace,
  topic: string,
  events: readonly EventLike[],
): PublishTrace {
  if (!isTracingEnabled()) {
    const headers: Record<string, string> = {};
    activePropagator().inject(parent.context, headers, {
      set: (carrier, key, value) => {
        carrier[key] = value;
      },
    });
    return { headersOf: () => headers, end: () => {} };
  }
  const spans = events.map((event) => startProducerSpan(topic, event, parent.context));
  return {
    headersOf: (index) => spans[index]?.headers ?? {},
    end: (error) => {
      for (const span of spans) span.end(error);
    },
  };
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
