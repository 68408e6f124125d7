import type { SimulatorCore } from './core.ts';
import type { SimulatorLimits } from './simulator.ts';

/**
 * The control API both simulators serve next to /stats: `GET /stats`, `POST /faults` (a JSON subset
 * of {@link SimulatorFaults}), `POST /reset` (optional `{ rate, burst, deviceRate, deviceBurst }`;
 * `deviceRate: null` removes the per-device limit), `POST /limits` (`{ rate, burst }`: the provider's limits
 * from now on, records and counts kept). Returns undefined for other paths.
 */
export function handleControl(
  core: SimulatorCore,
  kind: 'fcm' | 'apns',
  method: string,
  path: string,
  body: string,
): { status: number; json: unknown } | undefined {
  const route = path.split('?')[0];
  try {
    if (route === '/stats' && method === 'GET') return { status: 200, json: core.snapshot(kind) };
    if (route === '/faults' && method === 'POST')
      return { status: 200, json: core.setFaults(parseObject(body)) };
    if (route === '/limits' && method === 'POST') {
      const { rate, burst } = parseObject(body) as { rate?: unknown; burst?: unknown };
      for (const [name, value] of [
        ['rate', rate],
        ['burst', burst],
      ] as const) {
        if (value !== undefined && !(typeof value === 'number' && Number.isFinite(value) && value > 0))
          throw new TypeError(`${name} must be a positive number`);
      }
      core.setLimits({
        ...(rate !== undefined ? { rate: rate as number } : {}),
        ...(burst !== undefined ? { burst: burst as number } : {}),
      });
      return { status: 200, json: core.snapshot(kind) };
    }
    if (route === '/reset' && method === 'POST') {
      const limits = parseObject(body) as SimulatorLimits;
      core.reset(limits);
      return { status: 200, json: core.snapshot(kind) };
    }
  } catch (error) {
    return { status: 400, json: { error: (error as Error).message } };
  }
  return undefined;
}

function parseObject(body: string): Record<string, unknown> {
  if (body.trim() === '') return {};
  const value: unknown = JSON.parse(body);
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new TypeError('expected a JSON object');
  return value as Record<string, unknown>;
}
