import {
  type Context,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TextMapPropagator,
  TraceFlags,
  trace,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { Sampler } from '@opentelemetry/sdk-trace';
import type { EventLike } from '../telemetry/attributes.ts';
import { startProducerSpan } from '../telemetry/producer-tracing.ts';
import { isTracingEnabled } from '../telemetry/tracing.ts';

/**
 * The gateway's tracing, all in this module: a SERVER span per ingest request that continues the
 * caller's W3C `traceparent`, and the trace context of every event it writes in the event's Kafka
 * headers, so that a trace starts at the caller and runs on through the consumer to the provider.
 *
 * The caller is not trusted with more than its trace id and span id:
 * - Only `traceparent` and `tracestate` are read (`@opentelemetry/core`'s W3C propagator), whatever
 *   OTEL_PROPAGATORS says: an inbound `baggage` is dropped, never copied into the Kafka headers.
 * - Its sampled flag decides nothing: with tracing on, {@link gatewaySampler} makes the gateway's own
 *   sampler decide for a request with a remote parent as for one without; with tracing off, the
 *   messages carry the caller's trace id and span id with every flag cleared.
 *
 * With tracing on (`startTracing`, OTEL_* variables) the project's PRODUCER spans carry the context
 * on through the SDK's propagator.
 */

const TRACER = 'aqueduct-gateway';

/** W3C Trace Context: `traceparent` and `tracestate`, nothing else. */
export const w3cTraceContext: TextMapPropagator = new W3CTraceContextPropagator();

/**
 * The caller's trace context, read from `traceparent`/`tracestate` only, with every flag cleared: what
 * the caller says about sampling is not a decision the gateway takes over, and flags W3C has not defined
 * are not the caller's to set on the gateway's messages (the propagator writes them unchecked).
 */
export function callerContext(headers: HeaderBag): Context {
  const extracted = w3cTraceContext.extract(ROOT_CONTEXT, headers, headerGetter);
  const spanContext = trace.getSpanContext(extracted);
  if (!spanContext) return ROOT_CONTEXT;
  return trace.setSpanContext(ROOT_CONTEXT, {
    ...spanContext,
    traceFlags: TraceFlags.NONE,
  });
}

/**
 * The gateway's sampler: the one OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG name, applied alike to
 * requests with and without a caller's `traceparent` (a `parentbased_*` sampler would otherwise follow
 * the caller's sampled flag, so any caller could have every one of its requests traced). Spans under
 * the gateway's own spans follow their parent as usual. Undefined for samplers it does not rebuild
 * (jaeger_remote, xray…): those are left to the SDK as configured.
 */
export async function gatewaySampler(env: NodeJS.ProcessEnv = process.env): Promise<Sampler | undefined> {
  const name = (env.OTEL_TRACES_SAMPLER ?? 'parentbased_always_on').trim().toLowerCase();
  const { AlwaysOffSampler, AlwaysOnSampler, ParentBasedSampler, TraceIdRatioBasedSampler } = await import(
    '@opentelemetry/sdk-trace'
  );
  let root: Sampler;
  switch (name) {
    case 'always_on':
    case 'parentbased_always_on':
      root = new AlwaysOnSampler();
      break;
    case 'always_off':
    case 'parentbased_always_off':
      root = new AlwaysOffSampler();
      break;
    case 'traceidratio':
    case 'parentbased_traceidratio': {
      const ratio = Number(env.OTEL_TRACES_SAMPLER_ARG ?? '1');
      root = new TraceIdRatioBasedSampler(Number.isFinite(ratio) && ratio >= 0 && ratio <= 1 ? ratio : 1);
      break;
    }
    default:
      return undefined;
  }
  return new ParentBasedSampler({ root, remoteParentSampled: root, remoteParentNotSampled: root });
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
  const parent = callerContext(headers);
  const span = trace.getTracer(TRACER).startSpan(
    'POST /v1/notifications',
    {
      kind: SpanKind.SERVER,
      // What the HTTP server conventions require of every server span (the gateway speaks plain HTTP).
      attributes: {
        'http.request.method': 'POST',
        'http.route': '/v1/notifications',
        'url.path': '/v1/notifications',
        'url.scheme': 'http',
        ...attributes,
      },
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
 * below it. With tracing off, no span is made and every message carries the caller's trace id and span
 * id (every flag cleared): a consumer whose sampler decides for itself (always_on, traceidratio) joins
 * the caller's trace; one that follows its parent (the default parentbased_always_on) traces nothing.
 */
export function startPublishTrace(
  parent: RequestTrace,
  topic: string,
  events: readonly EventLike[],
): PublishTrace {
  if (!isTracingEnabled()) {
    const headers: Record<string, string> = {};
    w3cTraceContext.inject(parent.context, headers, {
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

/** Ends a request span with its HTTP status (an error status and `error.type` for a 5xx). */
export function endRequestTrace(
  requestTrace: RequestTrace,
  status: number,
  attributes: Record<string, string | number> = {},
): void {
  requestTrace.span.setAttributes({ 'http.response.status_code': status, ...attributes });
  // A 4xx is the caller's error, not the server's: a SERVER span is an error (with its error.type, the
  // status code) only for a 5xx.
  if (status >= 500) {
    requestTrace.span.setAttribute('error.type', String(status));
    requestTrace.span.setStatus({ code: SpanStatusCode.ERROR });
  }
  requestTrace.span.end();
}
