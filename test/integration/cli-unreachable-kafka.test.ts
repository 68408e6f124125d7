import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import getPort from 'get-port';
import { describe, expect, it } from 'vitest';

/**
 * A one-shot verb whose brokers do not answer says so while kafkajs retries (about a minute), instead of
 * looking hung. Nothing listens on the port: every connection is refused.
 */

const CLI = fileURLToPath(new URL('../../bin/aqueduct.js', import.meta.url));

/** Runs the CLI until its stderr has a line matching `pattern`; returns the stderr so far and kills it. */
function stderrUntil(args: string[], env: Record<string, string>, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no line matching ${pattern} in 30 s; stderr:\n${stderr}`));
    }, 30_000);
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
      if (pattern.test(stderr)) {
        clearTimeout(timer);
        child.kill('SIGKILL');
        resolve(stderr);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      if (!pattern.test(stderr)) reject(new Error(`exited with ${code} first; stderr:\n${stderr}`));
    });
  });
}

describe('a one-shot verb whose Kafka brokers do not answer', () => {
  for (const args of [
    ['publish', '--generate', '5'],
    ['replay', '--dry-run'],
  ]) {
    it(`aqueduct ${args[0]} says it is waiting, for which brokers and why`, async () => {
      const broker = `127.0.0.1:${await getPort({ host: '127.0.0.1' })}`;
      const stderr = await stderrUntil(args, { KAFKA_BROKERS: broker }, /\n/);
      expect(stderr.trim()).toBe(
        `aqueduct ${args[0]}: waiting for Kafka at ${broker}: Connection error: connect ECONNREFUSED ${broker} (kafkajs retries for about a minute; Ctrl-C to stop)`,
      );
    }, 40_000);
  }
});
