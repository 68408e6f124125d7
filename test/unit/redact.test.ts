import { describe, expect, it } from 'vitest';
import { decodeEvent } from '../../src/events/decode.ts';
import { jsonErrorWithoutInput, redactUrl, withoutToken } from '../../src/redact.ts';

const SECRET = 'secret-device-token-123';

/** The message JSON.parse throws for `text`. */
function parseError(text: string): unknown {
  try {
    JSON.parse(text);
  } catch (error) {
    return error;
  }
  throw new Error(`${text} parsed`);
}

describe('jsonErrorWithoutInput', () => {
  // V8 quotes the input around the error, with or without leading and trailing "...".
  it.each([
    [`{"id":"x","platform":"fcm","token": ${SECRET}}`, 'Unexpected token'],
    [`{"token":"${SECRET}",,}`, 'Expected double-quoted property name in JSON at position'],
    [SECRET, 'Unexpected token'],
    [`[1, ${SECRET}]`, 'Unexpected token'],
    [`{"token":"${SECRET}`, 'Unterminated string in JSON at position'],
    [`{"token":"${SECRET}"}x`, 'Unexpected non-whitespace character after JSON at position'],
    ['', 'Unexpected end of JSON input'],
  ])('keeps what is wrong and drops the quoted input: %s', (text, kept) => {
    const message = jsonErrorWithoutInput(parseError(text));
    expect(message).toContain(kept);
    expect(message).not.toContain('secret');
    expect(message).not.toContain('"');
    expect(message).not.toContain("'s'"); // not even the one character V8 names
  });

  it('says "not valid JSON" when the message is nothing but the quoted input', () => {
    expect(jsonErrorWithoutInput(new SyntaxError(`"${SECRET}" is not valid JSON`))).toBe('not valid JSON');
  });

  it('keeps a dead letter reason free of the token', () => {
    const decoded = decodeEvent(Buffer.from(`{"id":"x","platform":"fcm","token": ${SECRET}}`));
    expect(decoded).toMatchObject({ ok: false, kind: 'invalid-json' });
    expect(JSON.stringify(decoded)).not.toContain('secret');
  });
});

describe('redactUrl', () => {
  it('masks the password and nothing else', () => {
    expect(redactUrl('redis://user:hunter2@redis:6379/0')).toBe('redis://user:***@redis:6379/0');
    expect(redactUrl('not a url')).toBe('<unparsable url>');
  });
});

describe('withoutToken', () => {
  const token = 'a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90';

  it('takes the token out whole, in another case, and in pieces of 16 characters or more', () => {
    expect(withoutToken(`device ${token} is gone`, token)).toBe('device <token> is gone');
    expect(withoutToken(`device ${token.toUpperCase()}`, token)).toBe('device <token>');
    expect(withoutToken(`cut: ${token.slice(0, 20)}...`, token)).toBe('cut: <token>...');
    expect(withoutToken(`tail ${token.slice(-17)}`, token)).toBe('tail <token>');
  });

  it('leaves shorter runs and other words alone', () => {
    expect(withoutToken('BadDeviceToken for a1b2c3d4e5', token)).toBe('BadDeviceToken for a1b2c3d4e5');
    expect(withoutToken('no token here', token)).toBe('no token here');
    expect(withoutToken('x', '')).toBe('x');
  });
});
