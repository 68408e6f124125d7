import type { Cluster, Redis } from 'ioredis';
import type { Logger } from '../log.ts';
import type { RedisClient } from './client.ts';

/** A Redis (or a Cluster master) that may delete Aqueduct's keys on its own when memory runs short. */
export interface EvictingNode {
  /** `host:port`. */
  node: string;
  /** Its `maxmemory-policy`, e.g. `allkeys-lru`. */
  policy: string;
}

/**
 * The nodes whose `maxmemory-policy` is not `noeviction`. Every other policy lets Redis delete keys
 * when it reaches `maxmemory`, the `volatile-*` ones included, as every key Aqueduct writes has a TTL:
 * a bucket deleted comes back full (a burst the provider refuses), an idempotency window deleted lets a
 * second copy of an event through, a finished-offsets set deleted lets a redelivery be pushed again.
 * Under `noeviction` a full Redis refuses writes instead, which the limiter's failure policy handles.
 *
 * Read from `INFO memory`, which managed services keep where they rename `CONFIG`. A node that cannot be
 * read is left out: this is advice, and Redis being unreachable is reported elsewhere.
 */
export async function evictingNodes(redis: RedisClient): Promise<EvictingNode[]> {
  const nodes: Redis[] = isCluster(redis) ? redis.nodes('master') : [redis];
  const read = await Promise.all(
    nodes.map(async (node) => {
      const policy = await node.info('memory').then(maxmemoryPolicy, () => undefined);
      return { node: `${node.options.host}:${node.options.port}`, policy };
    }),
  );
  return read.filter(
    (entry): entry is EvictingNode => entry.policy !== undefined && entry.policy !== 'noeviction',
  );
}

/** The `maxmemory_policy` field of an `INFO memory` answer, or undefined when it has none. */
export function maxmemoryPolicy(info: string): string | undefined {
  return /^maxmemory_policy:(\S+)/m.exec(info)?.[1];
}

/**
 * Warns once for the nodes that may evict (see {@link evictingNodes}), when the client is first ready;
 * never throws, so a caller can leave it running beside its start.
 */
export async function warnIfRedisEvicts(redis: RedisClient, logger: Logger): Promise<void> {
  // A Cluster client knows its masters once it is ready; a client that never gets there says so itself.
  if (redis.status !== 'ready') {
    const ready = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 30_000).unref();
      redis.once('ready', () => {
        clearTimeout(timer);
        resolve(true);
      });
    });
    if (!ready) return;
  }
  const nodes = await evictingNodes(redis).catch(() => []);
  if (nodes.length === 0) return;
  logger.warn(
    { nodes },
    "Redis may delete Aqueduct's keys when memory runs short (maxmemory-policy is not noeviction): a deleted bucket refills at once and a deleted idempotency window lets duplicates through; set maxmemory-policy noeviction",
  );
}

function isCluster(redis: RedisClient): redis is Cluster {
  return (redis as Cluster).isCluster === true;
}
