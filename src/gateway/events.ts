import { randomUUID } from 'node:crypto';
import { describeIssues } from '../events/decode.ts';
import {
  EVENT_LIMITS,
  isPayloadTooLarge,
  type NotificationEvent,
  notificationEventSchema,
} from '../events/event.ts';
import { messageKey } from '../publish/publisher.ts';

/**
 * What the gateway does to a request body before anything is written: one event (a JSON object) or a
 * batch (`{"events": [...]}`), each validated against event contract v1. An event without an `id` gets
 * a UUID and one without a `tenant` gets the API key's tenant; an event naming another tenant is
 * refused. The Kafka message value is the JSON of exactly the object that was validated (the caller's
 * fields in the caller's order, the added `id`/`tenant` included, defaults not filled in), so what the
 * consumer reads is byte for byte what passed here.
 */

/** One event ready to be written. */
export interface PreparedEvent {
  id: string;
  /** The message key: {@link messageKey} (same device, same partition, in order). */
  key: string;
  /** The message value: the validated event's JSON. */
  value: string;
  /** The event as validated (defaults applied), for span attributes. */
  event: NotificationEvent;
}

/** Why a body was refused; `status` is the HTTP answer. */
export interface BodyRejection {
  status: 400 | 403 | 413;
  /** Machine-readable: `invalid-body`, `invalid-event`, `duplicate-id`, `tenant-mismatch`, `too-many-events`, `event-too-large`, `payload-too-large`. */
  error: string;
  /** Names the offending field (e.g. `events[2].token: Too big: …`); never quotes a value. */
  message: string;
}

export type PreparedBody =
  | { ok: true; events: PreparedEvent[]; batch: boolean }
  | ({ ok: false } & BodyRejection);

/** Options of {@link prepareBody}. */
export interface PrepareOptions {
  /** The API key's tenant. */
  tenant: string;
  /** Most events per request. */
  maxBatch: number;
  /** Largest message value per event (default: the contract's 16 KiB). */
  maxEventBytes?: number;
  /** Makes the id of an event that has none (default: a random UUID). */
  newId?: () => string;
}

type JsonObject = Record<string, unknown>;

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Validates a parsed request body and turns it into Kafka messages, or says exactly why not. */
export function prepareBody(body: unknown, options: PrepareOptions): PreparedBody {
  const newId = options.newId ?? randomUUID;
  const maxEventBytes = options.maxEventBytes ?? EVENT_LIMITS.maxMessageBytes;
  let raws: unknown[];
  let batch: boolean;
  if (isObject(body) && 'events' in body) {
    const extra = Object.keys(body).filter((key) => key !== 'events');
    if (!Array.isArray(body.events) || extra.length > 0) {
      return reject(
        400,
        'invalid-body',
        extra.length > 0
          ? `a batch is {"events": [...]} and nothing else; unexpected: ${extra.slice(0, 3).join(', ')}`
          : 'events: must be an array of events',
      );
    }
    raws = body.events;
    batch = true;
    if (raws.length === 0) return reject(400, 'invalid-body', 'events: must hold at least one event');
    if (raws.length > options.maxBatch) {
      return reject(
        413,
        'too-many-events',
        `events: ${raws.length} events in one request, limit ${options.maxBatch}; split the batch`,
      );
    }
  } else if (isObject(body)) {
    raws = [body];
    batch = false;
  } else {
    return reject(400, 'invalid-body', 'the body must be one event (a JSON object) or {"events": [...]}');
  }

  const where = (index: number) => (batch ? `events[${index}]` : '');
  const events: PreparedEvent[] = [];
  const firstIndexOf = new Map<string, number>();
  for (let index = 0; index < raws.length; index++) {
    const raw = raws[index];
    if (!isObject(raw))
      return reject(400, 'invalid-event', `${where(index) || '(event)'}: must be a JSON object`);
    // Only a tenant name can name another tenant: any other value is refused with the event's schema.
    if (typeof raw.tenant === 'string' && raw.tenant !== options.tenant) {
      return reject(
        403,
        'tenant-mismatch',
        `${prefix(where(index))}tenant: this API key belongs to tenant "${options.tenant}" and cannot send for another`,
      );
    }
    let candidate: JsonObject = raw;
    if (candidate.id === undefined) candidate = { id: newId(), ...candidate };
    if (candidate.tenant === undefined) candidate = { ...candidate, tenant: options.tenant };
    const value = jsonOf(candidate);
    if (value === undefined)
      return reject(400, 'invalid-event', `${where(index) || '(event)'}: JSON nested too deeply`);
    const bytes = Buffer.byteLength(value);
    if (bytes > maxEventBytes) {
      return reject(
        413,
        'event-too-large',
        `${where(index) || '(event)'}: ${bytes} bytes as JSON, limit ${maxEventBytes}`,
      );
    }
    const parsed = notificationEventSchema.safeParse(candidate);
    if (!parsed.success) {
      const issues = parsed.error.issues.map((issue) => ({
        ...issue,
        path: batch ? [`events[${index}]`, ...issue.path] : issue.path,
      }));
      if (issues.length === 1 && issues.every(isPayloadTooLarge))
        return reject(413, 'payload-too-large', describeIssues(issues));
      return reject(400, 'invalid-event', describeIssues(issues));
    }
    const id = parsed.data.id;
    const earlier = firstIndexOf.get(id);
    if (earlier !== undefined) {
      return reject(
        400,
        'duplicate-id',
        `${prefix(where(index))}id: the same id as events[${earlier}] (an id is delivered once)`,
      );
    }
    firstIndexOf.set(id, index);
    events.push({ id, key: messageKey(parsed.data), value, event: parsed.data });
  }
  return { ok: true, events, batch };
}

/**
 * The JSON text of a parsed event, or undefined when it is nested too deeply to write back: the
 * parser reads any depth a body can hold, JSON.stringify recurses and runs out of stack (a RangeError)
 * some thousands of levels down, and no valid event nests deeper than two.
 */
function jsonOf(candidate: JsonObject): string | undefined {
  try {
    return JSON.stringify(candidate);
  } catch (error) {
    if (error instanceof RangeError) return undefined;
    throw error;
  }
}

function prefix(where: string): string {
  return where === '' ? '' : `${where}.`;
}

function reject(status: BodyRejection['status'], error: string, message: string): PreparedBody {
  return { ok: false, status, error, message };
}
