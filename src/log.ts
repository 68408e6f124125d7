import { context, trace } from '@opentelemetry/api';
import { type DestinationStream, type Logger, pino } from 'pino';

export type { Logger } from 'pino';

/**
 * Paths pino masks as a second line of defence; the first is never logging a device token, a
 * credential or notification text at all. `*.x` reaches one level down (`{ event: { token } }`).
 */
export const REDACTED_PATHS: readonly string[] = [
  'token',
  '*.token',
  '*.*.token',
  'tokens',
  '*.tokens',
  'deviceToken',
  '*.deviceToken',
  'credentials',
  '*.credentials',
  'password',
  '*.password',
  'authorization',
  '*.authorization',
  'headers.authorization',
  '*.headers.authorization',
  'apiKey',
  '*.apiKey',
  'notification',
  '*.notification',
];

/**
 * `trace_id` and `span_id` (and the sampled flag) of the span active where the line is logged, so that a
 * log line leads to its trace. Without tracing no span is ever active and this adds nothing: reading
 * the active context is a property lookup on the root context.
 */
function traceFields(): Record<string, string> {
  const span = trace.getSpan(context.active());
  if (!span) return {};
  const { traceId, spanId, traceFlags } = span.spanContext();
  return { trace_id: traceId, span_id: spanId, trace_flags: `0${traceFlags.toString(16)}`.slice(-2) };
}

/**
 * Structured JSON logs (pino) on stdout, one line per notable event, at `level` (LOG_LEVEL: trace, debug,
 * info, warn, error, fatal or silent). Lines logged inside an active span carry its `trace_id` and
 * `span_id`. `destination` replaces stdout (tests).
 */
export function createLogger(
  level: string = process.env.LOG_LEVEL ?? 'info',
  name = 'aqueduct',
  destination?: DestinationStream,
): Logger {
  const options = {
    name,
    level,
    base: { pid: process.pid },
    mixin: traceFields,
    redact: { paths: [...REDACTED_PATHS], censor: '[redacted]' },
  };
  return destination ? pino(options, destination) : pino(options);
}
