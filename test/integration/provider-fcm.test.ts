import https from 'node:https';
import type { Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { notificationEventSchema } from '../../src/events/event.ts';
import { EVENT_ID_DATA_KEY } from '../../src/events/payload.ts';
import { createFcmAgent } from '../../src/providers/endpoint.ts';
import { type FcmProvider, LOCAL_FCM_ACCESS_TOKEN, parseEndpoint } from '../../src/providers/index.ts';
import type { PushOutcome } from '../../src/providers/types.ts';
import { type FcmSimulator, startFcmSimulator } from '../../src/simulators/index.ts';
import {
  bulkyData,
  fcmFromSettings,
  fcmTo,
  pushRequest,
  resetSimulator,
  tempFiles,
  withPayloadOf,
} from '../helpers/provider-fixtures.ts';
import { startTlsSidecar } from '../helpers/tls-sidecar.ts';

// The real firebase-admin client against the in-process FCM simulator: no mocks anywhere.
describe('FCM provider (firebase-admin) against the FCM simulator', () => {
  let sim: FcmSimulator;
  let fcm: FcmProvider;
  const files = tempFiles();

  beforeAll(async () => {
    sim = await startFcmSimulator({ keepPayloads: true, projectId: 'aqueduct-test' });
    // Built the way the consumer builds it: from the configuration contract's settings.
    fcm = fcmFromSettings(
      {
        FCM_ENDPOINT: sim.url,
        FCM_CA_FILE: files.write('fcm.pem', sim.caPem),
        FCM_PROJECT_ID: 'aqueduct-test',
      },
      { maxInFlight: 16 },
    );
  });
  afterEach(() => resetSimulator(sim));
  afterAll(async () => {
    await fcm.close();
    await sim.close();
    files.cleanup();
  });

  it("switches firebase-admin's own retries off (every attempt must pass Aqueduct's bucket)", () => {
    expect(fcm.libraryRetriesDisabled).toBe(true);
  });

  it('warmUp opens the connections that the first sends then reuse (no handshake per push)', async () => {
    const cold = fcmFromSettings(
      {
        FCM_ENDPOINT: sim.url,
        FCM_CA_FILE: files.write('fcm-warm.pem', sim.caPem),
        FCM_PROJECT_ID: 'aqueduct-test',
      },
      { maxInFlight: 8 },
    );
    try {
      const before = sim.tlsConnections();
      expect(await cold.warmUp()).toBe(8);
      expect(sim.tlsConnections() - before).toBe(8);
      expect(sim.stats().requests).toBe(0); // GET / is no push: nothing counted, no token taken
      const outcomes = await cold.send(Array.from({ length: 8 }, () => pushRequest()));
      expect(outcomes.every((o) => o.kind === 'delivered')).toBe(true);
      expect(sim.tlsConnections() - before).toBe(8);
    } finally {
      await cold.close();
    }
  });

  it('delivers, mapping every event field onto the FCM v1 message', async () => {
    const request = pushRequest({
      notification: { title: 'Título', body: 'Body ✓' },
      data: { orderId: '42' },
      priority: 'high',
      ttlSeconds: 90,
      collapseKey: 'orders',
    });
    const [outcome] = await fcm.send([request]);
    const [record] = sim.records();
    expect(outcome).toEqual({ kind: 'delivered', messageId: record?.messageId, httpStatus: 200 });
    expect(record?.messageId).toMatch(/^projects\/aqueduct-test\/messages\/.+/);
    expect(record?.eventId).toBe(request.event.id);
    expect(record?.payload).toEqual({
      token: request.event.token,
      notification: { title: 'Título', body: 'Body ✓' },
      data: { orderId: '42', [EVENT_ID_DATA_KEY]: request.event.id },
      android: { priority: 'high', ttl: '90s', collapse_key: 'orders' },
    });
  });

  it('sends a normal-priority event without TTL or collapse key as just that', async () => {
    const request = pushRequest();
    await fcm.send([request]);
    const payload = sim.records()[0]?.payload as { android: unknown };
    expect(payload.android).toEqual({ priority: 'normal' });
  });

  it('answers one outcome per push, in order, for a mixed batch larger than sendEach takes at once', async () => {
    const batch = Array.from({ length: 510 }, (_, i) =>
      pushRequest({ token: i % 10 === 3 ? `dead-${i}` : i % 10 === 7 ? `bad-${i}` : `tok-${i}` }),
    );
    const outcomes = await fcm.send(batch);
    expect(outcomes).toHaveLength(510);
    outcomes.forEach((outcome, i) => {
      const expected = i % 10 === 3 || i % 10 === 7 ? 'invalid-token' : 'delivered';
      expect(outcome.kind, `push ${i}`).toBe(expected);
    });
    expect(sim.stats()).toMatchObject({ requests: 510, accepted: 408, invalidTokens: 102 });
    const delivered = new Set(sim.records().map((r) => r.eventId));
    for (const [i, request] of batch.entries()) {
      expect(delivered.has(request.event.id)).toBe(outcomes[i]?.kind === 'delivered');
    }
  });

  it('surfaces a 429 as a throttled retry carrying the Retry-After', async () => {
    sim.setFaults({ storm: { retryAfterSeconds: 7 } });
    const [outcome] = await fcm.send([pushRequest()]);
    expect(outcome).toEqual({
      kind: 'retry',
      reason: 'QUOTA_EXCEEDED',
      throttled: true,
      scope: 'fleet',
      httpStatus: 429,
      retryAfterMs: 7000,
    });
    expect(sim.stats()).toMatchObject({ requests: 1, throttled: 1, accepted: 0 });
  });

  it("answers one device's pushes beyond its own limit as FCM does, which firebase-admin carries and Aqueduct reads as that device's throttle", async () => {
    sim.reset({ deviceRate: 0.001, deviceBurst: 2 });
    try {
      const token = 'flooded-device:APA91b-0123456789';
      const flood = Array.from({ length: 5 }, () => pushRequest({ token }));
      const outcomes = await fcm.send([...flood, pushRequest(), pushRequest()]);
      expect(outcomes.filter((o) => o.kind === 'delivered')).toHaveLength(4); // the burst of 2, and the others
      for (const outcome of outcomes.filter((o) => o.kind !== 'delivered')) {
        expect(outcome).toEqual({
          kind: 'retry',
          reason: 'QUOTA_EXCEEDED: device message rate',
          throttled: true,
          scope: 'device',
          httpStatus: 429,
        });
      }
      expect(outcomes.slice(5).every((o) => o.kind === 'delivered')).toBe(true);
      expect(sim.stats()).toMatchObject({ requests: 7, accepted: 4, deviceThrottled: 3, throttled: 0 });
      expect(sim.throttles().map((t) => t.scope)).toEqual(['device', 'device', 'device']);
    } finally {
      sim.reset({ deviceRate: null });
    }
  });

  it('reports a dead token (404 UNREGISTERED) and a malformed one (400) as invalid-token', async () => {
    const outcomes = await fcm.send([pushRequest({ token: 'dead-abc' }), pushRequest({ token: 'bad-abc' })]);
    expect(outcomes).toEqual([
      { kind: 'invalid-token', reason: 'UNREGISTERED', httpStatus: 404 },
      { kind: 'invalid-token', reason: 'INVALID_ARGUMENT: invalid registration token', httpStatus: 400 },
    ]);
  });

  it('turns 500 and 503 into plain retries, one request each (no hidden library retry)', async () => {
    sim.setFaults({ error500: 1 });
    const [internal] = await fcm.send([pushRequest()]);
    sim.setFaults({ error500: 0, error503: 1 });
    const [unavailable] = await fcm.send([pushRequest()]);
    expect(internal).toEqual({ kind: 'retry', reason: 'INTERNAL', throttled: false, httpStatus: 500 });
    expect(unavailable).toEqual({ kind: 'retry', reason: 'UNAVAILABLE', throttled: false, httpStatus: 503 });
    expect(sim.stats()).toMatchObject({ requests: 2, serverErrors: 2 });
  });

  it('delivers the largest payload the contract lets through (4096 bytes as it counts them)', async () => {
    const request = withPayloadOf(pushRequest(), 4096);
    expect(notificationEventSchema.safeParse(request.event).success).toBe(true);
    expect((await fcm.send([request]))[0]?.kind).toBe('delivered');
    const over = withPayloadOf(pushRequest(), 4097);
    expect(notificationEventSchema.safeParse(over.event).success).toBe(false);
  });

  it('rejects a payload over 4096 bytes as permanent', async () => {
    const [outcome] = await fcm.send([pushRequest({ data: bulkyData(5000) })]);
    expect(outcome).toMatchObject({ kind: 'rejected', httpStatus: 400 });
    expect(outcome?.kind === 'rejected' && outcome.reason).toMatch(/^INVALID_ARGUMENT: Message is too big/);
    expect(sim.stats()).toMatchObject({ rejected: 1, accepted: 0 });
  });

  it('turns a dropped connection into a retry, once', async () => {
    sim.setFaults({ drop: 1 });
    const [outcome] = await fcm.send([pushRequest()]);
    expect(outcome).toEqual({ kind: 'retry', reason: 'network: ECONNRESET', throttled: false });
    expect(sim.stats()).toMatchObject({ requests: 1, dropped: 1 });
    // The next push gets a fresh connection.
    sim.setFaults({ drop: 0 });
    expect((await fcm.send([pushRequest()]))[0]?.kind).toBe('delivered');
  });

  it('under mixed faults, every outcome agrees with what the simulator did', async () => {
    sim.setFaults({ error500: 0.05, error503: 0.05, drop: 0.02, slow: 0.05, slowMs: 50 });
    const batch = Array.from({ length: 200 }, (_, i) =>
      pushRequest({ token: i % 25 === 0 ? `dead-${i}` : `tok-${i}` }),
    );
    const outcomes = await fcm.send(batch);
    const count = (predicate: (o: (typeof outcomes)[number]) => boolean) => outcomes.filter(predicate).length;
    const stats = sim.stats();
    expect(stats.requests).toBe(200);
    expect(count((o) => o.kind === 'delivered')).toBe(stats.accepted);
    expect(count((o) => o.kind === 'invalid-token')).toBe(stats.invalidTokens);
    expect(count((o) => o.kind === 'retry' && (o.httpStatus === 500 || o.httpStatus === 503))).toBe(
      stats.serverErrors,
    );
    expect(count((o) => o.kind === 'retry' && o.reason === 'network: ECONNRESET')).toBe(stats.dropped);
    const accepted = new Set(sim.records().map((r) => r.eventId));
    for (const [i, outcome] of outcomes.entries()) {
      expect(accepted.has(batch[i]?.event.id)).toBe(outcome.kind === 'delivered');
    }
  });

  it('still delivers when answers are slow', async () => {
    sim.setFaults({ slow: 1, slowMs: 200 });
    const outcomes = await fcm.send([pushRequest(), pushRequest()]);
    expect(outcomes.map((o) => o.kind)).toEqual(['delivered', 'delivered']);
    expect(sim.stats().slowed).toBe(2);
  });

  it('never puts the device token into a reason', async () => {
    sim.setFaults({ error503: 1 });
    const token = 'dead-secret-token-value';
    const outcomes = await fcm.send([pushRequest({ token })]);
    expect(JSON.stringify(outcomes)).not.toContain(token);
  });
});

describe('FCM provider: credentials and trust', () => {
  it('sends the local token to an override, and the simulator can insist on it', async () => {
    const sim = await startFcmSimulator({ verifyAuth: true, accessToken: LOCAL_FCM_ACCESS_TOKEN });
    const good = fcmTo(sim, { accessToken: LOCAL_FCM_ACCESS_TOKEN });
    const bad = fcmTo(sim, { accessToken: 'someone-else' });
    try {
      expect((await good.send([pushRequest()]))[0]?.kind).toBe('delivered');
      expect((await bad.send([pushRequest()]))[0]).toEqual({
        kind: 'retry',
        reason: 'UNAUTHENTICATED',
        throttled: false,
        httpStatus: 401,
      });
      expect(sim.stats()).toMatchObject({ accepted: 1, authFailures: 1 });
    } finally {
      await Promise.all([good.close(), bad.close()]);
      await sim.close();
    }
  });

  it('fetches a fresh access token after FCM refused the cached one, so the retry is not refused again', async () => {
    const sim = await startFcmSimulator({ verifyAuth: true, accessToken: 'fresh' });
    // The first token is refused (as a revoked one is) long before firebase-admin would renew it.
    const issued: string[] = [];
    const credential = {
      getAccessToken: async () => {
        const token = issued.length === 0 ? 'revoked' : 'fresh';
        issued.push(token);
        return { access_token: token, expires_in: 3600 };
      },
    };
    const fcm = fcmTo(sim, { credential });
    try {
      expect((await fcm.send([pushRequest()]))[0]).toMatchObject({ kind: 'retry', httpStatus: 401 });
      expect((await fcm.send([pushRequest()]))[0]?.kind).toBe('delivered');
      expect(issued).toEqual(['revoked', 'fresh']);
      expect(sim.stats()).toMatchObject({ accepted: 1, authFailures: 1 });
    } finally {
      await fcm.close();
      await sim.close();
    }
  });

  it('refuses a server it was not told to trust, as a retry naming the TLS error', async () => {
    const sim = await startFcmSimulator();
    const untrusting = fcmTo(sim, { trust: false });
    try {
      expectTlsRefusal((await untrusting.send([pushRequest()]))[0]);
      expect(sim.stats().requests).toBe(0);
    } finally {
      await untrusting.close();
      await sim.close();
    }
  });

  it('speaks HTTP/1.1 over plain text to an http:// endpoint (a sidecar that originates the TLS)', async () => {
    const sim = await startFcmSimulator({ keepPayloads: true, projectId: 'p' });
    const sidecar = await startTlsSidecar({ url: sim.url, caPem: sim.caPem, alpn: 'http/1.1' });
    const fcm = fcmFromSettings({ FCM_ENDPOINT: sidecar.url, FCM_PROJECT_ID: 'p' }, { maxInFlight: 4 });
    try {
      const outcomes = await fcm.send(Array.from({ length: 20 }, () => pushRequest()));
      expect(outcomes.map((o) => o.kind)).toEqual(Array(20).fill('delivered'));
      expect(sim.stats().accepted).toBe(20);
      // Keep-alive connections, at most one per request in flight, reused across the batch.
      expect(sidecar.connections()).toBeGreaterThan(0);
      expect(sidecar.connections()).toBeLessThanOrEqual(4);
    } finally {
      await fcm.close();
      await sidecar.close();
      await sim.close();
    }
  });

  it('refuses FCM_CA_FILE next to a plain-text http:// endpoint, naming both settings', () => {
    const files = tempFiles();
    try {
      expect(() =>
        fcmFromSettings({ FCM_ENDPOINT: 'http://127.0.0.1:1', FCM_CA_FILE: files.write('ca.pem', 'x') }),
      ).toThrow(/FCM_CA_FILE is set but FCM_ENDPOINT is a plain-text http:\/\/ URL/);
    } finally {
      files.cleanup();
    }
  });
});

// Google's endpoint speaks HTTP/1.1 and HTTP/2; firebase-admin can be pointed elsewhere only over
// HTTP/1.1, so for a server that speaks HTTP/2 only the agent carries those requests as HTTP/2 streams.
describe('FCM provider against a server that speaks HTTP/2 only', () => {
  let sim: FcmSimulator;
  let fcm: FcmProvider;
  const files = tempFiles();

  beforeAll(async () => {
    sim = await startFcmSimulator({ http1: false, projectId: 'p' });
    fcm = fcmFromSettings(
      { FCM_ENDPOINT: sim.url, FCM_CA_FILE: files.write('fcm-h2.pem', sim.caPem), FCM_PROJECT_ID: 'p' },
      { maxInFlight: 8 },
    );
  });
  afterEach(() => resetSimulator(sim));
  afterAll(async () => {
    await fcm.close();
    await sim.close();
    files.cleanup();
  });

  /** What each of `count` requests in a row through a fresh agent ran on: the ALPN protocol, or its error's code. */
  const protocolsSeen = async (server: FcmSimulator, count: number): Promise<Array<string | null>> => {
    const agent = createFcmAgent({
      endpoint: parseEndpoint('fcm', server.url, 'FCM_ENDPOINT'),
      caPem: server.caPem,
      maxInFlight: 1,
    });
    const seen: Array<string | null> = [];
    try {
      for (let i = 0; i < count; i++) {
        seen.push(
          await new Promise<string | null>((resolve) => {
            https
              .get('https://fcm.googleapis.com/', { agent }, (response) => {
                response.resume();
                const socket = response.socket as { alpnProtocol?: string | false | null };
                response.once('end', () => resolve(socket.alpnProtocol || null));
              })
              .once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
          }),
        );
      }
      return seen;
    } finally {
      agent.destroy();
    }
  };

  it('offers HTTP/1.1: a server speaking both is spoken to in it; one that refuses it is bridged from the next connection on', async () => {
    const both = await startFcmSimulator();
    try {
      expect(await protocolsSeen(both, 2)).toEqual(['http/1.1', 'http/1.1']);
    } finally {
      await both.close();
    }
    // The bridged socket is a pipe inside the process, not the TLS connection: it has no ALPN of its own.
    expect(await protocolsSeen(sim, 3)).toEqual(['EPROTO', null, null]);
  });

  it('keeps a bridged connection that carries request after request as lean as a socket of its own', async () => {
    const agent = createFcmAgent({
      endpoint: parseEndpoint('fcm', sim.url, 'FCM_ENDPOINT'),
      caPem: sim.caPem,
      maxInFlight: 1,
    });
    const sockets = new Set<Socket>();
    try {
      for (let i = 0; i < 16; i++) {
        await new Promise<void>((resolve) => {
          // With a timeout, as firebase-admin sends its requests.
          https
            .get('https://fcm.googleapis.com/', { agent, timeout: 15_000 }, (response) => {
              sockets.add(response.socket);
              response.resume();
              response.once('end', () => resolve());
            })
            .once('error', () => resolve());
        });
      }
      // The first connection is refused (the server speaks HTTP/2 only); the next is bridged and kept.
      expect(sockets.size).toBe(1);
      for (const socket of sockets) expect(socket.listenerCount('timeout')).toBeLessThanOrEqual(2);
    } finally {
      agent.destroy();
    }
  });

  it('keeps to maxInFlight connections when a flood of pushes comes before any handshake is done', async () => {
    const both = await startFcmSimulator();
    const cold = fcmTo(both, { maxInFlight: 4 });
    const coldBridged = fcmFromSettings(
      { FCM_ENDPOINT: sim.url, FCM_CA_FILE: files.write('fcm-h2-cold.pem', sim.caPem), FCM_PROJECT_ID: 'p' },
      { maxInFlight: 4 },
    );
    try {
      const outcomes = await cold.send(Array.from({ length: 200 }, () => pushRequest()));
      expect(outcomes.every((o) => o.kind === 'delivered')).toBe(true);
      expect(both.tlsConnections()).toBeLessThanOrEqual(4);
      // Without a warm-up, the first connections to the HTTP/2-only server are refused (those pushes
      // come back as network retries); the rest are bridged, on at most maxInFlight connections.
      const bridged = await coldBridged.send(Array.from({ length: 200 }, () => pushRequest()));
      const refused = bridged.filter((o) => o.kind !== 'delivered');
      expect(refused.length).toBeLessThanOrEqual(4);
      for (const outcome of refused) expect(outcome).toMatchObject({ kind: 'retry', throttled: false });
      expect(sim.tlsConnections()).toBeLessThanOrEqual(8 + 4); // the shared provider's 8, and these
    } finally {
      await Promise.all([cold.close(), coldBridged.close()]);
      await both.close();
    }
  });

  it('speaks HTTP/2 with prior knowledge to a plain-text endpoint that answers HTTP/1.1 with an HTTP/2 preface', async () => {
    // The sidecar relays bytes to the HTTP/2-only server: on its plain side the server speaks h2c.
    const sidecar = await startTlsSidecar({ url: sim.url, caPem: sim.caPem, alpn: 'h2' });
    const plain = fcmFromSettings({ FCM_ENDPOINT: sidecar.url, FCM_PROJECT_ID: 'p' }, { maxInFlight: 4 });
    try {
      // The first request learns what the server speaks (and fails); the warm-up asks again.
      expect(await plain.warmUp()).toBe(4);
      const outcomes = await plain.send(Array.from({ length: 40 }, () => pushRequest()));
      expect(outcomes.map((o) => o.kind)).toEqual(Array(40).fill('delivered'));
      expect(sim.stats().accepted).toBe(40);
      expect(sidecar.connections()).toBeLessThanOrEqual(1 + 4);
    } finally {
      await plain.close();
      await sidecar.close();
    }
  });

  it('warms up and delivers, one outcome per push in order, dead tokens reported', async () => {
    expect(await fcm.warmUp()).toBe(8);
    const batch = Array.from({ length: 100 }, (_, i) =>
      pushRequest({ token: i % 10 === 0 ? `dead-${i}` : `tok-${i}` }),
    );
    const outcomes = await fcm.send(batch);
    expect(outcomes.map((o) => o.kind)).toEqual(
      batch.map((_, i) => (i % 10 === 0 ? 'invalid-token' : 'delivered')),
    );
    expect(sim.stats()).toMatchObject({ requests: 100, accepted: 90, invalidTokens: 10 });
  });

  it('surfaces a 429 with its Retry-After, and a 503, as FCM answered them', async () => {
    sim.setFaults({ storm: { retryAfterSeconds: 7 } });
    const [throttled] = await fcm.send([pushRequest()]);
    expect(throttled).toEqual({
      kind: 'retry',
      reason: 'QUOTA_EXCEEDED',
      throttled: true,
      scope: 'fleet',
      httpStatus: 429,
      retryAfterMs: 7000,
    });
    sim.setFaults({ storm: null, error503: 1 });
    const [unavailable] = await fcm.send([pushRequest()]);
    expect(unavailable).toEqual({ kind: 'retry', reason: 'UNAVAILABLE', throttled: false, httpStatus: 503 });
  });

  it('names the TLS error when it does not trust the server it bridges to', async () => {
    const untrusting = fcmTo(sim, { trust: false, maxInFlight: 1 });
    try {
      // The refusal of HTTP/1.1 comes in the handshake before the certificate is checked.
      await untrusting.send([pushRequest()]);
      expectTlsRefusal((await untrusting.send([pushRequest()]))[0]);
      expect(sim.stats().requests).toBe(0);
    } finally {
      await untrusting.close();
    }
  });

  it('turns a dropped connection into a retry, and the next push gets a fresh one', async () => {
    sim.setFaults({ drop: 1 });
    const [outcome] = await fcm.send([pushRequest()]);
    expect(outcome).toMatchObject({ kind: 'retry', throttled: false });
    expect(outcome?.kind === 'retry' && outcome.reason).toMatch(/^network: /);
    sim.setFaults({ drop: 0 });
    expect((await fcm.send([pushRequest()]))[0]?.kind).toBe('delivered');
  });
});

/** A push refused because the server's certificate is not trusted: a retry whose reason names the TLS error. */
function expectTlsRefusal(outcome: PushOutcome | undefined): void {
  expect(outcome).toMatchObject({ kind: 'retry', throttled: false });
  expect(outcome?.kind === 'retry' && outcome.reason).toMatch(/^network: .*(SELF_SIGNED|CERT|VERIFY)/);
}
