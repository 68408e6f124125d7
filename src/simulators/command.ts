import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Command, InvalidArgumentError } from 'commander';
import { SetupError } from '../services/errors.ts';
import { MAX_TIMER_MS } from '../timer-delay.ts';
import { startApnsSimulator } from './apns.ts';
import { DEFAULT_BAD_TOKEN_PREFIX, DEFAULT_DEAD_TOKEN_PREFIX, type SimulatorFaults } from './faults.ts';
import { startFcmSimulator } from './fcm.ts';
import { DEFAULT_BURST, DEFAULT_RATE, type RunningSimulator, type SimulatorOptions } from './simulator.ts';
import { type SimulatorStats, summaryLine } from './stats.ts';

interface CommonFlags {
  host: string;
  port: number;
  rate: number;
  burst: number;
  deviceRate?: number;
  deviceBurst?: number;
  certDir?: string;
  certHost?: string[];
  deadPrefix: string;
  badPrefix: string;
  fail500: number;
  fail503: number;
  drop: number;
  slow: number;
  slowMs: number;
  storm?: number;
  seed?: number;
  verifyAuth?: boolean;
  quiet?: boolean;
}

interface FcmFlags extends CommonFlags {
  project?: string;
  accessToken?: string;
  http2Only?: boolean;
}

interface ApnsFlags extends CommonFlags {
  statsPort: number;
  authKey?: string;
  keyId?: string;
  teamId?: string;
  tokenUpdateMinSeconds?: number;
}

/** `aqueduct simulate fcm|apns`: a provider simulator in the foreground until Ctrl-C. */
export function registerSimulateCommand(program: Command): void {
  const simulate = program
    .command('simulate')
    .description('run a local FCM or APNs simulator (rate limit, faults, /stats) until Ctrl-C');

  const fcm = simulate
    .command('fcm')
    .description('FCM HTTP v1 over HTTPS: POST /v1/projects/{id}/messages:send; GET /stats on the same port');
  commonOptions(fcm, 8443)
    .option('--project <id>', 'serve only this project id (others get 403); default: any')
    .option(
      '--access-token <token>',
      'with --verify-auth, the bearer token to accept (default: the one Aqueduct sends)',
    )
    .option(
      '--http2-only',
      'refuse HTTP/1.1 (Google speaks both): a stand-in for a server that speaks HTTP/2 only',
    )
    .action(async (flags: FcmFlags) => {
      checkDeviceFlags(flags);
      await run('fcm', flags, () =>
        startFcmSimulator({
          ...simulatorOptions(flags),
          ...(flags.project ? { projectId: flags.project } : {}),
          ...(flags.accessToken ? { accessToken: flags.accessToken } : {}),
          ...(flags.http2Only ? { http1: false } : {}),
        }),
      );
    });

  const apns = simulate
    .command('apns')
    .description('APNs over HTTP/2 + TLS: POST /3/device/{token}; GET /stats on --stats-port (plain HTTP)');
  commonOptions(apns, 8444)
    .option(
      '--stats-port <port>',
      'plain-HTTP port for GET /stats, POST /faults, POST /reset',
      parsePort,
      8445,
    )
    .option(
      '--auth-key <file>',
      'with --verify-auth, the .p8 key (or its public key) tokens must be signed with',
    )
    .option('--key-id <id>', 'with --verify-auth, the key id tokens must name')
    .option('--team-id <id>', 'with --verify-auth, the team id tokens must name')
    .option(
      '--token-update-min-seconds <s>',
      "answer 429 TooManyProviderTokenUpdates to a signing key's new provider token sooner than this after its previous one (Apple asks for one every 20 minutes at most: 1200); default: no limit",
      parsePositive,
    )
    .action(async (flags: ApnsFlags) => {
      checkDeviceFlags(flags);
      if (flags.verifyAuth && !flags.authKey) {
        throw new SetupError('--verify-auth needs the key to verify with', 'pass --auth-key <file.p8>');
      }
      await run('apns', flags, () =>
        startApnsSimulator({
          ...simulatorOptions(flags),
          statsPort: flags.statsPort,
          ...(flags.authKey ? { authKeyPem: readKey(flags.authKey) } : {}),
          ...(flags.keyId ? { keyId: flags.keyId } : {}),
          ...(flags.teamId ? { teamId: flags.teamId } : {}),
          ...(flags.tokenUpdateMinSeconds ? { tokenUpdateMinSeconds: flags.tokenUpdateMinSeconds } : {}),
        }),
      );
    });
}

function commonOptions(command: Command, defaultPort: number): Command {
  return command
    .option('--host <host>', 'interface to listen on', '0.0.0.0')
    .option('--port <port>', 'TLS port (0: a free one)', parsePort, defaultPort)
    .option(
      '--rate <n>',
      'requests per second the simulated provider allows (bucket refill)',
      parsePositive,
      DEFAULT_RATE,
    )
    .option('--burst <n>', 'requests it allows at once (bucket size)', parsePositive, DEFAULT_BURST)
    .option(
      '--device-rate <n>',
      "pushes per second it allows to any one device token; beyond it, the provider's per-device 429 (default: no per-device limit)",
      parsePositive,
    )
    .option('--device-burst <n>', 'pushes one device takes at once (default: --device-rate)', parsePositive)
    .option(
      '--cert-dir <dir>',
      'write the self-signed certificate here (fcm.pem / apns.pem); default: a temp dir',
    )
    .option('--cert-host <names...>', 'extra host names for the certificate (e.g. a compose service name)')
    .option('--dead-prefix <prefix>', 'device tokens with this prefix are dead', DEFAULT_DEAD_TOKEN_PREFIX)
    .option('--bad-prefix <prefix>', 'device tokens with this prefix are malformed', DEFAULT_BAD_TOKEN_PREFIX)
    .option('--fail-500 <share>', 'share of requests answered 500', parseShare, 0)
    .option('--fail-503 <share>', 'share of requests answered 503', parseShare, 0)
    .option(
      '--drop <share>',
      'share of requests dropped unanswered (fcm: connection closed, apns: stream reset)',
      parseShare,
      0,
    )
    .option('--slow <share>', 'share of answers delayed by --slow-ms', parseShare, 0)
    .option('--slow-ms <ms>', 'delay of a slow answer', parseDelayMs, 1000)
    .option(
      '--storm <seconds>',
      'start in a 429 storm with this Retry-After (end: POST /faults {"storm":null})',
      parsePositive,
    )
    .option('--seed <n>', 'seed of the fault dice (replayable runs)', parsePositive)
    .option('--verify-auth', 'verify credentials instead of accepting any well-formed one')
    .option('--quiet', 'no per-second summary');
}

function simulatorOptions(flags: CommonFlags): SimulatorOptions {
  const faults: Partial<SimulatorFaults> = {
    deadTokenPrefix: flags.deadPrefix,
    badTokenPrefix: flags.badPrefix,
    error500: flags.fail500,
    error503: flags.fail503,
    drop: flags.drop,
    slow: flags.slow,
    slowMs: flags.slowMs,
    ...(flags.storm !== undefined ? { storm: { retryAfterSeconds: flags.storm } } : {}),
  };
  return {
    host: flags.host,
    port: flags.port,
    rate: flags.rate,
    burst: flags.burst,
    ...(flags.deviceRate !== undefined ? { deviceRate: flags.deviceRate } : {}),
    ...(flags.deviceBurst !== undefined ? { deviceBurst: flags.deviceBurst } : {}),
    faults,
    ...(flags.certHost ? { certHosts: flags.certHost } : {}),
    ...(flags.seed !== undefined ? { seed: flags.seed } : {}),
    ...(flags.verifyAuth ? { verifyAuth: true } : {}),
  };
}

async function run(
  kind: 'fcm' | 'apns',
  flags: CommonFlags,
  start: () => Promise<RunningSimulator>,
): Promise<void> {
  let simulator: RunningSimulator;
  try {
    simulator = await start();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE')
      throw new SetupError(`a port of the ${kind} simulator is in use`, 'pass a free --port (0 picks one)', {
        cause: error,
      });
    if (code === 'EADDRNOTAVAIL')
      throw new SetupError(`cannot listen on ${flags.host}`, 'pass --host 127.0.0.1 or 0.0.0.0', {
        cause: error,
      });
    throw error;
  }
  const ownDir = flags.certDir === undefined;
  const certDir = flags.certDir ?? mkdtempSync(join(tmpdir(), 'aqueduct-sim-'));
  mkdirSync(certDir, { recursive: true });
  const caFile = join(certDir, `${kind}.pem`);
  writeFileSync(caFile, simulator.caPem);

  const faults = simulator.faults();
  console.error(
    `${kind} simulator listening on ${simulator.url} (bound to ${flags.host}) · rate ${flags.rate}/s, burst ${flags.burst}` +
      (flags.deviceRate === undefined
        ? ''
        : ` · per device ${flags.deviceRate}/s, burst ${flags.deviceBurst ?? Math.max(1, flags.deviceRate)}`) +
      ` · dead tokens: ${faults.deadTokenPrefix || '(none)'}* · auth: ${flags.verifyAuth ? 'verified' : 'any well-formed'}`,
  );
  console.error(`certificate (self-signed, trust it as the CA): ${caFile}`);
  console.error('point Aqueduct at it:');
  for (const [key, value] of Object.entries(simulator.env(caFile))) console.log(`export ${key}=${value}`);
  const statsCommand = simulator.statsUrl.startsWith('https:')
    ? `curl -s --cacert ${caFile} ${simulator.statsUrl}`
    : `curl -s ${simulator.statsUrl}`;
  console.error(
    `stats: ${statsCommand}   faults: POST ${simulator.statsUrl.replace(/\/stats$/, '/faults')} {"error503":0.1}`,
  );

  let previous: SimulatorStats = simulator.stats();
  const timer = setInterval(() => {
    const current = simulator.stats();
    if (current.requests !== previous.requests && !flags.quiet)
      console.error(summaryLine(kind, previous, current));
    previous = current;
  }, 1000);

  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  clearInterval(timer);
  const final = simulator.stats();
  console.error(`${kind} simulator stopping: ${JSON.stringify(final)}`);
  await simulator.close();
  if (ownDir) rmSync(certDir, { recursive: true, force: true });
}

function checkDeviceFlags(flags: CommonFlags): void {
  if (flags.deviceBurst !== undefined && flags.deviceRate === undefined) {
    throw new SetupError('--device-burst needs --device-rate', 'pass --device-rate <n> too');
  }
}

function readKey(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'error';
    throw new SetupError(
      `cannot read --auth-key ${file} (${code})`,
      'pass the .p8 file the tokens are signed with',
      {
        cause: error,
      },
    );
  }
}

function parsePort(value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new InvalidArgumentError('a port number (0-65535)');
  return port;
}

function parsePositive(value: string): number {
  const number = Number(value);
  if (!Number.isFinite(number) || number <= 0) throw new InvalidArgumentError('a positive number');
  return number;
}

/** A delay in ms: at most what a Node timer can wait, since a longer one fires after 1 ms. */
function parseDelayMs(value: string): number {
  const ms = Number(value);
  if (!Number.isFinite(ms) || ms <= 0 || ms > MAX_TIMER_MS)
    throw new InvalidArgumentError(`a positive number of ms, at most ${MAX_TIMER_MS}`);
  return ms;
}

function parseShare(value: string): number {
  const number = Number(value);
  if (!Number.isFinite(number) || number < 0 || number > 1)
    throw new InvalidArgumentError('a share between 0 and 1');
  return number;
}
