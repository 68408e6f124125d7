import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { createProviders } from '../../src/providers/index.ts';
import { providersOptions } from '../../src/settings-options.ts';
import { pushRequest, tempFiles } from '../helpers/provider-fixtures.ts';

const bin = fileURLToPath(new URL('../../bin/aqueduct.js', import.meta.url));

/** `aqueduct simulate …` as a child process, with its output collected line by line. */
function simulate(args: string[]) {
  const child = spawn(process.execPath, [bin, 'simulate', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const out: string[] = [];
  const err: string[] = [];
  const waiters: Array<() => void> = [];
  const collect = (lines: string[]) => (chunk: Buffer) => {
    lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
    for (const wake of waiters.splice(0)) wake();
  };
  child.stdout?.on('data', collect(out));
  child.stderr?.on('data', collect(err));
  child.on('exit', () => {
    for (const wake of waiters.splice(0)) wake();
  });
  /** Resolves once `predicate` holds for the output so far (the test's own timeout bounds the wait). */
  const until = async (predicate: () => boolean): Promise<void> => {
    while (!predicate()) {
      if (child.exitCode !== null) throw new Error(`simulator exited ${child.exitCode}:\n${err.join('\n')}`);
      await new Promise<void>((resolve) => waiters.push(resolve));
    }
  };
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, out, err, until, exited };
}

const running: ChildProcess[] = [];
afterEach(() => {
  for (const child of running.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
});

/** `export KEY=value` lines → an environment. */
function exportsOf(lines: string[]): Record<string, string> {
  return Object.fromEntries(
    lines
      .filter((line) => line.startsWith('export '))
      .map((line) => line.slice('export '.length).split(/=(.*)/s).slice(0, 2) as [string, string]),
  );
}

describe('aqueduct simulate (command line)', () => {
  it('fcm: prints where it listens and the env for Aqueduct, serves pushes, logs a summary per second, stops on SIGTERM', async () => {
    const files = tempFiles();
    const certDir = join(files.dir, 'certs');
    const sim = simulate([
      'fcm',
      '--port',
      '0',
      '--rate',
      '800',
      '--burst',
      '2000',
      '--device-rate',
      '0.001',
      '--device-burst',
      '1',
      '--cert-dir',
      certDir,
      '--host',
      '127.0.0.1',
    ]);
    running.push(sim.child);
    try {
      await sim.until(() => sim.out.filter((line) => line.startsWith('export ')).length === 3);
      const env = exportsOf(sim.out);
      expect(Object.keys(env).sort()).toEqual(['FCM_CA_FILE', 'FCM_ENDPOINT', 'FCM_PROJECT_ID']);
      expect(env.FCM_CA_FILE).toBe(`${certDir}/fcm.pem`);
      expect(sim.err.join('\n')).toMatch(
        /fcm simulator listening on https:\/\/127\.0\.0\.1:\d+ .*rate 800\/s, burst 2000 · per device 0\.001\/s, burst 1/,
      );

      const providers = createProviders(providersOptions(loadConfig(env)));
      try {
        const outcomes = await providers.fcm.send([
          pushRequest(),
          pushRequest(),
          pushRequest({ token: 'dead-x' }),
        ]);
        expect(outcomes.map((o) => o.kind)).toEqual(['delivered', 'delivered', 'invalid-token']);
        // --device-rate: a second push to the same device within its limit is refused for that device.
        const again = await providers.fcm.send([pushRequest({ token: 'dead-x' })]);
        expect(again).toMatchObject([{ kind: 'retry', throttled: true, scope: 'device' }]);
      } finally {
        await providers.fcm.close();
        await providers.apns.close();
      }
      await sim.until(() =>
        sim.err.some((line) => /^fcm-sim .*accepted \d+\/s \(total 2\) · 429s 0 · errors 0/.test(line)),
      );
      await sim.until(() =>
        sim.err.some((line) => /^fcm-sim .*total 2\) · 429s 0 · .*· device 429s 1$/.test(line)),
      );

      sim.child.kill('SIGTERM');
      expect(await sim.exited).toBe(0);
      expect(sim.err.at(-1)).toMatch(/fcm simulator stopping: .*"accepted":2.*"invalidTokens":1/);
    } finally {
      files.cleanup();
    }
  });

  it('fcm --http2-only: refuses a handshake that offers HTTP/1.1 alone, and Aqueduct, warmed up as the consumer does, delivers to it', async () => {
    const sim = simulate(['fcm', '--port', '0', '--host', '127.0.0.1', '--http2-only', '--quiet']);
    running.push(sim.child);
    await sim.until(() => sim.out.filter((line) => line.startsWith('export ')).length === 3);
    const env = exportsOf(sim.out);
    const endpoint = new URL(env.FCM_ENDPOINT as string);
    const handshake = await new Promise<string>((resolve) => {
      const socket = tls.connect({
        host: endpoint.hostname,
        port: Number(endpoint.port),
        ca: readFileSync(env.FCM_CA_FILE as string),
        ALPNProtocols: ['http/1.1'],
      });
      socket.once('secureConnect', () => {
        socket.destroy();
        resolve(`connected: ${socket.alpnProtocol}`);
      });
      socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
    });
    expect(handshake).toBe('ERR_SSL_TLSV1_ALERT_NO_APPLICATION_PROTOCOL');
    const providers = createProviders(providersOptions(loadConfig(env)));
    try {
      // Warmed up as the consumer does: the warm-up takes the refused first handshake.
      expect(await providers.fcm.warmUp?.()).toBeGreaterThan(0);
      expect((await providers.fcm.send([pushRequest()])).map((o) => o.kind)).toEqual(['delivered']);
    } finally {
      await providers.fcm.close();
      await providers.apns.close();
    }
    sim.child.kill('SIGTERM');
    expect(await sim.exited).toBe(0);
    expect(sim.err.at(-1)).toMatch(/fcm simulator stopping: .*"accepted":1/);
  });

  it('apns: same, with /stats on the plain-HTTP stats port', async () => {
    const sim = simulate([
      'apns',
      '--port',
      '0',
      '--stats-port',
      '0',
      '--host',
      '127.0.0.1',
      '--rate',
      '0.01',
      '--burst',
      '2',
    ]);
    running.push(sim.child);
    await sim.until(() => sim.out.filter((line) => line.startsWith('export ')).length === 2);
    const env = exportsOf(sim.out);
    expect(Object.keys(env).sort()).toEqual(['APNS_CA_FILE', 'APNS_ENDPOINT']);
    await sim.until(() => sim.err.some((line) => line.startsWith('stats: ')));
    const statsUrl = /curl -s (http:\/\/\S+\/stats)/.exec(sim.err.join('\n'))?.[1] as string;

    const providers = createProviders(providersOptions(loadConfig(env)));
    try {
      // Burst 2 and next to no refill: the third push meets the simulator's limit.
      const outcomes = await providers.apns.send([pushRequest({ platform: 'apns' })]);
      await providers.apns.send([pushRequest({ platform: 'apns' })]);
      const [third] = await providers.apns.send([pushRequest({ platform: 'apns' })]);
      expect(outcomes[0]?.kind).toBe('delivered');
      expect(third).toMatchObject({
        kind: 'retry',
        throttled: true,
        httpStatus: 429,
        reason: 'TooManyRequests',
      });
      expect(third?.kind === 'retry' && third.retryAfterMs).toBeGreaterThan(90_000);
    } finally {
      await providers.fcm.close();
      await providers.apns.close();
    }
    const stats = (await (await fetch(statsUrl)).json()) as Record<string, unknown>;
    expect(stats).toMatchObject({ simulator: 'apns', accepted: 2, throttled: 1, rate: 0.01, burst: 2 });
    await sim.until(() => sim.err.some((line) => /^apns-sim .*accepted \d+\/s \(total 2\)/.test(line)));

    sim.child.kill('SIGINT');
    expect(await sim.exited).toBe(0);
    expect(sim.err.at(-1)).toMatch(/apns simulator stopping: .*"accepted":2.*"throttled":1/);
  });
});
