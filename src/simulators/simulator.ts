import type { SimulatorFaults } from './faults.ts';
import type { AcceptedRecord, SimulatorStats, ThrottleRecord } from './stats.ts';

/** The limits a simulator enforces; `deviceRate: null` removes the per-device limit. */
export interface SimulatorLimits {
  rate?: number;
  burst?: number;
  deviceRate?: number | null;
  deviceBurst?: number;
}

/**
 * What every simulator takes and what a running one offers: the FCM and APNs simulators differ in their
 * protocol, not in how a test, a benchmark or the CLI drives them.
 */

/** Options every simulator takes. */
export interface SimulatorOptions {
  /** Interface to listen on. Default 127.0.0.1 (the CLI listens on 0.0.0.0). */
  host?: string;
  /** Port to listen on; 0 (the default) picks a free one. */
  port?: number;
  /** Sustained requests per second the simulated provider allows (token refill rate). Default 800. */
  rate?: number;
  /** Requests it allows at once after a quiet spell (bucket size). Default 2000. */
  burst?: number;
  /**
   * Sustained pushes per second it allows to any one device token (a bucket per device). Beyond it the
   * device's pushes are refused as the real provider refuses them: APNs 429 TooManyRequests, FCM 429
   * RESOURCE_EXHAUSTED / QUOTA_EXCEEDED with a QuotaFailure naming the device's message rate. Default:
   * no per-device limit.
   */
  deviceRate?: number;
  /** Pushes one device takes at once (its bucket's size). Default: `deviceRate` (at least 1). */
  deviceBurst?: number;
  /** Faults to inject from the start; `setFaults` changes them at run time. */
  faults?: Partial<SimulatorFaults>;
  /** Check credentials instead of accepting any well-formed one. */
  verifyAuth?: boolean;
  /** Extra names (or IPs) for the TLS certificate, besides localhost, 127.0.0.1, ::1 and this host's name. */
  certHosts?: string[];
  /** Keep each accepted request's payload in its record (tests); off by default to keep memory flat. */
  keepPayloads?: boolean;
  /** Seed of the fault dice, for a run that can be replayed. Default: random. */
  seed?: number;
}

export const DEFAULT_RATE = 800;
export const DEFAULT_BURST = 2000;

/** A running simulator, in-process. */
export interface RunningSimulator {
  readonly kind: 'fcm' | 'apns';
  /** `https://host:port`: the endpoint override (FCM_ENDPOINT / APNS_ENDPOINT). */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** The self-signed certificate clients must trust (FCM_CA_FILE / APNS_CA_FILE contents). */
  readonly caPem: string;
  /** Where GET /stats answers. */
  readonly statsUrl: string;
  /** Counts so far (a copy). */
  stats(): SimulatorStats;
  /** Every accepted notification so far, in arrival order. */
  records(): AcceptedRecord[];
  /** Arrival times (epoch ms) of every request that took a token from the bucket, accepted or not. */
  admissions(): number[];
  /** Every 429 answered so far, in order: when, and whether the provider's or a device's limit said it. */
  throttles(): ThrottleRecord[];
  /** The faults in force. */
  faults(): SimulatorFaults;
  /** Changes some faults (the others stay); returns the faults now in force. */
  setFaults(update: Partial<SimulatorFaults>): SimulatorFaults;
  /** Forgets counts and records and refills the buckets (optionally with new limits). */
  reset(limits?: SimulatorLimits): void;
  /** Changes the provider's rate and burst from now on, keeping the bucket's level, records and counts. */
  setLimits(limits: { rate?: number; burst?: number }): void;
  /** The environment that points Aqueduct here, given where the certificate was written. */
  env(caFile: string): Record<string, string>;
  close(): Promise<void>;
}
