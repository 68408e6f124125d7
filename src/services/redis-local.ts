import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import getPort from 'get-port';
import { Redis } from 'ioredis';
import { SetupError } from './errors.ts';
import { assertPortFree } from './ports.ts';
import { spawnTied, type TiedProcess, which } from './process.ts';

/** Options of {@link LocalRedis.start}. */
export interface LocalRedisOptions {
  /** Default: a free port. */
  port?: number;
  /** When set, the server requires this password (`requirepass`). */
  password?: string;
  /** Extra `redis-server` arguments, e.g. `['--maxmemory', '64mb']`. */
  args?: string[];
}

/**
 * A private `redis-server` on 127.0.0.1, persisting nothing. Tests that stop, restart or flush Redis
 * use one of these so that they never touch a Redis they did not start.
 */
export class LocalRedis {
  readonly port: number;
  private readonly options: LocalRedisOptions;
  private readonly binary: string;
  private readonly dir: string;
  private process: TiedProcess;

  private constructor(
    port: number,
    options: LocalRedisOptions,
    binary: string,
    dir: string,
    process: TiedProcess,
  ) {
    this.port = port;
    this.options = options;
    this.binary = binary;
    this.dir = dir;
    this.process = process;
  }

  get url(): string {
    const auth = this.options.password ? `:${encodeURIComponent(this.options.password)}@` : '';
    return `redis://${auth}127.0.0.1:${this.port}`;
  }

  static async start(options: LocalRedisOptions = {}): Promise<LocalRedis> {
    const binary = await which('redis-server');
    if (!binary) {
      throw new SetupError(
        'redis-server was not found on PATH.',
        'install Redis 7 (Debian: apt-get install redis-server), or set REDIS_URL to use a Redis you already run.',
      );
    }
    const port = options.port ?? (await getPort({ host: '127.0.0.1' }));
    await assertPortFree(port, 'Redis port');
    const dir = await mkdtemp(join(tmpdir(), 'aqueduct-redis-'));
    const redis = new LocalRedis(port, options, binary, dir, LocalRedis.spawn(binary, port, options, dir));
    await redis.waitUntilReady();
    return redis;
  }

  private static spawn(binary: string, port: number, options: LocalRedisOptions, dir: string): TiedProcess {
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
    args.push('--dir', dir, '--daemonize', 'no');
    if (options.password) args.push('--requirepass', options.password);
    args.push(...(options.args ?? []));
    return spawnTied(binary, args, join(dir, 'redis.log'));
  }

  private async waitUntilReady(timeoutMs = 10_000): Promise<void> {
    const pong = async (client: Redis) => (await client.ping()) === 'PONG';
    if (await pollRedis(this.url, pong, () => this.process.isRunning(), timeoutMs)) return;
    const log = await readFile(join(this.dir, 'redis.log'), 'utf8').catch(() => '');
    throw new SetupError(
      `redis-server on port ${this.port} did not start:\n${log.trimEnd().split('\n').slice(-15).join('\n')}`,
      'read the redis-server log above.',
    );
  }

  /** Stops the server; its data is gone (nothing is persisted). */
  async stop(): Promise<void> {
    await this.process.stop(5_000);
  }

  /** Kills the server at once, as a crash would. */
  async kill(): Promise<void> {
    await this.process.stop(0);
  }

  /** Starts the server again on the same port, empty, as after a crash without persistence. */
  async restart(): Promise<void> {
    await this.stop();
    this.process = LocalRedis.spawn(this.binary, this.port, this.options, this.dir);
    await this.waitUntilReady();
  }

  /** Stops the server and removes its folder. */
  async dispose(): Promise<void> {
    await this.stop();
    await rm(this.dir, { recursive: true, force: true });
  }
}

/**
 * Connects to a starting redis-server every 50 ms until `ready` says yes (true), the server process is
 * no longer `running` or `timeoutMs` has passed (false).
 */
export async function pollRedis(
  url: string,
  ready: (client: Redis) => Promise<boolean>,
  running: () => boolean,
  timeoutMs: number,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && running()) {
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on('error', () => {});
    try {
      await client.connect();
      if (await ready(client)) return true;
    } catch {
      // not up yet
    } finally {
      client.disconnect();
    }
    await sleep(50);
  }
  return false;
}
