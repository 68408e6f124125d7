import { randomUUID } from 'node:crypto';
import { type Cluster, Redis } from 'ioredis';
import { inject } from 'vitest';
import { createRedis, redisNodeAddresses } from '../../src/redis/client.ts';
import { LocalRedisCluster, type LocalRedisClusterOptions } from '../../src/services/index.ts';

/**
 * A Redis client on the run's shared server with a key prefix of its own. Clean-up deletes only keys
 * under that prefix: the server may be one the user runs (REDIS_URL), so it is never flushed.
 */
export interface TestRedis {
  client: Redis;
  prefix: string;
  cleanup(): Promise<void>;
}

export function testRedis(name = 'test'): TestRedis {
  const client = new Redis(inject('redisUrl'), { maxRetriesPerRequest: 3 });
  const prefix = `aqt:${name}:${randomUUID().slice(0, 8)}:`;
  return {
    client,
    prefix,
    async cleanup() {
      let cursor = '0';
      do {
        const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
        if (keys.length > 0) await client.del(...keys);
        cursor = next;
      } while (cursor !== '0');
      client.disconnect();
    },
  };
}

/**
 * A 3-master Redis Cluster of the test's own (with replicas if `options` asks), for tests that kill or
 * restart its nodes (the run's shared cluster must stay whole), with a Cluster client that tolerates
 * the outages the test makes.
 */
export interface PrivateCluster {
  local: LocalRedisCluster;
  client: Cluster;
  stop(): Promise<void>;
}

export async function privateCluster(
  maxRetriesPerRequest: number,
  options: LocalRedisClusterOptions = {},
): Promise<PrivateCluster> {
  const local = await LocalRedisCluster.start(options);
  const client = createRedis(
    { url: '', clusterNodes: redisNodeAddresses(local.nodes.split(',')) },
    { maxRetriesPerRequest },
  ) as Cluster;
  client.on('error', () => {});
  return {
    local,
    client,
    async stop() {
      client.disconnect();
      await local.stop();
    },
  };
}
