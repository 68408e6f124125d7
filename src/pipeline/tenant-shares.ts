/**
 * Which tenants are over their max-min fair share of a provider's budget, as one consumer process sees
 * it (see docs/architecture.md, "Tenant fairness"). The batch processor parks the events of a tenant over
 * its share on the deferred topic, out of the way of the other tenants' events in the same partitions.
 *
 * Per provider, it keeps decaying rates (time constant `horizonMs`):
 * - each tenant's *demand*: the events of it the process has read and wants to send, and, in a partition
 *   with a backlog, its part of the events waiting behind them (in proportion to its part of the batch);
 * - the provider's *budget*: the tokens the process got for that provider, all tenants together;
 * - when the process last went short of tokens for that provider: a step that wanted more than it got,
 *   or a partition with more events waiting behind the ones read than the budget sends in the horizon.
 *
 * A tenant is over its share when the provider was short within the horizon and the tenant's demand is
 * above its weighted max-min share of the budget (water-filling: every tenant asking for less than an
 * equal weighted split gets what it asks for, the rest is split among the others by weight). A tenant's
 * parked backlog counts in its demand too (its part of the deferred topic's lag), so a tenant with a
 * parked backlog keeps parking: its newer events do not overtake the older ones ahead of the others.
 *
 * Events without a tenant are never over a share: they are one deployment's own traffic, with nobody to
 * be fair to, and parking them would only cost Kafka writes.
 *
 * The process sees its own partitions only. Tenants spread over partitions (the usual case: events are
 * keyed by device or id) look the same in every process, so the local shares add up to the global ones.
 */

/** Options of {@link TenantShares}. */
export interface TenantSharesOptions {
  /** Weight of a tenant (default 1): shares are split in proportion to weight. */
  weights?: ReadonlyMap<string, number>;
  /** Time constant of the rates, and how long a shortage or a parked read counts, in ms. Default 2000. */
  horizonMs?: number;
  /**
   * Each provider's configured rate (tokens/s), for the least budget a process assumes (see
   * {@link TenantShares.fleetShare}).
   */
  nominalRates?: ReadonlyMap<string, number>;
}

/** A rate that decays exponentially: `add` counts, `perSecond` reads. */
class DecayingRate {
  private value = 0;
  private at = 0;
  private readonly tauMs: number;

  constructor(tauMs: number) {
    this.tauMs = tauMs;
  }

  add(n: number, now: number): void {
    this.value = this.decayed(now) + n;
    this.at = now;
  }

  /**
   * Counts per second, lagging behind a change by about the time constant (demand and budget alike, so
   * that their ratio, which decides the shares, is right from the start).
   */
  perSecond(now: number): number {
    return (this.decayed(now) * 1000) / this.tauMs;
  }

  private decayed(now: number): number {
    if (this.value === 0) return 0;
    const elapsed = Math.max(0, now - this.at);
    return this.value * Math.exp(-elapsed / this.tauMs);
  }
}

interface TenantState {
  demand: DecayingRate;
}

interface ProviderState {
  budget: DecayingRate;
  /** When a step of this provider last got fewer tokens than it wanted (epoch ms, 0: never). */
  shortAt: number;
  tenants: Map<string, TenantState>;
}

/** Below this many events/s a tenant's demand counts as gone: its entry is dropped. */
const IDLE_DEMAND_PER_SECOND = 0.01;

export class TenantShares {
  private readonly weights: ReadonlyMap<string, number>;
  private readonly horizonMs: number;
  private readonly nominalRates: ReadonlyMap<string, number>;
  /** This process's part of the fleet (its partitions ÷ the topic's); 1 until told. */
  private fleetPart = 1;
  private readonly providers = new Map<string, ProviderState>();

  constructor(options: TenantSharesOptions = {}) {
    this.weights = options.weights ?? new Map();
    this.horizonMs = options.horizonMs ?? 2000;
    this.nominalRates = options.nominalRates ?? new Map();
  }

  /** `n` events of `tenant` for `provider` were read and want sending. */
  demanded(provider: string, tenant: string, n: number, now = Date.now()): void {
    this.tenant(provider, tenant).demand.add(n, now);
  }

  /** The process got `n` tokens for `provider`. */
  granted(provider: string, n: number, now = Date.now()): void {
    this.provider(provider).budget.add(n, now);
  }

  /** A step for `provider` got fewer tokens than it wanted. */
  wentShort(provider: string, now = Date.now()): void {
    this.provider(provider).shortAt = now;
  }

  /**
   * `waiting` events for `provider` wait in a partition behind what was read (Kafka's lag). More than
   * the process gets tokens for in half the horizon counts as a shortage: whoever reads behind them would
   * wait longer than that, tokens or not, unless the tenants over their share are moved out of the way.
   */
  backlogged(provider: string, waiting: number, now = Date.now()): void {
    const state = this.provider(provider);
    // Before any grant the process cannot tell how long the backlog takes: any backlog counts.
    if (waiting > (state.budget.perSecond(now) * this.horizonMs) / 2000) state.shortAt = now;
  }

  /** Whether `tenant`'s events for `provider` are over its share now (see the module comment). */
  isOverShare(provider: string, tenant: string | undefined, now = Date.now()): boolean {
    if (tenant === undefined) return false;
    const state = this.providers.get(provider);
    const own = state?.tenants.get(tenant);
    if (!state || !own) return false;
    if (state.shortAt === 0 || now - state.shortAt >= this.horizonMs) return false;
    const shares = this.sharesOf(state, this.budgetOf(provider, state, now), now);
    return own.demand.perSecond(now) > (shares.get(tenant) ?? 0);
  }

  /** The tokens/s the process gets for `provider`: as granted lately, else the configured rate. */
  private budgetOf(provider: string, state: ProviderState, now: number): number {
    // The grants are counted from the first one on: just after a start they are a fraction of the
    // process's rate, and a small tenant would look over its share of that. Half the process's part of
    // the configured rate is a floor that a share of the real budget does not fall under for long.
    const floor = ((this.nominalRates.get(provider) ?? 0) * this.fleetPart) / 2;
    return Math.max(state.budget.perSecond(now), floor);
  }

  /**
   * This process holds `part` of the topic's partitions (0 to 1), so about that part of each
   * provider's configured rate is its budget when tokens are short.
   */
  fleetShare(part: number): void {
    this.fleetPart = Math.min(1, Math.max(0, part));
  }

  /** Weight of a tenant (1 unless configured). */
  weightOf(tenant: string | undefined): number {
    return tenant === undefined ? 1 : (this.weights.get(tenant) ?? 1);
  }

  /**
   * Each tenant's weighted max-min share of the provider's budget (events/s), by water-filling: tenants
   * in order of demand per weight; one whose demand fits in its weighted part of what is left gets its
   * demand, and the first that does not ends it: it and all after it get their weighted part.
   */
  private sharesOf(state: ProviderState, budget: number, now: number): Map<string, number> {
    const demands: Array<{ tenant: string; demand: number; weight: number }> = [];
    for (const [tenant, entry] of state.tenants) {
      const demand = entry.demand.perSecond(now);
      if (demand < IDLE_DEMAND_PER_SECOND) {
        state.tenants.delete(tenant);
        continue;
      }
      demands.push({ tenant, demand, weight: this.weightOf(tenant) });
    }
    demands.sort((a, b) => a.demand / a.weight - b.demand / b.weight);
    let left = budget;
    let weightLeft = demands.reduce((sum, d) => sum + d.weight, 0);
    const shares = new Map<string, number>();
    for (const [i, { tenant, demand, weight }] of demands.entries()) {
      const part = (left * weight) / weightLeft;
      if (demand > part) {
        for (const rest of demands.slice(i)) shares.set(rest.tenant, (left * rest.weight) / weightLeft);
        break;
      }
      shares.set(tenant, demand);
      left -= demand;
      weightLeft -= weight;
    }
    return shares;
  }

  private provider(provider: string): ProviderState {
    let state = this.providers.get(provider);
    if (!state) {
      state = { budget: new DecayingRate(this.horizonMs), shortAt: 0, tenants: new Map() };
      this.providers.set(provider, state);
    }
    return state;
  }

  private tenant(provider: string, tenant: string): TenantState {
    const tenants = this.provider(provider).tenants;
    let state = tenants.get(tenant);
    if (!state) {
      state = { demand: new DecayingRate(this.horizonMs) };
      tenants.set(tenant, state);
    }
    return state;
  }
}

/**
 * The entries in weighted round-robin order of their tenants (each tenant's own order kept), so that a
 * step that gets only some of the tokens it asked for splits them among its tenants max-min fairly.
 */
export function interleaveByTenant<T>(
  entries: readonly T[],
  tenantOf: (entry: T) => string | undefined,
  weightOf: (tenant: string | undefined) => number,
): T[] {
  const queues = new Map<string | undefined, T[]>();
  for (const entry of entries) {
    const tenant = tenantOf(entry);
    const queue = queues.get(tenant);
    if (queue) queue.push(entry);
    else queues.set(tenant, [entry]);
  }
  if (queues.size <= 1) return [...entries];
  // Stride scheduling: each tenant's next entry is due at (taken + 1) / weight; the earliest goes next.
  const lanes = [...queues].map(([tenant, queue]) => ({
    queue,
    next: 0,
    weight: weightOf(tenant),
    taken: 0,
  }));
  const out: T[] = [];
  while (out.length < entries.length) {
    let best: (typeof lanes)[number] | undefined;
    for (const lane of lanes) {
      if (lane.next >= lane.queue.length) continue;
      if (!best || (lane.taken + 1) / lane.weight < (best.taken + 1) / best.weight) best = lane;
    }
    if (!best) break;
    out.push(best.queue[best.next++] as T);
    best.taken++;
  }
  return out;
}
