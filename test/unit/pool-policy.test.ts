import { describe, expect, it } from 'vitest';
import { acquireChunk, poolKey, poolPlan, sendWindow } from '../../src/limiter/pool-policy.ts';

const fcm = { name: 'fcm', rate: 1000, capacity: 1500 };

describe('pool policy', () => {
  it('draws from the provider bucket alone while tenants are not capped, whatever the tenant', () => {
    const policy = { sendConcurrency: 64 };
    expect(poolKey('fcm', 'acme', policy)).toBe('fcm');
    expect(poolPlan(fcm, 'acme', policy)).toEqual({ key: 'fcm', buckets: [fcm], chunk: 250, window: 100 });
    expect(poolPlan(fcm, undefined, policy).key).toBe('fcm');
  });

  it('adds the tenant bucket when tenants are capped, with a burst of one second of its rate by default', () => {
    const policy = { sendConcurrency: 64, tenantRate: 10.5 };
    expect(poolKey('fcm', 'acme', policy)).toBe('fcm:tenant:acme');
    expect(poolPlan(fcm, 'acme', policy).buckets).toEqual([
      fcm,
      { name: 'fcm:tenant:acme', rate: 10.5, capacity: 11 },
    ]);
    expect(poolPlan(fcm, 'acme', { ...policy, tenantBurst: 40 }).buckets[1]?.capacity).toBe(40);
    expect(poolPlan(fcm, undefined, policy)).toMatchObject({ key: 'fcm', buckets: [fcm] });
  });

  it('sizes the chunk from the provider rate: a quarter second of it, never under 200, unless configured', () => {
    expect(acquireChunk(100, 10_000)).toBe(200);
    expect(acquireChunk(1000, 10_000)).toBe(250);
    expect(acquireChunk(1001, 10_000)).toBe(251);
    expect(acquireChunk(1000, 10_000, 16)).toBe(16);
    expect(poolPlan(fcm, 'acme', { sendConcurrency: 64, acquireChunk: 16, tenantRate: 5 }).chunk).toBe(16);
  });

  it('keeps the default chunk to a quarter of the smallest capacity, at least 1: a turn then has room to come late', () => {
    expect(acquireChunk(800, 2000)).toBe(200);
    expect(acquireChunk(1000, 800)).toBe(200);
    expect(acquireChunk(100, 20)).toBe(5);
    expect(acquireChunk(200, 200)).toBe(50);
    expect(acquireChunk(30, 5)).toBe(1);
    expect(acquireChunk(30, 5, 5)).toBe(5);
    expect(
      poolPlan({ name: 'apns', rate: 100, capacity: 20 }, undefined, { sendConcurrency: 64 }).chunk,
    ).toBe(5);
    // A capped tenant's bucket is the smallest one.
    expect(poolPlan(fcm, 'acme', { sendConcurrency: 64, tenantRate: 50 }).chunk).toBe(12);
  });

  it('sizes the window from the send concurrency, or a tenth of a second of the provider rate when more', () => {
    expect(sendWindow(100, 64)).toBe(64);
    expect(sendWindow(1000, 64)).toBe(100);
    expect(sendWindow(1001, 64)).toBe(101);
    expect(sendWindow(50_000, 16)).toBe(5000);
  });
});
