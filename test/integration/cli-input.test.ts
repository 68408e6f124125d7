import { execFile, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, inject, it } from 'vitest';
import { createKafka } from '../../src/kafka/client.ts';
import { readTopic } from '../../testkit/topics.ts';

/**
 * A verb given input it cannot use says so before it connects to anything: `aqueduct publish` a file it
 * cannot read, `aqueduct replay` a reason kind that no dead letter carries.
 */

const CLI = fileURLToPath(new URL('../../bin/aqueduct.js', import.meta.url));

function run(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      {
        env: {
          ...process.env,
          KAFKA_BROKERS: inject('kafkaBrokers').join(','),
          AQUEDUCT_TOPIC_REPLICATION_FACTOR: '1',
          AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS: '1',
          ...env,
        },
        timeout: 30_000,
      },
      (error, stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr }),
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

  it.each([
    [
      '--tenants',
      'acme,a b',
      'comma-separated tenants, each of letters, digits, dot, dash and underscore (at most 64)',
    ],
    ['--topic', 'my topic', 'a Kafka topic name: letters, digits, dot, dash and underscore (at most 200)'],
  ])(
    'refuses %s %j before it connects, rather than generate events no consumer takes',
    async (flag, value, why) => {
      const result = await run(['publish', '--generate', '5', flag, value]);
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr).toContain(`argument '${value}' is invalid. ${why}`);
    },
  );

  it('refuses a file together with --generate', async () => {
    const result = await run(['publish', 'events.jsonl', '--generate', '5']);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr.trim()).toBe('aqueduct publish: give a file or --generate N, not both');
  });
});

describe('aqueduct called wrongly', () => {
  it.each([
    [['consume', '--no-such-flag'], "error: unknown option '--no-such-flag'"],
    [['consum'], "error: unknown command 'consum'"],
    [['publish', '--generate'], "error: option '--generate <n>' argument missing"],
    [[], 'Usage: aqueduct [options] [command]'],
  ])('%j exits 2, as a refused setting does, and not 1 as a verb that ran and failed', async (args, says) => {
    const result = await run(args);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(says);
  });

  it('--help and --version exit 0', async () => {
    expect((await run(['--help'])).code).toBe(0);
    expect((await run(['consume', '--help'])).code).toBe(0);
    expect((await run(['--version'])).code).toBe(0);
  });
});

describe('aqueduct inspect --watch given an interval no timer can wait', () => {
  it('refuses it rather than refresh every millisecond', async () => {
    const result = await run(['inspect', '--watch', '--interval', '3000000000']);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(
      "error: option '--interval <ms>' argument '3000000000' is invalid. must be an integer number of ms from 50 to 2147483647.",
    );
    expect(result.stderr).not.toContain('TimeoutOverflowWarning');
  });
});

describe('a verb whose settings name a file it cannot read', () => {
  const missing = join(tmpdir(), `aqueduct-no-such-${process.pid}.pem`);

  it.each([
    ['publish', ['publish', '--generate', '1']],
    ['replay', ['replay', '--dry-run']],
  ])('aqueduct %s says which setting in one line and exits 2', async (verb, args) => {
    const result = await run(args, { KAFKA_TLS_CA_FILE: missing });
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr.trim()).toBe(`aqueduct ${verb}: cannot read KAFKA_TLS_CA_FILE=${missing} (ENOENT)`);
  });

  it('aqueduct consume says which setting in one line and exits 2, as for any refused setting', async () => {
    const result = await run(['consume'], {
      AQUEDUCT_HTTP_PORT: '0',
      APNS_KEY_FILE: missing,
      APNS_KEY_ID: 'KEY1234567',
      APNS_TEAM_ID: 'TEAM123456',
      LOG_LEVEL: 'silent',
    });
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr.trim()).toBe('aqueduct consume: apns: APNS_KEY_FILE cannot be read (ENOENT)');
  });
});

describe('aqueduct serve given a host it cannot listen on', () => {
  it.each([
    ['192.0.2.1', 'EADDRNOTAVAIL'],
    ['no such host', 'ENOTFOUND'],
  ])('names AQUEDUCT_GATEWAY_HOST=%s in one line and exits 2', async (host, code) => {
    const result = await run(['serve'], {
      AQUEDUCT_GATEWAY_HOST: host,
      AQUEDUCT_GATEWAY_PORT: '0',
      AQUEDUCT_GATEWAY_ADMIN_PORT: '0',
      AQUEDUCT_GATEWAY_API_KEYS: JSON.stringify({ ['a'.repeat(64)]: 'acme' }),
      LOG_LEVEL: 'silent',
    });
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr.trim()).toBe(
      `aqueduct serve: AQUEDUCT_GATEWAY_HOST=${host}: cannot listen there (${code}): give an address of this host, or 0.0.0.0 for all of them`,
    );
  });
});

describe('aqueduct simulate given a delay no timer can wait', () => {
  it('refuses --slow-ms above it rather than answer the slow requests at once', async () => {
    const result = await run(['simulate', 'fcm', '--port', '0', '--slow-ms', '3000000000']);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(
      "error: option '--slow-ms <ms>' argument '3000000000' is invalid. a positive number of ms, at most 2147483647",
    );
  });
});

describe('aqueduct replay given a reason kind no dead letter carries', () => {
  it('names it and lists the kinds, rather than replay nothing', async () => {
    const result = await run(['replay', '--dry-run', '--kind', 'max-attempts,rejectd']);
    expect(result.code, result.stderr).toBe(2);
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

describe('aqueduct publish reading a file as bytes', () => {
  // A file as Windows tools write it (a byte order mark, CRLF), with a Latin-1 line among UTF-8 ones.
  const valid = (id: string, title: string) =>
    JSON.stringify({ id, platform: 'fcm', token: `tok-${id}`, notification: { title, body: 'b' } });
  const file = async () => {
    const path = join(await mkdtemp(join(tmpdir(), 'aqueduct-publish-')), 'events.jsonl');
    await writeFile(
      path,
      Buffer.concat([
        Buffer.from(`\ufeff${valid('bom-1', 'Café')}\r\n\r\n`, 'utf8'),
        Buffer.from(`${valid('latin-1', 'Café')}\r\n`, 'latin1'),
        Buffer.from(`${valid('utf-2', '🚚')}\r\n`, 'utf8'),
      ]),
    );
    return path;
  };

  it('publishes the UTF-8 lines byte for byte and refuses the one that is not UTF-8, by its line', async () => {
    const topic = `cli-bytes-${randomUUID().slice(0, 8)}`;
    const result = await run(['publish', await file(), '--topic', topic, '--create-topic', '-q']);
    expect(result.code, result.stderr).toBe(1);
    // Line 2 is blank: the refusal names the line an editor shows, not the event's number.
    expect(result.stderr).toContain('skipped line 3: not UTF-8');
    expect(JSON.parse(result.stdout.trim())).toMatchObject({ published: 2, invalid: 1 });
    const values = (
      await readTopic(createKafka({ clientId: 't', brokers: inject('kafkaBrokers') }), topic)
    ).map((m) => m.value?.toString('utf8'));
    expect(values.sort()).toEqual([valid('bom-1', 'Café'), valid('utf-2', '🚚')].sort());
  });

  it('sends every line as it is with --no-validate, so the consumer can be tested with bad bytes', async () => {
    const topic = `cli-raw-${randomUUID().slice(0, 8)}`;
    const result = await run([
      'publish',
      await file(),
      '--topic',
      topic,
      '--create-topic',
      '--no-validate',
      '-q',
    ]);
    expect(result.code, result.stderr).toBe(0);
    const values = (
      await readTopic(createKafka({ clientId: 't', brokers: inject('kafkaBrokers') }), topic)
    ).map((m) => m.value);
    expect(values).toContainEqual(Buffer.from(valid('latin-1', 'Café'), 'latin1'));
    expect(values).toHaveLength(3);
  });
});

describe('aqueduct publish stopped by Ctrl-C', () => {
  it('publishes what it read, says how far that was, and exits 130', async () => {
    const topic = `cli-stop-${randomUUID().slice(0, 8)}`;
    const event = (i: number) =>
      JSON.stringify({
        id: `stop-${i}`,
        platform: 'fcm',
        token: `tok-${i}`,
        notification: { title: 't', body: 'b' },
      });
    const child = spawn(process.execPath, [CLI, 'publish', '--topic', topic, '--create-topic'], {
      env: {
        ...process.env,
        KAFKA_BROKERS: inject('kafkaBrokers').join(','),
        AQUEDUCT_TOPIC_REPLICATION_FACTOR: '1',
        AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS: '1',
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString('utf8');
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    // 600 lines and stdin left open: the first 500 go out as one batch (its progress line is the cue),
    // the rest wait for more input, as a producer piping into publish would.
    const progressed = new Promise<void>((resolve) =>
      child.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk.toString('utf8');
        if (stderr.includes('published 500')) resolve();
      }),
    );
    child.stdin.write(`${Array.from({ length: 600 }, (_, i) => event(i)).join('\n')}\n`);
    try {
      await Promise.race([progressed, exited.then(() => Promise.reject(new Error(stderr)))]);
      child.kill('SIGINT');
      expect(await exited, stderr).toBe(130);
      const summary = JSON.parse(stdout.trim()) as { published: number; interrupted: boolean; lines: number };
      expect(summary).toMatchObject({ interrupted: true, invalid: 0 });
      expect(summary.published).toBeGreaterThanOrEqual(500);
      expect(summary.published).toBe(summary.lines);
      const published = await readTopic(
        createKafka({ clientId: 't', brokers: inject('kafkaBrokers') }),
        topic,
      );
      expect(published).toHaveLength(summary.published);
    } finally {
      child.stdin.destroy();
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });
});
