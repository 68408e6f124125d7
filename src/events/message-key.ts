import { createHash } from 'node:crypto';
import type { NotificationEventInput } from './event.ts';

/**
 * The message key of an event: a hash of its platform and device token. All notifications for one
 * device land in one partition, so they are delivered in the order they were published, while devices
 * spread evenly over partitions; the token itself is not repeated in the key.
 */
export function messageKey(event: Pick<NotificationEventInput, 'platform' | 'token'>): string {
  return createHash('sha256').update(`${event.platform}\0${event.token}`).digest('base64url').slice(0, 22);
}
