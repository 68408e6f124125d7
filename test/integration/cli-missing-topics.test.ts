import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { describe, expect, inject, it } from 'vitest';

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
