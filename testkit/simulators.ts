import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ApnsSimulator, type ApnsSimulatorOptions, startApnsSimulator } from '../src/simulators/apns.ts';
import { type FcmSimulator, startFcmSimulator } from '../src/simulators/fcm.ts';
import type { SimulatorOptions } from '../src/simulators/simulator.ts';

/** Both simulators, in-process, with their certificates written where consumers can trust them. */
export interface Simulators {
  fcm: FcmSimulator;
  apns: ApnsSimulator;
  /** Environment that points a consumer at both (endpoints, CA files, project). */
  env: Record<string, string>;
  /** Distinct event ids both accepted, and the accepted total (duplicates included). */
  accepted(): { ids: Set<string>; total: number };
  close(): Promise<void>;
}

/**
 * Both simulators with `options`; APNs also refuses a new provider token within 20 minutes of the
 * previous one (its `tokenUpdateMinSeconds`, 1200 unless given), as Apple asks, so that every run with
 * several consumers shows that the fleet shares one token.
 */
export async function startSimulators(
  options: SimulatorOptions & Pick<ApnsSimulatorOptions, 'tokenUpdateMinSeconds'> = {},
): Promise<Simulators> {
  const dir = await mkdtemp(join(tmpdir(), 'aqueduct-sim-'));
  const [fcm, apns] = await Promise.all([
    startFcmSimulator(options),
    startApnsSimulator({ tokenUpdateMinSeconds: 1200, ...options }),
  ]);
  const fcmCa = join(dir, 'fcm.pem');
  const apnsCa = join(dir, 'apns.pem');
  await Promise.all([writeFile(fcmCa, fcm.caPem), writeFile(apnsCa, apns.caPem)]);
  return {
    fcm,
    apns,
    env: { ...fcm.env(fcmCa), ...apns.env(apnsCa) },
    accepted() {
      const ids = new Set<string>();
      let total = 0;
      for (const record of [...fcm.records(), ...apns.records()]) {
        total++;
        if (record.eventId !== undefined) ids.add(record.eventId);
      }
      return { ids, total };
    },
    async close() {
      await Promise.all([fcm.close(), apns.close()]);
      await rm(dir, { recursive: true, force: true });
    },
  };
}
