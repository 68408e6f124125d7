import type { IncomingHttpHeaders } from 'node:http2';
import { EVENT_ID_DATA_KEY } from '../events/payload.ts';

/** How the APNs simulator checks a push's headers and payload, in the order APNs does. */

/** APNs' limit on a notification's payload, in bytes. */
export const APNS_MAX_PAYLOAD_BYTES = 4096;

/** An `apns-id`: a UUID, 8-4-4-4-12 hex digits. */
export const APNS_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const PUSH_TYPES = new Set([
  'alert',
  'background',
  'location',
  'voip',
  'complication',
  'fileprovider',
  'mdm',
  'liveactivity',
  'pushtotalk',
  'widgets',
]);
const PRIORITIES = new Set(['10', '5', '1']);

/** What {@link validatePush} finds: the event id and payload of a valid push, or APNs' status and reason. */
export type PushValidation =
  | { ok: true; eventId: string | undefined; payload: unknown }
  | { ok: false; status: number; reason: string };

/** Validates a push the way APNs does (headers first, then the payload). */
export function validatePush(
  token: string,
  requestedId: string | string[] | undefined,
  headers: IncomingHttpHeaders,
  body: Buffer,
  size: number,
): PushValidation {
  if (token === '') return { ok: false, status: 400, reason: 'MissingDeviceToken' };
  if (requestedId !== undefined && !(typeof requestedId === 'string' && APNS_ID.test(requestedId))) {
    return { ok: false, status: 400, reason: 'BadMessageId' };
  }
  const topic = headers['apns-topic'];
  if (typeof topic !== 'string' || topic === '') return { ok: false, status: 400, reason: 'MissingTopic' };
  const priority = headers['apns-priority'];
  if (priority !== undefined && !(typeof priority === 'string' && PRIORITIES.has(priority))) {
    return { ok: false, status: 400, reason: 'BadPriority' };
  }
  const expiration = headers['apns-expiration'];
  if (expiration !== undefined && !(typeof expiration === 'string' && /^\d+$/.test(expiration))) {
    return { ok: false, status: 400, reason: 'BadExpirationDate' };
  }
  const collapseId = headers['apns-collapse-id'];
  if (collapseId !== undefined && !(typeof collapseId === 'string' && Buffer.byteLength(collapseId) <= 64)) {
    return { ok: false, status: 400, reason: 'BadCollapseId' };
  }
  const pushType = headers['apns-push-type'];
  if (pushType !== undefined && !(typeof pushType === 'string' && PUSH_TYPES.has(pushType))) {
    return { ok: false, status: 400, reason: 'InvalidPushType' };
  }
  if (size === 0) return { ok: false, status: 400, reason: 'PayloadEmpty' };
  if (size > APNS_MAX_PAYLOAD_BYTES) return { ok: false, status: 413, reason: 'PayloadTooLarge' };
  let payload: unknown;
  try {
    payload = JSON.parse(body.toString('utf8'));
  } catch {
    payload = undefined;
  }
  // Apple's table has no reason for a payload that is not a JSON object; this is the simulator's word.
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) {
    return { ok: false, status: 400, reason: 'BadPayload' };
  }
  const eventId = (payload as Record<string, unknown>)[EVENT_ID_DATA_KEY];
  return { ok: true, eventId: typeof eventId === 'string' ? eventId : undefined, payload };
}
