/**
 * At most `limit` tasks running at once; the rest wait in arrival order. One instance per provider, so
 * the bound holds across concurrent `send` calls (several partitions sending at the same time).
 */
export class ConcurrencyLimit {
  readonly limit: number;
  private running = 0;
  private readonly waiting: Array<() => void> = [];
  private head = 0;

  constructor(limit: number) {
    if (!Number.isInteger(limit) || limit < 1)
      throw new RangeError(`concurrency limit must be a positive integer, got ${limit}`);
    this.limit = limit;
  }

  /** Tasks started and not finished yet. */
  get inFlight(): number {
    return this.running;
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.running >= this.limit) {
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.running += 1;
    }
    try {
      return await task();
    } finally {
      this.release();
    }
  }

  private release(): void {
    if (this.head < this.waiting.length) {
      // The slot passes straight to the next waiter: `running` stays the same.
      const next = this.waiting[this.head] as () => void;
      this.waiting[this.head] = noop;
      this.head += 1;
      if (this.head > 1024 && this.head * 2 > this.waiting.length) {
        this.waiting.splice(0, this.head);
        this.head = 0;
      }
      next();
    } else {
      this.running -= 1;
    }
  }
}

const noop = () => {};

/** Maps every item through `task` under `limit`, keeping the order of the input. */
export function mapBounded<T, R>(
  items: readonly T[],
  limit: ConcurrencyLimit,
  task: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  return Promise.all(items.map((item, index) => limit.run(() => task(item, index))));
}
