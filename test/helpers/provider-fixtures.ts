import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/config.ts';
import { type NotificationEventInput, notificationEventSchema } from '../../src/events/event.ts';
import { payloadBytes } from '../../src/events/payload.ts';
import {
  ApnsProvider,
  FcmProvider,
  type FcmProviderOptions,
  type PushProvider,
  type PushRequest,
  parseEndpoint,
} from '../../src/providers/index.ts';
import { apnsProviderOptions, fcmProviderOptions, type ProviderTuning } from '../../src/settings-options.ts';
import type { RunningSimulator } from '../../src/simulators/simulator.ts';

/** A valid event (defaults applied), with a fresh id and token unless given. */
export function pushRequest(overrides: Partial<NotificationEventInput> = {}, attempt = 1): PushRequest {
  const { platform = 'fcm', token, data, ...rest } = overrides;
  const parsed = notificationEventSchema.parse({
    id: `evt-${randomUUID()}`,
    platform,
    token: platform === 'apns' ? randomBytes(32).toString('hex') : `tok-${randomUUID()}`,
    notification: { title: 'Hello', body: 'World' },
    ...rest,
  });
  // A given token and data are set after validation: provider tests send what the doors refuse (the
  // simulators' dead- and bad- prefixes on APNs, payloads over 4096 bytes) to see what the provider
  // itself does with them.
  const event = {
    ...parsed,
    ...(token === undefined ? {} : { token }),
    ...(data === undefined ? {} : { data }),
  };
  return { event, attempt };
}

/** A data payload of about `bytes` bytes: over both providers' 4096-byte limit when asked. */
export function bulkyData(bytes: number): Record<string, string> {
  const data: Record<string, string> = {};
  for (let i = 0; bytes > 0; i += 1, bytes -= 1000) data[`k${i}`] = 'x'.repeat(Math.min(1000, bytes));
  return data;
}

/**
 * The request with a data entry padded so that its push payload is exactly `bytes` as the contract
 * counts it (`payloadBytes`): the largest push the doors let through when `bytes` is 4096.
 */
export function withPayloadOf(request: PushRequest, bytes: number): PushRequest {
  // Entries of at most 1000 characters each (the contract's limit on a data value is 1024).
  const padded = (values: string[]) => ({
    ...request.event,
    data: { ...request.event.data, ...Object.fromEntries(values.map((value, i) => [`pad${i}`, value])) },
  });
  for (let entries = 1; entries <= 8; entries += 1) {
    const need = bytes - payloadBytes(padded(Array.from({ length: entries }, () => '')));
    if (need < 0 || need > entries * 1000) continue;
    const values = Array.from({ length: entries }, (_, i) =>
      'x'.repeat(Math.min(1000, Math.max(0, need - i * 1000))),
    );
    const event = padded(values);
    if (payloadBytes(event) === bytes) return { ...request, event };
  }
  throw new Error(`cannot pad a payload to ${bytes} bytes`);
}

/** A temporary directory for PEM files, removed by `cleanup`. */
export function tempFiles(): { dir: string; write(name: string, content: string): string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'aqueduct-provider-test-'));
  return {
    dir,
    write(name, content) {
      const file = join(dir, name);
      writeFileSync(file, content);
      return file;
    },
    cleanup() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** FCM built the way the consumer builds it: from settings (environment variable names), validated. */
export function fcmFromSettings(env: Record<string, string>, tuning: ProviderTuning = {}): FcmProvider {
  return new FcmProvider(fcmProviderOptions(loadConfig(env), tuning));
}

/**
 * FCM pointed straight at a server (a simulator), trusting its certificate unless `trust` is false,
 * with a fixed token and project: the other options as given.
 */
export function fcmTo(
  server: { url: string; caPem: string },
  options: Partial<Omit<FcmProviderOptions, 'endpoint' | 'caPem'>> & { trust?: boolean } = {},
): FcmProvider {
  const { trust = true, ...rest } = options;
  return new FcmProvider({
    endpoint: parseEndpoint('fcm', server.url, 'FCM_ENDPOINT'),
    ...(trust ? { caPem: server.caPem } : {}),
    accessToken: 't',
    projectId: 'p',
    ...rest,
  });
}

/** APNs built the way the consumer builds it; settings that configure no APNs are a test error. */
export function apnsFromSettings(env: Record<string, string>, tuning: ProviderTuning = {}): PushProvider {
  const options = apnsProviderOptions(loadConfig(env), tuning);
  if (options === undefined) throw new Error('these settings configure no APNs');
  return new ApnsProvider(options);
}

/** A simulator shared by a suite's tests, put back after each: no faults, no records, its buckets full. */
export function resetSimulator(sim: RunningSimulator): void {
  sim.setFaults({ error500: 0, error503: 0, drop: 0, slow: 0, storm: null });
  sim.reset();
}
