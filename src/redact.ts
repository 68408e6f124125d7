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

/** The shortest run of a token's characters that is taken for a piece of it in a text. */
const TOKEN_FRAGMENT = 16;

/**
 * `text` without `token` in it, whole or in pieces: an error message a server or a library wrote may
 * quote the device token, in another case (hex tokens), or cut short. Every run of at least 16
 * characters that occurs in the token (case ignored) becomes `<token>`. Runs on error paths only.
 */
export function withoutToken(text: string, token: string): string {
  if (token.length < TOKEN_FRAGMENT || text.length < TOKEN_FRAGMENT)
    return token ? text.split(token).join('<token>') : text;
  const haystack = token.toLowerCase();
  const lower = text.toLowerCase();
  let out = '';
  let i = 0;
  while (i < text.length) {
    let length = 0;
    // The longest run from i that occurs in the token (a run's prefix occurs whenever the run does).
    while (i + length < text.length && haystack.includes(lower.slice(i, i + length + 1))) length++;
    if (length >= TOKEN_FRAGMENT) {
      out += '<token>';
      i += length;
    } else {
      out += text[i];
      i++;
    }
  }
  return out;
}
