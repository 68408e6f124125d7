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

const getter: TextMapGetter<IHeaders> = {
  keys: (headers) => Object.keys(headers),
  get: (headers, key) => headerString(headers, key),
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
