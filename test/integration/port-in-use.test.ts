import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { hashApiKey } from '../../src/gateway/api-keys.ts';

/**
 * A second `aqueduct consume` (or `serve`) on a host where its port is taken: a one-line error that names
 * the setting, and a non-zero exit, never Node's uncaught EADDRINUSE with a stack trace.
 */

const CLI = fileURLToPath(new URL('../../bin/aqueduct.js', import.meta.url));

let held: Server;
let port: number;
beforeAll(async () => {
  held = createServer();
  await new Promise<void>((resolve) => held.listen(0, '0.0.0.0', () => resolve()));
  port = (held.address() as { port: number }).port;
});
afterAll(async () => {
  await new Promise((resolve) => held.close(resolve));
});

function run(args: string[], env: Record<string, string>): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...process.env, LOG_LEVEL: 'silent', ...env }, timeout: 30_000 },
      (error, _stdout, stderr) => {
        const code = error ? ((error as { code?: unknown }).code as number) : 0;
        resolve({ code, stderr });
      },
    );
  });
}

function expectOneLineNaming(result: { code: number; stderr: string }, setting: string): void {
  expect(result.code).toBe(2);
  const lines = result.stderr.trim().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toContain(`${setting}=${port}`);
  expect(lines[0]).toContain('already in use');
  expect(result.stderr).not.toMatch(/\n\s+at /);
}

describe('a port that is already taken', () => {
  it('aqueduct consume names AQUEDUCT_HTTP_PORT and exits 2', async () => {
    const result = await run(['consume'], {
      AQUEDUCT_HTTP_PORT: String(port),
      KAFKA_BROKERS: inject('kafkaBrokers').join(','),
      REDIS_URL: inject('redisUrl'),
    });
    expectOneLineNaming(result, 'AQUEDUCT_HTTP_PORT');
  });

  it('aqueduct serve names AQUEDUCT_GATEWAY_PORT and exits 2', async () => {
    const result = await run(['serve'], {
      AQUEDUCT_GATEWAY_PORT: String(port),
      AQUEDUCT_GATEWAY_ADMIN_PORT: '0',
      AQUEDUCT_GATEWAY_HOST: '0.0.0.0',
      AQUEDUCT_GATEWAY_API_KEYS: JSON.stringify({ [hashApiKey('port-test-key')]: 'acme' }),
      KAFKA_BROKERS: inject('kafkaBrokers').join(','),
      REDIS_URL: inject('redisUrl'),
    });
    expectOneLineNaming(result, 'AQUEDUCT_GATEWAY_PORT');
  });
});
