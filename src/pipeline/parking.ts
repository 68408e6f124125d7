import type { EachBatchPayload } from 'kafkajs';
import type { NotificationEvent } from '../events/event.ts';
import type { Item, Sendable } from './item.ts';
import { interleaveByTenant, type TenantShares } from './tenant-shares.ts';

/** Fewest events of a batch whose mix of tenants is taken for the mix of the backlog behind it. */
const MIN_BATCH_FOR_BACKLOG_DEMAND = 100;

/** The topics {@link Parking} tells apart. */
export interface ParkingTopics {
  /** Never parked from: a retry waits for its due time where it is. */
  retry: string;
  /** Where events are parked, and read back from with low-priority tokens. */
  deferred: string;
}

/**
 * Tenant fairness as the batch processor applies it (see docs/architecture.md, "Tenants share a
 * provider's limit"): what it tells the tenant shares about each batch and step, and which events it
 * parks on the deferred topic. Events of a main-topic partition whose tenant is over its share are
 * parked; events read back from the deferred topic are never parked again, and are sent interleaved by
 * tenant.
 */
export class Parking {
  private readonly shares: TenantShares;
  private readonly topics: ParkingTopics;

  constructor(shares: TenantShares, topics: ParkingTopics) {
    this.shares = shares;
    this.topics = topics;
  }

  /** Whether events over their tenant's share are parked from `topic`: only from the main topic. */
  parksFrom(topic: string): boolean {
    return topic !== this.topics.retry && topic !== this.topics.deferred;
  }

  /** Whether `topic`'s events are parked ones read back (taking low-priority tokens). */
  readsBack(topic: string): boolean {
    return topic === this.topics.deferred;
  }

  /** The group gave this process `assigned` of the topic's `total` partitions. */
  assigned(assigned: number, total: number): void {
    if (total > 0) this.shares.fleetShare(assigned / total);
  }

  /** An event was read for the first time: its tenant asks for one more push. */
  read(event: NotificationEvent): void {
    this.shares.demanded(event.platform, event.tenant ?? '', 1);
  }

  /**
   * Tells the shares how many events wait in the partition behind this batch (its lag), split among
   * the providers and tenants as the batch's events are: a tenant whose events fill the batch is taken
   * to fill the backlog too, and asks for all of it. In the main topic a backlog is also a shortage (see
   * TenantShares.backlogged); in the deferred topic it is the parked tenants' demand only.
   */
  backlog(topic: string, batch: EachBatchPayload['batch'], items: readonly Item[]): void {
    const parks = this.parksFrom(topic);
    const lag = Number(batch.offsetLag());
    if (items.length === 0 || !(lag > 0)) return;
    const perTenant = new Map<string, { platform: string; tenant: string; count: number }>();
    for (const item of items) {
      if (!item.decoded.ok || item.decoded.event.tenant === undefined) continue;
      const { platform, tenant } = item.decoded.event;
      const key = `${platform}:${tenant}`;
      const entry = perTenant.get(key) ?? { platform, tenant, count: 0 };
      entry.count++;
      perTenant.set(key, entry);
    }
    const now = Date.now();
    const perProvider = new Map<string, number>();
    for (const { platform, tenant, count } of perTenant.values()) {
      const waiting = (lag * count) / items.length;
      // A few events are no sample of what waits behind them (a fetch cut short): no one is charged.
      if (items.length >= MIN_BATCH_FOR_BACKLOG_DEMAND) this.shares.demanded(platform, tenant, waiting, now);
      perProvider.set(platform, (perProvider.get(platform) ?? 0) + waiting);
    }
    if (parks) for (const [platform, waiting] of perProvider) this.shares.backlogged(platform, waiting, now);
  }

  /**
   * A judge of "is this event's tenant over its share now?" for one pass over a partition's items: each
   * (provider, tenant) is asked once. Always false outside the main topic and for events without a tenant.
   */
  judge(topic: string, now = Date.now()): (event: NotificationEvent) => boolean {
    if (!this.parksFrom(topic)) return () => false;
    const over = new Map<string, boolean>();
    return (event) => {
      if (event.tenant === undefined) return false;
      const key = `${event.platform}:${event.tenant}`;
      let isOver = over.get(key);
      if (isOver === undefined) {
        isOver = this.shares.isOverShare(event.platform, event.tenant, now);
        over.set(key, isOver);
      }
      return isOver;
    };
  }

  /**
   * Tells the shares what each bucket group of a step got (`sent` of `wanted`) and, in the main topic,
   * picks of what got no token the events of tenants now over their share: parked rather than left to
   * hold the partition (one list per group, in the groups' order).
   */
  afterSends(
    topic: string,
    groups: ReadonlyArray<{ entries: readonly Sendable[]; unsent: readonly Sendable[] }>,
  ): Sendable[][] {
    const now = Date.now();
    for (const { entries, unsent } of groups) {
      const platform = entries[0]?.event.platform;
      if (!platform) continue;
      this.shares.granted(platform, entries.length - unsent.length, now);
      if (unsent.length > 0) this.shares.wentShort(platform, now);
    }
    const isOver = this.judge(topic, now);
    return groups.map(({ unsent }) => unsent.filter(({ event }) => isOver(event)));
  }

  /**
   * A bucket group's entries read back from the deferred topic, in the order a step sends them: the
   * first `urgent` as they are, then the rest interleaved by tenant weight, so that however many
   * windows the tokens cover, each tenant gets its weighted part of them.
   */
  readBackOrder(entries: readonly Sendable[], urgent: number): Sendable[] {
    const rest = interleaveByTenant(
      entries.slice(urgent),
      (entry) => entry.event.tenant,
      (tenant) => this.shares.weightOf(tenant),
    );
    return [...entries.slice(0, urgent), ...rest];
  }
}
