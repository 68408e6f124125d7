/** The `tenant` label of events without a tenant. */
export const NO_TENANT_LABEL = 'none';
/** The `tenant` label of every tenant that has no label of its own. */
export const OTHER_TENANTS_LABEL = 'other';

/** Options of {@link TenantLabels}. */
export interface TenantLabelsOptions {
  /**
   * The most tenants with a label of their own (besides `none` and `other`). Default 20. Every label is
   * a time series per metric in Prometheus, so this bounds what one process adds, however many tenants
   * send.
   */
  maxLabels?: number;
  /**
   * How many tenants the heavy-hitter count follows (Space-Saving): a tenant with more than
   * `1 / tracked` of the traffic is always among them. Default 8 × `maxLabels`.
   */
  tracked?: number;
  /** The fewest events a tenant must have sent before it gets a label (so the first few seen do not). Default 100. */
  minEvents?: number;
}

/**
 * Which `tenant` label a tenant's events are counted under: the busiest tenants get one of their own,
 * everyone else shares `other`. A tenant is given a label once it has surely sent `minEvents` events
 * and at least `1 / (4 × maxLabels)` of the events of the tenants without a label, by a Space-Saving
 * count (which follows `tracked` tenants and knows how much of each count is certain). It keeps the
 * label for the life of the process: a counter series must only ever grow, so a tenant's events never
 * move between its own series and `other` once it has one. What it sent before its label stays in
 * `other`.
 */
export class TenantLabels {
  private readonly maxLabels: number;
  private readonly tracked: number;
  private readonly minEvents: number;
  private readonly labelled = new Set<string>();
  /** Space-Saving counters: at most `tracked` tenants, each with its count and how much of it may be another's. */
  private readonly counts = new Map<string, { count: number; error: number }>();
  /** Events of tenants without a label. */
  private total = 0;

  constructor(options: TenantLabelsOptions = {}) {
    this.maxLabels = options.maxLabels ?? 20;
    this.tracked = options.tracked ?? 8 * Math.max(this.maxLabels, 1);
    this.minEvents = options.minEvents ?? 100;
    if (!Number.isInteger(this.maxLabels) || this.maxLabels < 0)
      throw new RangeError(`maxLabels must be an integer >= 0, got ${this.maxLabels}`);
    if (!Number.isInteger(this.tracked) || this.tracked < 1)
      throw new RangeError(`tracked must be an integer >= 1, got ${this.tracked}`);
  }

  /** Counts one event of `tenant` (undefined: none) and returns the label it is counted under. */
  labelOf(tenant: string | undefined): string {
    if (tenant === undefined) return NO_TENANT_LABEL;
    if (this.labelled.has(tenant)) return tenant;
    // A tenant named like a shared label stays in `other`: labelled `none` or `other`, its events would
    // be added to those of no tenant or of all the unlabelled ones, and no reader could tell them apart.
    if (tenant === NO_TENANT_LABEL || tenant === OTHER_TENANTS_LABEL) return OTHER_TENANTS_LABEL;
    this.total++;
    const { count, error } = this.count(tenant);
    const sure = count - error;
    if (
      this.labelled.size < this.maxLabels &&
      sure >= this.minEvents &&
      sure * 4 * this.maxLabels >= this.total
    ) {
      // From now on its events are not in the competition for the remaining labels.
      this.labelled.add(tenant);
      this.counts.delete(tenant);
      this.total = Math.max(0, this.total - count);
      return tenant;
    }
    return OTHER_TENANTS_LABEL;
  }

  /** Tenants with a label of their own, in the order they got it. */
  labels(): string[] {
    return [...this.labelled];
  }

  private count(tenant: string): { count: number; error: number } {
    const known = this.counts.get(tenant);
    if (known) {
      known.count++;
      return known;
    }
    if (this.counts.size < this.tracked) {
      const fresh = { count: 1, error: 0 };
      this.counts.set(tenant, fresh);
      return fresh;
    }
    // Space-Saving: the newcomer takes the place of the smallest count and inherits it, as its error.
    let smallest: string | undefined;
    let least = Number.POSITIVE_INFINITY;
    for (const [name, entry] of this.counts)
      if (entry.count < least) {
        least = entry.count;
        smallest = name;
      }
    if (smallest !== undefined) this.counts.delete(smallest);
    const entry = { count: least + 1, error: least };
    this.counts.set(tenant, entry);
    return entry;
  }
}
