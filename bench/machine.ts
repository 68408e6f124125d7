import { cpus, totalmem } from 'node:os';

/** The machine a figure was measured on, stored beside every result. */
export function machine(): { cores: number; memoryGiB: number; cpu: string; node: string } {
  return {
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    cpu: cpus()[0]?.model ?? 'unknown',
    node: process.version,
  };
}
