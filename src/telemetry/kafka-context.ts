import {
  type Context,
  context,
  propagation,
  ROOT_CONTEXT,
  type TextMapGetter,
  type TextMapSetter,
  trace,
} from '@opentelemetry/api';
import type { IHeaders } from 'kafkajs';
import { headerString } from '../kafka/headers.ts';

/**
 * W3C trace context (`traceparent`, `tracestate`, and `baggage`) in Kafka message headers, through the
 * propagator the tracing SDK registered (OTEL_PROPAGATORS; W3C by default). Without tracing the global
 * propagator is a no-op: inject adds nothing, extract returns the context it was given.
 */

/**
 * A repeated header is read as HTTP reads a repeated field: its values joined by commas. That combines
 * `tracestate` and `baggage` entries, which are lists, and makes two `traceparent`s one invalid value, so
 * that such a message starts a new trace rather than one of two parents picked at random (W3C Trace
 * Context's test suite, `test_traceparent_duplicated`).
 */
const getter: TextMapGetter<IHeaders> = {
  keys: (headers) => Object.keys(headers),
  get: (headers, key) => {
    const value = headers[key];
    if (!Array.isArray(value)) return headerString(headers, key);
    const parts = value.filter((part) => part !== null && part !== undefined).map((part) => part.toString());
    return parts.length > 0 ? parts.join(',') : undefined;
  },
};

const setter: TextMapSetter<Record<string, string>> = {
  set(headers, key, value) {
    headers[key] = value;
  },
};

/**
 * Adds the trace context of `from` (default: the active context) to `headers` and returns them; a
 * message produced with these headers continues that trace in its consumer.
 */
export function injectTraceContext(
  headers: Record<string, string> = {},
  from: Context = context.active(),
): Record<string, string> {
  propagation.inject(from, headers, setter);
  return headers;
}

/**
 * The trace context a message carries in its headers, on top of `base` (default: the root context, so
 * that a message's trace never inherits whatever happened to be active while it was read).
 */
export function extractTraceContext(headers: IHeaders | undefined, base: Context = ROOT_CONTEXT): Context {
  if (!headers) return base;
  return propagation.extract(base, headers, getter);
}

/**
 * Per consumed message (the kafkajs message object) that carried no valid trace context: the context of
 * the span that read it, i.e. of the trace its reading started. Forgotten with the message.
 */
const startedTraces = new WeakMap<object, Context>();

/**
 * Remembers that reading `message`, whose headers carry no valid trace context, started a new trace in
 * `context` (see {@link copyTraceContext}).
 */
export function rememberStartedTrace(message: object, context: Context): void {
  startedTraces.set(message, context);
}

/**
 * The trace context headers (`traceparent`, and `tracestate` when there is one) that a copy of `message`
 * Aqueduct writes (retry, deferred, dead-letter, invalid-token records) carries in place of the
 * message's own, or undefined to keep the message's own. A message without a valid `traceparent` of its
 * own (none, an invalid one, two of them) started a trace when it was read; without this its copy would
 * carry no context, or the same invalid one, and its next reading would start yet another trace.
 */
export function copyTraceContext(message: object): Record<string, string> | undefined {
  const started = startedTraces.get(message);
  if (!started || !trace.getSpanContext(started)) return undefined;
  const headers = injectTraceContext({}, started);
  return headers.traceparent ? headers : undefined;
}
