import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import getPort from 'get-port';
import { createKafka } from '../kafka/client.ts';
import { SetupError } from './errors.ts';
import { KAFKA_DIR, kafkaClasspath } from './kafka-classpath.ts';
import { kafkaLogging, kafkaVersion } from './kafka-version.ts';
import { assertPortFree } from './ports.ts';
import { runCommand, spawnTied, type TiedProcess, which } from './process.ts';

/** Options of {@link LocalKafka.start}. */
export interface LocalKafkaOptions {
  /** Kafka release to run, e.g. `3.9.1`. Default: `KAFKA_VERSION`, else the default 4.x release. */
  version?: string;
  /** Client port of the broker. Default: a free port. */
  port?: number;
  /** Controller (KRaft quorum) port. Default: a free port. */
  controllerPort?: number;
  /** Where the broker keeps its log segments. Default: a fresh temporary folder, removed on stop. */
  dataDir?: string;
  /** Maximum JVM heap in MiB. Default 768: enough for tests and the demo on a 2-core machine. */
  heapMb?: number;
  /** Extra `server.properties` entries, e.g. for a SASL listener. */
  properties?: Record<string, string>;
  /**
   * SCRAM credentials written into the metadata log when the storage is formatted (KRaft has no
   * ZooKeeper to hold them; `kafka-storage format --add-scram`), for a SASL/SCRAM listener in
   * `properties`. Ignored when `dataDir` was formatted before.
   */
  scramUsers?: ReadonlyArray<{
    mechanism: 'SCRAM-SHA-256' | 'SCRAM-SHA-512';
    username: string;
    password: string;
  }>;
  /** How long to wait for the broker to answer a metadata request. Default 90 s. */
  readyTimeoutMs?: number;
  /** Progress messages ("fetching Kafka jars…"). Default: silent. */
  log?: (message: string) => void;
}

/**
 * A real Apache Kafka broker (single node, KRaft: broker and controller in one process) run from the
 * Maven Central jars. The jars are fetched once into Maven's local repository, which every clone of
 * this project and every later run reuses; the resolved classpath is remembered in ~/.cache/aqueduct,
 * one file per broker version.
 */
export class LocalKafka {
  /** The Kafka release this broker runs. */
  readonly version: string;
  readonly brokers: string[];
  readonly logFile: string;
  private process: TiedProcess;
  private readonly ownedDataDir: string | undefined;
  /** How the broker process is started, kept to start it again in {@link LocalKafka.resume}. */
  private readonly launch: { java: string; args: string[]; readyTimeoutMs: number };

  private constructor(
    version: string,
    brokers: string[],
    logFile: string,
    process: TiedProcess,
    ownedDataDir: string | undefined,
    launch: { java: string; args: string[]; readyTimeoutMs: number },
  ) {
    this.version = version;
    this.brokers = brokers;
    this.logFile = logFile;
    this.process = process;
    this.ownedDataDir = ownedDataDir;
    this.launch = launch;
  }

  static async start(options: LocalKafkaOptions = {}): Promise<LocalKafka> {
    // Ports chosen here are free when chosen, but the JVM binds them seconds later (after formatting the
    // storage), and another process's outgoing connection can take one in between (they share the
    // ephemeral range). Such a start is tried again on fresh ports in a fresh folder; fixed ports or a
    // given folder are the caller's to change.
    const choosesPorts =
      options.port === undefined && options.controllerPort === undefined && options.dataDir === undefined;
    for (let attempt = 1; ; attempt++) {
      try {
        return await LocalKafka.startOnce(options);
      } catch (error) {
        if (!choosesPorts || attempt >= START_ATTEMPTS || !isPortTaken(error)) throw error;
        options.log?.(
          `a Kafka port was taken before the broker bound it; starting again on other ports (attempt ${attempt + 1} of ${START_ATTEMPTS})`,
        );
      }
    }
  }

  private static async startOnce(options: LocalKafkaOptions): Promise<LocalKafka> {
    const log = options.log ?? (() => {});
    const java = await which('java');
    if (!java) {
      throw new SetupError(
        'Java was not found on PATH: the local Kafka broker runs on the JVM.',
        'install a JDK 17 or newer (Debian: apt-get install openjdk-17-jdk-headless), or set KAFKA_BROKERS to use a broker you already run.',
      );
    }
    const version = options.version ?? kafkaVersion();
    const classpath = await kafkaClasspath(version, log);

    const port = options.port ?? (await getPort({ host: '127.0.0.1' }));
    const controllerPort = options.controllerPort ?? (await getPort({ host: '127.0.0.1', exclude: [port] }));
    await assertPortFree(port, 'Kafka broker port');
    await assertPortFree(controllerPort, 'Kafka controller port');

    const ownedDataDir = options.dataDir ? undefined : await mkdtemp(join(tmpdir(), 'aqueduct-kafka-'));
    const dataDir = options.dataDir ?? (ownedDataDir as string);
    await mkdir(dataDir, { recursive: true });
    const configFile = join(dataDir, 'server.properties');
    const logFile = join(dataDir, 'broker.log');
    await writeFile(
      configFile,
      serverProperties({ port, controllerPort, dataDir, extra: options.properties }),
    );

    const jvm = [
      `-Xmx${options.heapMb ?? 768}m`,
      '-Xms128m',
      // Small, single-node broker: a short-pause collector and fast start matter more than throughput.
      '-XX:+UseSerialGC',
      '-XX:TieredStopAtLevel=1',
      '-Djava.awt.headless=true',
      loggingConfig(version),
      '-cp',
      classpath,
    ];
    const started = Date.now();
    // Kafka writes meta.properties into its log directory once the storage is formatted.
    if (!existsSync(join(dataDir, 'logs', 'meta.properties'))) {
      await runCommand(java, [
        ...jvm,
        'kafka.tools.StorageTool',
        'format',
        '-t',
        kafkaClusterId(),
        '-c',
        configFile,
        ...(options.scramUsers ?? []).flatMap((u) => [
          '--add-scram',
          `${u.mechanism}=[name=${u.username},password=${u.password}]`,
        ]),
      ]);
    }
    const args = [...jvm, 'kafka.Kafka', configFile];
    const proc = spawnTied(java, args, logFile);
    const brokers = [`127.0.0.1:${port}`];
    const readyTimeoutMs = options.readyTimeoutMs ?? 90_000;
    const kafka = new LocalKafka(version, brokers, logFile, proc, ownedDataDir, {
      java,
      args,
      readyTimeoutMs,
    });
    try {
      await kafka.waitUntilReady(readyTimeoutMs);
    } catch (error) {
      await kafka.stop();
      throw error;
    }
    log(
      `Kafka ${version} ${brokers[0]} ready in ${((Date.now() - started) / 1000).toFixed(1)} s (log: ${logFile})`,
    );
    return kafka;
  }

  /** Waits until a metadata request succeeds, or fails with the tail of the broker's log. */
  private async waitUntilReady(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const admin = createKafka({
      clientId: 'aqueduct-readiness',
      brokers: this.brokers,
      extra: { retry: { retries: 0 }, connectionTimeout: 1000 },
    }).admin();
    try {
      while (Date.now() < deadline) {
        if (!this.process.isRunning()) {
          throw new SetupError(
            `the Kafka broker exited during start-up:\n${await tail(this.logFile)}`,
            'read the broker log above; a busy port or a full disk are the usual causes.',
          );
        }
        try {
          await admin.connect();
          const cluster = await admin.describeCluster();
          if (cluster.brokers.length > 0 && cluster.controller !== null) return;
        } catch {
          // not up yet
        }
        await sleep(250);
      }
    } finally {
      await admin.disconnect().catch(() => {});
    }
    throw new SetupError(
      `the Kafka broker did not answer a metadata request within ${timeoutMs / 1000} s:\n${await tail(this.logFile)}`,
      'check the broker log above; on a very slow machine raise readyTimeoutMs.',
    );
  }

  get pid(): number {
    return this.process.pid;
  }

  /** Stops the broker (controlled shutdown) and removes its data when it was a temporary folder. */
  async stop(): Promise<void> {
    await this.process.stop(20_000);
    if (this.ownedDataDir) await rm(this.ownedDataDir, { recursive: true, force: true });
  }

  /** Kills the broker at once (no controlled shutdown): for fault-injection runs. */
  async kill(): Promise<void> {
    await this.process.stop(0);
  }

  /**
   * Stops the broker process (controlled shutdown; `kill: true` for none) and keeps its data, so that
   * {@link LocalKafka.resume} brings the same broker back: fault-injection runs.
   */
  async halt(options: { kill?: boolean } = {}): Promise<void> {
    await this.process.stop(options.kill ? 0 : 20_000);
  }

  /** Starts a halted broker again on the same ports and data and waits until it answers. */
  async resume(): Promise<void> {
    if (this.process.isRunning()) return;
    this.process = spawnTied(this.launch.java, this.launch.args, this.logFile);
    await this.waitUntilReady(this.launch.readyTimeoutMs);
  }

  /** True while the broker process runs. */
  get running(): boolean {
    return this.process.isRunning();
  }
}

/** Starts tried when a chosen port is taken before the broker binds it. */
const START_ATTEMPTS = 3;

/** Whether a start failed because the broker could not bind one of its ports. */
function isPortTaken(error: unknown): boolean {
  return error instanceof SetupError && error.message.includes('Address already in use');
}

function serverProperties(p: {
  port: number;
  controllerPort: number;
  dataDir: string;
  extra: Record<string, string> | undefined;
}): string {
  const props: Record<string, string> = {
    'process.roles': 'broker,controller',
    'node.id': '1',
    'controller.quorum.voters': `1@127.0.0.1:${p.controllerPort}`,
    listeners: `PLAINTEXT://127.0.0.1:${p.port},CONTROLLER://127.0.0.1:${p.controllerPort}`,
    'advertised.listeners': `PLAINTEXT://127.0.0.1:${p.port}`,
    'controller.listener.names': 'CONTROLLER',
    'inter.broker.listener.name': 'PLAINTEXT',
    'listener.security.protocol.map': 'CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT',
    'log.dirs': join(p.dataDir, 'logs'),
    'num.partitions': '1',
    'default.replication.factor': '1',
    'offsets.topic.replication.factor': '1',
    'offsets.topic.num.partitions': '10',
    'transaction.state.log.replication.factor': '1',
    'transaction.state.log.min.isr': '1',
    // Kafka's default: a new group waits 3 s for more members before its first assignment, so that a
    // fleet started together (the demo's three consumers) joins as one generation instead of rebalancing
    // once per member.
    'group.initial.rebalance.delay.ms': '3000',
    'auto.create.topics.enable': 'false',
    'log.retention.hours': '2',
    'log.segment.bytes': String(64 * 1024 * 1024),
    ...p.extra,
  };
  return `${Object.entries(props)
    .map(([key, value]) => `${key}=${value}`)
    .join('\n')}\n`;
}

/**
 * A Kafka cluster id: 16 random bytes, base64url without padding (what `kafka-storage random-uuid`
 * prints), never starting with '-': the storage tool's argument parser would take that for an option
 * (one start in 64 failed with "argument --cluster-id/-t: expected one argument").
 */
function kafkaClusterId(): string {
  for (;;) {
    const id = randomBytes(16).toString('base64url');
    if (!id.startsWith('-')) return id;
  }
}

/** The JVM flag pointing the broker's logging at its configuration in kafka/. */
function loggingConfig(version: string): string {
  const logging = kafkaLogging(version);
  return `-D${logging.configProperty}=file:${join(KAFKA_DIR, logging.configFile)}`;
}

async function tail(file: string, lines = 30): Promise<string> {
  try {
    return (await readFile(file, 'utf8')).trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no broker log)';
  }
}
