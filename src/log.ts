import { type Logger, pino } from 'pino';

export type { Logger } from 'pino';

/**
 * Structured JSON logs (pino), one line per notable event. Fields that could carry a device token or a
 * credential are redacted by path as a second line of defence; the first is never logging them.
 */
export function createLogger(level: string = process.env.LOG_LEVEL ?? 'info', name = 'aqueduct'): Logger {
  return pino({
    name,
    level,
    base: { pid: process.pid },
    redact: {
      paths: ['token', '*.token', 'event.token', 'credentials', '*.password', 'password', 'authorization'],
      censor: '[redacted]',
    },
  });
}
