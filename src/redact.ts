/** Hides the password in a URL such as redis://user:secret@host:6379 before it is printed. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '<unparsable url>';
  }
}

/**
 * A JSON.parse error's message without the piece of the input V8 quotes in it (`Unexpected token 's',
 * ..."token": secret-dev"... is not valid JSON`): that piece may be part of a device token, an API key
 * or a password, and the message goes to logs, headers, spans and answers. What remains says what is
 * wrong and, where V8 gives it, at which position.
 */
export function jsonErrorWithoutInput(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const quoted = message.search(/(^|, )(\.\.\.)?"/);
  const kept = (quoted < 0 ? message : message.slice(0, quoted))
    // `Unexpected token 's'` quotes a character of the input too.
    .replace(/^Unexpected token .*$/s, 'Unexpected token');
  return (kept || 'not valid JSON').slice(0, 120);
}
