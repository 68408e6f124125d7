import { execFile } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, inject, it } from 'vitest';

/**
 * A verb given input it cannot use says so before it connects to anything: `aqueduct publish` a file it
 * cannot read, `aqueduct replay` a reason kind that no dead letter carries.
 */

const CLI = fileURLToPath(new URL('../../bin/aqueduct.js', import.meta.url));

function run(args: string[]): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...process.env, KAFKA_BROKERS: inject('kafkaBrokers').join(',') }, timeout: 30_000 },
      (error, _stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stderr }),
    );
  });
}

describe('aqueduct publish given input it cannot use', () => {
  it('names a file that does not exist', async () => {
    const file = join(tmpdir(), `aqueduct-no-such-${process.pid}.jsonl`);
    const result = await run(['publish', file]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr.trim()).toBe(
      `aqueduct publish: cannot read ${file}: ENOENT: no such file or directory, stat '${file}'`,
    );
  });

  it('names a directory given as the file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aqueduct-publish-'));
    const result = await run(['publish', dir]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr.trim()).toBe(`aqueduct publish: cannot read ${dir}: it is a directory`);
  });

  it('refuses a file together with --generate', async () => {
    const result = await run(['publish', 'events.jsonl', '--generate', '5']);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr.trim()).toBe('aqueduct publish: give a file or --generate N, not both');
  });
});

describe('aqueduct replay given a reason kind no dead letter carries', () => {
  it('names it and lists the kinds, rather than replay nothing', async () => {
    const result = await run(['replay', '--dry-run', '--kind', 'max-attempts,rejectd']);
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr).toContain(
      "error: option '--kind <kinds>' argument 'max-attempts,rejectd' is invalid. unknown rejectd; the reason kinds are empty, too-large, invalid-utf8, invalid-json, unknown-schema-version, invalid-event, rejected, max-attempts",
    );
  });
});

describe('npm run demo given an option it does not know', () => {
  it('says which, with the usage, and starts nothing', async () => {
    const demo = fileURLToPath(new URL('../../testkit/demo.ts', import.meta.url));
    const result = await new Promise<{ code: number; stderr: string }>((resolve) => {
      execFile(process.execPath, [demo, '--event', '5'], { timeout: 30_000 }, (error, _stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stderr }),
      );
    });
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr.trim()).toBe(
      "Unknown option '--event'\nusage: npm run demo -- [--events N] [--consumers N] [--partitions N] [--tenants a,b,…] [--json]",
    );
  });
});
