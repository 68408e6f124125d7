import { jsonErrorWithoutInput } from '../redact.ts';
import {
  EVENT_LIMITS,
  HEADER_SAFE,
  type NotificationEvent,
  notificationEventSchema,
  PROTO_DATA_KEY_MESSAGE,
  RESERVED_DATA_KEYS,
  SCHEMA_VERSION,
  TOKEN_RULES,
} from './event.ts';
import { EVENT_ID_DATA_KEY, oversizePayloadBytes } from './payload.ts';

/** Why a message could not become an event; the consumer dead-letters it with this reason. */
export const DECODE_FAILURE_KINDS = [
  'empty',
  'too-large',
  'invalid-utf8',
  'invalid-json',
  'unknown-schema-version',
  'invalid-event',
] as const;
export type DecodeFailureKind = (typeof DECODE_FAILURE_KINDS)[number];

export type DecodeResult =
  | { ok: true; event: NotificationEvent }
  | { ok: false; kind: DecodeFailureKind; reason: string; eventId?: string };

const utf8 = new TextDecoder('utf-8', { fatal: true });
const L = EVENT_LIMITS;

/**
 * Turns a Kafka message value into a validated event, or says exactly why not. Size is checked before
 * anything is parsed, and the reason never quotes the token or the notification text.
 */
export function decodeEvent(
  value: Buffer | null,
  maxBytes: number = EVENT_LIMITS.maxMessageBytes,
): DecodeResult {
  if (value === null || value.length === 0)
    return { ok: false, kind: 'empty', reason: 'message has no value' };
  if (value.length > maxBytes) {
    return { ok: false, kind: 'too-large', reason: `message is ${value.length} bytes, limit ${maxBytes}` };
  }
  let textValue: string;
  try {
    textValue = utf8.decode(value);
  } catch {
    return { ok: false, kind: 'invalid-utf8', reason: 'message value is not valid UTF-8' };
  }
  let json: unknown;
  try {
    json = JSON.parse(textValue);
  } catch (error) {
    return { ok: false, kind: 'invalid-json', reason: `not JSON: ${jsonErrorWithoutInput(error)}` };
  }
  // A valid event (nearly every one) needs nothing below: it has the schema version read here.
  const fast = acceptedEvent(json);
  if (fast !== undefined) return { ok: true, event: fast };
  const eventId = typeof json === 'object' && json !== null && 'id' in json ? safeId(json.id) : undefined;
  const version =
    typeof json === 'object' && json !== null && 'schemaVersion' in json ? json.schemaVersion : undefined;
  if (version !== undefined && version !== SCHEMA_VERSION) {
    return {
      ok: false,
      kind: 'unknown-schema-version',
      reason: `schemaVersion ${JSON.stringify(version)?.slice(0, 20)} is not supported (this consumer reads ${SCHEMA_VERSION})`,
      ...(eventId ? { eventId } : {}),
    };
  }
  const parsed = notificationEventSchema.safeParse(json);
  const issues = [...(parsed.success ? [] : parsed.error.issues), ...protoDataKey(json)];
  if (!parsed.success || issues.length > 0) {
    return {
      ok: false,
      kind: 'invalid-event',
      reason: describeIssues(issues),
      ...(eventId ? { eventId } : {}),
    };
  }
  return { ok: true, event: parsed.data };
}

/**
 * The schema's refusal of a data key `__proto__`, which zod's record skips before its key rule could
 * refuse it (the entry would be dropped, and the push would go without it).
 */
function protoDataKey(json: unknown): Array<{ code: 'custom'; path: string[]; message: string }> {
  const data = isObject(json) ? json.data : undefined;
  if (!isObject(data) || !Object.hasOwn(data, '__proto__')) return [];
  return [{ code: 'custom', path: ['data', '__proto__'], message: PROTO_DATA_KEY_MESSAGE }];
}

const EVENT_KEYS = new Set(Object.keys(notificationEventSchema.shape));
const createdAtSchema = notificationEventSchema.shape.createdAt;
const ID_CHARS = /^[\x21-\x7e]+$/;
const TENANT_CHARS = /^[A-Za-z0-9._-]+$/;

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const isText = (value: unknown, min: number, max: number): value is string =>
  typeof value === 'string' && value.length >= min && value.length <= max;

/**
 * The contract checked by hand, for the common case of a valid event (about a tenth of what the zod
 * schema costs, which was the consumer's largest CPU item). It accepts only what
 * `notificationEventSchema` accepts and builds the value the schema would (same fields, same order,
 * defaults applied); anything it does not accept, and anything unusual, goes through the schema, which
 * stays the authority for every verdict and every reason. A test compares the two on generated and
 * mutated events. Keep both in step when the contract changes.
 */
export function acceptedEvent(json: unknown): NotificationEvent | undefined {
  if (!isObject(json)) return undefined;
  for (const key in json) if (!EVENT_KEYS.has(key)) return undefined;
  const { schemaVersion, id, platform, token, notification, data, tenant, priority, ttlSeconds } = json;
  const { collapseKey, createdAt } = json;
  if (schemaVersion !== undefined && schemaVersion !== SCHEMA_VERSION) return undefined;
  if (!isText(id, 1, L.idLength) || !ID_CHARS.test(id)) return undefined;
  if (platform !== 'fcm' && platform !== 'apns') return undefined;
  if (!isText(token, 1, L.tokenLength) || !TOKEN_RULES[platform].pattern.test(token)) return undefined;
  if (!isObject(notification)) return undefined;
  for (const key in notification) if (key !== 'title' && key !== 'body') return undefined;
  const { title, body } = notification;
  if (!isText(title, 0, L.titleLength) || !isText(body, 0, L.bodyLength)) return undefined;
  if (!title.isWellFormed() || !body.isWellFormed()) return undefined;
  let dataCopy: Record<string, string> | undefined;
  if (data !== undefined) {
    if (!isObject(data)) return undefined;
    dataCopy = {};
    let entries = 0;
    for (const key in data) {
      const value = data[key];
      // __proto__ as a key: left to the schema (which builds that value its own way).
      if (
        ++entries > L.maxDataEntries ||
        key === '__proto__' ||
        key.length < 1 ||
        key.length > L.dataKeyLength ||
        key === EVENT_ID_DATA_KEY ||
        RESERVED_DATA_KEYS[platform].pattern.test(key)
      )
        return undefined;
      if (!isText(value, 0, L.dataValueLength) || !key.isWellFormed() || !value.isWellFormed())
        return undefined;
      dataCopy[key] = value;
    }
  }
  if (tenant !== undefined && (!isText(tenant, 1, L.tenantLength) || !TENANT_CHARS.test(tenant)))
    return undefined;
  if (priority !== undefined && priority !== 'high' && priority !== 'normal') return undefined;
  if (
    ttlSeconds !== undefined &&
    (typeof ttlSeconds !== 'number' ||
      !Number.isInteger(ttlSeconds) ||
      ttlSeconds < 0 ||
      ttlSeconds > L.maxTtlSeconds)
  )
    return undefined;
  if (
    collapseKey !== undefined &&
    (!isText(collapseKey, 1, L.collapseKeyLength) || !HEADER_SAFE.test(collapseKey))
  )
    return undefined;
  if (
    createdAt !== undefined &&
    (typeof createdAt !== 'string' || !createdAtSchema.safeParse(createdAt).success)
  )
    return undefined;
  if (oversizePayloadBytes({ id, platform, notification: { title, body }, data: dataCopy }) !== undefined)
    return undefined;
  // The schema's output: its fields in its order, the absent optional ones left out, the default set.
  const event: Record<string, unknown> = {};
  if (schemaVersion !== undefined) event.schemaVersion = schemaVersion;
  event.id = id;
  event.platform = platform;
  event.token = token;
  event.notification = { title, body };
  if (dataCopy !== undefined) event.data = dataCopy;
  if (tenant !== undefined) event.tenant = tenant;
  event.priority = priority ?? 'normal';
  if (ttlSeconds !== undefined) event.ttlSeconds = ttlSeconds;
  if (collapseKey !== undefined) event.collapseKey = collapseKey;
  if (createdAt !== undefined) event.createdAt = createdAt;
  return event as NotificationEvent;
}

/** What {@link describeIssues} reads of a zod issue. */
interface Issue {
  path: PropertyKey[];
  message: string;
  /** A refused record key (zod's `invalid_key`) carries the key's own issues here. */
  issues?: ReadonlyArray<{ message: string }>;
}

/** "token: Too big…; notification.title: expected string" — paths and messages, never the values. */
export function describeIssues(issues: ReadonlyArray<Issue>): string {
  return issues
    .slice(0, 5)
    .map((issue) => `${issue.path.map(pathSegment).join('.') || '(event)'}: ${issueMessage(issue)}`)
    .join('; ');
}

/** zod says only "Invalid key in record" for a refused key; the key's own issue says why. */
function issueMessage(issue: Issue): string {
  const keyIssue = issue.issues?.[0];
  return keyIssue === undefined ? issue.message : `key ${keyIssue.message}`;
}

/**
 * A field name as the reason shows it. Names under `data` are the producer's: one longer than 64
 * characters, or holding a space, a control character or a lone surrogate, is shown quoted and escaped
 * and cut at 64 characters, so a reason stays one bounded line.
 */
function pathSegment(segment: PropertyKey): string {
  const name = String(segment);
  if (/^[^\p{C}\p{Z}]{1,64}$/u.test(name)) return name;
  return JSON.stringify(name.length > 64 ? `${name.slice(0, 64)}…` : name);
}

function safeId(id: unknown): string | undefined {
  return typeof id === 'string' &&
    id.length > 0 &&
    id.length <= EVENT_LIMITS.idLength &&
    /^[\x21-\x7e]+$/.test(id)
    ? id
    : undefined;
}
