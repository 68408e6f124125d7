import { execFile } from 'node:child_process';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import getPort from 'get-port';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig, redactConfig } from '../../src/config.ts';
import { createKafka } from '../../src/kafka/client.ts';
import { kafkaSecurity } from '../../src/kafka/security.ts';
import { ensureTopicFamily, SINGLE_BROKER_DURABILITY } from '../../src/kafka/topics.ts';
import { TokenBucketLimiter } from '../../src/limiter/index.ts';
import { generateEvents } from '../../src/publish/generate.ts';
import { publishEvents } from '../../src/publish/publisher.ts';
import { createRedis } from '../../src/redis/client.ts';
import { LocalKafka, LocalRedis } from '../../src/services/index.ts';
import { ConfigError } from '../../src/settings.ts';
import { kafkaSecurityOptions, redisConnectionOptions } from '../../src/settings-options.ts';
import { generateCertificate } from '../../src/simulators/certs.ts';
import { type ConsumerProcess, spawnConsumer } from '../../testkit/fleet.ts';
import { type Simulators, startSimulators } from '../../testkit/simulators.ts';

/**
 * The consumer's connection settings against servers that demand them: a private Kafka broker whose
 * second listener is SASL_SSL with SCRAM users (created when the storage is formatted, as KRaft wants),
 * and a private redis-server with an ACL user, requirepass for the default user and a TLS port. Secrets
 * come from files (<NAME>_FILE); they must never show up in a log line or a config dump.
 */

const KAFKA_PASSWORD = 'scram-secret-7f3a9c';
const REDIS_PASSWORD = 'redis-acl-secret-51be';
const DEFAULT_USER_PASSWORD = 'requirepass-secret-0d4e';

let dir: string;
let kafka: LocalKafka;
let redis: LocalRedis;
let saslBroker: string;
let redisTlsPort: number;
const files = { kafkaPassword: '', redisPassword: '', ca: '' };

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'aqueduct-security-'));
  const cert = await generateCertificate();
  files.ca = join(dir, 'ca.pem');
  files.kafkaPassword = join(dir, 'kafka-password');
  files.redisPassword = join(dir, 'redis-password');
  const keystore = join(dir, 'keystore.pem');
  const certFile = join(dir, 'cert.pem');
  const keyFile = join(dir, 'key.pem');
  await Promise.all([
    writeFile(files.ca, cert.certPem),
    writeFile(certFile, cert.certPem),
    writeFile(keyFile, cert.keyPem),
    writeFile(keystore, `${cert.keyPem}\n${cert.certPem}`),
    writeFile(files.kafkaPassword, `${KAFKA_PASSWORD}\n`),
    writeFile(files.redisPassword, `${REDIS_PASSWORD}\n`),
  ]);

  const [port, controllerPort, saslPort] = await Promise.all([
    getPort({ host: '127.0.0.1' }),
    getPort({ host: '127.0.0.1' }),
    getPort({ host: '127.0.0.1' }),
  ]);
  saslBroker = `127.0.0.1:${saslPort}`;
  const scram = 'org.apache.kafka.common.security.scram.ScramLoginModule required;';
  kafka = await LocalKafka.start({
    port,
    controllerPort,
    heapMb: 512,
    scramUsers: [
      { mechanism: 'SCRAM-SHA-256', username: 'aqueduct', password: KAFKA_PASSWORD },
      { mechanism: 'SCRAM-SHA-512', username: 'aqueduct', password: KAFKA_PASSWORD },
    ],
    properties: {
      listeners: `PLAINTEXT://127.0.0.1:${port},SASL_SSL://${saslBroker},CONTROLLER://127.0.0.1:${controllerPort}`,
      'advertised.listeners': `PLAINTEXT://127.0.0.1:${port},SASL_SSL://${saslBroker}`,
      'listener.security.protocol.map': 'CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL',
      'sasl.enabled.mechanisms': 'SCRAM-SHA-256,SCRAM-SHA-512',
      'listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config': scram,
      'listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config': scram,
      'listener.name.sasl_ssl.ssl.keystore.type': 'PEM',
      'listener.name.sasl_ssl.ssl.keystore.location': keystore,
    },
  });

  redisTlsPort = await getPort({ host: '127.0.0.1' });
  redis = await LocalRedis.start({
    password: DEFAULT_USER_PASSWORD,
    args: [
      ...['--user', 'aqueduct', 'on', `>${REDIS_PASSWORD}`, '~*', '&*', '+@all'],
      ...['--tls-port', String(redisTlsPort), '--tls-cert-file', certFile, '--tls-key-file', keyFile],
      ...['--tls-auth-clients', 'no'],
    ],
  });
}, 120_000);

afterAll(async () => {
  await kafka?.stop();
  await redis?.dispose();
});

/** The settings a deployment would give: secrets as files, the CA for both servers. */
function secureEnv(): Record<string, string> {
  return {
    KAFKA_BROKERS: saslBroker,
    KAFKA_SASL_MECHANISM: 'scram-sha-512',
    KAFKA_SASL_USERNAME: 'aqueduct',
    KAFKA_SASL_PASSWORD_FILE: files.kafkaPassword,
    KAFKA_TLS_CA_FILE: files.ca,
    REDIS_URL: `rediss://127.0.0.1:${redisTlsPort}`,
    REDIS_USERNAME: 'aqueduct',
    REDIS_PASSWORD_FILE: files.redisPassword,
    REDIS_TLS_CA_FILE: files.ca,
  };
}

/** A kafkajs client built from `env` as every Aqueduct verb builds it. */
function kafkaFrom(env: Record<string, string>) {
  const config = loadConfig(env);
  return createKafka({
    brokers: config.KAFKA_BROKERS,
    clientId: 'sec',
    extra: kafkaSecurity(kafkaSecurityOptions(config)),
  });
}

describe('connection security from the settings', () => {
  it('connects to Kafka over SASL_SSL with SCRAM (256 and 512) and refuses a wrong password', async () => {
    for (const mechanism of ['scram-sha-256', 'scram-sha-512'] as const) {
      const admin = kafkaFrom({ ...secureEnv(), KAFKA_SASL_MECHANISM: mechanism }).admin();
      await admin.connect();
      expect((await admin.describeCluster()).brokers).toHaveLength(1);
      await admin.disconnect();
    }
    const wrong = loadConfig({ ...secureEnv(), KAFKA_SASL_PASSWORD_FILE: '', KAFKA_SASL_PASSWORD: 'nope' });
    const admin = createKafka({
      brokers: wrong.KAFKA_BROKERS,
      clientId: 'sec',
      extra: { ...kafkaSecurity(kafkaSecurityOptions(wrong)), retry: { retries: 0 } },
    }).admin();
    await expect(admin.connect()).rejects.toThrow(/SASL|authentic/i);
  });

  it('connects to Redis over TLS as an ACL user and acquires tokens; without credentials Redis refuses', async () => {
    const config = loadConfig(secureEnv());
    const client = createRedis(redisConnectionOptions(config), { maxRetriesPerRequest: 1 });
    try {
      expect(await client.acl('WHOAMI')).toBe('aqueduct');
      const limiter = new TokenBucketLimiter(client, { keyPrefix: 'sec' });
      const result = await limiter.acquire([{ name: 'fcm', rate: 10, capacity: 5 }], 3);
      expect(result.granted).toBe(3);
    } finally {
      client.disconnect();
    }
    const anonymous = new Redis(redis.port, '127.0.0.1', {
      maxRetriesPerRequest: 0,
      enableReadyCheck: false,
      retryStrategy: () => null,
    });
    anonymous.on('error', () => {});
    await expect(anonymous.ping()).rejects.toThrow(/NOAUTH/);
    anonymous.disconnect();
  });

  it('runs aqueduct consume end to end on those settings, and no secret reaches its logs', async () => {
    const config = loadConfig(secureEnv());
    const client = kafkaFrom(secureEnv());
    const topic = `secure-${Date.now()}`;
    await ensureTopicFamily(client, topic, 2, SINGLE_BROKER_DURABILITY);
    const events = [...generateEvents({ count: 60, deadTokenRatio: 0.1 })];
    await publishEvents(client, events, { topic });
    let simulators: Simulators | undefined;
    let consumer: ConsumerProcess | undefined;
    try {
      simulators = await startSimulators({ rate: 1000, burst: 1000 });
      const logFile = join(dir, 'consumer.log');
      consumer = spawnConsumer(
        'secure',
        {
          ...secureEnv(),
          AQUEDUCT_TOPIC: topic,
          AQUEDUCT_GROUP_ID: `${topic}-group`,
          AQUEDUCT_REDIS_PREFIX: 'secure',
          LOG_LEVEL: 'debug',
          ...simulators.env,
        },
        logFile,
      );
      const deadline = Date.now() + 60_000;
      const sims = simulators;
      const finished = () =>
        sims.accepted().ids.size + sims.fcm.stats().invalidTokens + sims.apns.stats().invalidTokens;
      while (finished() < events.length && Date.now() < deadline && consumer.ended === undefined)
        await sleep(200);
      expect(finished()).toBe(events.length);
      expect(await consumer.stop()).toBe(0);

      // The limiter worked through the ACL user over TLS: its buckets are in that Redis.
      const admin = createRedis(redisConnectionOptions(config));
      expect(await admin.keys('secure:{fcm}:bucket*')).not.toHaveLength(0);
      admin.disconnect();

      const log = await readFile(logFile, 'utf8');
      expect(log).toContain('"KAFKA_SASL_PASSWORD":"***"');
      for (const secret of [KAFKA_PASSWORD, REDIS_PASSWORD, DEFAULT_USER_PASSWORD])
        expect(log).not.toContain(secret);
    } finally {
      await consumer?.kill();
      await simulators?.close();
    }
  });
  it('runs aqueduct publish on those settings', async () => {
    const topic = `secure-publish-${Date.now()}`;
    const cli = fileURLToPath(new URL('../../bin/aqueduct.js', import.meta.url));
    const args = ['publish', '--generate', '25', '--create-topic', '--partitions', '2', '--topic', topic];
    const { code, stdout, stderr } = await new Promise<{ code: number; stdout: string; stderr: string }>(
      (resolve) =>
        execFile(
          process.execPath,
          [cli, ...args],
          {
            env: {
              ...process.env,
              ...secureEnv(),
              AQUEDUCT_TOPIC_REPLICATION_FACTOR: '1',
              AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS: '1',
            },
            timeout: 60_000,
          },
          (error, out, err) =>
            resolve({
              code: error ? (typeof error.code === 'number' ? error.code : -1) : 0,
              stdout: out,
              stderr: err,
            }),
        ),
    );
    expect(code, stderr).toBe(0);
    expect(JSON.parse(stdout.trim().split('\n').at(-1) ?? '')).toMatchObject({
      published: 25,
      invalid: 0,
      topic,
    });
    expect(stderr).not.toContain(KAFKA_PASSWORD);

    const admin = kafkaFrom(secureEnv()).admin();
    await admin.connect();
    try {
      const offsets = await admin.fetchTopicOffsets(topic);
      expect(offsets.reduce((sum, p) => sum + Number(p.high), 0)).toBe(25);
    } finally {
      await admin.disconnect();
    }
  }, 60_000);
});

describe('secret settings', () => {
  it('come from <NAME>_FILE, never both ways, and are masked in config dumps', async () => {
    const config = loadConfig({
      REDIS_PASSWORD_FILE: files.redisPassword,
      KAFKA_SASL_MECHANISM: 'plain',
      KAFKA_SASL_USERNAME: 'aqueduct',
      KAFKA_SASL_PASSWORD: KAFKA_PASSWORD,
    });
    expect(config.REDIS_PASSWORD).toBe(REDIS_PASSWORD); // trailing newline dropped
    const dump = JSON.stringify(redactConfig(config));
    expect(dump).not.toContain(REDIS_PASSWORD);
    expect(dump).not.toContain(KAFKA_PASSWORD);
    expect(JSON.stringify(redactConfig(loadConfig({ REDIS_URL: 'redis://u:pa:ss@h:1' })))).not.toContain(
      'pa:ss',
    );
    expect(() => loadConfig({ REDIS_URL: 'redis://:x@h:1', REDIS_PASSWORD: 'y' })).toThrow(/one way only/);
    expect(() => loadConfig({ REDIS_PASSWORD: 'x', REDIS_PASSWORD_FILE: files.redisPassword })).toThrow(
      ConfigError,
    );
    expect(() => loadConfig({ KAFKA_SASL_PASSWORD_FILE: join(dir, 'missing') })).toThrow(
      /KAFKA_SASL_PASSWORD_FILE=.*ENOENT/,
    );
    expect(() => loadConfig({ KAFKA_SASL_MECHANISM: 'scram-sha-256' })).toThrow(/KAFKA_SASL_USERNAME/);
  });
});
