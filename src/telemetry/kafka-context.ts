import {
  type Context,
  context,
  propagation,
  ROOT_CONTEXT,
  type TextMapGetter,
  type TextMapSetter,
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
