/** A 64-bit fingerprint in two words (an IdempotencyKey is one). */
export interface Fingerprint {
  readonly high: number;
  readonly low: number;
}

/**
 * The fingerprints seen lately (of the keys a process marked final, of the devices it pushed to), in
 * two generations of `capacity / 2` (the older one dropped whole when the newer fills up). Each
 * generation is an open-addressing table of 64-bit fingerprints in typed arrays: a check costs a probe
 * or two in memory that the collector never scans, where a Set of key strings cost a string hash and a
 * cache miss per set per event. Two keys are told apart by their fingerprints, as in the idempotency
 * window itself.
 */
export class RecentKeys {
  private readonly perGeneration: number;
  private readonly slots: number;
  private recent: Generation;
  private older: Generation | undefined;

  constructor(capacity: number) {
    this.perGeneration = Math.max(1, Math.floor(capacity / 2));
    // At most half full: probes stay short.
    this.slots = 2 ** Math.ceil(Math.log2(this.perGeneration * 2));
    this.recent = new Generation(this.slots);
  }

  has(key: Fingerprint): boolean {
    const { high, low } = key;
    return this.recent.has(high, low) || (this.older?.has(high, low) ?? false);
  }

  add(key: Fingerprint): void {
    if (!this.recent.add(key.high, key.low)) return;
    if (this.recent.size >= this.perGeneration) this.rotate();
  }

  /** Starts a new generation: the older one is forgotten, the newer becomes the older. */
  rotate(): void {
    const next = this.older ?? new Generation(this.slots);
    next.clear();
    this.older = this.recent;
    this.recent = next;
  }
}

/** One table: slot i holds a fingerprint in words 2i and 2i + 1; (0, 0) marks an empty slot. */
class Generation {
  size = 0;
  private readonly words: Uint32Array;
  private readonly mask: number;

  constructor(slots: number) {
    this.words = new Uint32Array(slots * 2);
    this.mask = slots - 1;
  }

  clear(): void {
    this.words.fill(0);
    this.size = 0;
  }

  has(high: number, low: number): boolean {
    const at = this.slotOf(high, stored(high, low));
    return this.words[at] !== 0 || this.words[at + 1] !== 0;
  }

  /** Adds a fingerprint; false when it was there already. */
  add(high: number, low: number): boolean {
    const l = stored(high, low);
    const at = this.slotOf(high, l);
    if (this.words[at] !== 0 || this.words[at + 1] !== 0) return false;
    this.words[at] = high;
    this.words[at + 1] = l;
    this.size++;
    return true;
  }

  /** Where the fingerprint (high, l) is, or the empty slot it would take (an index into `words`). */
  private slotOf(high: number, l: number): number {
    for (let slot = l & this.mask; ; slot = (slot + 1) & this.mask) {
      const at = slot * 2;
      const sh = this.words[at] as number;
      const sl = this.words[at + 1] as number;
      if ((sh === high && sl === l) || (sh === 0 && sl === 0)) return at;
    }
  }
}

/** The low word as stored: the fingerprint (0, 0) would read as an empty slot, so it is kept as (0, 1). */
function stored(high: number, low: number): number {
  return high === 0 && low === 0 ? 1 : low;
}
