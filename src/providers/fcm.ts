import https from 'node:https';
import {
  type App,
  applicationDefault,
  type Credential,
  cert,
  deleteApp,
  initializeApp,
} from 'firebase-admin/app';
import { getMessaging, type Message, type Messaging } from 'firebase-admin/messaging';
import type { NotificationEvent } from '../events/event.ts';
import { EVENT_ID_DATA_KEY } from '../events/payload.ts';
import { withoutToken } from '../redact.ts';
import { createFcmAgent, type Endpoint, FCM_HOST } from './endpoint.ts';
import { ProviderConfigError } from './errors.ts';
import { classifyFcmFailure, describeFcmError } from './fcm-classification.ts';
import { TokenRefusalGuard } from './token-refusal-guard.ts';
import type { PushOutcome, PushProvider, PushRequest } from './types.ts';

/** Options of {@link FcmProvider}. */
export interface FcmProviderOptions {
  /** The Firebase project (FCM_PROJECT_ID). When absent firebase-admin takes it from the credential. */
  projectId?: string;
  /** A service-account JSON file (GOOGLE_APPLICATION_CREDENTIALS). Absent: Application Default Credentials. */
  serviceAccountFile?: string;
  /**
   * A fixed OAuth access token instead of Google credentials: for simulators only, so allowed only
   * together with `endpoint` (production keeps real credentials).
   */
  accessToken?: string;
  /** A firebase-admin credential to fetch OAuth access tokens with, instead of the options above. */
  credential?: Credential;
  /** An FCM HTTP v1 server to use instead of fcm.googleapis.com (FCM_ENDPOINT, already parsed). */
  endpoint?: Endpoint;
  /** PEM certificate(s) to trust for TLS (the contents of FCM_CA_FILE); default: Node's CA store. */
  caPem?: string;
  /**
   * Requests in flight at once, across all concurrent `send` calls of this provider (the agent's
   * `maxSockets`; the others wait in the agent's queue, where firebase-admin's 15 s timeout does not run
   * yet). Default 64.
   */
  maxInFlight?: number;
}

/** sendEach takes at most 500 messages (firebase-admin's FCM_MAX_BATCH_SIZE). */
const SEND_EACH_LIMIT = 500;

/** Fewest ms between two access-token refreshes forced by 401s (the answers of one wave ask for one). */
const FORCED_REFRESH_INTERVAL_MS = 5000;

let appCounter = 0;

/**
 * FCM through firebase-admin's `sendEach`, one HTTP v1 request per push.
 *
 * Transport: firebase-admin's HTTP/1.1 transport (`enableLegacyHttpTransport()`) over a keep-alive
 * `https.Agent` given as the app's documented `httpAgent` option. The agent is what makes the endpoint
 * override possible (it dials FCM_ENDPOINT whatever host firebase-admin addresses), its `maxSockets`
 * bounds the requests in flight, and its connections live across batches (the HTTP/2 transport opens a
 * session per `sendEach` call). Production and simulators therefore run the very same code path.
 *
 * firebase-admin's own retries (503, ECONNRESET, ETIMEDOUT, up to 4 times with back-off) are switched
 * off: every attempt must pass Aqueduct's token bucket, and a hidden retry would both exceed the rate
 * and hold a batch for seconds. Transient failures come back as `retry` outcomes instead.
 */
export class FcmProvider implements PushProvider {
  readonly platform = 'fcm' as const;
  /** Whether firebase-admin's internal retries could be switched off (see the class comment). */
  readonly libraryRetriesDisabled: boolean;
  private readonly app: App;
  private readonly messaging: Messaging;
  private readonly agent: https.Agent;
  private readonly maxInFlight: number;
  private lastForcedRefresh = 0;
  private readonly refusals = new TokenRefusalGuard(
    'that GOOGLE_APPLICATION_CREDENTIALS and FCM_PROJECT_ID are the project the app registers with',
  );

  constructor(options: FcmProviderOptions) {
    const maxInFlight = options.maxInFlight ?? 64;
    this.maxInFlight = maxInFlight;
    if (options.accessToken !== undefined && options.endpoint === undefined) {
      throw new ProviderConfigError(
        'fcm',
        'a fixed access token is only for simulators: set FCM_ENDPOINT too',
        {
          setting: 'FCM_ENDPOINT',
        },
      );
    }
    this.agent = createFcmAgent({
      maxInFlight,
      ...(options.endpoint ? { endpoint: options.endpoint } : {}),
      ...(options.caPem ? { caPem: options.caPem } : {}),
    });
    this.app = initializeApp(
      {
        credential: chooseCredential(options),
        httpAgent: this.agent,
        ...(options.projectId ? { projectId: options.projectId } : {}),
      },
      `aqueduct-fcm-${process.pid}-${++appCounter}`,
    );
    this.messaging = getMessaging(this.app);
    this.messaging.enableLegacyHttpTransport();
    this.libraryRetriesDisabled = disableLibraryRetries(this.messaging);
  }

  async send(batch: readonly PushRequest[]): Promise<PushOutcome[]> {
    if (batch.length === 0) return [];
    const parts: Array<readonly PushRequest[]> = [];
    for (let i = 0; i < batch.length; i += SEND_EACH_LIMIT) parts.push(batch.slice(i, i + SEND_EACH_LIMIT));
    const results = await Promise.all(parts.map((part) => this.sendPart(part)));
    return results.flat();
  }

  private async sendPart(part: readonly PushRequest[]): Promise<PushOutcome[]> {
    try {
      const now = Date.now();
      const response = await this.messaging.sendEach(
        part.map((request) => toFcmMessage(request.event, request.expiresAtMs, now)),
      );
      const outcomes = response.responses.map((result, i): PushOutcome => {
        if (result.success)
          return this.refusals.check({
            kind: 'delivered',
            messageId: result.messageId ?? '',
            httpStatus: 200,
          });
        const token = (part[i] as PushRequest).event.token;
        return this.refusals.check(scrub(classifyFcmFailure(describeFcmError(result.error, token)), token));
      });
      if (outcomes.some((outcome) => outcome.kind === 'retry' && outcome.httpStatus === 401))
        this.refreshAccessToken();
      return outcomes;
    } catch (error) {
      // sendEach itself failed (no project id, the app deleted): every push of the part shares the fate.
      return part.map((request) =>
        scrub(classifyFcmFailure(describeFcmError(error, request.event.token)), request.event.token),
      );
    }
  }

  /**
   * Opens the agent's `maxInFlight` keep-alive connections with as many concurrent `GET /` requests
   * (FCM answers them with a 404 that counts against no quota; so do the simulators). firebase-admin's
   * HTTP/1.1 transport sends one request per connection: a cold process would otherwise do a TLS
   * handshake per request for its whole first window of sends, while the tokens for them tick away.
   * One request goes first, and again if it fails: an endpoint override that speaks HTTP/2 only
   * refuses the first handshake, and the agent then knows to bridge the others (see endpoint.ts). Its
   * connection is one of those the concurrent requests then use.
   */
  async warmUp(timeoutMs = 5000): Promise<number> {
    if (!(await this.openConnection(timeoutMs))) await this.openConnection(timeoutMs);
    const opened = await Promise.all(
      Array.from({ length: this.maxInFlight }, () => this.openConnection(timeoutMs)),
    );
    return opened.filter(Boolean).length;
  }

  private openConnection(timeoutMs: number): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const request = https.request(
        { hostname: FCM_HOST, port: '443', path: '/', method: 'GET', agent: this.agent, timeout: timeoutMs },
        (response) => {
          response.resume();
          response.once('end', () => resolve(true));
        },
      );
      request.once('timeout', () => request.destroy());
      request.once('error', () => resolve(false));
      request.end();
    });
  }

  /**
   * FCM refused our OAuth access token (revoked, or the clock is off): firebase-admin would send the
   * cached one until five minutes before it expires, so every retry in that time would meet the same
   * 401. This fetches a fresh one for the next sends, through the app's internals (the only way to
   * force it; without them the token is renewed when it expires).
   */
  private refreshAccessToken(): void {
    const now = Date.now();
    if (now - this.lastForcedRefresh < FORCED_REFRESH_INTERVAL_MS) return;
    this.lastForcedRefresh = now;
    const internals = (this.app as { INTERNAL?: { getToken?: (forceRefresh: boolean) => Promise<unknown> } })
      .INTERNAL;
    internals?.getToken?.(true)?.catch(() => {});
  }

  async close(): Promise<void> {
    await deleteApp(this.app).catch(() => {});
    this.agent.destroy();
  }
}

/**
 * The FCM v1 message for an event: notification, data (with the event id), Android delivery options.
 * `expiresAtMs` (when its TTL runs out, see PushRequest) makes the TTL what is left of it at `nowMs`.
 */
export function toFcmMessage(
  event: NotificationEvent,
  expiresAtMs?: number,
  nowMs: number = Date.now(),
): Message {
  const android: NonNullable<Message['android']> = {
    priority: event.priority === 'high' ? 'high' : 'normal',
  };
  if (event.ttlSeconds !== undefined)
    android.ttl = expiresAtMs === undefined ? event.ttlSeconds * 1000 : Math.max(0, expiresAtMs - nowMs);
  if (event.collapseKey !== undefined) android.collapseKey = event.collapseKey;
  return {
    token: event.token,
    notification: { title: event.notification.title, body: event.notification.body },
    data: { ...event.data, [EVENT_ID_DATA_KEY]: event.id },
    android,
  };
}

function chooseCredential(options: FcmProviderOptions): Credential {
  if (options.credential !== undefined) return options.credential;
  if (options.accessToken !== undefined) return staticTokenCredential(options.accessToken);
  if (options.serviceAccountFile !== undefined) {
    try {
      return cert(options.serviceAccountFile);
    } catch (error) {
      throw new ProviderConfigError(
        'fcm',
        'GOOGLE_APPLICATION_CREDENTIALS is not a readable service-account file',
        {
          setting: 'GOOGLE_APPLICATION_CREDENTIALS',
          cause: error,
        },
      );
    }
  }
  return applicationDefault();
}

/** A credential that never talks to Google: a simulator accepts any bearer token. */
function staticTokenCredential(token: string): Credential {
  return { getAccessToken: async () => ({ access_token: token, expires_in: 3600 }) };
}

/**
 * firebase-admin has no option for its retry policy; it lives on the messaging request handler's HTTP
 * client (`RequestClient.retry`, checked in firebase-admin 14.5). When the shape is not what we know, the
 * library's retries stay on and `libraryRetriesDisabled` says so (a test checks it stays true).
 */
function disableLibraryRetries(messaging: Messaging): boolean {
  const handler = (messaging as unknown as { messagingRequestHandler?: { httpClient?: { retry?: unknown } } })
    .messagingRequestHandler;
  const client = handler?.httpClient;
  if (!client || typeof client.retry !== 'object' || client.retry === null) return false;
  const retry = client.retry as { maxRetries?: unknown };
  if (typeof retry.maxRetries !== 'number') return false;
  client.retry = { ...retry, maxRetries: 0 };
  return true;
}

/** A reason never quotes the device token, even if a server echoed it. */
export function scrub(outcome: PushOutcome, token: string): PushOutcome {
  if (outcome.kind === 'delivered' || !token) return outcome;
  const reason = withoutToken(outcome.reason, token);
  return reason === outcome.reason ? outcome : { ...outcome, reason };
}
