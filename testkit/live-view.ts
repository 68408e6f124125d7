import type { BurstStatus } from './burst.ts';

/**
 * The demo's live view: one block per second (redrawn in place on a terminal), with each tenant's
 * delivered/s once more than one tenant is being delivered.
 */
export function liveView(print: (line: string) => void, redraw: boolean): (status: BurstStatus) => void {
  let drawn = 0;
  return (s) => {
    const tokens = Object.entries(s.tokensLeft)
      .map(([name, left]) => `${name} ${left ?? '–'}`)
      .join(', ');
    const active = s.tenants.filter((t) => t.deliveredPerSecond > 0);
    const lines = [
      `t=${s.elapsedSeconds.toFixed(0).padStart(3)}s published ${s.published}  delivered ${s.delivered} (${Math.round(s.deliveredPerSecond)}/s of ${s.allowedPerSecond}/s allowed)`,
      `       tokens left: ${tokens || '–'}  paused partitions ${s.pausedPartitions}  provider 429s ${s.provider429}  retries ${s.retried}  dead letters ${s.deadLettered}  invalid tokens ${s.invalidTokens}`,
    ];
    // Per tenant once more than one is being delivered: who gets the provider's budget.
    if (active.length > 1)
      lines.push(
        `       per tenant: ${s.tenants.map((t) => `${t.tenant} ${Math.round(t.deliveredPerSecond)}/s (${t.delivered})`).join('  ')}`,
      );
    if (s.elapsedSeconds === 0) return; // still publishing
    if (redraw && drawn > 0) process.stdout.write(`\x1b[${drawn}A\x1b[0J`);
    for (const line of lines) print(line);
    drawn = lines.length;
  };
}
