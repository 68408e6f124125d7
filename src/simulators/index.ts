export {
  APNS_MAX_PAYLOAD_BYTES,
  type ApnsSimulator,
  type ApnsSimulatorOptions,
  startApnsSimulator,
} from './apns.ts';
export { generateCertificate, type SimulatorCertificate } from './certs.ts';
export {
  FCM_MAX_PAYLOAD_BYTES,
  type FcmSimulator,
  type FcmSimulatorOptions,
  startFcmSimulator,
} from './fcm.ts';
export {
  type AcceptedRecord,
  DEFAULT_BAD_TOKEN_PREFIX,
  DEFAULT_BURST,
  DEFAULT_DEAD_TOKEN_PREFIX,
  DEFAULT_RATE,
  type RunningSimulator,
  type SimulatorFaults,
  type SimulatorOptions,
  type SimulatorStats,
  TokenBucket,
} from './shared.ts';
