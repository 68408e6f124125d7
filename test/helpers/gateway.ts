import { spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import type { Kafka } from 'kafkajs';
import { inject } from 'vitest';
import { hashApiKey } from '../../src/gateway/api-keys.ts';
import { loadGatewayConfig } from '../../src/gateway/config.ts';
import { type Gateway, startGateway } from '../../src/gateway/server.ts';
import { createKafka } from '../../src/kafka/client.ts';
import { ensureTopics, SINGLE_BROKER_DURABILITY } from '../../src/kafka/topics.ts';
import { createLogger } from '../../src/log.ts';

/** Options of {@link startTestGateway}. */
export interface TestGatewayOptions {
  /** API key → tenant (the gateway is given their hashes). */
  keys: Record<string, string>;
  /** Partitions of the fresh topic (default 3). */
  partitions?: number;
  /** Brokers (default: the run's). */
  brokers?: string[];
  /** More settings (AQUEDUCT_TENANT_RATE, AQUEDUCT_GATEWAY_MAX_BATCH, …). */
  env?: Record<string, string>;
}

/** A gateway on a fresh topic, a Redis key prefix of its own, and a way to call it. */
export interface TestGateway {
  gateway: Gateway;
  topic: string;
  kafka: Kafka;
  post(body: unknown, options?: { key?: string; headers?: Record<string, string> }): Promise<GatewayAnswer>;
  close(): Promise<void>;
}

/** A response, read. */
export interface GatewayAnswer {
  status: number;
  headers: Headers;
  body: { ids?: string[]; error?: string; message?: string };
}

/** Starts an in-process gateway (`startGateway`, what `aqueduct serve` runs) for a test. */
export async function startTestGateway(options: TestGatewayOptions): Promise<TestGateway> {
  const brokers = options.brokers ?? inject('kafkaBrokers');
  const topic = `gw-${randomUUID().slice(0, 8)}`;
  const kafka = createKafka({ brokers, clientId: 'aqueduct-test' });
  const admin = kafka.admin();
  await admin.connect();
  await ensureTopics(admin, [{ topic, numPartitions: options.partitions ?? 3 }], SINGLE_BROKER_DURABILITY);
  await admin.disconnect();
  const prefix = `aqt-gw-${randomUUID().slice(0, 8)}`;
  const config = loadGatewayConfig({
    KAFKA_BROKERS: brokers.join(','),
    AQUEDUCT_TOPIC_REPLICATION_FACTOR: '1',
    AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS: '1',
    REDIS_URL: inject('redisUrl'),
    AQUEDUCT_REDIS_PREFIX: prefix,
    AQUEDUCT_TOPIC: topic,
    AQUEDUCT_GATEWAY_PORT: '0',
    AQUEDUCT_GATEWAY_ADMIN_PORT: '0',
    AQUEDUCT_GATEWAY_HOST: '127.0.0.1',
    AQUEDUCT_GATEWAY_API_KEYS: JSON.stringify(
      Object.fromEntries(Object.entries(options.keys).map(([key, tenant]) => [hashApiKey(key), tenant])),
    ),
    ...options.env,
  });
  const gateway = await startGateway(config, { logger: createLogger('silent'), defaultMetrics: false });
  return {
    gateway,
    topic,
    kafka,
    async post(body, { key, headers = {} } = {}) {
      const response = await fetch(`${gateway.url}/v1/notifications`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          ...(key ? { authorization: `Bearer ${key}` } : {}),
          ...headers,
        },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });
      return {
        status: response.status,
        headers: response.headers,
        body: (await response.json()) as GatewayAnswer['body'],
      };
    },
    async close() {
      await gateway.close();
      // The run's Redis may be shared: delete only this gateway's keys.
      const redis = new Redis(inject('redisUrl'));
      let cursor = '0';
      do {
        const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 500);
        if (keys.length > 0) await redis.del(...keys);
        cursor = next;
      } while (cursor !== '0');
      redis.disconnect();
    },
  };
}

/**
 * A valid event for `token`, with optional extra fields: an FCM event with that token when its length is
 * even, else an APNs event whose token is the hex SHA-256 of it (APNs tokens are hex).
 */
export function sampleEvent(token: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const fcm = token.length % 2 === 0;
  return {
    platform: fcm ? 'fcm' : 'apns',
    token: fcm ? token : createHash('sha256').update(token).digest('hex'),
    notification: { title: 'Order shipped', body: `Parcel for ${token.slice(0, 4)} is on its way` },
    ...extra,
  };
}

/** An `aqueduct serve` process started by a test. */
export interface GatewayProcess {
  url: string;
  /** Every JSON log line it printed so far. */
  logs: Array<Record<string, unknown>>;
  /** SIGTERM, and the exit code once it is gone. */
  stop(): Promise<number | string>;
}

const CLI = fileURLToPath(new URL('../../bin/aqueduct.js', import.meta.url));

/** Spawns `node bin/aqueduct.js serve` on a free port and waits until it listens. */
export async function spawnGateway(env: Record<string, string>): Promise<GatewayProcess> {
  const child = spawn(process.execPath, [CLI, 'serve'], {
    env: {
      ...process.env,
      AQUEDUCT_GATEWAY_PORT: '0',
      AQUEDUCT_GATEWAY_ADMIN_PORT: '0',
      AQUEDUCT_GATEWAY_HOST: '127.0.0.1',
      AQUEDUCT_TOPIC_REPLICATION_FACTOR: '1',
      AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS: '1',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const ensureGone = () => child.kill('SIGKILL');
  process.once('exit', ensureGone);
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => {
      process.removeListener('exit', ensureGone);
      resolve(code ?? signal ?? 'unknown');
    });
  });
  const logs: Array<Record<string, unknown>> = [];
  let output = '';
  const url = new Promise<string>((resolve, reject) => {
    let buffer = '';
    const onData = (chunk: Buffer) => {
      buffer += chunk.toString('utf8');
      output = `${output}${chunk.toString('utf8')}`.slice(-4000);
      for (let newline = buffer.indexOf('\n'); newline >= 0; newline = buffer.indexOf('\n')) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (!line.startsWith('{')) continue;
        try {
          const entry = JSON.parse(line) as Record<string, unknown>;
          logs.push(entry);
          if (entry.msg === 'gateway listening') resolve(String(entry.url));
        } catch {
          // not a log line
        }
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    void exited.then((code) =>
      reject(new Error(`aqueduct serve exited (${code}) before listening:\n${output}`)),
    );
  });
  return {
    url: await url,
    logs,
    stop: () => {
      child.kill('SIGTERM');
      return exited;
    },
  };
}

/**
 * Sends `request` as is on a new connection (then half-closes it, with `halfClose`); what the server
 * wrote before it closed (10 s at most).
 */
export function sendRaw(
  port: number,
  request: string,
  options: { halfClose?: boolean } = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(request);
      if (options.halfClose) socket.end();
    });
    let response = '';
    const giveUp = setTimeout(() => {
      socket.destroy();
      reject(new Error(`the server kept the connection open for 10 s; it wrote: ${response}`));
    }, 10_000);
    socket.on('data', (chunk) => {
      response += chunk.toString('utf8');
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(giveUp);
      resolve(response);
    });
  });
}
