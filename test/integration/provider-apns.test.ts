import { setTimeout as sleep } from 'node:timers/promises';
import type { Cluster } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { notificationEventSchema } from '../../src/events/event.ts';
import { EVENT_ID_DATA_KEY } from '../../src/events/payload.ts';
import { providerTokenKey, RedisProviderTokenStore } from '../../src/providers/apns-token-store.ts';
import {
  ApnsProvider,
  type PushProvider,
  parseEndpoint,
  throwAwaySigningKey,
} from '../../src/providers/index.ts';
import { createRedis, redisNodeAddresses } from '../../src/redis/client.ts';
import { type ApnsSimulator, startApnsSimulator } from '../../src/simulators/index.ts';
import { startStreamLimitServer } from '../helpers/apns-stream-limit-server.ts';
import {
  apnsFromSettings,
  bulkyData,
  pushRequest,
  resetSimulator,
  tempFiles,
  withPayloadOf,
} from '../helpers/provider-fixtures.ts';
import { type TestRedis, testRedis } from '../helpers/redis.ts';
import { startTlsSidecar } from '../helpers/tls-sidecar.ts';

const apnsPush = (overrides: Parameters<typeof pushRequest>[0] = {}) =>
  pushRequest({ platform: 'apns', ...overrides });

// The real @parse/node-apn client against the in-process APNs simulator: no mocks anywhere.
describe('APNs provider (@parse/node-apn) against the APNs simulator', () => {
  let sim: ApnsSimulator;
  let apns: PushProvider;
  const files = tempFiles();
  // An EC P-256 key made for this run stands in for Apple's .p8 file.
  const keyPem = throwAwaySigningKey();

  beforeAll(async () => {
    sim = await startApnsSimulator({
      keepPayloads: true,
      verifyAuth: true,
      authKeyPem: keyPem,
      keyId: 'KEY1234567',
      teamId: 'TEAM123456',
    });
    apns = newProvider('shared', 16);
  });
  /** A provider of its own (its own HTTP/2 connection), built the way the consumer builds it: from the settings. */
  const newProvider = (name: string, maxInFlight: number) =>
    apnsFromSettings(
      {
        APNS_KEY_FILE: files.write(`AuthKey-${name}.p8`, keyPem),
        APNS_KEY_ID: 'KEY1234567',
        APNS_TEAM_ID: 'TEAM123456',
        APNS_TOPIC: 'dev.aqueduct.test',
        APNS_PRODUCTION: 'false',
        APNS_ENDPOINT: sim.url,
        APNS_CA_FILE: files.write(`apns-${name}.pem`, sim.caPem),
      },
      { maxInFlight },
    );
  afterEach(() => resetSimulator(sim));
  afterAll(async () => {
    await apns.close();
    await sim.close();
    files.cleanup();
  });

  it('warmUp opens the HTTP/2 session that the first sends then use (no handshake on the first push)', async () => {
    const cold = newProvider('warm', 4);
    try {
      const before = sim.tlsConnections();
      expect(await cold.warmUp?.()).toBe(1);
      // The server counts the handshake on its side of the same event loop, a tick after the client.
      await vi.waitFor(() => expect(sim.tlsConnections() - before).toBe(1));
      expect(sim.stats().requests).toBe(0); // no push was sent: nothing counted, no token taken
      const outcomes = await cold.send(Array.from({ length: 4 }, () => apnsPush()));
      expect(outcomes.every((o) => o.kind === 'delivered')).toBe(true);
      expect(sim.tlsConnections() - before).toBe(1);
    } finally {
      await cold.close();
    }
  });

  it('on a new connection (one stream until a valid provider token), resends the streams APNs refused', async () => {
    // No warm-up: the first window of 32 streams is written before the server's SETTINGS arrive, and
    // the streams beyond its one are reset with REFUSED_STREAM, which means they were not processed.
    const cold = newProvider('cold', 32);
    try {
      const outcomes = await cold.send(Array.from({ length: 32 }, () => apnsPush()));
      expect(outcomes.map((o) => o.kind)).toEqual(Array(32).fill('delivered'));
      expect(sim.stats()).toMatchObject({ accepted: 32, duplicates: 0 });
    } finally {
      await cold.close();
    }
  });

  it('delivers with a verified provider token, mapping every event field onto the APNs request', async () => {
    const before = Math.floor(Date.now() / 1000);
    const request = apnsPush({
      notification: { title: 'Título', body: 'Body ✓' },
      data: { orderId: '42' },
      priority: 'high',
      ttlSeconds: 90,
      collapseKey: 'orders',
    });
    const [outcome] = await apns.send([request]);
    const [record] = sim.records();
    expect(outcome).toEqual({ kind: 'delivered', messageId: record?.messageId, httpStatus: 200 });
    expect(record?.eventId).toBe(request.event.id);
    const { headers, body } = (record?.payload ?? {}) as { headers: Record<string, string>; body: unknown };
    expect(body).toEqual({
      orderId: '42',
      [EVENT_ID_DATA_KEY]: request.event.id,
      aps: { alert: { title: 'Título', body: 'Body ✓' } },
    });
    expect(headers).toMatchObject({
      'apns-id': record?.messageId,
      'apns-priority': '10',
      'apns-collapse-id': 'orders',
      'apns-topic': 'dev.aqueduct.test',
      'apns-push-type': 'alert',
    });
    const expiration = Number(headers['apns-expiration']);
    expect(expiration).toBeGreaterThanOrEqual(before + 90);
    expect(expiration).toBeLessThanOrEqual(Math.floor(Date.now() / 1000) + 90);
  });

  it('sends normal priority as 5 and no expiration or collapse id when the event has none', async () => {
    await apns.send([apnsPush()]);
    const { headers } = (sim.records()[0]?.payload ?? {}) as { headers: Record<string, string> };
    expect(headers['apns-priority']).toBe('5');
    expect(headers).not.toHaveProperty('apns-expiration');
    expect(headers).not.toHaveProperty('apns-collapse-id');
  });

  it('answers one outcome per push, in order, for a mixed batch', async () => {
    const batch = Array.from({ length: 150 }, (_, i) =>
      apnsPush({ token: i % 10 === 3 ? `dead-${i}` : i % 10 === 7 ? `bad-${i}` : `tok-${i}` }),
    );
    const outcomes = await apns.send(batch);
    expect(outcomes).toHaveLength(150);
    for (const [i, outcome] of outcomes.entries()) {
      const expected = i % 10 === 3 || i % 10 === 7 ? 'invalid-token' : 'delivered';
      expect(outcome.kind, `push ${i}`).toBe(expected);
    }
    expect(sim.stats()).toMatchObject({ requests: 150, accepted: 120, invalidTokens: 30 });
  });

  it('surfaces a 429 as a throttled retry carrying the Retry-After (which node-apn itself drops)', async () => {
    sim.setFaults({ storm: { retryAfterSeconds: 7 } });
    const outcomes = await apns.send([apnsPush(), apnsPush()]);
    for (const outcome of outcomes) {
      expect(outcome).toEqual({
        kind: 'retry',
        reason: 'TooManyRequests',
        throttled: true,
        // Apple's TooManyRequests is about one device token, whoever sends it; the answer does not
        // say so itself (the consumer reads it as the sender's when it answers a first push).
        scope: 'device',
        deviceScopeAssumed: true,
        httpStatus: 429,
        retryAfterMs: 7000,
      });
    }
    // node-apn would retry a 429 at once, three times; here each push is one request.
    expect(sim.stats()).toMatchObject({ requests: 2, throttled: 2 });
  });

  it("answers one device's pushes beyond its own limit with 429 TooManyRequests and no Retry-After, read as that device's throttle", async () => {
    sim.reset({ deviceRate: 0.001, deviceBurst: 2 });
    try {
      const token = 'ab'.repeat(32);
      const flood = Array.from({ length: 5 }, () => apnsPush({ token }));
      const outcomes = await apns.send([...flood, apnsPush(), apnsPush()]);
      expect(outcomes.filter((o) => o.kind === 'delivered')).toHaveLength(4);
      for (const outcome of outcomes.filter((o) => o.kind !== 'delivered')) {
        expect(outcome).toEqual({
          kind: 'retry',
          reason: 'TooManyRequests',
          throttled: true,
          scope: 'device',
          deviceScopeAssumed: true,
          httpStatus: 429,
        });
      }
      expect(outcomes.slice(5).every((o) => o.kind === 'delivered')).toBe(true);
      expect(sim.stats()).toMatchObject({ requests: 7, accepted: 4, deviceThrottled: 3, throttled: 0 });
    } finally {
      sim.reset({ deviceRate: null });
    }
  });

  it('reports a dead token (410 Unregistered) and a malformed one (400 BadDeviceToken) as invalid-token', async () => {
    const before = Date.now();
    const outcomes = await apns.send([apnsPush({ token: 'dead-abc' }), apnsPush({ token: 'bad-abc' })]);
    expect(outcomes).toEqual([
      {
        kind: 'invalid-token',
        reason: 'Unregistered',
        httpStatus: 410,
        // The 410's timestamp: when APNs confirmed the token dead.
        invalidSinceMs: expect.any(Number),
      },
      { kind: 'invalid-token', reason: 'BadDeviceToken', httpStatus: 400 },
    ]);
    const [dead] = outcomes;
    expect(dead?.kind === 'invalid-token' && dead.invalidSinceMs).toBeGreaterThanOrEqual(before);
    expect(dead?.kind === 'invalid-token' && dead.invalidSinceMs).toBeLessThanOrEqual(Date.now());
  });

  it('takes BadDeviceToken for every token, with no delivery between, for a wrong environment: retried, not reported', async () => {
    const fresh = newProvider('refusals', 8);
    try {
      const bad = Array.from({ length: 24 }, (_, i) => apnsPush({ token: `bad-${i}` }));
      const outcomes = await fresh.send(bad);
      const kinds = outcomes.map((o) => o.kind);
      // The first 20 may be dead tokens; a run longer than a fleet's dead tokens make is not.
      expect(kinds.filter((k) => k === 'invalid-token')).toHaveLength(20);
      expect(kinds.filter((k) => k === 'retry')).toHaveLength(4);
      expect(outcomes.find((o) => o.kind === 'retry')).toMatchObject({
        reason: expect.stringMatching(/^BadDeviceToken .* check APNS_PRODUCTION .* and APNS_TOPIC$/),
        throttled: false,
      });
      // A delivery ends the run: the next refusal is a dead token again.
      expect((await fresh.send([apnsPush()]))[0]?.kind).toBe('delivered');
      expect((await fresh.send([apnsPush({ token: 'bad-again' })]))[0]?.kind).toBe('invalid-token');
    } finally {
      await fresh.close();
    }
  });

  it('turns 500 and 503 into plain retries, one request each (no hidden library retry)', async () => {
    sim.setFaults({ error500: 1 });
    const [internal] = await apns.send([apnsPush()]);
    sim.setFaults({ error500: 0, error503: 1 });
    const [unavailable] = await apns.send([apnsPush()]);
    expect(internal).toEqual({
      kind: 'retry',
      reason: 'InternalServerError',
      throttled: false,
      httpStatus: 500,
    });
    expect(unavailable).toEqual({
      kind: 'retry',
      reason: 'ServiceUnavailable',
      throttled: false,
      httpStatus: 503,
    });
    expect(sim.stats()).toMatchObject({ requests: 2, serverErrors: 2 });
    sim.setFaults({ error503: 0 });
    expect((await apns.send([apnsPush()]))[0]?.kind).toBe('delivered');
  });

  it('delivers the largest payload the contract lets through (4096 bytes as it counts them)', async () => {
    const request = withPayloadOf(apnsPush(), 4096);
    expect(notificationEventSchema.safeParse(request.event).success).toBe(true);
    expect((await apns.send([request]))[0]?.kind).toBe('delivered');
    const over = withPayloadOf(apnsPush(), 4097);
    expect(notificationEventSchema.safeParse(over.event).success).toBe(false);
  });

  it('rejects a payload over 4096 bytes (413 PayloadTooLarge) as permanent', async () => {
    const [outcome] = await apns.send([apnsPush({ data: bulkyData(5000) })]);
    expect(outcome).toEqual({ kind: 'rejected', reason: 'PayloadTooLarge', httpStatus: 413 });
    expect(sim.stats()).toMatchObject({ rejected: 1, accepted: 0 });
  });

  it('turns a reset stream into a retry, once', async () => {
    sim.setFaults({ drop: 1 });
    const [outcome] = await apns.send([apnsPush()]);
    expect(outcome).toEqual({ kind: 'retry', reason: 'network: NGHTTP2_INTERNAL_ERROR', throttled: false });
    expect(sim.stats()).toMatchObject({ requests: 1, dropped: 1 });
    sim.setFaults({ drop: 0 });
    expect((await apns.send([apnsPush()]))[0]?.kind).toBe('delivered');
  });

  it('under mixed faults, every outcome agrees with what the simulator did (a 500 fails no other push)', async () => {
    // node-apn alone would tear its current session down on every 500 and fail the pushes in flight
    // there (see ApnsProvider); here each push's outcome is its own answer.
    sim.setFaults({ error500: 0.05, error503: 0.05, drop: 0.02, slow: 0.05, slowMs: 50 });
    const batch = Array.from({ length: 200 }, (_, i) =>
      apnsPush({ token: i % 25 === 0 ? `dead-${i}` : `tok-${i}` }),
    );
    const outcomes = await apns.send(batch);
    const count = (predicate: (o: (typeof outcomes)[number]) => boolean) => outcomes.filter(predicate).length;
    const stats = sim.stats();
    expect(stats.requests).toBe(200);
    expect(count((o) => o.kind === 'delivered')).toBe(stats.accepted);
    expect(count((o) => o.kind === 'invalid-token')).toBe(stats.invalidTokens);
    expect(count((o) => o.kind === 'retry' && (o.httpStatus === 500 || o.httpStatus === 503))).toBe(
      stats.serverErrors,
    );
    expect(count((o) => o.kind === 'retry' && o.reason === 'network: NGHTTP2_INTERNAL_ERROR')).toBe(
      stats.dropped,
    );
    expect(stats.serverErrors).toBeGreaterThan(0);
    const accepted = new Set(sim.records().map((r) => r.eventId));
    for (const [i, outcome] of outcomes.entries()) {
      expect(accepted.has(batch[i]?.event.id)).toBe(outcome.kind === 'delivered');
    }
  });

  it('turns an answer slower than the request timeout into a retry', async () => {
    const slow = await startApnsSimulator({ faults: { slow: 1, slowMs: 5_000 } });
    const provider = apnsFromSettings(
      { APNS_ENDPOINT: slow.url, APNS_CA_FILE: files.write('slow.pem', slow.caPem) },
      { apnsRequestTimeoutMs: 200 },
    );
    try {
      expect((await provider.send([apnsPush()]))[0]).toEqual({
        kind: 'retry',
        reason: 'network: timeout',
        throttled: false,
      });
    } finally {
      await provider.close();
      await slow.close();
    }
  });

  it('turns a connection lost while waiting for the answer into a retry', async () => {
    const doomed = await startApnsSimulator({ faults: { slow: 1, slowMs: 30_000 } });
    const provider = apnsFromSettings({
      APNS_ENDPOINT: doomed.url,
      APNS_CA_FILE: files.write('doomed.pem', doomed.caPem),
    });
    try {
      const pending = provider.send([apnsPush()]);
      while (doomed.stats().requests === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      await doomed.close(); // destroys the connection under the waiting request
      const [outcome] = await pending;
      expect(outcome).toMatchObject({ kind: 'retry', throttled: false });
      expect(outcome?.kind === 'retry' && outcome.reason).toMatch(/^network: /);
    } finally {
      await provider.close();
    }
  });

  it('closes although the HTTP/2 session it held was destroyed under it', async () => {
    // node-apn keeps such a session as its current one and would wait forever for its close() callback,
    // which Node never calls for a destroyed session. A lost connection can leave this state; here the
    // session is destroyed directly.
    const provider = newProvider('destroyed', 4);
    expect((await provider.send([apnsPush()]))[0]?.kind).toBe('delivered');
    const client = (provider as unknown as { provider: { client: { session: { destroy(): void } } } })
      .provider.client;
    client.session.destroy();
    await provider.close();
  });

  it('never puts the device token into a reason', async () => {
    sim.setFaults({ drop: 1 });
    const token = 'secret-token-value';
    const outcomes = await apns.send([apnsPush({ token })]);
    expect(JSON.stringify(outcomes)).not.toContain(token);
  });
});

describe('APNs provider against a server allowing fewer streams than its concurrency', () => {
  it('sends at most the streams the server allows, so no push times out waiting inside the session', async () => {
    // 32 pushes, two streams at a time, each answered after 100 ms: pushes queued inside the HTTP/2
    // session would wait up to 1.6 s there while their 1 s request timeout runs.
    const server = await startStreamLimitServer({ maxConcurrentStreams: 2, answerAfterMs: 100 });
    const files = tempFiles();
    const provider = apnsFromSettings(
      { APNS_ENDPOINT: server.url, APNS_CA_FILE: files.write('limit.pem', server.caPem) },
      { maxInFlight: 32, apnsRequestTimeoutMs: 1000 },
    );
    try {
      await provider.warmUp?.();
      const outcomes = await provider.send(Array.from({ length: 32 }, () => apnsPush()));
      expect(outcomes.map((outcome) => outcome.kind)).toEqual(Array(32).fill('delivered'));
      expect(server.stats()).toEqual({ answered: 32, peakOpenStreams: 2 });
    } finally {
      await provider.close();
      await server.close();
      files.cleanup();
    }
  });
});

describe('APNs provider: credentials', () => {
  it('is refused (403 InvalidProviderToken, rejected) when its key is not the one the simulator verifies', async () => {
    const sim = await startApnsSimulator({ verifyAuth: true, authKeyPem: throwAwaySigningKey() });
    const apns = new ApnsProvider({
      keyPem: throwAwaySigningKey(),
      keyId: 'KEY1234567',
      teamId: 'TEAM123456',
      topic: 't',
      production: false,
      endpoint: parseEndpoint('apns', sim.url, 'APNS_ENDPOINT'),
      caPem: sim.caPem,
    });
    try {
      expect((await apns.send([apnsPush()]))[0]).toEqual({
        kind: 'rejected',
        reason: 'InvalidProviderToken',
        httpStatus: 403,
      });
      expect(sim.stats()).toMatchObject({ authFailures: 1, accepted: 0 });
    } finally {
      await apns.close();
      await sim.close();
    }
  });

  it('signs with a throw-away key when pointed at a simulator without APNS_KEY_FILE', async () => {
    const sim = await startApnsSimulator();
    const files = tempFiles();
    const apns = apnsFromSettings({
      APNS_ENDPOINT: sim.url,
      APNS_CA_FILE: files.write('apns.pem', sim.caPem),
    });
    try {
      expect((await apns.send([apnsPush()]))[0]?.kind).toBe('delivered');
    } finally {
      await apns.close();
      await sim.close();
      files.cleanup();
    }
  });

  it('speaks HTTP/2 over plain text to an http:// endpoint (a sidecar that originates the TLS)', async () => {
    const sim = await startApnsSimulator({ keepPayloads: true });
    const sidecar = await startTlsSidecar({ url: sim.url, caPem: sim.caPem, alpn: 'h2' });
    const apns = apnsFromSettings({ APNS_ENDPOINT: sidecar.url }, { maxInFlight: 8 });
    try {
      const outcomes = await apns.send(Array.from({ length: 20 }, () => apnsPush()));
      expect(outcomes.map((o) => o.kind)).toEqual(Array(20).fill('delivered'));
      expect(sim.stats().accepted).toBe(20);
      // One HTTP/2 session carries them all, through the sidecar.
      expect(sidecar.connections()).toBe(1);
    } finally {
      await apns.close();
      await sidecar.close();
      await sim.close();
    }
  });

  it('refuses APNS_CA_FILE next to a plain-text http:// endpoint, naming both settings', () => {
    const files = tempFiles();
    try {
      expect(() =>
        apnsFromSettings({ APNS_ENDPOINT: 'http://127.0.0.1:1', APNS_CA_FILE: files.write('ca.pem', 'x') }),
      ).toThrow(/APNS_CA_FILE is set but APNS_ENDPOINT is a plain-text http:\/\/ URL/);
    } finally {
      files.cleanup();
    }
  });
});

// A fleet of consumers against an APNs endpoint that counts provider token updates per signing key
// (Apple: no more than once every 20 minutes): the store is the real script on the run's Redis and on
// its Redis Cluster.
describe('APNs provider token shared by a fleet', () => {
  const keyPem = throwAwaySigningKey();
  let sim: ApnsSimulator;
  let redis: TestRedis;
  let cluster: Cluster;
  const opened: ApnsProvider[] = [];

  beforeAll(() => {
    redis = testRedis('apns-token');
    cluster = createRedis(
      { url: '', clusterNodes: redisNodeAddresses(inject('redisClusterNodes').split(',')) },
      { maxRetriesPerRequest: 3 },
    ) as Cluster;
  });
  // A simulator per test: it remembers every token it saw for 20 minutes.
  beforeEach(async () => {
    sim = await startApnsSimulator({
      verifyAuth: true,
      authKeyPem: keyPem,
      keyId: 'KEY1234567',
      teamId: 'TEAM123456',
      tokenUpdateMinSeconds: 1200,
    });
  });
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((provider) => provider.close()));
    await sim.close();
  });
  afterAll(async () => {
    await redis.cleanup();
    cluster.disconnect();
  });

  /** One consumer process's APNs provider; with a store, sharing the fleet's token through it. */
  const processProvider = (tokenStore?: RedisProviderTokenStore, tokenCheckEveryMs?: number) => {
    const provider = new ApnsProvider({
      keyPem,
      keyId: 'KEY1234567',
      teamId: 'TEAM123456',
      topic: 'dev.aqueduct.test',
      production: false,
      endpoint: parseEndpoint('apns', sim.url, 'APNS_ENDPOINT'),
      caPem: sim.caPem,
      ...(tokenStore ? { tokenStore } : {}),
      ...(tokenCheckEveryMs ? { tokenCheckEveryMs } : {}),
    });
    opened.push(provider);
    return provider;
  };

  it('signing a token per process, the second process is refused with 429 TooManyProviderTokenUpdates', async () => {
    expect((await processProvider().send([apnsPush()]))[0]?.kind).toBe('delivered');
    const second = await processProvider().send([apnsPush()]);
    expect(second[0]).toMatchObject({ kind: 'retry', httpStatus: 429 });
    expect(JSON.stringify(second[0])).toContain('TooManyProviderTokenUpdates');
    expect(sim.stats()).toMatchObject({ authFailures: 1, accepted: 1 });
  });

  it('after Redis lost the token, a process started since is refused until it takes the one the fleet sends', async () => {
    const keyPrefix = `${redis.prefix}lost`;
    const store = () =>
      new RedisProviderTokenStore(redis.client, {
        prefix: keyPrefix,
        teamId: 'TEAM123456',
        keyId: 'KEY1234567',
      });
    const key = providerTokenKey(keyPrefix, 'TEAM123456', 'KEY1234567');
    const fleet = processProvider(store(), 3000);
    const started = Date.now();
    expect((await fleet.send([apnsPush()]))[0]?.kind).toBe('delivered');
    const jwtStored = async () => (await redis.client.get(key))?.split(' ')[1];
    const sent = await jwtStored();
    expect(sent).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    // A second later (a later iat), Redis restarts empty and a process starts: it stores its own token.
    await sleep(1100);
    await redis.client.del(key);
    const late = processProvider(store(), 200);
    const refused = await late.send([apnsPush()]);
    expect(refused[0]).toMatchObject({ kind: 'retry', httpStatus: 429 });
    expect(JSON.stringify(refused[0])).toContain('TooManyProviderTokenUpdates');
    // The fleet's next read (3 s after it started) puts its token back; the late process's next read takes it.
    await sleep(Math.max(0, started + 3800 - Date.now()));
    expect(await jwtStored()).toBe(sent);
    const outcomes = await Promise.all([fleet.send([apnsPush()]), late.send([apnsPush()])]);
    expect(outcomes.flat().map((outcome) => outcome.kind)).toEqual(['delivered', 'delivered']);
    expect(sim.stats()).toMatchObject({ authFailures: 1, accepted: 3 });
    await redis.client.del(key);
  });

  it.each([
    ['one Redis', () => redis.client, () => `${redis.prefix}fleet`],
    ['a Redis Cluster', () => cluster, () => `aqt-cluster-apns-${Date.now()}`],
  ] as const)(
    'sharing the token through %s, every process of the fleet delivers',
    async (_, client, prefix) => {
      const keyPrefix = prefix();
      const store = () =>
        new RedisProviderTokenStore(client(), {
          prefix: keyPrefix,
          teamId: 'TEAM123456',
          keyId: 'KEY1234567',
        });
      // Another signing key's token, stored at the same time, is a key of its own.
      await new RedisProviderTokenStore(client(), {
        prefix: keyPrefix,
        teamId: 'TEAM123456',
        keyId: 'OTHERKEY00',
      }).share({ jwt: 'a.b.c', iat: Math.floor(Date.now() / 1000) }, 0);
      const fleet = [processProvider(store()), processProvider(store()), processProvider(store())];
      const outcomes = await Promise.all(fleet.map((provider) => provider.send([apnsPush(), apnsPush()])));
      expect(outcomes.flat().map((outcome) => outcome.kind)).toEqual(Array(6).fill('delivered'));
      expect(sim.stats()).toMatchObject({ authFailures: 0, accepted: 6 });
      const key = providerTokenKey(keyPrefix, 'TEAM123456', 'KEY1234567');
      const ttl = await client().ttl(key);
      expect(ttl).toBeGreaterThan(3500);
      expect(ttl).toBeLessThanOrEqual(3600);
      await client().del(key);
      await client().del(providerTokenKey(keyPrefix, 'TEAM123456', 'OTHERKEY00'));
    },
  );
});
