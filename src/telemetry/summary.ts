import type { Logger } from '../log.ts';
import type { PipelineObserver } from '../pipeline/observer.ts';

/** Running totals of one consumer process. */
export interface PipelineTotals {
  delivered: number;
  invalidTokens: number;
  rejected: number;
  retried: number;
  throttled: number;
  /** Events held back for a device the provider throttled on its own (see DeviceBackoff). */
  deviceDeferred: number;
  /** Events of a tenant over its fair share parked on the deferred topic (each parking counts). */
  parked: number;
  deadLettered: number;
  duplicatesSkipped: number;
  paused: number;
  resumed: number;
  tokensRequested: number;
  tokensGranted: number;
  /** Acquire calls this process's pools made to Redis (takes answered from held tokens are not calls). */
  acquireCalls: number;
  limiterErrors: number;
}

/**
 * Counts what the pipeline does and logs one `pipeline summary` line per interval in which something
 * happened (cumulative totals, so the last line of a process tells its whole story).
 */
export class SummaryObserver implements PipelineObserver {
  readonly totals: PipelineTotals = {
    delivered: 0,
    invalidTokens: 0,
    rejected: 0,
    retried: 0,
    throttled: 0,
    deviceDeferred: 0,
    parked: 0,
    deadLettered: 0,
    duplicatesSkipped: 0,
    paused: 0,
    resumed: 0,
    tokensRequested: 0,
    tokensGranted: 0,
    acquireCalls: 0,
    limiterErrors: 0,
  };
  private timer: NodeJS.Timeout | undefined;
  private lastLogged = '';

  async acquire(_pool: unknown, requested: number, take: () => Promise<number>): Promise<number> {
    const granted = await take();
    this.totals.tokensRequested += requested;
    this.totals.tokensGranted += granted;
    return granted;
  }

  poolAcquired(): void {
    this.totals.acquireCalls++;
  }

  send<T>(_context: unknown, send: () => Promise<T>): Promise<T> {
    return send();
  }

  outcome(_event: unknown, outcome: { kind: string; throttled?: boolean }): void {
    if (outcome.kind === 'delivered') this.totals.delivered++;
    else if (outcome.kind === 'invalid-token') this.totals.invalidTokens++;
    else if (outcome.kind === 'rejected') this.totals.rejected++;
    else if (outcome.kind === 'retry' && outcome.throttled) this.totals.throttled++;
  }

  retried(): void {
    this.totals.retried++;
  }

  deadLettered(): void {
    this.totals.deadLettered++;
  }

  deferred(): void {
    this.totals.deviceDeferred++;
  }

  parked(): void {
    this.totals.parked++;
  }

  duplicateSkipped(): void {
    this.totals.duplicatesSkipped++;
  }

  paused(): void {
    this.totals.paused++;
  }

  resumed(): void {
    this.totals.resumed++;
  }

  limiterError(): void {
    this.totals.limiterErrors++;
  }

  /** Logs the totals every `intervalMs` when they changed, and once more on `stop`. */
  start(logger: Logger, intervalMs = 5000): void {
    this.timer = setInterval(() => this.log(logger), intervalMs);
    this.timer.unref();
  }

  stop(logger: Logger): void {
    if (this.timer) clearInterval(this.timer);
    this.log(logger);
  }

  private log(logger: Logger): void {
    const snapshot = JSON.stringify(this.totals);
    if (snapshot === this.lastLogged) return;
    this.lastLogged = snapshot;
    logger.info({ totals: this.totals }, 'pipeline summary');
  }
}
