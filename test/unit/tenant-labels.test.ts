import fc from 'fast-check';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import type { NotificationEvent } from '../../src/events/event.ts';
import { PipelineMetrics } from '../../src/telemetry/metrics.ts';
import { NO_TENANT_LABEL, OTHER_TENANTS_LABEL, TenantLabels } from '../../src/telemetry/tenant-labels.ts';

describe('TenantLabels', () => {
  it('gives the busiest tenants a label of their own and puts the rest in "other"', () => {
    const labels = new TenantLabels({ maxLabels: 2, minEvents: 10 });
    const seen = new Map<string, Set<string>>();
    // Two heavy tenants among 500 that send one event each.
    for (let i = 0; i < 500; i++) {
      for (const tenant of ['heavy-a', 'heavy-b', `light-${i}`]) {
        const label = labels.labelOf(tenant);
        seen.set(tenant, (seen.get(tenant) ?? new Set()).add(label));
      }
    }
    expect(labels.labels().sort()).toEqual(['heavy-a', 'heavy-b']);
    expect(seen.get('light-7')).toEqual(new Set([OTHER_TENANTS_LABEL]));
    expect(labels.labelOf(undefined)).toBe(NO_TENANT_LABEL);
  });

  it('never gives a tenant named "none" or "other" a label that shares its name with a shared one', () => {
    const labels = new TenantLabels({ maxLabels: 5, minEvents: 10 });
    for (let i = 0; i < 200; i++) {
      expect(labels.labelOf('none')).toBe(OTHER_TENANTS_LABEL);
      expect(labels.labelOf('other')).toBe(OTHER_TENANTS_LABEL);
      labels.labelOf('acme');
    }
    expect(labels.labels()).toEqual(['acme']);
  });

  it('never gives more labels than allowed, and never takes one back (counters only grow)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 60 }), { minLength: 1, maxLength: 3000 }),
        fc.integer({ min: 0, max: 5 }),
        (draws, maxLabels) => {
          const labels = new TenantLabels({ maxLabels, minEvents: 3, tracked: 8 });
          const labelled = new Set<string>();
          for (const draw of draws) {
            const tenant = `t${draw}`;
            const label = labels.labelOf(tenant);
            if (labelled.has(tenant)) expect(label).toBe(tenant);
            if (label === tenant) labelled.add(tenant);
            else expect(label).toBe(OTHER_TENANTS_LABEL);
          }
          expect(labelled.size).toBeLessThanOrEqual(maxLabels);
        },
      ),
    );
  });

  it('rejects nonsense limits', () => {
    expect(() => new TenantLabels({ maxLabels: -1 })).toThrow(RangeError);
    expect(() => new TenantLabels({ tracked: 0 })).toThrow(RangeError);
  });
});

describe('per-tenant metrics', () => {
  it('counts deliveries and deferrals by tenant label', async () => {
    const registry = new Registry();
    const metrics = new PipelineMetrics(registry, { tenantLabels: { maxLabels: 1, minEvents: 2 } });
    const event = (tenant: string | undefined) =>
      ({ platform: 'fcm', ...(tenant ? { tenant } : {}) }) as NotificationEvent;
    const delivered = { kind: 'delivered', messageId: 'm', httpStatus: 200 } as const;
    for (let i = 0; i < 5; i++) metrics.outcome(event('acme'), delivered);
    metrics.outcome(event('globex'), delivered);
    metrics.outcome(event(undefined), delivered);
    metrics.deferred(event('acme'));
    const text = await registry.metrics();
    // acme's first event counts under "other" (it had not sent minEvents yet), the next four its own.
    expect(text).toContain('aqueduct_tenant_delivered_total{tenant="acme"} 4');
    expect(text).toContain('aqueduct_tenant_delivered_total{tenant="other"} 2');
    expect(text).toContain('aqueduct_tenant_delivered_total{tenant="none"} 1');
    expect(text).toContain('aqueduct_tenant_deferred_total{tenant="acme"} 1');
  });
});
