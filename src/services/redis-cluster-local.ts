import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import getPort from 'get-port';
import { Redis } from 'ioredis';
import { SetupError } from './errors.ts';
import { runCommand, spawnTied, type TiedProcess, which } from './process.ts';
import { pollRedis } from './redis-local.ts';

/** Options of {@link LocalRedisCluster.start}. */
export interface LocalRedisClusterOptions {
  /** Masters. Default 3, the least `redis-cli --cluster create` accepts. */
  masters?: number;
  /** Replicas of each master (`--cluster-replicas`). Default 0. */
  replicas?: number;
  /**
   * `cluster-node-timeout`: how long a node may be unreachable before the others count it as failed
   * (and a replica takes over its master's slots). Default Redis' 15 s; tests of a failover use less.
   */
  nodeTimeoutMs?: number;
}

/**
 * A private Redis Cluster on 127.0.0.1: `masters` × (1 + `replicas`) `redis-server --cluster-enabled yes`
 * on free ports (and free cluster-bus ports), joined by `redis-cli --cluster create` with the 16384
 * slots split among the masters, persisting nothing. The nodes announce 127.0.0.1, so a Cluster client
 * needs no NAT map. `ports` lists the masters first, then the replicas, as `--cluster create` assigns
 * them (roles change with a failover: ask {@link LocalRedisCluster.slotOwner}).
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
    const replicas = options.replicas ?? 0;
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
    for (let i = 0; i < masters * (1 + replicas); i++) {
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
          ...(options.nodeTimeoutMs ? ['--cluster-node-timeout', String(options.nodeTimeoutMs)] : []),
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
        String(replicas),
        '--cluster-yes',
      ]);
      // Every node must agree that all slots are served before a client may rely on its slot map, and
      // every replica must hold its master's data, or a failover would promote an empty node.
      await Promise.all(
        ports.map((port) =>
          cluster.waitFor(port, async (client) => {
            if (!(await client.cluster('INFO')).includes('cluster_state:ok')) return false;
            const replication = await client.info('replication');
            return replication.includes('role:master') || replication.includes('master_link_status:up');
          }),
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
   * keeps its cluster configuration, so it serves its slots again once the cluster says it is ok (a
   * master whose replica took over meanwhile comes back as that replica's replica).
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

  /**
   * The master serving `slot` now and its replicas, by port, as the first running node that answers
   * CLUSTER NODES sees it (after a failover, what the cluster agreed on). CLUSTER SLOTS would leave out
   * a replica that has not yet reported a replication offset.
   */
  async slotOwner(slot: number): Promise<{ master: number; replicas: number[] }> {
    for (const [index, port] of this.ports.entries()) {
      if (!this.processes[index]?.isRunning()) continue;
      const client = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0 });
      try {
        await client.connect();
        // <id> <ip:port@bus> <flags> <master id or -> <ping> <pong> <epoch> <link> <slot ranges…>
        const nodes = String(await client.cluster('NODES'))
          .trim()
          .split('\n')
          .map((line) => line.split(' '));
        const portOf = (fields: string[]) => Number(fields[1]?.split('@')[0]?.split(':').at(-1));
        const serves = (fields: string[]) =>
          fields.slice(8).some((range) => {
            const [from = Number.NaN, to = from] = range.split('-').map(Number);
            return slot >= from && slot <= to;
          });
        const master = nodes.find((fields) => fields[2]?.includes('master') && serves(fields));
        if (!master) continue;
        const replicas = nodes.filter((fields) => fields[3] === master[0] && !fields[2]?.includes('fail'));
        return { master: portOf(master), replicas: replicas.map(portOf) };
      } catch {
        // ask the next node
      } finally {
        client.disconnect();
      }
    }
    throw new Error(`no running node says who serves slot ${slot}`);
  }

  /**
   * Moves `slot` to the master on port `to` as `redis-cli --cluster reshard` does (IMPORTING on the
   * target, MIGRATING on the source, MIGRATE of its keys, then SETSLOT NODE on every master), with
   * `whileOpen` run between the first two steps and the last: while it runs, a call naming several of
   * the slot's keys gets ASK or TRYAGAIN, as during a reshard of a slot with many keys.
   */
  async migrateSlot(
    slot: number,
    to: number,
    whileOpen: () => Promise<void> = async () => {},
  ): Promise<void> {
    const from = (await this.slotOwner(slot)).master;
    await this.onNode(from, async (source) =>
      this.onNode(to, async (target) => {
        const [sourceId, targetId] = [
          String(await source.cluster('MYID')),
          String(await target.cluster('MYID')),
        ];
        await target.cluster('SETSLOT', slot, 'IMPORTING', sourceId);
        await source.cluster('SETSLOT', slot, 'MIGRATING', targetId);
        await whileOpen();
        for (;;) {
          const keys = (await source.cluster('GETKEYSINSLOT', slot, 100)) as string[];
          if (keys.length === 0) break;
          await source.migrate('127.0.0.1', to, '', 0, 5000, 'KEYS', ...keys);
        }
        const masters = [];
        for (const port of this.ports) {
          if (!this.processes[this.ports.indexOf(port)]?.isRunning()) continue;
          if (
            await this.onNode(port, async (node) => (await node.info('replication')).includes('role:master'))
          )
            masters.push(port);
        }
        for (const port of masters)
          await this.onNode(port, (node) => node.cluster('SETSLOT', slot, 'NODE', targetId));
      }),
    );
  }

  /** Runs `work` with a client of one node (not a Cluster client: it follows no redirection). */
  private async onNode<T>(port: number, work: (client: Redis) => Promise<T>): Promise<T> {
    const client = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
    try {
      return await work(client);
    } finally {
      client.disconnect();
    }
  }

  /** Stops every node and removes their folder (nothing is persisted). */
  async stop(): Promise<void> {
    await Promise.all(this.processes.map((process) => process.stop(5_000)));
    await rm(this.dir, { recursive: true, force: true });
  }
}
