/**
 * What of an event reaches the device, and its size as each provider counts it. Both providers refuse
 * a payload above 4096 bytes (APNs `413 PayloadTooLarge`; FCM `400 INVALID_ARGUMENT`, "message is too
 * big"), so the contract refuses such an event at every door instead of spending a token and a
 * provider call on it.
 */

/** The data key that carries the event id inside every push (the providers add it). */
export const EVENT_ID_DATA_KEY = 'aqueduct_id';

/** Both providers' limit on a push's payload, in bytes. */
export const PROVIDER_PAYLOAD_LIMIT_BYTES = 4096;

/** The fields of an event that make up what the device receives. */
export interface PayloadFields {
  id: string;
  platform: 'fcm' | 'apns';
  notification: { title: string; body: string };
  data?: Record<string, string> | undefined;
}

/**
 * The APNs payload of an event: the event's data as custom keys next to `aps` (Apple's dictionary, with
 * the alert), and the event id.
 */
export function apnsPayload(event: PayloadFields): Record<string, unknown> {
  return {
    ...event.data,
    [EVENT_ID_DATA_KEY]: event.id,
    aps: { alert: { title: event.notification.title, body: event.notification.body } },
  };
}

/**
 * The payload's size as the provider counts it. APNs: the bytes of the JSON body it receives. FCM: the
 * UTF-8 bytes of the payload's keys and values (notification title and body, data with the event id),
 * as its "message too big" error describes the count; a lower bound of any JSON encoding of them, so
 * nothing FCM would take is refused here.
 */
export function payloadBytes(event: PayloadFields): number {
  if (event.platform === 'apns') return Buffer.byteLength(JSON.stringify(apnsPayload(event)));
  const { title, body } = event.notification;
  let bytes = 'title'.length + Buffer.byteLength(title) + 'body'.length + Buffer.byteLength(body);
  bytes += EVENT_ID_DATA_KEY.length + Buffer.byteLength(event.id);
  for (const key in event.data) bytes += Buffer.byteLength(key) + Buffer.byteLength(event.data[key] ?? '');
  return bytes;
}

/**
 * The payload's size when it is above the limit, `undefined` when it is within. The text's lengths come
 * first: a UTF-16 code unit is at most 6 bytes of JSON (an escape), and the structure at most 256 more,
 * so the common, small event is never encoded to be measured.
 */
export function oversizePayloadBytes(event: PayloadFields): number | undefined {
  let units = event.id.length + event.notification.title.length + event.notification.body.length;
  for (const key in event.data) units += key.length + (event.data[key]?.length ?? 0);
  if (6 * units + 256 <= PROVIDER_PAYLOAD_LIMIT_BYTES) return undefined;
  const bytes = payloadBytes(event);
  return bytes > PROVIDER_PAYLOAD_LIMIT_BYTES ? bytes : undefined;
}
