import { execFile } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, inject, it } from 'vitest';

/**
 * `aqueduct publish` given input it cannot use says so in one line and exits 2, before it connects to
 * Kafka.
 */

const CLI = fileURLToPath(new URL('../../bin/aqueduct.js', import.meta.url));

function publish(args: string[]): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, 'publish', ...args],
      { env: { ...process.env, KAFKA_BROKERS: inject('kafkaBrokers').join(',') }, timeout: 30_000 },
      (error, _stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stderr }),
    );
  });
}

describe('aqueduct publish given input it cannot use', () => {
  it('names a file that does not exist', async () => {
    const file = join(tmpdir(), `aqueduct-no-such-${process.pid}.jsonl`);
    const result = await publish([file]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr.trim()).toBe(
      `aqueduct publish: cannot read ${file}: ENOENT: no such file or directory, stat '${file}'`,
    );
  });

  it('names a directory given as the file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aqueduct-publish-'));
    const result = await publish([dir]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr.trim()).toBe(`aqueduct publish: cannot read ${dir}: it is a directory`);
  });

  it('refuses a file together with --generate', async () => {
    const result = await publish(['events.jsonl', '--generate', '5']);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr.trim()).toBe('aqueduct publish: give a file or --generate N, not both');
  });
});
