import type { Platform } from '../events/event.ts';

/** The first fleet block for a provider's project-wide 429 that came without Retry-After, in ms. */
const UNANNOUNCED_BLOCK_MS = 1000;

/**
 * How long a project-wide 429 blocks the fleet's sends to its provider. With Retry-After, what it says.
 * Without, 1 s, doubled for each further wave of throttles (a throttle of a push decided after the
 * previous block was set) until a push is delivered: FCM's quota is counted per minute, so a spent quota
 * refuses every push for the rest of its minute, and a fixed short block would meet it again every
 * second. Kept per process: each process doubles on the throttles its own pushes meet.
 */
export class FleetBlocks {
  /** Per provider, the waves of throttles without Retry-After, and when the latest block was set. */
  private readonly unannounced = new Map<Platform, { waves: number; setAt: number }>();

  /** The block for a throttle of a push decided at `decidedAt`, answered now (`now`), in ms. */
  blockMs(platform: Platform, retryAfterMs: number | undefined, decidedAt: number, now: number): number {
    if (retryAfterMs !== undefined) return retryAfterMs;
    const blocks = this.unannounced.get(platform);
    if (blocks === undefined) {
      this.unannounced.set(platform, { waves: 1, setAt: now });
      return UNANNOUNCED_BLOCK_MS;
    }
    if (decidedAt > blocks.setAt) {
      blocks.waves += 1;
      blocks.setAt = now;
    }
    return UNANNOUNCED_BLOCK_MS * 2 ** Math.min(blocks.waves - 1, 30);
  }

  /** A delivery decided after the latest unannounced block: the provider takes pushes again. */
  accepted(platform: Platform, decidedAt: number): void {
    const blocks = this.unannounced.get(platform);
    if (blocks !== undefined && decidedAt > blocks.setAt) this.unannounced.delete(platform);
  }
}
