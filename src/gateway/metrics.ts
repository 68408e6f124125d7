import { Counter, collectDefaultMetrics, Histogram, Registry } from 'prom-client';

/**
 * The gateway's Prometheus metrics, served at `/metrics`. A registry of its own (not prom-client's
 * global one), so that a test can run several gateways in one process. Tenants are not a label: their
 * number is unbounded; the per-tenant picture is in the limiter's buckets (`aqueduct inspect gateway:*`).
 */
export class GatewayMetrics {
  readonly registry = new Registry();
  /** Requests answered, by status code. */
  readonly requests = new Counter({
    name: 'aqueduct_gateway_requests_total',
    help: 'Ingest requests answered, by HTTP status.',
    labelNames: ['status'] as const,
    registers: [this.registry],
  });
  /** Requests refused before they reached a route (see `BoundedServerOptions.onRefused`). */
  readonly protocolRefusals = new Counter({
    name: 'aqueduct_gateway_protocol_refusals_total',
    help: 'Requests refused before reaching the API (broken framing, missed deadline, oversized headers, unsupported version, coding or expectation, CONNECT, too many pipelined, arriving while the gateway shuts down), by HTTP status.',
    labelNames: ['status'] as const,
    registers: [this.registry],
  });
  /** Events acknowledged by Kafka and answered 202. */
  readonly eventsAccepted = new Counter({
    name: 'aqueduct_gateway_events_accepted_total',
    help: 'Events written to Kafka (acknowledged by all in-sync replicas) and answered 202.',
    registers: [this.registry],
  });
  /** Events refused, by reason (invalid-event, throttled, kafka-unavailable, …). */
  readonly eventsRefused = new Counter({
    name: 'aqueduct_gateway_events_refused_total',
    help: 'Events in requests that were not accepted, by reason.',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  /** Request latency, by status. */
  readonly requestSeconds = new Histogram({
    name: 'aqueduct_gateway_request_duration_seconds',
    help: 'Time from request to answer, by HTTP status.',
    labelNames: ['status'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });
  /** Kafka produce requests (each may carry several coalesced HTTP requests). */
  readonly kafkaWriteSeconds = new Histogram({
    name: 'aqueduct_gateway_kafka_write_duration_seconds',
    help: 'Duration of Kafka produce requests (acks from all in-sync replicas), by outcome.',
    labelNames: ['outcome'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  readonly kafkaWriteEvents = new Histogram({
    name: 'aqueduct_gateway_kafka_write_events',
    help: 'Events per Kafka produce request (HTTP requests coalesced while one is in flight).',
    buckets: [1, 10, 100, 250, 500, 1000, 2500, 5000],
    registers: [this.registry],
  });

  constructor(options: { defaultMetrics?: boolean } = {}) {
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });
  }
}
