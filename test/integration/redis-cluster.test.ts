import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { type Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { InspectSnapshot } from '../../src/inspect/format.ts';
import { TokenBucketLimiter } from '../../src/limiter/index.ts';
import { createRedis, onNodeErrors, redisNodeAddresses } from '../../src/redis/client.ts';
import { RedisReachability } from '../../src/redis/reachability.ts';
import { LocalRedisCluster } from '../../src/services/index.ts';
import { sampleEvent, startTestGateway } from '../helpers/gateway.ts';
import { privateCluster } from '../helpers/redis.ts';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const node = `${root}node_modules/.bin/node`;
const cli = `${root}bin/aqueduct.js`;

/** The run's shared 3-master Redis Cluster; every key here is under a prefix of this file's own. */
let cluster: Cluster;
let prefix: string;
let limiter: TokenBucketLimiter;

beforeAll(() => {
  cluster = createRedis(
    { url: '', clusterNodes: redisNodeAddresses(inject('redisClusterNodes').split(',')) },
    { maxRetriesPerRequest: 3 },
  ) as Cluster;
  prefix = `aqt-cluster-${randomUUID().slice(0, 8)}`;
  limiter = new TokenBucketLimiter(cluster, { keyPrefix: prefix });
});

afterAll(async () => {
  for (const [master, key] of await keysOnMasters(`${prefix}:*`)) await master.del(key);
  cluster.disconnect();
});

/** Every key matching `pattern` on every master, with the master holding it. */
async function keysOnMasters(pattern: string): Promise<Array<[Redis, string]>> {
  const found: Array<[Redis, string]> = [];
  for (const master of cluster.nodes('master')) {
    let cursor = '0';
    do {
      const [next, keys] = await master.scan(cursor, 'MATCH', pattern, 'COUNT', 500);
      for (const key of keys) found.push([master, key]);
      cursor = next;
    } while (cursor !== '0');
  }
  return found;
}

/** The master serving a key's slot, by its port. */
async function ownerPort(key: string): Promise<number> {
  const slot = Number(await cluster.cluster('KEYSLOT', key));
  const range = (await cluster.cluster('SLOTS')).find(([from, to]) => slot >= from && slot <= to);
  const master = range?.[2];
  if (!master) throw new Error(`no master serves slot ${slot}`);
  return master[1];
}

describe('the limiter on a Redis Cluster', () => {
  it("puts each provider's buckets in a slot of its own, and acquires (one and many) work in each", async () => {
    // A refill of one token per 100 s: what is left is what was taken, however long the calls take.
    const fcm = { name: 'fcm', rate: 0.01, capacity: 10 };
    const fcmTenant = { name: 'fcm:tenant:acme', rate: 0.01, capacity: 10 };
    const apns = { name: 'apns', rate: 0.01, capacity: 10 };
    const slots = await Promise.all(
      [fcm, fcmTenant, apns].map(async (b) =>
        Number(await cluster.cluster('KEYSLOT', limiter.keyOf(b.name))),
      ),
    );
    // The provider's bucket and its tenants' share a slot (one script call takes from both); the
    // providers do not.
    expect(slots[0]).toBe(slots[1]);
    expect(slots[0]).not.toBe(slots[2]);

    expect((await limiter.acquire([fcm, fcmTenant], 3)).granted).toBe(3);
    expect((await limiter.acquire([apns], 4)).granted).toBe(4);
    // One call across both slots: pipelined per hash tag, each reply back in its request's place.
    const many = await limiter.acquireMany([
      { buckets: [apns], n: 2 },
      { buckets: [fcm, fcmTenant], n: 5 },
      { buckets: [apns], n: 1 },
    ]);
    expect(many.map((r) => [r.granted, r.failedOpen])).toEqual([
      [2, false],
      [5, false],
      [1, false],
    ]);
    expect(many[1]?.tokensLeft.map(Math.floor)).toEqual([2, 2]);
    expect(many[2]?.tokensLeft.map(Math.floor)).toEqual([3]);
    // A call mixing two providers' buckets could not run on a cluster: refused before it is sent.
    await expect(limiter.acquire([fcm, apns], 1)).rejects.toThrow(/hash tag/);
  });

  it('inspect (the limiter and `aqueduct inspect`) lists the buckets of every master', async () => {
    // Providers whose buckets land on each of the three masters.
    const masters = new Set(cluster.nodes('master').map((m) => m.options.port));
    const byMaster = new Map<number, string>();
    for (let i = 0; byMaster.size < masters.size && i < 200; i++) {
      const name = `provider${i}`;
      const port = await ownerPort(limiter.keyOf(name));
      if (!byMaster.has(port)) byMaster.set(port, name);
    }
    expect(byMaster.size).toBe(3);
    const names = [...byMaster.values()].sort();
    for (const name of names) await limiter.acquire([{ name, rate: 1, capacity: 5 }], 1);

    const states = await limiter.inspect('provider*');
    expect(states.map((s) => s.name)).toEqual(names);
    expect(states.every((s) => s.capacity === 5 && (s.tokens ?? 0) >= 4)).toBe(true);

    const { stdout } = await run(node, [cli, 'inspect', '--json', '--prefix', prefix, 'provider*'], {
      env: { ...process.env, REDIS_URL: '', REDIS_CLUSTER_NODES: inject('redisClusterNodes') },
    });
    const snapshot = JSON.parse(stdout) as InspectSnapshot;
    expect(snapshot.buckets.map((b) => b.name)).toEqual(names);
  });

  it('`aqueduct inspect` names the unreachable cluster and exits 2', async () => {
    const error = (await run(node, [cli, 'inspect'], {
      env: { ...process.env, REDIS_CLUSTER_NODES: '127.0.0.1:1' },
    }).catch((e: unknown) => e)) as { code: number; stderr: string };
    expect(error.code).toBe(2);
    expect(error.stderr).toContain('Redis is unreachable at REDIS_CLUSTER_NODES=127.0.0.1:1');
  });

  it('`aqueduct inspect` says which cluster it could not read when a master is down, and exits 2', async () => {
    const local = await LocalRedisCluster.start();
    try {
      await local.killNode(local.ports[1] as number);
      const error = (await run(node, [cli, 'inspect'], {
        env: { ...process.env, REDIS_URL: '', REDIS_CLUSTER_NODES: local.nodes },
      }).catch((e: unknown) => e)) as { code: number; stderr: string };
      expect(error.code, error.stderr).toBe(2);
      expect(error.stderr).toMatch(
        new RegExp(`Redis (could not be read|is unreachable) at REDIS_CLUSTER_NODES=${local.nodes}`),
      );
      expect(error.stderr).not.toMatch(/\n\s+at /); // no stack trace
    } finally {
      await local.stop();
    }
  }, 60_000);

  it('readiness reads each hash tag in use: not ready while a master is down, though the client says ready', async () => {
    const { local, client, stop } = await privateCluster(1);
    const reachability = new RedisReachability(
      client,
      ['{d0}', '{d1}', '{d2}'].map((tag) => `probe:${tag}:reachable`),
      200,
    );
    try {
      await expect.poll(() => reachability.ok, { timeout: 10_000, interval: 100 }).toBe(true);
      const port = local.ports[2] as number;
      await local.killNode(port);
      await expect.poll(() => reachability.ok, { timeout: 10_000, interval: 100 }).toBe(false);
      expect(client.status).toBe('ready');
      await local.restartNode(port);
      await expect.poll(() => reachability.ok, { timeout: 20_000, interval: 200 }).toBe(true);
    } finally {
      reachability.stop();
      await stop();
    }
  }, 60_000);

  it('inspect never lists the buckets of some masters as if they were all: a master down is an error', async () => {
    const { local, client, stop } = await privateCluster(1);
    try {
      const own = new TokenBucketLimiter(client, { keyPrefix: 'probe', timeoutMs: 2000 });
      const names = Array.from({ length: 12 }, (_, i) => `p${i}`);
      for (const name of names) await own.acquire([{ name, rate: 1, capacity: 10 }], 1);
      expect((await own.inspect('*')).map((b) => b.name).sort()).toEqual([...names].sort());
      await local.killNode(local.ports[1] as number);
      const deadline = Date.now() + 8000;
      const partial: number[] = [];
      let refused = 0;
      while (Date.now() < deadline) {
        await own.inspect('*').then(
          (buckets) => {
            if (buckets.length < names.length) partial.push(buckets.length);
          },
          () => refused++,
        );
        await sleep(200);
      }
      expect(partial).toEqual([]);
      expect(refused).toBeGreaterThan(0);
    } finally {
      await stop();
    }
  }, 60_000);

  it('reports the connection errors of a node by the address the cluster announces, which this host cannot resolve', async () => {
    const local = await LocalRedisCluster.start();
    const reports: Array<{ node: string; message: string }> = [];
    let client: Cluster | undefined;
    try {
      for (const [i, port] of local.ports.entries()) {
        const node = new Redis(port, '127.0.0.1');
        await node.config('SET', 'cluster-announce-hostname', `node${i}.aqueduct.invalid`);
        await node.config('SET', 'cluster-preferred-endpoint-type', 'hostname');
        node.disconnect();
      }
      // The seeds answer; the slot map then names the nodes by those names, and the client, which
      // connects at once, keeps trying them.
      client = createRedis(
        { url: '', clusterNodes: redisNodeAddresses(local.nodes.split(',')) },
        { maxRetriesPerRequest: 1 },
      ) as Cluster;
      client.on('error', () => {});
      onNodeErrors(client, (error, node) => reports.push({ node, message: error.message }));
      await expect
        .poll(() => reports.find((report) => report.node.includes('.aqueduct.invalid:')), {
          timeout: 15_000,
          interval: 200,
        })
        .toMatchObject({ node: expect.stringMatching(/^node\d\.aqueduct\.invalid:\d+$/) });
      expect(reports.find((report) => report.node.includes('.aqueduct.invalid:'))?.message).toMatch(
        /ENOTFOUND|EAI_AGAIN/,
      );
      // `aqueduct inspect` names the node and why, rather than only that a connection closed.
      const error = (await run(node, [cli, 'inspect'], {
        env: { ...process.env, REDIS_URL: '', REDIS_CLUSTER_NODES: local.nodes },
      }).catch((e: unknown) => e)) as { code: number; stderr: string };
      expect(error.code, error.stderr).toBe(2);
      // A node whose hostname has not reached the asked node by gossip yet is announced as `?`.
      expect(error.stderr).toMatch(/\(node (node\d\.aqueduct\.invalid|\?):\d+: .*(ENOTFOUND|EAI_AGAIN)/);
    } finally {
      client?.disconnect();
      await local.stop();
    }
  }, 60_000);

  it('`aqueduct inspect` pointed at a Redis that is not a cluster says so', async () => {
    const standalone = new URL(inject('redisUrl')).host;
    const error = (await run(node, [cli, 'inspect'], {
      env: { ...process.env, REDIS_CLUSTER_NODES: standalone },
    }).catch((e: unknown) => e)) as { code: number; stderr: string };
    expect(error.code).toBe(2);
    expect(error.stderr).toContain(`REDIS_CLUSTER_NODES=${standalone}`);
    expect(error.stderr).toContain('cluster support disabled');
  });
});

describe('the gateway on a Redis Cluster', () => {
  it("holds each tenant to its admission limit through the Cluster client, each tenant's bucket in a slot of its own", async () => {
    const keys = { 'key-acme-cluster-0123456789': 'acme', 'key-globex-cluster-0123456789': 'globex' };
    const gw = await startTestGateway({
      keys,
      env: {
        REDIS_CLUSTER_NODES: inject('redisClusterNodes'),
        AQUEDUCT_TENANT_RATE: '0.5',
        AQUEDUCT_TENANT_BURST: '5',
      },
    });
    try {
      const slots = new Set<number>();
      for (const [key, tenant] of Object.entries(keys)) {
        const events = (n: number) =>
          Array.from({ length: n }, (_, i) => sampleEvent(`${tenant}-cluster-${i}`));
        expect((await gw.post({ events: events(5) }, { key })).status).toBe(202);
        expect((await gw.post({ events: events(2) }, { key })).status).toBe(429);
        const buckets = await keysOnMasters(`aqt-gw-*:{gateway.${tenant}}:bucket`);
        expect(buckets.length).toBeGreaterThanOrEqual(1);
        for (const [master, bucket] of buckets) slots.add(Number(await master.cluster('KEYSLOT', bucket)));
      }
      expect(slots.size).toBe(2);
    } finally {
      await gw.close();
    }
  });
});
