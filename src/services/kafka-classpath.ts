import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SetupError } from './errors.ts';
import { kafkaLogging } from './kafka-version.ts';
import { runCommand, which } from './process.ts';

/** kafka/: the pom that names the broker's jars, and its logging configurations. */
export const KAFKA_DIR = resolve(fileURLToPath(new URL('../../kafka/', import.meta.url)));
const POM = join(KAFKA_DIR, 'pom.xml');

/**
 * The JVM classpath of a Kafka broker version, resolved by Maven from kafka/pom.xml. Maven's local
 * repository is the jar cache; ~/.cache/aqueduct remembers the resolved list (one file per version,
 * keyed by the pom's hash) so that a start needs no Maven at all once the jars are there.
 */
export async function kafkaClasspath(
  version: string,
  log: (message: string) => void = () => {},
): Promise<string> {
  const { mavenProfile } = kafkaLogging(version);
  const pom = await readFile(POM);
  const key = createHash('sha256')
    .update(pom)
    .update(`\0${version}\0${mavenProfile}`)
    .digest('hex')
    .slice(0, 16);
  const cacheDir = join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'aqueduct');
  const cacheFile = join(cacheDir, `kafka-classpath-${version}-${key}.txt`);
  if (existsSync(cacheFile)) {
    const cached = (await readFile(cacheFile, 'utf8')).trim();
    if (cached.split(':').every((jar) => existsSync(jar))) return cached;
  }
  const mvn = await which('mvn');
  if (!mvn) {
    throw new SetupError(
      'Maven (mvn) was not found on PATH: it fetches the Kafka broker jars the first time.',
      'install Maven (Debian: apt-get install maven), or set KAFKA_BROKERS to use a broker you already run.',
    );
  }
  await mkdir(cacheDir, { recursive: true });
  const outFile = `${cacheFile}.${process.pid}.tmp`;
  const goal = [
    ...['-B', '-q', '-f', POM, 'dependency:build-classpath', `-Dmdep.outputFile=${outFile}`],
    ...[`-Dkafka.version=${version}`, `-Dkafka.logging=${mavenProfile}`],
  ];
  try {
    // Offline first: after the first fetch everything is in the local repository.
    await runCommand(mvn, ['-o', ...goal]);
  } catch {
    log(`Fetching the Kafka ${version} broker jars with Maven (once; about 50 MB)…`);
    try {
      await runCommand(mvn, goal);
    } catch (error) {
      throw new SetupError(
        `Maven could not fetch the Kafka ${version} jars: ${(error as Error).message.split('\n').slice(0, 8).join('\n')}`,
        'check that KAFKA_VERSION (if set) names a released Kafka version and that Maven can reach its central repository (proxy settings in ~/.m2/settings.xml), or set KAFKA_BROKERS to use a broker you already run.',
        { cause: error },
      );
    }
  }
  const classpath = (await readFile(outFile, 'utf8')).trim();
  await rm(outFile, { force: true });
  await writeFile(cacheFile, classpath);
  return classpath;
}
