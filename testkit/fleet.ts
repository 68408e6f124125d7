import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../bin/aqueduct.js', import.meta.url));
const OTHER_OUTPUT_LINES = 100;

/** One `aqueduct consume` process started by a test, benchmark or the demo. */
export interface ConsumerProcess {
  readonly name: string;
  readonly child: ChildProcess;
  /** Every JSON log line it printed so far, parsed. */
  readonly logs: Array<Record<string, unknown>>;
  /**
   * The last lines it printed that are not JSON logs (at most OTHER_OUTPUT_LINES): an uncaught error's
   * stack goes there, so a test's failure message can show why a process died.
   */
  readonly otherOutput: string[];
  /** Resolves with the exit code (or signal) when it is gone. */
  readonly exited: Promise<number | string>;
  /** What ended it: `stop` or `kill` when this side asked, `self` when it exited on its own; undefined while it runs. */
  readonly ended: 'stop' | 'kill' | 'self' | undefined;
  /** Resolves when its log says it joined the group. */
  joined(): Promise<void>;
  /** SIGTERM and wait for the exit. */
  stop(): Promise<number | string>;
  /** SIGKILL: a crash. */
  kill(): Promise<number | string>;
}

/** Spawns `count` consumers, `consumer-1` to `consumer-N`, each appending its log to `logFile(name)`. */
export function spawnFleet(
  count: number,
  env: Record<string, string>,
  logFile: (name: string) => string,
): ConsumerProcess[] {
  return Array.from({ length: count }, (_, i) => {
    const name = `consumer-${i + 1}`;
    return spawnConsumer(name, env, logFile(name));
  });
}

/**
 * Spawns `node bin/aqueduct.js consume` with the given environment (on top of this process's), collects
 * its JSON logs (also appended to `logFile` when given), and ties its life to this process.
 */
export function spawnConsumer(name: string, env: Record<string, string>, logFile?: string): ConsumerProcess {
  const child = spawn(process.execPath, [CLI, 'consume'], {
    env: { ...process.env, AQUEDUCT_HTTP_PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const file: WriteStream | undefined = logFile ? createWriteStream(logFile, { flags: 'a' }) : undefined;
  const logs: Array<Record<string, unknown>> = [];
  const otherOutput: string[] = [];
  const keepOther = (line: string) => {
    if (line.trim() === '') return;
    otherOutput.push(line);
    if (otherOutput.length > OTHER_OUTPUT_LINES) otherOutput.shift();
  };
  let joinedResolve: () => void = () => {};
  const joinedPromise = new Promise<void>((resolve) => {
    joinedResolve = resolve;
  });
  let buffer = '';
  const onData = (chunk: Buffer) => {
    file?.write(chunk);
    buffer += chunk.toString('utf8');
    let newline = buffer.indexOf('\n');
    while (newline >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + 1);
      newline = buffer.indexOf('\n');
      if (!line.startsWith('{')) {
        keepOther(line);
        continue;
      }
      try {
        const entry = JSON.parse(line) as Record<string, unknown>;
        logs.push(entry);
        if (entry.msg === 'joined the consumer group') joinedResolve();
      } catch {
        keepOther(line);
      }
    }
  };
  child.stdout?.on('data', onData);
  child.stderr?.on('data', onData);
  let asked: 'stop' | 'kill' | undefined;
  let ended: 'stop' | 'kill' | 'self' | undefined;
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => {
      file?.end();
      ended = asked ?? 'self';
      resolve(code ?? signal ?? 'unknown');
    });
  });
  const ensureGone = () => child.kill('SIGKILL');
  process.once('exit', ensureGone);
  void exited.then(() => process.removeListener('exit', ensureGone));
  return {
    name,
    child,
    logs,
    otherOutput,
    exited,
    get ended() {
      return ended;
    },
    joined: () => joinedPromise,
    stop: () => {
      asked ??= 'stop';
      child.kill('SIGTERM');
      return exited;
    },
    kill: () => {
      asked ??= 'kill';
      child.kill('SIGKILL');
      return exited;
    },
  };
}

/**
 * Consumers that failed on their own: exited without being asked, or asked to stop (SIGTERM) and
 * exited with a non-zero code. One killed on purpose (`kill`, a fault injected) is not a crash.
 */
export function consumerCrashes(consumers: readonly ConsumerProcess[]): number {
  return consumers.filter((c) => c.ended === 'self' || (c.ended === 'stop' && c.child.exitCode !== 0)).length;
}

/** Options of {@link fleetEnv}. */
export interface FleetEnvOptions {
  kafkaBrokers: readonly string[];
  redisUrl: string;
  /** A Redis Cluster (`host:port,…`) the consumers use instead of `redisUrl` (REDIS_CLUSTER_NODES). */
  redisClusterNodes?: string | undefined;
  topic: string;
  /** Prefix of the run's Redis keys (buckets and done-marks). */
  redisPrefix: string;
  /** Aqueduct's bucket, per provider. */
  aqueduct: { rate: number; burst: number };
  /** false: the limiter is disabled (the fire-and-forget baseline). Default true. */
  limiter?: boolean;
  /** The simulators' environment (endpoints, CA files). */
  simulatorEnv: Record<string, string>;
  /** Anything else, last (wins). */
  extra?: Record<string, string>;
}

/** The environment of a run's `aqueduct consume` processes. */
export function fleetEnv(options: FleetEnvOptions): Record<string, string> {
  return {
    KAFKA_BROKERS: options.kafkaBrokers.join(','),
    AQUEDUCT_TOPIC_REPLICATION_FACTOR: '1',
    AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS: '1',
    ...(options.redisClusterNodes
      ? { REDIS_CLUSTER_NODES: options.redisClusterNodes }
      : { REDIS_URL: options.redisUrl }),
    AQUEDUCT_TOPIC: options.topic,
    AQUEDUCT_GROUP_ID: `${options.topic}-group`,
    AQUEDUCT_REDIS_PREFIX: options.redisPrefix,
    AQUEDUCT_FCM_RATE: String(options.aqueduct.rate),
    AQUEDUCT_FCM_BURST: String(options.aqueduct.burst),
    AQUEDUCT_APNS_RATE: String(options.aqueduct.rate),
    AQUEDUCT_APNS_BURST: String(options.aqueduct.burst),
    AQUEDUCT_LIMITER_ENABLED: String(options.limiter ?? true),
    AQUEDUCT_RETRY_BASE_MS: '100',
    LOG_LEVEL: 'info',
    ...options.simulatorEnv,
    ...options.extra,
  };
}
