import { randomUUID } from 'node:crypto';
import diagnosticsChannel from 'node:diagnostics_channel';
import type http2 from 'node:http2';
import net from 'node:net';
import apn from '@parse/node-apn';
import type { NotificationEvent } from '../events/event.ts';
import { apnsPayload } from '../events/payload.ts';
import { classifyApnsFailure, describeApnsFailure } from './apns-classification.ts';
import { type ProviderTokenStore, providerTokenSigner, SharedProviderToken } from './apns-provider-token.ts';
import { ConcurrencyLimit } from './concurrency.ts';
import type { Endpoint } from './endpoint.ts';
import { ProviderConfigError } from './errors.ts';
import { scrub } from './fcm.ts';
import { TokenRefusalGuard } from './token-refusal-guard.ts';
import type { PushOutcome, PushProvider, PushRequest } from './types.ts';

/** Options of {@link ApnsProvider}. */
export interface ApnsProviderOptions {
  /** The .p8 signing key, PEM text (the contents of APNS_KEY_FILE). */
  keyPem: string;
  /** The key's 10-character id (APNS_KEY_ID). */
  keyId: string;
  /** The Apple developer team id (APNS_TEAM_ID). */
  teamId: string;
  /** The app's bundle id, sent as `apns-topic` (APNS_TOPIC). */
  topic: string;
  /** api.push.apple.com when true, api.sandbox.push.apple.com otherwise (APNS_PRODUCTION). */
  production: boolean;
  /**
   * An APNs HTTP/2 server to use instead of Apple's (APNS_ENDPOINT, already parsed); over plain text
   * (HTTP/2 with prior knowledge) when its scheme is `http`.
   */
  endpoint?: Endpoint;
  /** PEM certificate(s) to trust for TLS (the contents of APNS_CA_FILE); default: Node's CA store. */
  caPem?: string;
  /** Requests in flight at once, across all concurrent `send` calls of this provider. Default 64. */
  maxInFlight?: number;
  /** How long to wait for an answer before the push counts as a transient failure. Default 5000 ms. */
  requestTimeoutMs?: number;
  /**
   * Where the fleet shares its provider token (see apns-provider-token.ts); absent: this process signs
   * its own, as node-apn does.
   */
  tokenStore?: ProviderTokenStore;
  /** The token store could not be reached (the process goes on with a token of its own meanwhile). */
  onTokenStoreError?: (error: unknown) => void;
  /** How often (ms) the token store is read for a token another process renewed. Default 60 000. */
  tokenCheckEveryMs?: number;
}

interface FinishMessage {
  stream: { sentHeaders?: Record<string, unknown> };
  headers: Record<string, unknown>;
}

/** What the diagnostics channel saw of a push's answer. */
interface Observed {
  status?: number;
  retryAfter?: string;
}

/**
 * A stream the server reset with REFUSED_STREAM was not processed at all (RFC 9113 §8.7), so it is sent
 * again at once, on the token it already took. APNs allows one stream on a new connection until a
 * request with a valid provider token succeeds, and drops to one stream after a rejected push: the
 * streams a client opened before that SETTINGS frame reached it come back refused.
 */
const REFUSED_STREAM = 'NGHTTP2_REFUSED_STREAM';
const MAX_REFUSED_RESENDS = 3;

/**
 * APNs through @parse/node-apn: token authentication (a .p8 key), one HTTP/2 connection, one request
 * per push.
 *
 * node-apn retries 429 and 5xx itself, immediately, up to `connectionRetryLimit` times; that is switched
 * off (`connectionRetryLimit: 0`) so that every attempt passes Aqueduct's token bucket. node-apn also
 * never reports Retry-After (it reads the header under a name HTTP/2 never uses, then deletes it), and
 * reports a 429/5xx that arrives on a session it is closing as a bare error without its status; so the
 * provider reads `:status` and `retry-after` from Node's `http2.client.stream.finish` diagnostics
 * channel, matching each answer to its push by the `apns-id` it gave the push. Finally, a push whose
 * node-apn promise has not settled twice the request timeout after it started is given up as a `retry`
 * (a stream queued on a session that node-apn closes can otherwise wait forever).
 */
export class ApnsProvider implements PushProvider {
  readonly platform = 'apns' as const;
  private readonly provider: apn.Provider;
  private readonly topic: string;
  private readonly limit: ConcurrencyLimit;
  private readonly maxInFlight: number;
  /** The HTTP/2 sessions whose SETTINGS bound {@link limit} (see followStreamLimit). */
  private readonly followed = new WeakSet<http2.ClientHttp2Session>();
  private readonly giveUpMs: number;
  private readonly refusals = new TokenRefusalGuard('APNS_PRODUCTION (sandbox or production) and APNS_TOPIC');
  /** The fleet's provider token, when shared (see ApnsProviderOptions.tokenStore). */
  private readonly sharedToken: SharedProviderToken | undefined;
  /** apns-id of pushes in flight → what the diagnostics channel saw of their answer. */
  private readonly pending = new Map<string, Observed | undefined>();
  private readonly onFinish = (message: unknown) => {
    if (this.pending.size === 0) return;
    const { stream, headers } = message as FinishMessage;
    const status = Number(headers[':status']);
    if (status === 200) return;
    const id = stream.sentHeaders?.['apns-id'];
    if (typeof id !== 'string' || !this.pending.has(id)) return;
    const retryAfter = headers['retry-after'];
    this.pending.set(id, { status, ...(retryAfter === undefined ? {} : { retryAfter: String(retryAfter) }) });
    // node-apn answers a 500 by closing its *current* HTTP/2 session, which is often not the one the 500
    // came on; every push queued or in flight there fails (or, if the server does not answer the GOAWAY,
    // hangs). At 1 % of 500s that failed about a third of all pushes in our load test. This channel runs
    // before the stream's 'response' event and hands over the same headers object, so node-apn is shown
    // a 502 instead (same retry path, no session teardown); the outcome still reports the real 500.
    if (status === 500) headers[':status'] = 502;
  };

  constructor(options: ApnsProviderOptions) {
    this.topic = options.topic;
    this.maxInFlight = options.maxInFlight ?? 64;
    this.limit = new ConcurrencyLimit(this.maxInFlight);
    const requestTimeoutMs = options.requestTimeoutMs ?? 5000;
    this.giveUpMs = 2 * requestTimeoutMs;
    try {
      this.provider = new apn.Provider({
        token: { key: options.keyPem, keyId: options.keyId, teamId: options.teamId },
        production: options.production,
        ...(options.endpoint ? endpointOptions(options.endpoint) : {}),
        ...(options.caPem ? { ca: [options.caPem] } : {}),
        connectionRetryLimit: 0,
        requestTimeout: requestTimeoutMs,
      });
    } catch (error) {
      // node-apn signs a first token right away: a bad key fails here.
      throw new ProviderConfigError(
        'apns',
        'cannot sign a provider token with APNS_KEY_FILE / APNS_KEY_ID / APNS_TEAM_ID',
        {
          setting: 'APNS_KEY_FILE',
          cause: error,
        },
      );
    }
    this.sharedToken = options.tokenStore
      ? new SharedProviderToken(providerTokenSigner(options), options.tokenStore, {
          ...(options.onTokenStoreError ? { onStoreError: options.onTokenStoreError } : {}),
          checkEveryMs: options.tokenCheckEveryMs,
        })
      : undefined;
    // node-apn reads the token from its config before every request (`current`, `isExpired`,
    // `regenerate`); the shared one takes the place of the one it signed itself.
    const config = (this.provider as unknown as { client?: { config?: { token?: unknown } } }).client?.config;
    if (this.sharedToken && config) config.token = this.sharedToken;
    this.followSessions();
    diagnosticsChannel.subscribe('http2.client.stream.finish', this.onFinish);
  }

  /**
   * Every HTTP/2 session node-apn opens (its client's `connect()`, again after a GOAWAY or a lost
   * connection) bounds the pushes in flight by its server's SETTINGS_MAX_CONCURRENT_STREAMS. Node
   * queues the streams beyond it inside the session, where node-apn's request timeout already runs: a
   * server allowing fewer streams than `maxInFlight` (APNs allows one until a provider token is
   * accepted) would time out pushes that were never sent, each spending an attempt. Waiting in
   * {@link limit} instead, a push's timeout starts when it can go out.
   */
  private followSessions(): void {
    type Client = { connect?: () => Promise<unknown>; session?: http2.ClientHttp2Session | null };
    const client = (this.provider as unknown as { client?: Client }).client;
    const connect = client?.connect;
    if (!client || typeof connect !== 'function') return;
    client.connect = async () => {
      const connected = await connect.call(client);
      if (client.session) this.followStreamLimit(client.session);
      return connected;
    };
  }

  private followStreamLimit(session: http2.ClientHttp2Session): void {
    if (this.followed.has(session)) return;
    this.followed.add(session);
    const apply = ({ maxConcurrentStreams }: http2.Settings) => {
      const allowed = maxConcurrentStreams ?? this.maxInFlight;
      this.limit.resize(Math.max(1, Math.min(this.maxInFlight, allowed)));
    };
    session.on('remoteSettings', apply);
    if (session.remoteSettings) apply(session.remoteSettings);
  }

  /**
   * Opens the HTTP/2 session to APNs before the first send (its TLS handshake), so that a process's
   * first window of sends does not wait for it while their tokens tick away. node-apn opens the session
   * lazily on its first request; its client's `connect()` does the same without a request. Resolves with
   * the sessions opened (0 or 1); never throws: a failure shows on the first send instead.
   */
  async warmUp(timeoutMs = 5000): Promise<number> {
    type Session = {
      connecting?: boolean;
      destroyed?: boolean;
      once(event: string, listener: () => void): void;
    };
    const client = (
      this.provider as unknown as { client?: { connect?: () => Promise<unknown>; session?: Session } }
    ).client;
    if (typeof client?.connect !== 'function') return 0;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<number>((resolve) => {
      timer = setTimeout(() => resolve(0), timeoutMs);
    });
    const connected = async (): Promise<number> => {
      // The first request on the new session carries the fleet's token, not one of this process's own.
      await this.sharedToken?.ready;
      await client.connect?.();
      const session = client.session;
      if (!session || session.destroyed) return 0;
      if (session.connecting) {
        // connect() resolves once the session is created; the TLS handshake ends with its 'connect'.
        await new Promise<void>((resolve) => {
          session.once('connect', resolve);
          session.once('close', resolve);
        });
      }
      return session.destroyed ? 0 : 1;
    };
    try {
      return await Promise.race([connected(), timeout]);
    } catch {
      return 0;
    } finally {
      clearTimeout(timer);
    }
  }

  async send(batch: readonly PushRequest[]): Promise<PushOutcome[]> {
    await this.sharedToken?.ready;
    return Promise.all(
      batch.map(async (request) => this.refusals.check(await this.sendWithResends(request))),
    );
  }

  /**
   * One push, sent again at once when its stream was refused: each try waits for a slot of
   * {@link limit} of its own, so that resends after a server lowered its streams wait for that bound
   * too instead of queueing inside the session.
   */
  private async sendWithResends(request: PushRequest): Promise<PushOutcome> {
    for (let resends = 0; ; resends += 1) {
      const outcome = await this.limit.run(() => this.sendOne(request, resends < MAX_REFUSED_RESENDS));
      if (outcome !== 'refused') return outcome;
    }
  }

  /** One try; `'refused'` when the server refused its stream and `mayResend`. */
  private async sendOne(
    { event, expiresAtMs }: PushRequest,
    mayResend: boolean,
  ): Promise<PushOutcome | 'refused'> {
    const notification = toApnsNotification(event, this.topic, Date.now(), expiresAtMs);
    const id = notification.id;
    this.pending.set(id, undefined);
    let timer: NodeJS.Timeout | undefined;
    const giveUp = new Promise<'gave-up'>((resolve) => {
      timer = setTimeout(() => resolve('gave-up'), this.giveUpMs);
    });
    try {
      const result = await Promise.race([this.provider.send(notification, event.token), giveUp]);
      if (result === 'gave-up') return { kind: 'retry', reason: 'network: no answer', throttled: false };
      const ok = result.sent[0] as (apn.ResponseSent & { 'apns-id'?: string }) | undefined;
      if (ok) return { kind: 'delivered', messageId: ok['apns-id'] ?? id, httpStatus: 200 };
      const failure = describeApnsFailure(result.failed[0], this.pending.get(id));
      if (failure.transportError === REFUSED_STREAM && mayResend) return 'refused';
      const outcome = classifyApnsFailure(failure);
      if (outcome.kind === 'retry' && outcome.scope === 'credentials') this.sharedToken?.refused();
      return scrub(outcome, event.token);
    } catch (error) {
      return scrub(classifyApnsFailure(describeApnsFailure({ error })), event.token);
    } finally {
      clearTimeout(timer);
      this.pending.delete(id);
    }
  }

  async close(): Promise<void> {
    this.sharedToken?.close();
    diagnosticsChannel.unsubscribe('http2.client.stream.finish', this.onFinish);
    // node-apn keeps a session whose connection was lost as its current one, and its shutdown waits for
    // that session's close() callback, which Node never calls for a session already destroyed: the
    // shutdown (and the consumer's with it) would never end. Such sessions are let go of first.
    const client = (this.provider as unknown as { client?: Record<string, unknown> }).client;
    for (const name of ['session', 'manageChannelsSession']) {
      const session = client?.[name] as { destroyed?: boolean } | null | undefined;
      if (client && session?.destroyed) client[name] = null;
    }
    // node-apn's shutdown returns nothing to await (despite its typings); its callback runs once the
    // HTTP/2 session has closed, which a stream the server never answers puts off. By the time a push is
    // given up (twice the request timeout) node-apn has timed out every stream; past it, the sessions
    // are destroyed.
    let timer: NodeJS.Timeout | undefined;
    const shutDown = new Promise<void>((resolve) => {
      this.provider.shutdown(resolve);
    });
    const bound = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        for (const name of ['session', 'manageChannelsSession']) {
          (client?.[name] as { destroy?: () => void } | null | undefined)?.destroy?.();
        }
        resolve();
      }, this.giveUpMs);
    });
    try {
      await Promise.race([shutDown, bound]);
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * The APNs request for an event: an alert with title and body, the event's data as custom keys next to
 * `aps` (with the event id), and the delivery headers: priority 10 (high) or 5, expiration from the TTL,
 * collapse id, topic, push type `alert`, and a fresh `apns-id`.
 */
export function toApnsNotification(
  event: NotificationEvent,
  topic: string,
  nowMs: number = Date.now(),
  expiresAtMs?: number,
): apn.Notification {
  const notification = new apn.Notification();
  notification.rawPayload = apnsPayload(event);
  notification.id = randomUUID();
  notification.topic = topic;
  notification.pushType = 'alert';
  notification.priority = event.priority === 'high' ? 10 : 5;
  // apns-expiration is a UNIX time; 0 means "deliver now or never", which is what a TTL of 0 asks for.
  // A TTL counts from when the event was published (`expiresAtMs`), not from this try.
  if (event.ttlSeconds !== undefined) {
    notification.expiry =
      event.ttlSeconds === 0 ? 0 : Math.floor((expiresAtMs ?? nowMs + event.ttlSeconds * 1000) / 1000);
  }
  if (event.collapseKey !== undefined) notification.collapseId = event.collapseKey;
  return notification;
}

/**
 * node-apn's options for an endpoint override. node-apn hands its options to `http2.connect`, whose
 * `createConnection` replaces the TLS connection: for a plain-text endpoint the session runs over a
 * plain socket (HTTP/2 with prior knowledge).
 */
function endpointOptions(endpoint: Endpoint): {
  address: string;
  port: number;
  createConnection?: () => net.Socket;
} {
  const { host, port } = endpoint;
  if (endpoint.scheme === 'https') return { address: host, port };
  return { address: host, port, createConnection: () => net.connect({ host, port }) };
}
