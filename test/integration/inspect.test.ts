import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { InspectSnapshot } from '../../src/inspect/format.ts';
import { type BucketSpec, TokenBucketLimiter } from '../../src/limiter/index.ts';
import { type TestRedis, testRedis } from '../helpers/redis.ts';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const node = `${root}node_modules/.bin/node`;
const cli = `${root}bin/aqueduct.js`;

let redis: TestRedis;
let prefix: string;
let limiter: TokenBucketLimiter;
// A rate so slow that the level printed does not depend on how long the CLI takes to start.
const provider: BucketSpec = { name: 'fcm', rate: 0.001, capacity: 10 };
const tenant: BucketSpec = { name: 'fcm:tenant:acme', rate: 2.5, capacity: 4 };
const apns: BucketSpec = { name: 'apns', rate: 100, capacity: 50 };

beforeAll(async () => {
  redis = testRedis('inspect');
  prefix = redis.prefix.slice(0, -1);
  limiter = new TokenBucketLimiter(redis.client, { keyPrefix: prefix });
  await limiter.acquire([provider, tenant], 4); // fcm 6 left, the tenant 0 left
  await limiter.acquire([apns], 1);
  await limiter.blockUntil(['apns'], 60_000);
  // Something else under the same prefix that is not a bucket must be left out.
  await redis.client.set(`${prefix}:{fcm}:dedupe:abc`, '1', 'EX', 60);
});

afterAll(async () => {
  await redis.cleanup();
});

function env(): NodeJS.ProcessEnv {
  return { ...process.env, REDIS_URL: inject('redisUrl') };
}

describe('TokenBucketLimiter.inspect', () => {
  it('lists every bucket with its tokens refilled to the Redis time, rate, capacity, block and TTL', async () => {
    const states = await limiter.inspect();
    expect(states.map((s) => s.name)).toEqual(['apns', 'fcm', 'fcm:tenant:acme']);
    const [blocked, fcm, acme] = states;
    expect(blocked?.blockedUntilMs).toBeGreaterThan(blocked?.serverTimeMs ?? Number.POSITIVE_INFINITY);
    expect(fcm).toMatchObject({
      rate: 0.001,
      capacity: 10,
      blockedUntilMs: null,
      key: `${prefix}:{fcm}:bucket`,
    });
    // Not the stored level (0): the tenant bucket has refilled since, at 2.5 tokens/s.
    const stored = Number(await redis.client.hget(`${prefix}:{fcm}:bucket:tenant:acme`, 'tokens'));
    expect(stored).toBe(0);
    expect(acme?.tokens).toBeGreaterThan(0);
    expect(acme?.ttlMs).toBeGreaterThan(0);
  });

  it('filters by a glob on names', async () => {
    expect((await limiter.inspect('fcm:*')).map((s) => s.name)).toEqual(['fcm:tenant:acme']);
    expect((await limiter.inspect('fcm*')).map((s) => s.name)).toEqual(['fcm', 'fcm:tenant:acme']);
    expect((await limiter.inspect('*:tenant:*')).map((s) => s.name)).toEqual(['fcm:tenant:acme']);
    expect((await limiter.inspect('[a]pns')).map((s) => s.name)).toEqual(['apns']);
    expect(await limiter.inspect('nothing')).toEqual([]);
  });
});

describe('aqueduct inspect', () => {
  it('--json prints the buckets for machines', async () => {
    const { stdout } = await run(node, [cli, 'inspect', '--json', '--prefix', prefix, 'fcm*'], {
      env: env(),
    });
    const snapshot = JSON.parse(stdout) as InspectSnapshot;
    expect(snapshot.pattern).toBe('fcm*');
    expect(snapshot.buckets.map((b) => [b.name, b.rate, b.capacity])).toEqual([
      ['fcm', 0.001, 10],
      ['fcm:tenant:acme', 2.5, 4],
    ]);
    expect(snapshot.buckets.every((b) => typeof b.tokens === 'number' && (b.ttlMs ?? 0) > 0)).toBe(true);
  });

  it('prints a table for people', async () => {
    const { stdout } = await run(node, [cli, 'inspect', '--prefix', prefix], { env: env() });
    const lines = stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(
      /^BUCKET\s+TOKENS\s+RATE\/S\s+CAPACITY\s+HELD\s+RATE NOW\s+BLOCKED UNTIL\s+TTL$/,
    );
    expect(lines.slice(1).map((line) => line.split(/\s+/)[0])).toEqual(['apns', 'fcm', 'fcm:tenant:acme']);
    expect(lines[1]).toMatch(/\d{4}-\d\d-\d\dT.*\(in \d+\.\d s\)/);
    expect(lines[2]).toMatch(/^fcm\s+6(\.\d+)?\s+0\.001\s+10\s+0\s+-\s+-\s+\d/);
  });

  it('--watch refreshes (clearing the screen) until interrupted', async () => {
    const child: ChildProcess = spawn(
      node,
      [cli, 'inspect', '--watch', '--interval', '100', '--prefix', prefix],
      {
        env: env(),
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const deadline = Date.now() + 45_000; // a loaded machine can take seconds to start Node
      while (output.split('\x1b[2J').length < 4 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    } finally {
      child.kill('SIGINT');
    }
    expect(await exited).toBe(0);
    const frames = output.split('\x1b[2J\x1b[H').filter(Boolean);
    expect(frames.length).toBeGreaterThanOrEqual(3);
    for (const frame of frames) expect(frame).toContain('fcm:tenant:acme');
  });

  it('names the unreachable Redis and exits 2', async () => {
    const error = (await run(node, [cli, 'inspect'], {
      env: { ...process.env, REDIS_URL: 'redis://:secret@127.0.0.1:1' },
    }).catch((e: unknown) => e)) as { code: number; stderr: string };
    expect(error.code).toBe(2);
    expect(error.stderr).toContain('Redis is unreachable at REDIS_URL=redis://:***@127.0.0.1:1');
    expect(error.stderr).not.toContain('secret');
  });
});
