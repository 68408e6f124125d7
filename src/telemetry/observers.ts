import type { PipelineObserver } from '../pipeline/observer.ts';

/** An observer that implements only some hooks (the wrappers included). */
export type ObserverHooks = Partial<PipelineObserver>;

type NotifyHook = Exclude<keyof PipelineObserver, 'acquire' | 'send'>;
const NOTIFY_HOOKS: readonly NotifyHook[] = [
  'received',
  'settled',
  'batchDone',
  'released',
  'outcome',
  'retried',
  'deferred',
  'parked',
  'deadLettered',
  'duplicateSkipped',
  'paused',
  'resumed',
  'poolAcquired',
  'limiterError',
  'stepFailed',
  'markFailed',
];

/**
 * One observer made of several (summary counts, metrics, tracing). A hook that none of them implements
 * stays undefined, so the pipeline's `observer.hook?.(…)` costs nothing for it (its arguments are not
 * even evaluated); a hook that one implements is that one's, bound. Wrappers nest, the first observer
 * outermost.
 */
export function combineObservers(...observers: ObserverHooks[]): PipelineObserver {
  const combined: PipelineObserver = {
    acquire: (_pool, _requested, take) => take(),
    send: (_context, send) => send(),
  };
  for (const observer of [...observers].reverse()) {
    const inner = { acquire: combined.acquire, send: combined.send };
    const { acquire, send } = observer;
    if (acquire) {
      combined.acquire = (pool, requested, take, context) =>
        acquire.call(observer, pool, requested, () => inner.acquire(pool, requested, take, context), context);
    }
    if (send) {
      combined.send = (context, run) => send.call(observer, context, () => inner.send(context, run));
    }
  }
  for (const hook of NOTIFY_HOOKS) {
    const implementations = observers
      .map((observer) => observer[hook]?.bind(observer))
      .filter((fn): fn is NonNullable<typeof fn> => fn !== undefined);
    if (implementations.length === 0) continue;
    const only = implementations[0];
    (combined as unknown as Record<string, unknown>)[hook] =
      implementations.length === 1
        ? only
        : (...args: unknown[]) => {
            for (const fn of implementations) (fn as (...a: unknown[]) => void)(...args);
          };
  }
  return combined;
}
