import {
  type Attributes,
  type Context,
  context,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api';
import { readBackGroupId } from '../config.ts';
import type { NotificationEvent, Platform } from '../events/event.ts';
import type { TokenPool } from '../limiter/token-pool.ts';
import type { Item } from '../pipeline/item.ts';
import type { AcquireContext, SendContext } from '../pipeline/observer.ts';
import type { PushOutcome } from '../providers/types.ts';
import { ATTR, eventAttributes, reasonCode } from './attributes.ts';
import { extractTraceContext, rememberStartedTrace } from './kafka-context.ts';
import type { ObserverHooks } from './observers.ts';

const TRACER = 'aqueduct';

/** Where a provider's requests go, for `server.address` / `server.port`. */
export interface ProviderServer {
  address: string;
  port: number;
}

/** Options of {@link PipelineTracing}. */
export interface PipelineTracingOptions {
  /** The consumer group (messaging.consumer.group.name) of the main and retry topics. */
  groupId: string;
  /**
   * The deferred topic, whose parked events another group reads back (`<groupId>.deferred`, see
   * readBackGroupId): its CONSUMER spans name that group.
   */
  deferredTopic?: string;
  /** The Kafka client id (messaging.client.id). */
  clientId?: string;
  /** Each provider's server; unknown ones are left out of the CLIENT spans. */
  servers?: Partial<Record<Platform, ProviderServer>>;
}

/** The URL template of each provider's send request (HTTP semantic conventions name spans after it). */
const URL_TEMPLATE: Record<Platform, string> = {
  fcm: '/v1/projects/{project_id}/messages:send',
  apns: '/3/device/{device_token}',
};

/** What is kept about one message between its first reading and its outcome. */
interface EventTrace {
  readonly span: Span;
  /** The CONSUMER span's context: the parent of its acquire and CLIENT spans. */
  readonly context: Context;
  /** Open while the event waits for its token (possibly across pauses). */
  acquire: Span | undefined;
  acquireStartedAt: number;
  takes: number;
  outcome: string | undefined;
  reason: string | undefined;
}

/**
 * The pipeline's spans, one trace per event, continuing the producer's trace from the message headers:
 *
 *   send <topic> (PRODUCER, in the publisher)
 *   └─ process <topic> (CONSUMER): first reading → outcome recorded; topic, partition, offset, event id,
 *      │                            tenant, platform, attempt, outcome
 *      ├─ acquire tokens (INTERNAL): first ask → token granted; requested, granted, wait, buckets, and
 *      │                             events when the partition is paused and resumed while it waits
 *      └─ POST <url template> (CLIENT): the provider send; provider, HTTP status, outcome, attempt,
 *                                       Retry-After
 *
 * A CONSUMER span is a child of the message's creation context and links to it as well. A retried
 * event is read again from the retry topic with the original headers, so every attempt is another
 * CONSUMER span of the same trace; a message that came without a valid trace context starts its trace at
 * its first reading, and its copies carry that (see copyTraceContext). Installed only while tracing is on.
 */
export class PipelineTracing implements ObserverHooks {
  private readonly options: PipelineTracingOptions;
  private readonly tracer = trace.getTracer(TRACER);
  private readonly traces = new WeakMap<Item, EventTrace>();
  /** Per partition: events read and not finished (their CONSUMER spans are open). */
  private readonly open = new Map<string, Set<EventTrace>>();
  /** Per partition: events whose acquire span is open. */
  private readonly waiting = new Map<string, Set<EventTrace>>();

  constructor(options: PipelineTracingOptions) {
    this.options = options;
  }

  received(item: Item, topic: string, partition: number): void {
    const attributes: Attributes = {
      [ATTR.messagingSystem]: 'kafka',
      [ATTR.messagingSystemName]: 'kafka',
      [ATTR.messagingOperationType]: 'process',
      [ATTR.messagingOperationName]: 'process',
      [ATTR.messagingDestination]: topic,
      [ATTR.messagingPartition]: String(partition),
      [ATTR.kafkaOffset]: Number(item.offset),
      [ATTR.messagingKafkaOffset]: Number(item.offset),
      [ATTR.messagingConsumerGroup]:
        topic === this.options.deferredTopic ? readBackGroupId(this.options.groupId) : this.options.groupId,
      [ATTR.attempt]: item.attempt,
    };
    if (this.options.clientId) attributes[ATTR.messagingClientId] = this.options.clientId;
    if (item.decoded.ok) Object.assign(attributes, eventAttributes(item.decoded.event));
    const parent = extractTraceContext(item.message.headers);
    const creation = trace.getSpanContext(parent);
    // The messaging conventions link a process span to its message's creation context, and let a
    // single message's process span have it as parent too: one trace, and the link backends look for.
    const span = this.tracer.startSpan(
      `process ${topic}`,
      { kind: SpanKind.CONSUMER, attributes, links: creation ? [{ context: creation }] : [] },
      parent,
    );
    const spanContext = trace.setSpan(parent, span);
    if (!creation) rememberStartedTrace(item.message, spanContext);
    const eventTrace: EventTrace = {
      span,
      context: spanContext,
      acquire: undefined,
      acquireStartedAt: 0,
      takes: 0,
      outcome: undefined,
      reason: undefined,
    };
    this.traces.set(item, eventTrace);
    setOf(this.open, partitionKey(topic, partition)).add(eventTrace);
  }

  async acquire(
    pool: TokenPool,
    requested: number,
    take: () => Promise<number>,
    where: AcquireContext,
  ): Promise<number> {
    const startedAt = Date.now();
    const waiting = setOf(this.waiting, partitionKey(where.topic, where.partition));
    const traces = where.items.map((item) => this.traces.get(item));
    for (const eventTrace of traces) {
      if (!eventTrace || eventTrace.acquire) continue;
      eventTrace.acquire = this.tracer.startSpan(
        'acquire tokens',
        {
          kind: SpanKind.INTERNAL,
          attributes: { [ATTR.buckets]: pool.buckets.map((bucket) => bucket.name) },
        },
        eventTrace.context,
      );
      eventTrace.acquireStartedAt = startedAt;
      eventTrace.takes = 0;
      waiting.add(eventTrace);
    }
    // Run inside the first event's acquire span, so that a limiter failure logged meanwhile carries it.
    const first = traces[0];
    const granted = first?.acquire
      ? await context.with(trace.setSpan(first.context, first.acquire), take)
      : await take();
    const now = Date.now();
    traces.forEach((eventTrace, i) => {
      const span = eventTrace?.acquire;
      if (!eventTrace || !span) return;
      eventTrace.takes++;
      if (i >= granted) {
        span.addEvent('tokens short', { [ATTR.tokensRequested]: requested, [ATTR.tokensGranted]: granted });
        return;
      }
      span.setAttributes({
        [ATTR.tokensRequested]: requested,
        [ATTR.tokensGranted]: granted,
        [ATTR.tokensWaitMs]: now - eventTrace.acquireStartedAt,
        [ATTR.tokenTakes]: eventTrace.takes,
      });
      span.end();
      eventTrace.acquire = undefined;
      waiting.delete(eventTrace);
    });
    return granted;
  }

  paused(topic: string, partition: number, expectedWaitMs: number): void {
    for (const eventTrace of this.waiting.get(partitionKey(topic, partition)) ?? []) {
      eventTrace.acquire?.addEvent('partition paused', { [ATTR.expectedWaitMs]: expectedWaitMs });
    }
  }

  resumed(topic: string, partition: number, pausedMs: number): void {
    for (const eventTrace of this.waiting.get(partitionKey(topic, partition)) ?? []) {
      eventTrace.acquire?.addEvent('partition resumed', { [ATTR.pausedMs]: pausedMs });
    }
  }

  async send(where: SendContext, run: () => Promise<PushOutcome[]>): Promise<PushOutcome[]> {
    const server = this.options.servers?.[where.platform];
    const template = URL_TEMPLATE[where.platform];
    const spans = where.items.map((item, i) => {
      const attributes: Attributes = {
        [ATTR.httpMethod]: 'POST',
        [ATTR.urlTemplate]: template,
        [ATTR.provider]: where.platform,
        [ATTR.attempt]: item.attempt,
        [ATTR.sendBatchSize]: where.items.length,
      };
      if (item.attempt > 1) attributes[ATTR.httpResendCount] = item.attempt - 1;
      if (server) {
        attributes[ATTR.serverAddress] = server.address;
        attributes[ATTR.serverPort] = server.port;
      }
      const id = where.requests[i]?.event.id;
      if (id !== undefined) attributes[ATTR.eventId] = id;
      const parent = this.traces.get(item)?.context ?? ROOT_CONTEXT;
      return {
        span: this.tracer.startSpan(`POST ${template}`, { kind: SpanKind.CLIENT, attributes }, parent),
        parent,
      };
    });
    let outcomes: PushOutcome[];
    try {
      const first = spans[0];
      outcomes = first ? await context.with(trace.setSpan(first.parent, first.span), run) : await run();
    } catch (error) {
      for (const { span } of spans) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: 'provider send failed' });
        span.setAttribute(ATTR.errorType, error instanceof Error ? error.name : 'error');
        span.end();
      }
      throw error;
    }
    spans.forEach(({ span }, i) => {
      const outcome = outcomes[i];
      if (outcome) describeOutcome(span, outcome);
      else span.setStatus({ code: SpanStatusCode.ERROR, message: 'provider returned no outcome' });
      span.end();
    });
    return outcomes;
  }

  outcome(_event: NotificationEvent, outcome: PushOutcome, item: Item): void {
    const eventTrace = this.traces.get(item);
    if (!eventTrace) return;
    eventTrace.outcome = outcome.kind;
    eventTrace.reason = outcome.kind === 'delivered' ? undefined : reasonCode(outcome.reason);
  }

  deadLettered(reasonKind: string, item: Item): void {
    const eventTrace = this.traces.get(item);
    if (!eventTrace) return;
    eventTrace.outcome = 'dead-lettered';
    eventTrace.reason = reasonKind;
  }

  /** Held back for a device the provider throttled: on the retry topic, read again when due. */
  deferred(_event: NotificationEvent, item: Item): void {
    const eventTrace = this.traces.get(item);
    if (eventTrace) eventTrace.outcome = 'deferred';
  }

  /** Parked on the deferred topic (its tenant over its share): read back later, in the same trace. */
  parked(_event: NotificationEvent, item: Item): void {
    const eventTrace = this.traces.get(item);
    if (eventTrace) eventTrace.outcome = 'parked';
  }

  duplicateSkipped(item: Item): void {
    const eventTrace = this.traces.get(item);
    if (eventTrace) eventTrace.outcome = 'duplicate';
  }

  settled(items: readonly Item[], topic: string, partition: number): void {
    const open = this.open.get(partitionKey(topic, partition));
    for (const item of items) {
      const eventTrace = this.traces.get(item);
      if (!eventTrace) continue;
      this.traces.delete(item);
      open?.delete(eventTrace);
      // An event that waited for a token and ended without one (parked, expired, held for its device)
      // still has its acquire span open: ended here, or it would never be exported.
      if (eventTrace.acquire) {
        eventTrace.acquire.addEvent('ended without a token', {
          [ATTR.outcome]: eventTrace.outcome ?? 'finished',
        });
        eventTrace.acquire.setAttribute(ATTR.tokenTakes, eventTrace.takes);
        eventTrace.acquire.end();
        eventTrace.acquire = undefined;
        this.waiting.get(partitionKey(topic, partition))?.delete(eventTrace);
      }
      const { span } = eventTrace;
      span.setAttribute(ATTR.outcome, eventTrace.outcome ?? 'finished');
      if (eventTrace.reason) span.setAttribute(ATTR.outcomeReason, eventTrace.reason);
      if (eventTrace.outcome === 'dead-lettered') {
        span.setAttribute(ATTR.errorType, eventTrace.reason ?? 'dead-lettered');
        span.setStatus({ code: SpanStatusCode.ERROR, message: `dead-lettered: ${eventTrace.reason ?? ''}` });
      }
      span.end();
    }
  }

  /** The partition was revoked or the consumer stops: what is open ends as `released` (it will be read again). */
  released(topic: string, partition: number): void {
    const key = partitionKey(topic, partition);
    for (const eventTrace of this.open.get(key) ?? []) {
      if (eventTrace.acquire) {
        eventTrace.acquire.addEvent('partition released');
        eventTrace.acquire.end();
        eventTrace.acquire = undefined;
      }
      eventTrace.span.setAttribute(ATTR.outcome, 'released');
      eventTrace.span.end();
    }
    this.open.delete(key);
    this.waiting.delete(key);
  }
}

/** The CLIENT span's answer: HTTP status, outcome, Retry-After; an error status unless delivered. */
function describeOutcome(span: Span, outcome: PushOutcome): void {
  span.setAttribute(ATTR.outcome, outcome.kind);
  if (outcome.httpStatus !== undefined) span.setAttribute(ATTR.httpStatus, outcome.httpStatus);
  if (outcome.kind === 'delivered') return;
  const code = reasonCode(outcome.reason);
  span.setAttribute(ATTR.outcomeReason, code);
  span.setAttribute(ATTR.errorType, outcome.httpStatus !== undefined ? String(outcome.httpStatus) : code);
  if (outcome.kind === 'retry') {
    span.setAttribute(ATTR.throttled, outcome.throttled);
    if (outcome.retryAfterMs !== undefined) span.setAttribute(ATTR.retryAfterMs, outcome.retryAfterMs);
  }
  span.setStatus({ code: SpanStatusCode.ERROR, message: `${outcome.kind}: ${code}` });
}

function partitionKey(topic: string, partition: number): string {
  return `${topic}:${partition}`;
}

function setOf<T>(map: Map<string, Set<T>>, key: string): Set<T> {
  let set = map.get(key);
  if (!set) {
    set = new Set();
    map.set(key, set);
  }
  return set;
}
