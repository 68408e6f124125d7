import { once } from 'node:events';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.ts';
import { evictingNodes, maxmemoryPolicy, warnIfRedisEvicts } from '../../src/redis/eviction-policy.ts';
import { LocalRedis } from '../../src/services/index.ts';
import { privateCluster } from '../helpers/redis.ts';

/** A Redis that may evict keys is named at start: its buckets would come back full, its windows empty. */

describe('maxmemory-policy', () => {
  it('reads the policy from INFO memory', () => {
    expect(maxmemoryPolicy('# Memory\r\nused_memory:1\r\nmaxmemory_policy:allkeys-lru\r\n')).toBe(
      'allkeys-lru',
    );
    expect(maxmemoryPolicy('# Memory\r\nused_memory:1\r\n')).toBeUndefined();
  });

  it('names a Redis whose policy evicts, and stays quiet about one that does not', async () => {
    const keeping = await LocalRedis.start();
    const evicting = await LocalRedis.start({ args: ['--maxmemory-policy', 'allkeys-lru'] });
    const clients = [new Redis(keeping.url), new Redis(evicting.url)];
    try {
      const [quiet = [], named = []] = await Promise.all(
        clients.map(async (client) => {
          const lines: string[] = [];
          await warnIfRedisEvicts(
            client,
            createLogger('info', 'test', { write: (line) => lines.push(line) }),
          );
          return lines.map((line) => JSON.parse(line) as { msg: string; nodes: unknown });
        }),
      );
      expect(quiet).toEqual([]);
      expect(named).toHaveLength(1);
      expect(named[0]?.msg).toContain('set maxmemory-policy noeviction');
      expect(named[0]?.nodes).toEqual([{ node: new URL(evicting.url).host, policy: 'allkeys-lru' }]);
    } finally {
      for (const client of clients) client.disconnect();
      await Promise.all([keeping.dispose(), evicting.dispose()]);
    }
  });

  it('names, on a Redis Cluster, exactly the masters that may evict (volatile-* too: every key has a TTL)', async () => {
    const { local, client, stop } = await privateCluster(3);
    try {
      if (client.status !== 'ready') await once(client, 'ready');
      expect(await evictingNodes(client)).toEqual([]);
      const port = local.ports[1] as number;
      const master = new Redis({ host: '127.0.0.1', port });
      await master.config('SET', 'maxmemory-policy', 'volatile-lru');
      master.disconnect();
      expect(await evictingNodes(client)).toEqual([{ node: `127.0.0.1:${port}`, policy: 'volatile-lru' }]);
    } finally {
      await stop();
    }
  }, 60_000);
});
