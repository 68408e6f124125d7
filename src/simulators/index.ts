export { type ApnsSimulator, type ApnsSimulatorOptions, startApnsSimulator } from './apns.ts';
export { APNS_MAX_PAYLOAD_BYTES } from './apns-validation.ts';
export { generateCertificate, type SimulatorCertificate } from './certs.ts';
export { DEFAULT_BAD_TOKEN_PREFIX, DEFAULT_DEAD_TOKEN_PREFIX, type SimulatorFaults } from './faults.ts';
export {
  FCM_MAX_PAYLOAD_BYTES,
  type FcmSimulator,
  type FcmSimulatorOptions,
  startFcmSimulator,
} from './fcm.ts';
export { DEFAULT_BURST, DEFAULT_RATE, type RunningSimulator, type SimulatorOptions } from './simulator.ts';
export type { AcceptedRecord, SimulatorStats } from './stats.ts';
export { TokenBucket } from './token-bucket.ts';
