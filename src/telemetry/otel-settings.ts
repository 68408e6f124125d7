/**
 * The OTEL_* values the OpenTelemetry Node SDK would set aside without a word. The SDK spec asks for a
 * warning when a setting is not understood and for the setting to be ignored; the SDK does ignore them,
 * but it reports them through its diagnostics logger while it starts, before Aqueduct's logger is in
 * place, so that the report is lost. These checks name each such value before the SDK starts, and say
 * what is used instead. The accepted values are the ones of `@opentelemetry/sdk-node` (`create-from-env`).
 */

/** Trace exporters the SDK builds from OTEL_TRACES_EXPORTER. */
export const TRACE_EXPORTERS: ReadonlySet<string> = new Set(['otlp', 'console', 'none']);

const PROTOCOLS = ['grpc', 'http/protobuf', 'http/json'];
const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
];
const PROPAGATORS = ['tracecontext', 'baggage', 'b3', 'b3multi', 'none'];
const LOG_LEVELS = ['none', 'error', 'warn', 'info', 'debug', 'verbose', 'all'];
/** Numbers the SDK takes only when greater than 0. */
const POSITIVE_NUMBERS = [
  'OTEL_BSP_SCHEDULE_DELAY',
  'OTEL_BSP_EXPORT_TIMEOUT',
  'OTEL_BSP_MAX_QUEUE_SIZE',
  'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
  'OTEL_EXPORTER_OTLP_TIMEOUT',
  'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT',
];

/** The names OTEL_TRACES_EXPORTER lists (comma-separated, trimmed, blanks dropped). */
export function traceExporterNames(env: NodeJS.ProcessEnv): string[] {
  return listOf(env.OTEL_TRACES_EXPORTER);
}

/** One sentence per OTEL_* value the SDK would not use, naming what it uses instead; none when all is well. */
export function otelSettingProblems(env: NodeJS.ProcessEnv): string[] {
  const problems: string[] = [];
  const unknown = (name: string, value: string, accepted: readonly string[], instead: string) =>
    problems.push(`${name}=${JSON.stringify(value)} is not one of ${accepted.join(', ')}: ${instead}`);

  const exporters = traceExporterNames(env);
  for (const exporter of exporters.filter((name) => !TRACE_EXPORTERS.has(name))) {
    const others = exporters.some((name) => TRACE_EXPORTERS.has(name));
    unknown(
      'OTEL_TRACES_EXPORTER',
      exporter,
      [...TRACE_EXPORTERS],
      others ? 'left out' : 'no spans are exported',
    );
  }

  const protocolName = blank(env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)
    ? 'OTEL_EXPORTER_OTLP_PROTOCOL'
    : 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL';
  const protocol = (env[protocolName] ?? '').trim();
  if (protocol !== '' && !PROTOCOLS.includes(protocol)) {
    unknown(protocolName, protocol, PROTOCOLS, 'using http/protobuf');
  }

  const sampler = env.OTEL_TRACES_SAMPLER;
  if (!blank(sampler) && sampler !== undefined && !SAMPLERS.includes(sampler)) {
    unknown('OTEL_TRACES_SAMPLER', sampler, SAMPLERS, 'using parentbased_always_on');
  }
  if (sampler?.endsWith('traceidratio')) {
    const ratio = Number(env.OTEL_TRACES_SAMPLER_ARG);
    if (blank(env.OTEL_TRACES_SAMPLER_ARG) || !(ratio >= 0 && ratio <= 1)) {
      problems.push(
        `OTEL_TRACES_SAMPLER_ARG=${JSON.stringify(env.OTEL_TRACES_SAMPLER_ARG ?? '')} is not a ratio from 0 to 1: using 1`,
      );
    }
  }

  for (const propagator of listOf(env.OTEL_PROPAGATORS).filter((name) => !PROPAGATORS.includes(name))) {
    unknown('OTEL_PROPAGATORS', propagator, PROPAGATORS, 'left out');
  }

  const logLevel = (env.OTEL_LOG_LEVEL ?? '').trim();
  if (logLevel !== '' && !LOG_LEVELS.includes(logLevel.toLowerCase())) {
    unknown('OTEL_LOG_LEVEL', logLevel, LOG_LEVELS, 'using warn');
  }

  const disabled = (env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase();
  if (disabled !== '' && disabled !== 'true' && disabled !== 'false') {
    problems.push(
      `OTEL_SDK_DISABLED=${JSON.stringify(env.OTEL_SDK_DISABLED)} is neither true nor false: read as false`,
    );
  }

  for (const name of POSITIVE_NUMBERS) {
    const value = env[name];
    if (blank(value)) continue;
    if (!(Number(value) > 0)) {
      problems.push(`${name}=${JSON.stringify(value)} is not a number greater than 0: using the default`);
    }
  }
  return problems;
}

function listOf(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean);
}

function blank(value: string | undefined): boolean {
  return (value ?? '').trim() === '';
}
