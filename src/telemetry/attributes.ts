import { createHash } from 'node:crypto';
import type { Attributes } from '@opentelemetry/api';
import {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_REQUEST_RESEND_COUNT,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
} from '@opentelemetry/semantic-conventions';

/**
 * The span attribute names Aqueduct writes. HTTP ones are stable semantic conventions (imported); the
 * messaging ones are still "development" in semantic-conventions 1.45, so, as that package advises for
 * unstable names, they are copied here rather than imported from its incubating entry point. Names
 * of Aqueduct's own start with `aqueduct.`.
 *
 * Never an attribute: a device token, a credential, notification text or data. The device is named by
 * {@link deviceTokenId}, a hash.
 */
export const ATTR = {
  httpMethod: ATTR_HTTP_REQUEST_METHOD,
  httpStatus: ATTR_HTTP_RESPONSE_STATUS_CODE,
  httpResendCount: ATTR_HTTP_REQUEST_RESEND_COUNT,
  serverAddress: ATTR_SERVER_ADDRESS,
  serverPort: ATTR_SERVER_PORT,
  /** Still "development" in semantic-conventions 1.45. */
  urlTemplate: 'url.template',
  errorType: ATTR_ERROR_TYPE,

  /** `messaging.system` was renamed `messaging.system.name`; both are written for older backends. */
  messagingSystem: 'messaging.system',
  messagingSystemName: 'messaging.system.name',
  messagingOperationType: 'messaging.operation.type',
  messagingOperationName: 'messaging.operation.name',
  messagingDestination: 'messaging.destination.name',
  messagingPartition: 'messaging.destination.partition.id',
  messagingMessageId: 'messaging.message.id',
  messagingConsumerGroup: 'messaging.consumer.group.name',
  messagingClientId: 'messaging.client.id',
  /** `messaging.kafka.offset` was renamed `kafka.offset`; both are written for older backends. */
  kafkaOffset: 'kafka.offset',
  messagingKafkaOffset: 'messaging.kafka.offset',

  eventId: 'aqueduct.event.id',
  tenant: 'aqueduct.tenant',
  platform: 'aqueduct.platform',
  priority: 'aqueduct.priority',
  /** A hash of platform + device token (the message key `aqueduct publish` gives the event). */
  deviceTokenId: 'aqueduct.device.token_id',
  provider: 'aqueduct.provider',
  attempt: 'aqueduct.attempt',
  outcome: 'aqueduct.outcome',
  /** The provider's error code behind an outcome (UNREGISTERED, BadDeviceToken, HTTP 503, timeout…). */
  outcomeReason: 'aqueduct.outcome.reason',
  retryAfterMs: 'aqueduct.retry_after_ms',
  throttled: 'aqueduct.throttled',
  sendBatchSize: 'aqueduct.send.batch_size',
  tokensRequested: 'aqueduct.tokens.requested',
  tokensGranted: 'aqueduct.tokens.granted',
  tokensWaitMs: 'aqueduct.tokens.wait_ms',
  tokenTakes: 'aqueduct.tokens.takes',
  buckets: 'aqueduct.buckets',
  pausedMs: 'aqueduct.paused_ms',
  expectedWaitMs: 'aqueduct.expected_wait_ms',
} as const;

/** What an event may contribute to a span: its id, tenant, platform and priority, and a token hash. */
export interface EventLike {
  id?: unknown;
  tenant?: unknown;
  platform?: unknown;
  priority?: unknown;
  token?: unknown;
}

/** The attributes of an event (never its token, text or data). */
export function eventAttributes(event: EventLike): Attributes {
  const attributes: Attributes = {};
  if (typeof event.id === 'string') {
    attributes[ATTR.eventId] = event.id;
    attributes[ATTR.messagingMessageId] = event.id;
  }
  if (typeof event.tenant === 'string') attributes[ATTR.tenant] = event.tenant;
  if (typeof event.platform === 'string') attributes[ATTR.platform] = event.platform;
  if (typeof event.priority === 'string') attributes[ATTR.priority] = event.priority;
  if (typeof event.platform === 'string' && typeof event.token === 'string') {
    attributes[ATTR.deviceTokenId] = deviceTokenId(event.platform, event.token);
  }
  return attributes;
}

/**
 * A device named without its token: the first 22 base64url characters of SHA-256(platform NUL token),
 * the same value as the Kafka message key `aqueduct publish` gives the event, so that support can find a
 * device's traces and messages from a token they were given, and nobody can go the other way.
 */
export function deviceTokenId(platform: string, token: string): string {
  return createHash('sha256').update(`${platform}\0${token}`).digest('base64url').slice(0, 22);
}

/** The code part of an outcome reason (`INVALID_ARGUMENT: …` → `INVALID_ARGUMENT`), at most 64 characters. */
export function reasonCode(reason: string): string {
  const colon = reason.indexOf(':');
  return (colon >= 0 ? reason.slice(0, colon) : reason).trim().slice(0, 64);
}
