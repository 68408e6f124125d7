/**
 * The memory the gateway's bodies may hold while they are read. Each body is capped
 * (AQUEDUCT_GATEWAY_MAX_BODY_BYTES), but a slow client holds its part of a body for as long as the
 * request deadline allows, and every open connection may do so at once: 4096 connections of 1 MiB
 * each would hold 4 GiB. Past a body's first `freeBytes` (one event's worth, so a single event is never
 * refused), its bytes are taken from one pool shared by every body being read, and a body that finds the
 * pool empty is refused.
 */
export class BodyMemory {
  private inUse = 0;
  /** Bytes the bodies being read may hold beyond their free part, all together. */
  readonly poolBytes: number;
  /** Bytes of each body that are never counted. */
  readonly freeBytes: number;

  constructor(poolBytes: number, freeBytes: number) {
    this.poolBytes = poolBytes;
    this.freeBytes = freeBytes;
  }

  /**
   * Counts a body that has `before` bytes and receives `more`: true when they fit (they are then taken
   * from the pool), false when they do not (nothing is taken).
   */
  take(before: number, more: number): boolean {
    const counted = Math.max(0, before + more - this.freeBytes) - Math.max(0, before - this.freeBytes);
    if (counted === 0) return true;
    if (this.inUse + counted > this.poolBytes) return false;
    this.inUse += counted;
    return true;
  }

  /** Gives back what a body of `length` bytes took, once it is read (or refused). */
  release(length: number): void {
    this.inUse -= Math.max(0, length - this.freeBytes);
  }
}
