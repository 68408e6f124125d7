import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import getPort from 'get-port';
import type { Redis } from 'ioredis';
import { SetupError } from './errors.ts';
import { runCommand, spawnTied, type TiedProcess, which } from './process.ts';
import { pollRedis } from './redis-local.ts';

/** Options of {@link LocalRedisCluster.start}. */
export interface LocalRedisClusterOptions {
  /** Masters (no replicas). Default 3, the least `redis-cli --cluster create` accepts. */
  masters?: number;
}

/**
 * A private Redis Cluster on 127.0.0.1: `masters` × `redis-server --cluster-enabled yes` on free ports
 * (and free cluster-bus ports), joined by `redis-cli --cluster create` with the 16384 slots split among
 * them, persisting nothing. The nodes announce 127.0.0.1, so a Cluster client needs no NAT map.
 */
export class LocalRedisCluster {
  readonly ports: readonly number[];
  private readonly dir: string;
  private readonly processes: TiedProcess[];
  private readonly spawnNode: (port: number) => TiedProcess;

  private constructor(
    ports: readonly number[],
    dir: string,
    processes: TiedProcess[],
    spawnNode: (port: number) => TiedProcess,
  ) {
    this.ports = ports;
    this.dir = dir;
    this.processes = processes;
    this.spawnNode = spawnNode;
  }

  /** The nodes as REDIS_CLUSTER_NODES takes them: `127.0.0.1:p1,127.0.0.1:p2,…`. */
  get nodes(): string {
    return this.ports.map((port) => `127.0.0.1:${port}`).join(',');
  }

  static async start(options: LocalRedisClusterOptions = {}): Promise<LocalRedisCluster> {
    const masters = options.masters ?? 3;
    const [server, cli] = await Promise.all([which('redis-server'), which('redis-cli')]);
    if (!server || !cli) {
      throw new SetupError(
        `${server ? 'redis-cli' : 'redis-server'} was not found on PATH.`,
        'install Redis 7 (Debian: apt-get install redis-server, which brings redis-cli), or set REDIS_CLUSTER_NODES to a Redis Cluster you already run.',
      );
    }
    const taken: number[] = [];
    const freePort = async () => {
      const port = await getPort({ host: '127.0.0.1', exclude: taken });
      taken.push(port);
      return port;
    };
    const ports: number[] = [];
    const busPorts: number[] = [];
    for (let i = 0; i < masters; i++) {
      ports.push(await freePort());
      busPorts.push(await freePort());
    }
    const dir = await mkdtemp(join(tmpdir(), 'aqueduct-redis-cluster-'));
    const spawnNode = (port: number) =>
      spawnTied(
        server,
        [
          '--port',
          String(port),
          '--cluster-port',
          String(busPorts[ports.indexOf(port)]),
          '--bind',
          '127.0.0.1',
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          join(dir, `nodes-${port}.conf`),
          '--save',
          '',
          '--appendonly',
          'no',
          '--dir',
          dir,
          '--daemonize',
          'no',
        ],
        join(dir, `redis-${port}.log`),
      );
    const processes = ports.map(spawnNode);
    const cluster = new LocalRedisCluster(ports, dir, processes, spawnNode);
    try {
      await Promise.all(
        ports.map((port) => cluster.waitFor(port, async (client) => (await client.ping()) === 'PONG')),
      );
      await runCommand(cli, [
        '--cluster',
        'create',
        ...ports.map((port) => `127.0.0.1:${port}`),
        '--cluster-replicas',
        '0',
        '--cluster-yes',
      ]);
      // Every node must agree that all slots are served before a client may rely on its slot map.
      await Promise.all(
        ports.map((port) =>
          cluster.waitFor(port, async (client) =>
            (await client.cluster('INFO')).includes('cluster_state:ok'),
          ),
        ),
      );
    } catch (error) {
      await cluster.stop();
      throw error;
    }
    return cluster;
  }

  /** Polls one node until `ready` says yes; a SetupError with the node's log when it never does. */
  private async waitFor(
    port: number,
    ready: (client: Redis) => Promise<boolean>,
    timeoutMs = 15_000,
  ): Promise<void> {
    const node = this.processes[this.ports.indexOf(port)];
    const running = () => node?.isRunning() === true;
    if (await pollRedis(`redis://127.0.0.1:${port}`, ready, running, timeoutMs)) return;
    const log = await readFile(join(this.dir, `redis-${port}.log`), 'utf8').catch(() => '');
    throw new SetupError(
      `Redis Cluster node on port ${port} did not get ready:\n${log.trimEnd().split('\n').slice(-15).join('\n')}`,
      'read the redis-server log above.',
    );
  }

  /**
   * Kills the node on `port` and starts it again, empty (nothing is persisted), as after a crash: it
   * keeps its cluster configuration, so it serves its slots again once the cluster says it is ok.
   */
  async restartNode(port: number): Promise<void> {
    const index = await this.killNode(port);
    this.processes[index] = this.spawnNode(port);
    await this.waitFor(port, async (client) => (await client.cluster('INFO')).includes('cluster_state:ok'));
  }

  /** Kills the node on `port` at once, as a crash would; says which node of the list it was. */
  async killNode(port: number): Promise<number> {
    const index = this.ports.indexOf(port);
    if (index === -1) throw new Error(`no node of this cluster on port ${port}`);
    await this.processes[index]?.stop(0);
    return index;
  }

  /** Stops every node and removes their folder (nothing is persisted). */
  async stop(): Promise<void> {
    await Promise.all(this.processes.map((process) => process.stop(5_000)));
    await rm(this.dir, { recursive: true, force: true });
  }
}
