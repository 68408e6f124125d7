import { hash } from 'node:crypto';

/**
 * An idempotency key (an event's (tenant, id), see idempotencyKey in events/event.ts) with its place in
 * the idempotency window: an 8-byte fingerprint and a spread that picks its shard. An item keeps one
 * for its life, so the SHA-1 is computed once however often the key is looked up, marked and checked.
 */
export class IdempotencyKey {
  readonly text: string;
  #high = 0;
  #low = 0;
  #spread = -1;

  constructor(text: string) {
    this.text = text;
  }

  toString(): string {
    return this.text;
  }

  /** The first four bytes of the fingerprint. */
  get high(): number {
    if (this.#spread < 0) this.digest();
    return this.#high;
  }

  /** The next four bytes of the fingerprint. */
  get low(): number {
    if (this.#spread < 0) this.digest();
    return this.#low;
  }

  /** Bytes 8 to 11, which the fingerprint does not use: the shard is `spread % shards`. */
  get spread(): number {
    if (this.#spread < 0) this.digest();
    return this.#spread;
  }

  /**
   * The fingerprint is the first 8 bytes of the key's SHA-1, so that nobody can choose an id whose
   * fingerprint matches another tenant's event; the shard comes from other bytes, so all 64 bits of
   * the fingerprint tell the events of one shard apart.
   */
  private digest(): void {
    const digest = hash('sha1', this.text, 'buffer');
    this.#high = digest.readUInt32BE(0);
    this.#low = digest.readUInt32BE(4);
    this.#spread = digest.readUInt32BE(8);
  }
}

/** A key as the dedupe memory takes it: its text, or a key that carries its fingerprint already. */
export type KeyInput = string | IdempotencyKey;

export function asIdempotencyKey(key: KeyInput): IdempotencyKey {
  return typeof key === 'string' ? new IdempotencyKey(key) : key;
}
