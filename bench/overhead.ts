import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createKafka } from '../src/kafka/client.ts';
import { ensureTopicFamily, SINGLE_BROKER_DURABILITY } from '../src/kafka/topics.ts';
import { generateEvents } from '../src/publish/generate.ts';
import { publishEvents } from '../src/publish/publisher.ts';
import { startServices } from '../src/services/index.ts';
import { startSimulators } from '../testkit/simulators.ts';
import { machine } from './machine.ts';

/**
 * `npm run bench -- overhead`: what the pipeline costs when there is no limit to enforce. On one topic,
 * in one run, each in a process of its own (for its peak RSS):
 * - `raw`: kafkajs `eachBatch` that only decodes the messages (the floor);
 * - `aqueduct`: the full pipeline (validation, dedupe, token acquire with a rate far above what the
 *   machine can do, outcome bookkeeping, commits) with a no-op provider that accepts every push at once;
 * - `aqueductHttp` (for reference): the same with the real FCM/APNs clients against the simulators, so
 *   the HTTP/TLS cost of a real push is visible next to the pipeline's own.
 */

const WORKER = fileURLToPath(new URL('./overhead-worker.ts', import.meta.url));
export const RESULTS_DIR = fileURLToPath(new URL('./results/', import.meta.url));

export interface OverheadOptions {
  /** An existing broker and Redis (the test suite's); default: the service switch. */
  services?: { kafkaBrokers: string[]; redisUrl: string };
  events: number;
  httpEvents: number;
  outDir: string;
  log: (line: string) => void;
}

interface WorkerResult {
  mode: string;
  messages: number;
  seconds: number;
  messagesPerSecond: number;
  /** CPU time of the worker process (all threads) over the same window as `seconds`. */
  cpuSeconds: number;
  peakRssMiB: number;
}

export async function runOverheadBench(options: OverheadOptions) {
  const services = await startServices({
    env: options.services
      ? {
          ...process.env,
          KAFKA_BROKERS: options.services.kafkaBrokers.join(','),
          REDIS_URL: options.services.redisUrl,
        }
      : process.env,
    log: options.log,
  });
  const simulators = await startSimulators({ rate: 1e9, burst: 1e9 });
  try {
    const kafka = createKafka({ brokers: services.kafkaBrokers, clientId: 'overhead' });
    const topic = `overhead-${randomUUID().slice(0, 8)}`;
    await ensureTopicFamily(kafka, topic, 6, SINGLE_BROKER_DURABILITY);
    options.log(`publishing ${options.events} events`);
    await publishEvents(kafka, generateEvents({ count: options.events }), { topic, batchSize: 2000 });

    const env = (group: string): Record<string, string> => ({
      KAFKA_BROKERS: services.kafkaBrokers.join(','),
      REDIS_URL: services.redisUrl,
      AQUEDUCT_TOPIC: topic,
      AQUEDUCT_GROUP_ID: `${topic}-${group}`,
      AQUEDUCT_REDIS_PREFIX: `overhead-${group}-${randomUUID().slice(0, 6)}`,
      AQUEDUCT_FCM_RATE: '100000000',
      AQUEDUCT_FCM_BURST: '100000000',
      AQUEDUCT_APNS_RATE: '100000000',
      AQUEDUCT_APNS_BURST: '100000000',
      ...simulators.env,
    });
    options.log('raw kafkajs eachBatch (decode only)');
    const raw = await worker('raw', options.events, env('raw'));
    options.log('aqueduct pipeline, no-op provider');
    const aqueduct = await worker('aqueduct', options.events, env('aqueduct'));
    options.log('aqueduct pipeline, real clients against the simulators (reference)');
    const aqueductHttp = await worker('aqueduct-http', options.httpEvents, env('http'));
    const ratio = Number((aqueduct.messagesPerSecond / raw.messagesPerSecond).toFixed(3));
    const result = {
      scenario: 'overhead',
      command: 'npm run bench -- overhead',
      machine: machine(),
      events: options.events,
      rawMessagesPerSecond: raw.messagesPerSecond,
      aqueductMessagesPerSecond: aqueduct.messagesPerSecond,
      ratio,
      rawPeakRssMiB: raw.peakRssMiB,
      aqueductPeakRssMiB: aqueduct.peakRssMiB,
      aqueductHttpMessagesPerSecond: aqueductHttp.messagesPerSecond,
      aqueductHttpPeakRssMiB: aqueductHttp.peakRssMiB,
      runs: { raw, aqueduct, aqueductHttp },
      targets: { ratio: { target: '≥ 0.8', value: ratio, met: ratio >= 0.8 } },
    };
    await mkdir(options.outDir, { recursive: true });
    await writeFile(join(options.outDir, 'overhead.json'), `${JSON.stringify(result, null, 2)}\n`);
    return result;
  } finally {
    await simulators.close();
    await services.stop();
  }
}

function worker(mode: string, count: number, env: Record<string, string>): Promise<WorkerResult> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [WORKER, mode, String(count)],
      { env: { ...process.env, ...env, LOG_LEVEL: 'warn' }, maxBuffer: 64 * 1024 * 1024, timeout: 300_000 },
      (error, stdout, stderr) => {
        const line = stdout.trim().split('\n').at(-1) ?? '';
        if (error || !line.startsWith('{'))
          reject(new Error(`${mode} worker failed: ${error?.message ?? ''}\n${stderr.slice(-2000)}`));
        else resolve(JSON.parse(line) as WorkerResult);
      },
    );
  });
}

export async function main(): Promise<void> {
  const events = Number(process.env.BENCH_OVERHEAD_EVENTS ?? 60_000);
  const result = await runOverheadBench({
    events,
    httpEvents: Math.min(events, 10_000),
    outDir: RESULTS_DIR,
    log: (line) => console.error(line),
  });
  console.log('| figure | raw kafkajs | aqueduct (no-op provider) | aqueduct (HTTP to simulators) |');
  console.log('| --- | ---: | ---: | ---: |');
  console.log(
    `| messages/s | ${result.rawMessagesPerSecond} | ${result.aqueductMessagesPerSecond} | ${result.aqueductHttpMessagesPerSecond} |`,
  );
  console.log(
    `| peak RSS MiB | ${result.rawPeakRssMiB} | ${result.aqueductPeakRssMiB} | ${result.aqueductHttpPeakRssMiB} |`,
  );
  console.log(`${result.targets.ratio.met ? 'met    ' : 'MISSED '} ratio ≥ 0.8: ${result.ratio}`);
}

/** "0.71 / 1.04": a worker's CPU seconds over its measured wall seconds (older results have no CPU time). */
function cpu(run: { seconds: number; cpuSeconds?: number }): string {
  return run.cpuSeconds === undefined ? '–' : `${run.cpuSeconds} / ${run.seconds}`;
}

/** The docs/benchmarks.md block for the overhead scenario. */
export function overheadMarkdown(result: Awaited<ReturnType<typeof runOverheadBench>>): string {
  const m = result.machine;
  return [
    `Measured with \`${result.command}\` on ${m.cores} cores, ${m.memoryGiB} GiB, Node ${m.node}, ${m.kafka ?? 'Kafka 3.9.1 (local)'}: ${result.events} events on one 6-partition topic, each side in its own process, one after the other.`,
    '',
    '| | raw kafkajs `eachBatch`, decode only | Aqueduct pipeline, no-op provider | Aqueduct, real clients → simulators (reference) |',
    '| --- | ---: | ---: | ---: |',
    `| messages/s | ${result.rawMessagesPerSecond} | ${result.aqueductMessagesPerSecond} | ${result.aqueductHttpMessagesPerSecond} |`,
    `| CPU s / wall s of the worker process | ${cpu(result.runs.raw)} | ${cpu(result.runs.aqueduct)} | ${cpu(result.runs.aqueductHttp)} |`,
    `| peak RSS (MiB) | ${result.rawPeakRssMiB} | ${result.aqueductPeakRssMiB} | ${result.aqueductHttpPeakRssMiB} |`,
    '',
    `\`ratio\` = ${result.ratio} (target ≥ 0.8: ${result.targets.ratio.met ? 'met' : '**missed**'}).`,
  ].join('\n');
}
