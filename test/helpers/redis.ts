import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { inject } from 'vitest';

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
