import { z } from 'zod';
import { EVENT_ID_DATA_KEY, oversizePayloadBytes, PROVIDER_PAYLOAD_LIMIT_BYTES } from './payload.ts';

/**
 * The notification event, contract v1: what producers publish to the topic and what the consumer
 * validates before any other work. `schemas/event-v1.schema.json` is generated from this definition
 * (`npm run schema`) and a test keeps the two identical.
 */

/**
 * Limits enforced before any work is done on an event. Each field's bound leaves room for the others;
 * together they must also fit the providers' 4096-byte payload (`./payload.ts`).
 */
export const EVENT_LIMITS = {
  /** Largest accepted Kafka message value, in bytes. */
  maxMessageBytes: 16 * 1024,
  idLength: 128,
  tokenLength: 512,
  titleLength: 256,
  bodyLength: 2048,
  maxDataEntries: 32,
  dataKeyLength: 64,
  dataValueLength: 1024,
  tenantLength: 64,
  collapseKeyLength: 64,
  /** FCM and APNs both keep an undelivered notification at most 28 days. */
  maxTtlSeconds: 28 * 24 * 3600,
} as const;

const L = EVENT_LIMITS;

/**
 * What a device token may be, per platform, checked wherever an event comes in (the gateway, `aqueduct
 * publish`, the consumer's decoder) so that a malformed token is refused there and never costs a
 * provider call. A token also becomes part of a request path (FCM) or of an HTTP/2 request (APNs), so
 * neither rule lets through a control character, a space, a slash or a dot.
 */
export const TOKEN_RULES = {
  /** APNs device tokens are hex: 64 digits today; even-length 64..200 leaves room for longer ones. */
  apns: {
    pattern: /^(?:[0-9A-Fa-f]{2}){32,100}$/,
    message: 'an APNs device token is hex, an even number of 64 to 200 digits',
  },
  /** FCM registration tokens: letters, digits, `_`, `-` and `:` (base64url and the separator). */
  fcm: {
    pattern: /^[A-Za-z0-9_:-]+$/,
    message: 'an FCM registration token holds only letters, digits, _, - and :',
  },
} as const;

/**
 * Printable ASCII without spaces: the characters of a field that becomes an HTTP header value (the
 * collapse key is `apns-collapse-id`), so a CR, LF or NUL can never smuggle in another header.
 */
export const HEADER_SAFE = /^[\x21-\x7e]+$/;

/**
 * The `data` keys each platform's push keeps for itself, refused at every door so that such an event
 * never costs a token and a provider call to be refused there, and no key of the producer's is silently
 * overwritten: FCM refuses a message whose data key is `from`, `message_type` or starts with `google` or
 * `gcm` (HTTP v1 reference, `Message.data`); the APNs payload keeps `aps` for Apple's dictionary. On
 * both, the providers add the event id under {@link EVENT_ID_DATA_KEY}.
 */
export const RESERVED_DATA_KEYS = {
  fcm: {
    pattern: /^(?:(?:from|message_type)$|google|gcm)/,
    message: 'reserved by FCM (from, message_type, and keys starting with google or gcm)',
  },
  apns: { pattern: /^aps$/, message: "reserved by APNs (aps is Apple's dictionary in the payload)" },
} as const;
/** Why a data key `__proto__` is refused: a JavaScript object cannot hold it as a key of its own. */
export const PROTO_DATA_KEY_MESSAGE = 'not a data key: "__proto__" cannot be carried as one';

const NOT_EVENT_ID_KEY = new RegExp(`^(?!${EVENT_ID_DATA_KEY}$)`);
const EVENT_ID_KEY_MESSAGE = `reserved: every push carries the event id under ${EVENT_ID_DATA_KEY}`;

/** Marks the issue of an event whose push would be too large (the gateway answers it with 413). */
const PAYLOAD_TOO_LARGE = 'payloadTooLargeBytes';

export const SCHEMA_VERSION = 1;

const text = (max: number) => z.string().min(1).max(max);

/**
 * Free text that a provider receives as UTF-8: a lone surrogate (JSON can carry one as `\ud800`) has no
 * UTF-8 form, so it is refused here rather than by the provider after a token was spent on it.
 */
export const WELL_FORMED_MESSAGE = 'not well-formed Unicode (a lone surrogate)';
const freeText = (max: number) =>
  z
    .string()
    .max(max)
    .refine((s) => s.isWellFormed(), WELL_FORMED_MESSAGE);

export const notificationEventSchema = z
  .object({
    schemaVersion: z
      .literal(SCHEMA_VERSION)
      .optional()
      .describe('Contract version; absent means 1. Any other value is dead-lettered, never guessed at.'),
    id: text(L.idLength)
      .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces')
      .describe(
        "Unique event id within its tenant: (tenant, id) is the idempotency key (a redelivered event with the same id is pushed once; another tenant's event with the same id is its own).",
      ),
    platform: z.enum(['fcm', 'apns']).describe('Which push provider delivers it.'),
    token: text(L.tokenLength)
      .regex(TOKEN_RULES.fcm.pattern, 'letters, digits, _, - and :')
      .describe(
        'The device registration token. Never logged. APNs: hex, an even number of 64 to 200 digits; FCM: letters, digits, _, - and :.',
      ),
    notification: z
      .object({
        title: freeText(L.titleLength),
        body: freeText(L.bodyLength),
      })
      .strict(),
    data: z
      .record(
        freeText(L.dataKeyLength)
          .min(1)
          .regex(NOT_EVENT_ID_KEY, EVENT_ID_KEY_MESSAGE)
          // For the JSON Schema: zod's record skips the key before this rule, decodeEvent refuses it.
          .regex(/^(?!__proto__$)/, PROTO_DATA_KEY_MESSAGE),
        freeText(L.dataValueLength),
      )
      .refine((d) => Object.keys(d).length <= L.maxDataEntries, `at most ${L.maxDataEntries} entries`)
      .meta({ maxProperties: L.maxDataEntries })
      .optional()
      .describe(
        `Custom key/value data delivered to the app, at most ${L.maxDataEntries} entries. Refused keys: ${EVENT_ID_DATA_KEY} and __proto__; for FCM from, message_type and keys starting with google or gcm; for APNs aps.`,
      ),
    tenant: text(L.tenantLength)
      .regex(/^[A-Za-z0-9._-]+$/, 'letters, digits, dot, dash, underscore')
      .optional()
      .describe('Who sent it; a tenant gets its own rate cap inside the provider limit.'),
    priority: z.enum(['high', 'normal']).default('normal'),
    ttlSeconds: z.number().int().min(0).max(L.maxTtlSeconds).optional(),
    collapseKey: text(L.collapseKeyLength).regex(HEADER_SAFE, 'printable ASCII without spaces').optional(),
    createdAt: z.iso
      .datetime({ offset: true })
      .optional()
      .describe('When the producer created the event (RFC 3339).'),
  })
  .strict()
  .superRefine((event, ctx) => {
    // The field's own pattern is FCM's alphabet, of which APNs hex is a part: the APNs rule is the narrower.
    if (event.platform === 'apns' && !TOKEN_RULES.apns.pattern.test(event.token)) {
      ctx.addIssue({ code: 'custom', path: ['token'], message: TOKEN_RULES.apns.message });
    }
    const reserved = RESERVED_DATA_KEYS[event.platform];
    for (const key in event.data) {
      if (reserved.pattern.test(key))
        ctx.addIssue({ code: 'custom', path: ['data', key], message: reserved.message });
    }
    const bytes = oversizePayloadBytes(event);
    if (bytes !== undefined) {
      const message = payloadTooLargeMessage(event.platform, bytes);
      ctx.addIssue({ code: 'custom', path: [], message, params: { [PAYLOAD_TOO_LARGE]: bytes } });
    }
  });

/** True for the issue of an event whose push would be above the providers' payload limit. */
export function isPayloadTooLarge(issue: { code?: string; params?: Record<string, unknown> }): boolean {
  return issue.code === 'custom' && issue.params?.[PAYLOAD_TOO_LARGE] !== undefined;
}

/** Why an event whose push would be too large is refused: the size as its provider counts it. */
function payloadTooLargeMessage(platform: 'fcm' | 'apns', bytes: number): string {
  const counted = platform === 'apns' ? 'the APNs payload' : "FCM's payload (keys and values)";
  return `${counted} would be ${bytes} bytes, the provider's limit is ${PROVIDER_PAYLOAD_LIMIT_BYTES} (title, body and data together)`;
}

/** A validated event, with defaults applied. */
export type NotificationEvent = z.output<typeof notificationEventSchema>;

/**
 * The idempotency key of an event: (tenant, id). Tenants choose their own ids, so one tenant's
 * `order-42` must not mark another's as done. A space joins the two, which neither a tenant nor an id
 * may contain, so no two pairs share a key; an event without a tenant keys by its id alone, as every
 * event did before tenants were scoped (their marks still apply after an upgrade).
 */
export function idempotencyKey(event: Pick<NotificationEvent, 'id' | 'tenant'>): string {
  return event.tenant === undefined ? event.id : `${event.tenant} ${event.id}`;
}
/** What a producer writes (defaults may be left out). */
export type NotificationEventInput = z.input<typeof notificationEventSchema>;
export type Platform = NotificationEvent['platform'];
export const PLATFORMS: readonly Platform[] = ['fcm', 'apns'];

/** The JSON Schema (draft 2020-12) of the contract, as committed in schemas/event-v1.schema.json. */
export function eventJsonSchema(): Record<string, unknown> {
  return {
    $id: 'https://aqueduct.dev/schemas/event-v1.schema.json',
    title: 'Aqueduct notification event v1',
    ...z.toJSONSchema(notificationEventSchema, { io: 'input', target: 'draft-2020-12' }),
    // The per-platform token rule is a refinement, which toJSONSchema cannot express by itself.
    // An FCM event, or one whose token is APNs hex.
    anyOf: [
      { properties: { platform: { const: 'fcm' } } },
      { properties: { token: { pattern: TOKEN_RULES.apns.pattern.source } } },
    ],
    // The data keys each platform reserves, a refinement too: another platform, or none of its keys.
    allOf: PLATFORMS.map((platform) => ({
      anyOf: [
        { properties: { platform: { not: { const: platform } } } },
        {
          properties: {
            data: { propertyNames: { not: { pattern: RESERVED_DATA_KEYS[platform].pattern.source } } },
          },
        },
      ],
    })),
  };
}
