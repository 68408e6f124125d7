/**
 * `npm run demo`: the viral burst, live. With no configuration it starts a local Kafka broker and
 * redis-server (or uses KAFKA_BROKERS / REDIS_URL), the two provider simulators enforcing a typical
 * aggregate limit (800/s, burst 2000, half of it each), publishes a burst of events (20 000;
 * `--events N`) onto a six-partition topic, and lets three `aqueduct consume` processes drain it. A live
 * view shows the flow; the summary counts come from the simulators' records and the topics. `--json`
 * makes the last line one JSON object.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { SetupError } from '../src/services/errors.ts';
import { type Services, startServices } from '../src/services/index.ts';
import { runBurst } from './burst.ts';
import { liveView } from './live-view.ts';

/** The aggregate limit (800/s, burst 2000), shared evenly by the two simulated providers. */
const PROVIDER = { rate: 400, burst: 1000 };
/** Pushes (and so unreleased tokens) one consumer has in flight per provider: AQUEDUCT_SEND_CONCURRENCY. */
const SEND_CONCURRENCY = 64;

const OPTIONS = {
  events: { type: 'string', default: '20000' },
  consumers: { type: 'string', default: '3' },
  partitions: { type: 'string', default: '6' },
  tenants: { type: 'string', default: '' },
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const;
const USAGE =
  'usage: npm run demo -- [--events N] [--consumers N] [--partitions N] [--tenants a,b,…] [--json]';

const { values } = parsedArguments();
function parsedArguments() {
  try {
    return parseArgs({ options: OPTIONS });
  } catch (error) {
    // An unknown or malformed option: Node's message ("Unknown option '--x'") and the usage, not a stack.
    console.error(`${(error as Error).message}\n${USAGE}`);
    process.exit(2);
  }
}

if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
const events = wholeNumber('events', values.events);
const consumers = wholeNumber('consumers', values.consumers);
const partitions = wholeNumber('partitions', values.partitions);
const tenants = tenantList(values.tenants);
/** How a user configures Aqueduct for that provider: its published limits, as they are. */
const AQUEDUCT = { rate: PROVIDER.rate, burst: PROVIDER.burst };
/** Progress goes to stderr with --json, so that stdout's last line is the JSON object. */
const say = (message: string) => (values.json ? console.error(message) : console.log(message));

let services: Services | undefined;
let logDir: string | undefined;
const cleanUp = async () => {
  await services?.stop();
  if (logDir) await rm(logDir, { recursive: true, force: true });
};
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    say(`\n${signal}: stopping what the demo started…`);
    void cleanUp().finally(() => process.exit(130));
  });
}

try {
  services = await startServices({ log: say });
  logDir = await mkdtemp(join(tmpdir(), 'aqueduct-demo-'));
  say(
    `Viral burst: ${events} events → ${partitions} partitions → ${consumers} consumers → FCM + APNs simulators (each ${PROVIDER.rate}/s, burst ${PROVIDER.burst}; Aqueduct set to ${AQUEDUCT.rate}/s, burst ${AQUEDUCT.burst} each)`,
  );
  const live = liveView(say, !values.json && process.stdout.isTTY === true);
  const result = await runBurst({
    kafkaBrokers: services.kafkaBrokers,
    redisUrl: services.redisUrl,
    events,
    partitions,
    consumers,
    provider: PROVIDER,
    aqueduct: AQUEDUCT,
    limiter: true,
    deadTokenRatio: 0.01,
    ...(tenants.length > 0 ? { tenants } : {}),
    env: { AQUEDUCT_SEND_CONCURRENCY: String(SEND_CONCURRENCY) },
    logDir,
    onTick: live,
  });
  const { timeline: _timeline, perProvider, ...summary } = result;
  say('');
  say(
    `published ${result.published} · delivered ${result.delivered} · dead-lettered ${result.deadLettered} · invalid tokens ${result.invalidTokens}`,
  );
  say(
    `lost ${result.lost} · duplicate pushes ${result.duplicates} · provider 429s ${result.provider429} · retried ${result.retried}`,
  );
  say(
    `steady-state ${result.achievedRate}/s of ${result.configuredRate}/s configured · p50 ${result.p50Ms} ms, p99 ${result.p99Ms} ms publish→provider · ${result.redisCallsPerPush} Redis calls per push · ${result.seconds} s`,
  );
  const json = { ...summary, perProvider, kafka: services.source.kafka, redis: services.source.redis };
  console.log(values.json ? JSON.stringify(json) : '');
  const ok = result.lost === 0 && result.duplicates === 0 && result.provider429 === 0;
  process.exitCode = ok ? 0 : 1;
} catch (error) {
  if (error instanceof SetupError) {
    console.error(`demo: ${error.message}`);
    process.exitCode = 2;
  } else {
    throw error;
  }
} finally {
  await cleanUp();
}

/** `--tenants acme,globex`: tenant names as events carry them. */
function tenantList(value: string | undefined): string[] {
  const names = (value ?? '').split(',').filter((name) => name !== '');
  const bad = names.find((name) => !/^[A-Za-z0-9._-]{1,64}$/.test(name));
  if (bad !== undefined) {
    console.error(
      `demo: --tenants takes names of letters, digits, '.', '_' and '-' (up to 64), got "${bad}"`,
    );
    process.exit(2);
  }
  return names;
}

function wholeNumber(name: string, value: string | undefined): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) {
    console.error(`demo: --${name} must be a positive whole number, got "${value}"`);
    process.exit(2);
  }
  return n;
}
