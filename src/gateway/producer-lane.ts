import type { Kafka, Message, Producer, RetryOptions } from 'kafkajs';
import { createProducer } from '../kafka/client.ts';
import type { Logger } from '../log.ts';
import { KafkaUnavailableError } from './kafka-unavailable.ts';
import { topicRefusal } from './topic-check.ts';

/** Options of one {@link ProducerLane}: those of the KafkaWriter, bar how many lanes it runs. */
export interface ProducerLaneOptions {
  kafka: Kafka;
  topic: string;
  /** Each request's deadline, from its arrival: after it, the request fails (503), never later. */
  timeoutMs: number;
  /** Most bytes (message values) coalesced into one produce request. Default 512 KiB. */
  maxBatchBytes?: number;
  /** Every this many ms, while no producer is connected, one is connected in the background. Default 2000. */
  reconnectIntervalMs?: number;
  logger?: Logger;
  /** Called after every produce request with its size, duration and outcome (for metrics and readiness). */
  onWrite?: (sample: WriteSample) => void;
}

/** One produce request, as {@link ProducerLaneOptions.onWrite} reports it. */
export interface WriteSample {
  events: number;
  requests: number;
  seconds: number;
  /** Kafka acknowledged the write. */
  ok: boolean;
  /** Kafka refused the topic itself (missing, forbidden, an invalid name): see {@link topicRefusal}. */
  refused: boolean;
}

interface Pending {
  messages: Message[];
  bytes: number;
  deadline: number;
  resolve: () => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
  sent: boolean;
}

/**
 * One idempotent producer with its own queue: one produce request in flight at a time, the requests that
 * arrive meanwhile coalesced into the next one, each bounded by its deadline (see kafka-writer.ts for why).
 */
export class ProducerLane {
  readonly topic: string;
  private readonly kafka: Kafka;
  private readonly timeoutMs: number;
  private readonly maxBatchBytes: number;
  private readonly reconnectIntervalMs: number;
  private readonly logger: Logger | undefined;
  private readonly onWrite: ProducerLaneOptions['onWrite'];
  private readonly onHealth: (ok: boolean) => void;
  private readonly retry: RetryOptions;
  private producer: Producer | null = null;
  private connecting: Promise<Producer> | null = null;
  private healthyNow = false;
  private queue: Pending[] = [];
  private inFlight: Promise<void> | null = null;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private lastConnectFailure: { at: number; message: string } | null = null;
  private closed = false;

  constructor(options: ProducerLaneOptions, onHealth: (ok: boolean) => void) {
    this.onHealth = onHealth;
    this.kafka = options.kafka;
    this.topic = options.topic;
    this.timeoutMs = options.timeoutMs;
    this.maxBatchBytes = options.maxBatchBytes ?? 512 * 1024;
    this.reconnectIntervalMs = options.reconnectIntervalMs ?? 2000;
    this.logger = options.logger;
    this.onWrite = options.onWrite;
    // Four attempts within about 1.5 s (plus the connection timeouts), so that a failed write has given
    // up by itself before its deadline in the usual cases; the deadline covers the rest.
    this.retry = {
      retries: 3,
      initialRetryTime: 100,
      maxRetryTime: Math.max(200, Math.floor(this.timeoutMs / 4)),
    };
  }

  /** True while a producer is connected and the last write (if any) was acknowledged. */
  get ready(): boolean {
    return this.healthyNow && this.producer !== null;
  }

  /** Connects a producer; when Kafka cannot be reached, keeps trying in the background (never throws). */
  async start(): Promise<void> {
    try {
      await this.connectedProducer();
    } catch (error) {
      this.logger?.warn(
        { err: summary(error) },
        'Kafka not reachable yet; the gateway answers 503 until it is',
      );
      this.scheduleReconnect();
    }
  }

  /**
   * Resolves once Kafka acknowledged every message (all in-sync replicas); rejects with
   * {@link KafkaUnavailableError} otherwise, by the deadline at the latest.
   */
  write(messages: Message[]): Promise<void> {
    if (this.closed)
      return Promise.reject(new KafkaUnavailableError(this.topic, 'the gateway is shutting down'));
    return new Promise<void>((resolve, reject) => {
      const pending: Pending = {
        messages,
        bytes: messages.reduce((sum, m) => sum + byteLength(m.value) + byteLength(m.key), 0),
        deadline: Date.now() + this.timeoutMs,
        resolve,
        reject,
        sent: false,
        timer: setTimeout(() => {
          // Still queued: drop it unsent (an in-flight write is failed by its own timer).
          if (pending.sent) return;
          this.queue = this.queue.filter((p) => p !== pending);
          reject(new KafkaUnavailableError(this.topic, `not sent within ${this.timeoutMs} ms`));
        }, this.timeoutMs),
      };
      this.queue.push(pending);
      this.pump();
    });
  }

  private set healthy(ok: boolean) {
    this.healthyNow = ok;
    this.onHealth(ok);
  }

  /** Requests in flight or queued: where the writer sends the next one. */
  get load(): number {
    return (this.inFlight ? 1 : 0) + this.queue.length;
  }

  /** Waits for queued and in-flight writes (each still bounded by its deadline), then disconnects. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    while (this.inFlight || this.queue.length > 0) {
      if (this.inFlight) await this.inFlight;
      else this.pump();
      if (!this.inFlight && this.queue.length > 0) await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const producer = this.producer;
    this.producer = null;
    this.healthy = false;
    await producer?.disconnect().catch(() => {});
  }

  private pump(): void {
    if (this.inFlight || this.queue.length === 0) return;
    const batch: Pending[] = [];
    let bytes = 0;
    while (this.queue.length > 0) {
      const next = this.queue[0] as Pending;
      if (batch.length > 0 && bytes + next.bytes > this.maxBatchBytes) break;
      this.queue.shift();
      batch.push(next);
      bytes += next.bytes;
    }
    for (const pending of batch) pending.sent = true;
    this.inFlight = this.send(batch).finally(() => {
      this.inFlight = null;
      this.pump();
    });
  }

  private async send(batch: Pending[]): Promise<void> {
    const started = process.hrtime.bigint();
    const messages = batch.flatMap((p) => p.messages);
    const deadline = Math.min(...batch.map((p) => p.deadline));
    let producer: Producer | null = null;
    let timer: NodeJS.Timeout | undefined;
    // Once the produce request is out, a failure cannot tell whether the broker wrote it.
    let sending = false;
    try {
      const expired = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () =>
            reject(new KafkaUnavailableError(this.topic, `no acknowledgement within ${this.timeoutMs} ms`)),
          Math.max(0, deadline - Date.now()),
        );
      });
      producer = await Promise.race([this.connectedProducer(), expired]);
      sending = true;
      await Promise.race([
        producer.send({ topic: this.topic, messages, acks: -1, timeout: this.timeoutMs }),
        expired,
      ]);
      this.healthy = true;
      for (const pending of batch) {
        clearTimeout(pending.timer);
        pending.resolve();
      }
      this.onWrite?.({
        events: messages.length,
        requests: batch.length,
        seconds: elapsed(started),
        ok: true,
        refused: false,
      });
    } catch (error) {
      const refusal = topicRefusal(error, this.topic);
      const failure = new KafkaUnavailableError(
        this.topic,
        refusal ??
          (error instanceof KafkaUnavailableError
            ? error.message.replace(/^Kafka write to .*? failed: /, '')
            : summary(error).message),
        refusal ? { cause: error, refusal } : { cause: error, outcomeUnknown: sending },
      );
      this.healthy = false;
      if (producer) this.retire(producer);
      this.logger?.warn(
        { err: summary(refusal ? failure : error), events: messages.length },
        'Kafka write failed; answering 503',
      );
      for (const pending of batch) {
        clearTimeout(pending.timer);
        pending.reject(failure);
      }
      this.onWrite?.({
        events: messages.length,
        requests: batch.length,
        seconds: elapsed(started),
        ok: false,
        refused: refusal !== undefined,
      });
      this.scheduleReconnect();
    } finally {
      clearTimeout(timer);
    }
  }

  private connectedProducer(): Promise<Producer> {
    if (this.producer) return Promise.resolve(this.producer);
    if (this.connecting) return this.connecting;
    // Kafka was unreachable a moment ago: answer at once rather than make every request wait out its own
    // connection attempt. The background reconnect notices within reconnectIntervalMs when it is back.
    const failure = this.lastConnectFailure;
    if (failure && Date.now() - failure.at < this.reconnectIntervalMs) {
      this.scheduleReconnect();
      return Promise.reject(new KafkaUnavailableError(this.topic, `unreachable: ${failure.message}`));
    }
    return this.connect();
  }

  private connect(): Promise<Producer> {
    if (this.connecting) return this.connecting;
    const producer = createProducer(this.kafka, { allowAutoTopicCreation: false, retry: this.retry });
    this.connecting = producer.connect().then(
      () => {
        this.connecting = null;
        if (this.closed) {
          void producer.disconnect().catch(() => {});
          throw new KafkaUnavailableError(this.topic, 'the gateway is shutting down');
        }
        this.producer = producer;
        this.healthy = true;
        this.lastConnectFailure = null;
        return producer;
      },
      (error: unknown) => {
        this.connecting = null;
        this.lastConnectFailure = { at: Date.now(), message: summary(error).message };
        this.healthy = false;
        void producer.disconnect().catch(() => {});
        throw new KafkaUnavailableError(this.topic, `cannot connect: ${summary(error).message}`, {
          cause: error,
        });
      },
    );
    return this.connecting;
  }

  private retire(producer: Producer): void {
    if (this.producer === producer) this.producer = null;
    void producer.disconnect().catch(() => {});
  }

  private scheduleReconnect(): void {
    if (this.closed || this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (this.closed || this.producer) return;
      this.connect().then(
        () => this.logger?.info('Kafka producer connected again'),
        () => this.scheduleReconnect(),
      );
    }, this.reconnectIntervalMs);
    this.reconnectTimer.unref();
  }
}

function byteLength(value: Message['value'] | Message['key']): number {
  if (value === null || value === undefined) return 0;
  return typeof value === 'string' ? Buffer.byteLength(value) : value.length;
}

function elapsed(started: bigint): number {
  return Number(process.hrtime.bigint() - started) / 1e9;
}

function summary(error: unknown): { name: string; message: string } {
  if (error instanceof Error) return { name: error.name, message: error.message.slice(0, 300) };
  return { name: 'Error', message: String(error).slice(0, 300) };
}
