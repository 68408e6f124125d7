import { execFile, spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, inject, it } from 'vitest';
import { ensureTopics, SINGLE_BROKER_DURABILITY } from '../../src/kafka/topics.ts';
import { testKafka } from '../helpers/kafka.ts';

/**
 * A verb pointed at a topic that does not exist says so at once and exits 1. kafkajs alone retries a
 * produce to, or an offset fetch of, an unknown topic as if it might appear: `publish` and `replay`
 * would wait silently.
 */

const CLI = fileURLToPath(new URL('../../bin/aqueduct.js', import.meta.url));

function run(args: string[], env: Record<string, string>): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...process.env, ...env }, timeout: 60_000 },
      (error, _stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, stderr });
      },
    );
  });
}

describe('a verb pointed at a topic that does not exist', () => {
  const env = () => ({ KAFKA_BROKERS: inject('kafkaBrokers').join(','), REDIS_URL: inject('redisUrl') });

  it('aqueduct publish without --create-topic names the topic and the flag', async () => {
    const topic = `test-nosuch-${randomUUID().slice(0, 8)}`;
    const result = await run(['publish', '--generate', '5', '--topic', topic], env());
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr.trim()).toBe(
      `aqueduct publish: topic "${topic}" does not exist: add --create-topic (and --partitions N), or name another with --topic or AQUEDUCT_TOPIC`,
    );
  }, 60_000);

  it('aqueduct replay names the topics and AQUEDUCT_TOPIC', async () => {
    const topic = `test-nosuch-${randomUUID().slice(0, 8)}`;
    const result = await run(['replay', '--dry-run'], { ...env(), AQUEDUCT_TOPIC: topic });
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr.trim()).toBe(
      `aqueduct replay: "${topic}.dlq" and "${topic}" do not exist: check AQUEDUCT_TOPIC (now "${topic}"); a consumer creates the dead-letter topic when it starts`,
    );
  }, 60_000);
});

describe('aqueduct serve pointed at a topic that does not exist', () => {
  it('logs an error naming the topic, answers 503 unavailable naming it, and is ready only once the topic is created', async () => {
    const topic = `test-nosuch-${randomUUID().slice(0, 8)}`;
    const key = 'k-missing-topic-test';
    const child = spawn(process.execPath, [CLI, 'serve'], {
      env: {
        ...process.env,
        KAFKA_BROKERS: inject('kafkaBrokers').join(','),
        REDIS_URL: inject('redisUrl'),
        AQUEDUCT_TOPIC: topic,
        AQUEDUCT_GATEWAY_PORT: '0',
        AQUEDUCT_GATEWAY_ADMIN_PORT: '0',
        AQUEDUCT_GATEWAY_HOST: '127.0.0.1',
        AQUEDUCT_GATEWAY_API_KEYS: JSON.stringify({
          [createHash('sha256').update(key).digest('hex')]: 'acme',
        }),
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      const logs: Array<Record<string, unknown>> = [];
      const listening = new Promise<Record<string, unknown>>((resolve, reject) => {
        let buffer = '';
        child.stdout.on('data', (chunk: Buffer) => {
          buffer += chunk.toString('utf8');
          for (let newline = buffer.indexOf('\n'); newline >= 0; newline = buffer.indexOf('\n')) {
            const entry = JSON.parse(buffer.slice(0, newline)) as Record<string, unknown>;
            buffer = buffer.slice(newline + 1);
            logs.push(entry);
            if (entry.msg === 'gateway listening') resolve(entry);
          }
        });
        child.once('exit', (code) => reject(new Error(`aqueduct serve exited with ${code}`)));
      });
      const { url, adminUrl } = (await listening) as { url: string; adminUrl: string };
      expect(logs.filter((line) => line.level === 50).map((line) => line.msg)).toContain(
        `topic "${topic}" does not exist: requests are answered 503 until it is created (aqueduct publish --create-topic --partitions N), or set AQUEDUCT_TOPIC`,
      );
      // Its producers are connected, but not ready: every write would be refused.
      expect((await fetch(`${adminUrl}/readyz`)).status).toBe(503);
      const push = () =>
        fetch(`${url}/v1/notifications`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            platform: 'fcm',
            token: 'tok-abcdefgh',
            notification: { title: 't', body: 'b' },
          }),
        });
      const answer = await push();
      expect(answer.status).toBe(503);
      // Refused outright, so nothing was written: not the outcome-unknown of a write left unanswered.
      const body = (await answer.json()) as { error: string; message: string };
      expect(body.error).toBe('unavailable');
      expect(body.message).toContain(`Kafka refused the write: topic "${topic}" does not exist`);
      expect((await fetch(`${adminUrl}/readyz`)).status).toBe(503);
      // Past the producers' reconnect (2 s): still unready, for nothing but the topic's metadata has changed.
      await sleep(3000);
      expect((await fetch(`${adminUrl}/readyz`)).status).toBe(503);

      // Once the topic is created, the gateway sees it without being sent anything, and takes events.
      const admin = testKafka().admin();
      await admin.connect();
      await ensureTopics(admin, [{ topic, numPartitions: 1 }], SINGLE_BROKER_DURABILITY);
      await admin.disconnect();
      let ready = 0;
      for (let i = 0; i < 100 && ready !== 200; i++) {
        await sleep(100);
        ready = (await fetch(`${adminUrl}/readyz`)).status;
      }
      expect(ready).toBe(200);
      expect((await push()).status).toBe(202);
    } finally {
      child.kill('SIGKILL');
    }
  }, 60_000);
});
