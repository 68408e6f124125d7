import { describe, expect, it } from 'vitest';
import type { BurstStatus } from '../../testkit/burst.ts';
import { liveView } from '../../testkit/live-view.ts';

const status = (tenants: BurstStatus['tenants']): BurstStatus => ({
  elapsedSeconds: 3,
  published: 100,
  delivered: 60,
  deliveredPerSecond: 20,
  allowedPerSecond: 800,
  tokensLeft: { fcm: 10 },
  pausedPartitions: 0,
  provider429: 0,
  retried: 0,
  deadLettered: 0,
  invalidTokens: 0,
  tenants,
});

function render(s: BurstStatus): string[] {
  const lines: string[] = [];
  liveView((line) => lines.push(line), false)(s);
  return lines;
}

describe("the demo's live view", () => {
  it("shows each tenant's delivered/s once more than one tenant is being delivered", () => {
    const lines = render(
      status([
        { tenant: 'acme', delivered: 50, deliveredPerSecond: 15.2 },
        { tenant: 'globex', delivered: 10, deliveredPerSecond: 4.8 },
      ]),
    );
    expect(lines.at(-1)).toBe('       per tenant: acme 15/s (50)  globex 5/s (10)');
  });

  it('leaves the tenant line out while one tenant or none is delivered', () => {
    const one = render(
      status([
        { tenant: 'acme', delivered: 50, deliveredPerSecond: 15 },
        { tenant: 'globex', delivered: 10, deliveredPerSecond: 0 },
      ]),
    );
    expect(one.join('\n')).not.toContain('per tenant');
    expect(render(status([])).join('\n')).not.toContain('per tenant');
  });
});
