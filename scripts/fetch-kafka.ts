/**
 * Fetches the Kafka broker jars into Maven's local repository (once), so that the first test run does not.
 * `npm run kafka:fetch` fetches the version the tests will run (KAFKA_VERSION, else the default);
 * `npm run kafka:fetch -- --all` fetches every tested version (CI runs the suite on each).
 */
import { SetupError } from '../src/services/errors.ts';
import { kafkaClasspath } from '../src/services/kafka-classpath.ts';
import { kafkaVersion, TESTED_KAFKA_VERSIONS } from '../src/services/kafka-version.ts';

try {
  const versions = process.argv.includes('--all') ? TESTED_KAFKA_VERSIONS : [kafkaVersion()];
  for (const version of versions) {
    const started = Date.now();
    const jars = (await kafkaClasspath(version, (m) => console.log(m))).split(':');
    console.log(
      `Kafka ${version} jars ready: ${jars.length} jars (${((Date.now() - started) / 1000).toFixed(1)} s)`,
    );
  }
} catch (error) {
  console.error(error instanceof SetupError ? `fetch-kafka: ${error.message}` : error);
  process.exit(2);
}
