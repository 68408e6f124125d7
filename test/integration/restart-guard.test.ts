import { setTimeout as sleep } from 'node:timers/promises';
import { type Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TokenBucketLimiter } from '../../src/limiter/index.ts';
import { RestartSafeTokenSource } from '../../src/limiter/restart-guard.ts';
import { LocalRedis } from '../../src/services/index.ts';
import { privateCluster } from '../helpers/redis.ts';

/** After Redis lost its data, the buckets resume empty (at the refill rate), not with a full burst. */

let server: LocalRedis;
let client: Redis;
beforeAll(async () => {
  server = await LocalRedis.start();
  client = new Redis(server.url, { maxRetriesPerRequest: 1, retryStrategy: () => 100 });
  client.on('error', () => {});
});
afterAll(async () => {
  client?.disconnect();
  await server?.dispose();
});

describe('RestartSafeTokenSource', () => {
  it('empties the buckets once after Redis restarted empty; a reconnect without data loss changes nothing', async () => {
    const bucket = { name: 'fcm', rate: 10, capacity: 100 };
    const losses: string[][] = [];
    const limiter = new TokenBucketLimiter(client, { keyPrefix: 'guard' });
    const source = new RestartSafeTokenSource(limiter, client, {
      markerKeyFor: (tag) => `guard:{${tag}}:redis-epoch`,
      onDataLoss: (buckets) => losses.push([...buckets]),
    });
    expect((await source.acquire([bucket], 100)).granted).toBe(100); // a new bucket starts full

    // Reconnected, data intact: nothing is emptied.
    client.disconnect(true);
    await waitReady(client);
    await sleep(200);
    expect((await source.acquire([bucket], 100)).granted).toBeLessThan(10);
    expect(losses).toEqual([]);

    // Restarted empty: a plain limiter would grant a full burst again; this one starts from nothing.
    await server.restart();
    await waitReady(client);
    const afterRestart = await source.acquire([bucket], 100);
    expect(afterRestart.granted).toBeLessThan(10);
    expect(losses).toEqual([['fcm']]);
    expect((await limiter.acquire([{ ...bucket, name: 'apns' }], 100)).granted).toBe(100);
  });
});

describe('RestartSafeTokenSource on a Redis Cluster', () => {
  it('empties the buckets of a tag whose master restarted empty while the client stayed connected to the others', async () => {
    const { local, client: cluster, stop } = await privateCluster(3);
    try {
      const bucket = { name: 'fcm', rate: 10, capacity: 100 };
      const { source, losses } = guardedSource(cluster);
      expect((await source.acquire([bucket], 100)).granted).toBe(100);

      // The master of {fcm} crashes and comes back empty; the Cluster client as a whole never
      // reconnects (its other nodes stay up), only that node's connection does.
      const slot = Number(await cluster.cluster('KEYSLOT', 'guard:{fcm}:bucket'));
      const ranges = (await cluster.cluster('SLOTS')) as unknown as Array<[number, number, [string, number]]>;
      const port = ranges.find(([from, to]) => slot >= from && slot <= to)?.[2][1] as number;
      await local.restartNode(port);
      const granted = await firstAnswer(source, bucket, 20_000);
      expect(granted).toBeLessThan(10);
      expect(losses.flat()).toContain('fcm');
    } finally {
      await stop();
    }
  }, 60_000);
});

describe('RestartSafeTokenSource on a Redis Cluster with replicas', () => {
  it('empties nothing when the master of its tag fails over to a replica that holds the data', async () => {
    const { local, client: cluster, stop } = await privateCluster(3, { replicas: 1, nodeTimeoutMs: 1000 });
    try {
      // One token a second: what the bucket holds after the failover says whether it kept its level.
      const bucket = { name: 'fcm', rate: 1, capacity: 100 };
      const { source, losses } = guardedSource(cluster);
      expect((await source.acquire([bucket], 100)).granted).toBe(100);
      const slot = Number(await cluster.cluster('KEYSLOT', 'guard:{fcm}:bucket'));
      const { master } = await local.slotOwner(slot);
      // The replica has the drained bucket and the marker before its master dies.
      const node = new Redis(master, '127.0.0.1');
      expect(await node.wait(1, 5000)).toBe(1);
      node.disconnect();
      await local.killNode(master);
      const granted = await firstAnswer(source, bucket, 20_000);
      // The nodes learn of the failover by gossip: the one asked may see it after the client did.
      await expect
        .poll(async () => (await local.slotOwner(slot)).master, { timeout: 10_000, interval: 200 })
        .not.toBe(master);
      expect(granted).toBeLessThan(10);
      expect(losses).toEqual([]);
    } finally {
      await stop();
    }
  }, 60_000);
});

/** A guarded limiter on a Redis Cluster, and the bucket names of each data loss it reports. */
function guardedSource(cluster: Cluster): { source: RestartSafeTokenSource; losses: string[][] } {
  const losses: string[][] = [];
  const source = new RestartSafeTokenSource(
    new TokenBucketLimiter(cluster, { keyPrefix: 'guard' }),
    cluster,
    {
      markerKeyFor: (tag) => `guard:{${tag}}:redis-epoch`,
      onDataLoss: (buckets) => losses.push([...buckets]),
    },
  );
  return { source, losses };
}

/** What the first acquire of 100 that the cluster answers grants, asking again while a node is down. */
async function firstAnswer(
  source: RestartSafeTokenSource,
  bucket: { name: string; rate: number; capacity: number },
  timeoutMs: number,
): Promise<number | undefined> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const granted = await source.acquire([bucket], 100).then(
      (answer) => answer.granted,
      () => undefined,
    );
    if (granted !== undefined) return granted;
    await sleep(200);
  }
  return undefined;
}

async function waitReady(redis: Redis): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (redis.status !== 'ready') {
    if (Date.now() > deadline) throw new Error(`redis not ready: ${redis.status}`);
    if (redis.status === 'end') await redis.connect().catch(() => {});
    await sleep(50);
  }
}
