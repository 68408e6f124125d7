import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { FaultResult } from '../testkit/faults.ts';
import type { machine } from './machine.ts';

/**
 * chattyDevice, the scenario of issue 16: 10 000 events for distinct devices and 300 for one chatty
 * APNs device, every device held to 20 pushes a second (burst 20) by the simulators.
 */
export const CHATTY_DEVICE = { otherEvents: 10_000, events: 300, deviceRate: 20, deviceBurst: 20 };
/** The other devices must drain within this share of the ideal time, at both providers. */
export const OTHER_DEVICES_OF_IDEAL_TARGET = 0.8;

/** One run: the same traffic with the chatty device and without it, one after the other. */
export interface ChattyDeviceRun {
  measuredAt: string;
  machine: ReturnType<typeof machine>;
  /** Each provider's other devices: drained in how long, against the bucket's time (ofIdeal). */
  otherDevices: Record<'fcm' | 'apns', { seconds: number; idealSeconds: number; ofIdeal: number }>;
  /** The same without the chatty device, in the same bench run. */
  withoutChattyDevice: Record<'fcm' | 'apns', { seconds: number; idealSeconds: number; ofIdeal: number }>;
  /** The chatty device's own deliveries against its limit. */
  floodedDevice: NonNullable<FaultResult['floodedDevice']>;
  lost: number;
  duplicates: number;
  provider429: number;
  deviceThrottled: number;
  /** Retry-topic records of the run with the chatty device (its re-parks and its retried 429s). */
  retried: number;
  deadLettered: number;
  targets: Record<string, { target: string; value: number; met: boolean }>;
}

export interface ChattyDeviceResult {
  scenario: 'faults/chattyDevice';
  command: string;
  setup: Record<string, unknown>;
  /** Every run, oldest first. */
  runs: ChattyDeviceRun[];
}

/** One run's figures from the two scenario runs, with its targets. */
export function chattyDeviceRun(
  withChatty: FaultResult,
  without: FaultResult,
  measuredOn: ReturnType<typeof machine>,
): ChattyDeviceRun {
  const drain = (r: FaultResult, provider: 'fcm' | 'apns') => {
    const d = r.otherDevicesDrain?.[provider];
    return { seconds: d?.seconds ?? 0, idealSeconds: d?.idealSeconds ?? 0, ofIdeal: d?.ofIdeal ?? 0 };
  };
  const otherDevices = { fcm: drain(withChatty, 'fcm'), apns: drain(withChatty, 'apns') };
  const targets: ChattyDeviceRun['targets'] = {};
  for (const provider of ['fcm', 'apns'] as const) {
    const value = otherDevices[provider].ofIdeal;
    targets[`otherDevices.${provider}.ofIdeal`] = {
      target: `≥ ${OTHER_DEVICES_OF_IDEAL_TARGET}`,
      value,
      met: value >= OTHER_DEVICES_OF_IDEAL_TARGET,
    };
  }
  const lost = withChatty.lost + without.lost;
  const duplicates = withChatty.duplicates + without.duplicates;
  targets.lost = { target: '= 0', value: lost, met: lost === 0 };
  targets.duplicates = { target: '= 0', value: duplicates, met: duplicates === 0 };
  return {
    measuredAt: new Date().toISOString(),
    machine: measuredOn,
    otherDevices,
    withoutChattyDevice: { fcm: drain(without, 'fcm'), apns: drain(without, 'apns') },
    floodedDevice: withChatty.floodedDevice ?? {
      delivered: 0,
      seconds: 0,
      idealSeconds: 0,
      ofDeviceLimit: 0,
    },
    lost,
    duplicates,
    provider429: withChatty.provider429 + without.provider429,
    deviceThrottled: withChatty.deviceThrottled,
    retried: withChatty.retried,
    deadLettered: withChatty.deadLettered,
    targets,
  };
}

/** Appends the run to bench/results/chatty-device.json (every run is kept). */
export async function recordChattyDeviceRun(
  outDir: string,
  run: ChattyDeviceRun,
  setup: Record<string, unknown>,
): Promise<void> {
  const file = join(outDir, 'chatty-device.json');
  const before = await readFile(file, 'utf8')
    .then((text) => JSON.parse(text) as ChattyDeviceResult)
    .catch(() => undefined);
  const result: ChattyDeviceResult = {
    scenario: 'faults/chattyDevice',
    command: 'BENCH_FAULTS_SCENARIOS=chattyDevice npm run bench -- faults',
    setup: { ...setup, chatty: CHATTY_DEVICE },
    runs: [...(before?.runs ?? []), run],
  };
  await writeFile(file, `${JSON.stringify(result, null, 2)}\n`);
}

/** Every run's figures (rendered into docs/benchmarks.md by bench/readme.ts). */
export function chattyDeviceTable(result: ChattyDeviceResult): string {
  const mark = (run: ChattyDeviceRun, figure: string) => (run.targets[figure]?.met === false ? ' ✗' : '');
  return [
    '| run | other devices at fcm: s (ideal s) = ofIdeal | at apns | without the chatty device: fcm / apns ofIdeal | chatty device: s (its limit s) = ofDeviceLimit | device 429s | retry records | lost / duplicates / provider 429s / dead letters |',
    '| --- | --- | --- | --- | --- | ---: | ---: | --- |',
    ...result.runs.map((run, i) => {
      const o = run.otherDevices;
      const w = run.withoutChattyDevice;
      const f = run.floodedDevice;
      return `| ${i + 1} (${run.measuredAt.slice(0, 16)}) | ${o.fcm.seconds} (${o.fcm.idealSeconds}) = ${o.fcm.ofIdeal}${mark(run, 'otherDevices.fcm.ofIdeal')} | ${o.apns.seconds} (${o.apns.idealSeconds}) = ${o.apns.ofIdeal}${mark(run, 'otherDevices.apns.ofIdeal')} | ${w.fcm.ofIdeal} / ${w.apns.ofIdeal} | ${f.seconds} (${f.idealSeconds}) = ${f.ofDeviceLimit} | ${run.deviceThrottled} | ${run.retried} | ${run.lost} / ${run.duplicates} / ${run.provider429} / ${run.deadLettered} |`;
    }),
  ].join('\n');
}
