import { EVENT_LIMITS, type NotificationEvent, notificationEventSchema, SCHEMA_VERSION } from './event.ts';

/** Why a message could not become an event; the consumer dead-letters it with this reason. */
export type DecodeFailureKind =
  | 'empty'
  | 'too-large'
  | 'invalid-utf8'
  | 'invalid-json'
  | 'unknown-schema-version'
  | 'invalid-event';

export type DecodeResult =
  | { ok: true; event: NotificationEvent }
  | { ok: false; kind: DecodeFailureKind; reason: string; eventId?: string };

const utf8 = new TextDecoder('utf-8', { fatal: true });

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
  if (!parsed.success) {
    return {
      ok: false,
      kind: 'invalid-event',
      reason: describeIssues(parsed.error.issues),
      ...(eventId ? { eventId } : {}),
    };
  }
  return { ok: true, event: parsed.data };
}

/** "token: Too big…; notification.title: expected string" — paths and messages, never the values. */
export function describeIssues(issues: ReadonlyArray<{ path: PropertyKey[]; message: string }>): string {
  return issues
    .slice(0, 5)
    .map((issue) => `${issue.path.map(String).join('.') || '(event)'}: ${issue.message}`)
    .join('; ');
}

/**
 * V8's JSON.parse message without the piece of the input it quotes (`Unexpected token 'x', "{"token":"…"...
 * is not valid JSON`): that piece may be part of a device token, and the reason travels in headers,
 * logs and spans. What remains is the kind of error and its position.
 */
function jsonErrorWithoutInput(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message.replace(/, ".*"(\.\.\.)? is not valid JSON$/s, '').slice(0, 120);
}

function safeId(id: unknown): string | undefined {
  return typeof id === 'string' &&
    id.length > 0 &&
    id.length <= EVENT_LIMITS.idLength &&
    /^[\x21-\x7e]+$/.test(id)
    ? id
    : undefined;
}
