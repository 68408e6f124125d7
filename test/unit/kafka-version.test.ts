import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SetupError } from '../../src/services/errors.ts';
import {
  DEFAULT_KAFKA_VERSION,
  kafkaLogging,
  kafkaVersion,
  TESTED_KAFKA_VERSIONS,
} from '../../src/services/kafka-version.ts';

describe('the broker version switch (KAFKA_VERSION)', () => {
  it('defaults to a 4.x release, and names it first among the tested ones', () => {
    expect(kafkaVersion({})).toBe(DEFAULT_KAFKA_VERSION);
    expect(kafkaVersion({ KAFKA_VERSION: ' ' })).toBe(DEFAULT_KAFKA_VERSION);
    expect(DEFAULT_KAFKA_VERSION).toMatch(/^4\.\d+\.\d+$/);
    expect(TESTED_KAFKA_VERSIONS[0]).toBe(DEFAULT_KAFKA_VERSION);
    expect(TESTED_KAFKA_VERSIONS).toContain('3.9.1');
  });

  it('takes a release number and refuses anything else, with the fix in the message', () => {
    expect(kafkaVersion({ KAFKA_VERSION: '3.9.1' })).toBe('3.9.1');
    for (const wrong of ['latest', '4.1', 'v4.1.1', '2.8.2', '3.4.1']) {
      expect(() => kafkaVersion({ KAFKA_VERSION: wrong }), wrong).toThrow(SetupError);
      expect(() => kafkaVersion({ KAFKA_VERSION: wrong }), wrong).toThrow(/unset KAFKA_VERSION/);
    }
  });

  it('logs through log4j2 from Kafka 4 on and through reload4j before', () => {
    expect(kafkaLogging('4.4.0').mavenProfile).toBe('log4j2');
    expect(kafkaLogging('3.9.1').mavenProfile).toBe('reload4j');
    for (const version of TESTED_KAFKA_VERSIONS) {
      const { mavenProfile, configFile } = kafkaLogging(version);
      const pom = readFileSync(new URL('../../kafka/pom.xml', import.meta.url), 'utf8');
      expect(pom).toContain(`<id>${mavenProfile}</id>`);
      expect(() => readFileSync(new URL(`../../kafka/${configFile}`, import.meta.url))).not.toThrow();
    }
  });

  it('is the version kafka/pom.xml fetches when Maven is run on it by hand', () => {
    const pom = readFileSync(new URL('../../kafka/pom.xml', import.meta.url), 'utf8');
    expect(pom).toContain(`<kafka.version>${DEFAULT_KAFKA_VERSION}</kafka.version>`);
  });
});
