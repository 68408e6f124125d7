import { type Context, context, type Span, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { ATTR, type EventLike, eventAttributes } from './attributes.ts';
import { injectTraceContext } from './kafka-context.ts';

const TRACER = 'aqueduct';

/** The PRODUCER span of one message and the headers that carry its context to the consumer. */
export interface ProducerSpan {
  /** `traceparent` (and `tracestate`, `baggage`) to add to the message's Kafka headers. */
  readonly headers: Record<string, string>;
  /** Ends the span: acknowledged by the broker, or failed with `error`. */
  end(error?: unknown): void;
}

/**
 * Starts the PRODUCER span (`send <topic>`, messaging semantic conventions) of one event written to
 * `topic`, as a child of `parent` (default: the active context, e.g. the gateway's request span; none
 * for `aqueduct publish`, so every event starts its own trace). Works whether tracing is on or not:
 * off, the span is a no-op and the headers are empty.
 */
export function startProducerSpan(
  topic: string,
  event: EventLike,
  parent: Context = context.active(),
): ProducerSpan {
  const span: Span = trace.getTracer(TRACER).startSpan(
    `send ${topic}`,
    {
      kind: SpanKind.PRODUCER,
      attributes: {
        [ATTR.messagingSystem]: 'kafka',
        [ATTR.messagingSystemName]: 'kafka',
        [ATTR.messagingOperationType]: 'send',
        [ATTR.messagingOperationName]: 'send',
        [ATTR.messagingDestination]: topic,
        ...eventAttributes(event),
      },
    },
    parent,
  );
  return {
    headers: injectTraceContext({}, trace.setSpan(parent, span)),
    end(error?: unknown) {
      if (error !== undefined) {
        // A Kafka client's error (never an event's content): recorded as the span's exception event.
        span.recordException(error instanceof Error ? error : errorMessage(error));
        span.setStatus({ code: SpanStatusCode.ERROR, message: errorMessage(error) });
        span.setAttribute(ATTR.errorType, error instanceof Error ? error.name : 'error');
      }
      span.end();
    },
  };
}

/**
 * The PRODUCER spans of a publisher that sends in batches: one span per message, started when the
 * message is queued and ended when the produce request carrying it is acknowledged, in publish order.
 */
export class PublishTracing {
  private readonly topic: string;
  private readonly pending: ProducerSpan[] = [];
  private head = 0;

  constructor(topic: string) {
    this.topic = topic;
  }

  /** Starts the span of the next message (`raw`: the event object, or its JSON text) and returns its headers. */
  start(raw: unknown): Record<string, string> {
    const span = startProducerSpan(this.topic, eventOf(raw));
    this.pending.push(span);
    return span.headers;
  }

  /** The next `count` messages, in publish order, were acknowledged. */
  acknowledged(count: number): void {
    const end = Math.min(this.head + count, this.pending.length);
    for (; this.head < end; this.head++) this.pending[this.head]?.end();
    if (this.head === this.pending.length) {
      this.pending.length = 0;
      this.head = 0;
    }
  }

  /** Publishing stopped with `error`: every message not acknowledged yet failed. */
  failed(error: unknown): void {
    for (; this.head < this.pending.length; this.head++) this.pending[this.head]?.end(error);
    this.pending.length = 0;
    this.head = 0;
  }
}

function eventOf(raw: unknown): EventLike {
  if (typeof raw === 'string' || Buffer.isBuffer(raw)) {
    try {
      const parsed: unknown = JSON.parse(raw.toString());
      return typeof parsed === 'object' && parsed !== null ? (parsed as EventLike) : {};
    } catch {
      return {};
    }
  }
  return typeof raw === 'object' && raw !== null ? (raw as EventLike) : {};
}

function errorMessage(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).slice(0, 200);
}
