import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ScenarioResult } from './faults.ts';
import type { machine } from './machine.ts';

/** deviceStorm: the flooded device's events, and the limit each simulator holds every device to. */
export const DEVICE_STORM = { events: 300, deviceRate: 5, deviceBurst: 5 };
/** The share of the bucket's rate the other devices must be delivered at while the device is flooded. */
export const OTHER_DEVICES_TARGET = 0.95;

/** Writes bench/results/device-storm.json: the deviceStorm run, apart from faults.json. */
export async function writeDeviceStormResult(
  outDir: string,
  result: ScenarioResult,
  setup: {
    otherEvents: number;
    consumers: number;
    partitions: number;
    provider: { rate: number; burst: number };
    aqueductConfig: { rate: number; burst: number };
    machine: ReturnType<typeof machine>;
  },
): Promise<void> {
  const { machine: measuredOn, ...rest } = setup;
  await writeFile(
    join(outDir, 'device-storm.json'),
    `${JSON.stringify(
      {
        scenario: 'faults/deviceStorm',
        command: 'BENCH_FAULTS_SCENARIOS=deviceStorm npm run bench -- faults',
        measuredAt: new Date().toISOString(),
        machine: measuredOn,
        setup: { ...rest, flood: DEVICE_STORM, deadTokenRatio: 0.01 },
        ...result,
      },
      null,
      2,
    )}\n`,
  );
}

/** The deviceStorm figures (rendered into docs/benchmarks.md by bench/readme.ts). */
export function deviceStormTable(r: ScenarioResult & { setup?: { flood?: typeof DEVICE_STORM } }): string {
  const flood = r.setup?.flood ?? DEVICE_STORM;
  const rows = (['fcm', 'apns'] as const).map((provider) => {
    const o = r.otherDevices?.[provider];
    const t = r.targets[`otherDevicesRate.${provider}`];
    return `| other devices at ${provider} | ${o?.delivered} in ${o?.seconds} s = ${o?.perSecond}/s | ${o?.ofBucketRate} of the bucket's rate${t && !t.met ? ' ✗' : ''} |`;
  });
  return [
    `One APNs device flooded with ${flood.events} events among ${r.published - flood.events} for other devices; every device held to ${flood.deviceRate}/s (burst ${flood.deviceBurst}) by the simulators.`,
    '',
    '| figure | value | target |',
    '| --- | ---: | --- |',
    ...rows,
    `| lost | ${r.lost} | = 0 |`,
    `| duplicates | ${r.duplicates} | = 0 |`,
    `| provider-wide 429s | ${r.provider429} | = 0 |`,
    `| device 429s (the flooded device's) | ${r.deviceThrottled} | |`,
    ...(r.floodedDevice
      ? [
          `| flooded device: its events over (its limit's time) | ${r.floodedDevice.seconds} s (${r.floodedDevice.idealSeconds} s) = ${r.floodedDevice.ofDeviceLimit} of its limit | |`,
        ]
      : []),
    `| delivered / dead-lettered / invalid tokens | ${r.delivered} / ${r.deadLettered} / ${r.invalidTokens} | |`,
    `| seconds until every event had its outcome | ${r.seconds} | |`,
  ].join('\n');
}
