import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { createMetrics, PipelineMetrics } from '../../src/telemetry/metrics.ts';

interface Panel {
  id: number;
  title: string;
  gridPos: { x: number; y: number; w: number; h: number };
  datasource: { uid: string };
  targets: Array<{ expr: string; refId: string }>;
}

const dashboard = JSON.parse(
  readFileSync(new URL('../../grafana/aqueduct-dashboard.json', import.meta.url), 'utf8'),
) as { uid: string; panels: Panel[]; templating: { list: Array<{ name: string; type: string }> } };

describe('the Grafana dashboard', () => {
  it('queries only metrics the consumer exports', async () => {
    const { registry } = createMetrics();
    new PipelineMetrics(registry, { rates: { fcm: 1, apns: 1 } });
    const exported = new Set((await registry.getMetricsAsJSON()).map((metric) => metric.name));
    const queried = new Set(
      dashboard.panels
        .flatMap((panel) => panel.targets.map((target) => target.expr))
        .flatMap((expr) => expr.match(/\baqueduct_[a-z_]+/g) ?? [])
        .map((name) => name.replace(/_(bucket|count|sum)$/, '')),
    );
    expect(queried.size).toBeGreaterThan(10);
    for (const name of queried) expect(exported, `${name} is queried but not exported`).toContain(name);
  });

  it('has the panels operators ask for first, laid out without overlaps', () => {
    const titles = dashboard.panels.map((panel) => panel.title);
    for (const title of [
      'Delivered per second vs configured rate',
      'Provider 429s per second',
      'Paused partitions',
      'Consumer lag',
    ]) {
      expect(titles).toContain(title);
    }
    const delivered = dashboard.panels.find((panel) => panel.title.startsWith('Delivered'));
    expect(delivered?.targets.map((t) => t.expr).join(' ')).toMatch(
      /outcome="delivered".*aqueduct_bucket_rate/s,
    );
    expect(new Set(dashboard.panels.map((panel) => panel.id)).size).toBe(dashboard.panels.length);
    expect(dashboard.templating.list).toContainEqual(
      expect.objectContaining({ name: 'datasource', type: 'datasource' }),
    );
    const cells = new Set<string>();
    for (const panel of dashboard.panels) {
      expect(panel.datasource.uid).toBe(`\${datasource}`);
      const { x, y, w, h } = panel.gridPos;
      expect(x + w).toBeLessThanOrEqual(24);
      for (let i = x; i < x + w; i++) {
        for (let j = y; j < y + h; j++) {
          expect(cells.has(`${i},${j}`), `${panel.title} overlaps another panel`).toBe(false);
          cells.add(`${i},${j}`);
        }
      }
      for (const target of panel.targets) {
        const opened = target.expr.split('(').length;
        expect(target.expr.split(')').length, target.expr).toBe(opened);
      }
    }
  });
});
