import { randomInt } from 'node:crypto';
import type { Platform } from '../events/event.ts';
import { keyPartition } from '../kafka/partitioner.ts';

/** Each provider's lane of the deferred topic: FCM's the even partitions, APNs' the odd ones. */
const LANE: Record<Platform, number> = { fcm: 0, apns: 1 };

/**
 * The deferred-topic partition of a parked event: one of its provider's partitions (every other one,
 * when there are two or more), picked by its key as Kafka's partitioner would within that lane, or
 * at random for an event without a key.
 *
 * A partition is read in order, and a step that cannot send pauses it until the tokens it waits for
 * have refilled. Were both providers' events parked on one partition, the read-back of the provider
 * with tokens to spare would wait, behind the other provider's unsent events, for that provider's
 * refill; in lanes of their own, each provider's parked backlog is read back as its own tokens allow.
 * The events of one key stay in one partition, in the order they were parked.
 */
export function parkedPartition(platform: Platform, key: Buffer | string | null, partitions: number): number {
  if (partitions < 2) return 0;
  const lane = LANE[platform];
  // Partitions lane, lane + 2, lane + 4, …
  const size = Math.ceil((partitions - lane) / 2);
  const index = key === null ? randomInt(size) : keyPartition(key, size);
  return lane + 2 * index;
}
