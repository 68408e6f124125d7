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
