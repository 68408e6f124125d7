/**
 * Finds device tokens in text (logs, exported spans), whole or in part: any {@link WINDOW} characters
 * in a row taken from a token count as that token leaked (a truncated token in an error message is a
 * leak too). Scanning every token against every line would be tokens × bytes; instead every window of
 * every token is indexed, and every window of every long run of token-like characters in the text is
 * looked up once.
 */

const WINDOW = 16;
/** Characters device tokens are made of (FCM: base64url and ':'; APNs: hex), plus '-' and '_'. */
const RUN = /[A-Za-z0-9:_-]{16,}/g;

/** What {@link TokenScanner.scan} found. */
export interface TokenFindings {
  /** Distinct tokens found at least once. */
  distinct: number;
  /** Occurrences, over all texts. */
  occurrences: number;
  /** Where the first few were seen (source name and the log message or span name), never the token. */
  where: string[];
}

export class TokenScanner {
  private readonly byWindow = new Map<string, string>();
  private readonly tokens = new Set<string>();
  private readonly found = new Set<string>();
  private occurrences = 0;
  private readonly where: string[] = [];

  /** Tokens shorter than the window cannot be told apart from ordinary words and are not looked for. */
  constructor(tokens: Iterable<string>) {
    for (const token of tokens) {
      if (token.length < WINDOW) continue;
      this.tokens.add(token);
      for (let i = 0; i + WINDOW <= token.length; i++) this.byWindow.set(token.slice(i, i + WINDOW), token);
    }
  }

  /** Number of tokens being looked for. */
  get size(): number {
    return this.tokens.size;
  }

  /** Scans one text; `source` and `context` say where it came from (kept for the first findings). */
  scan(text: string, source: string, context = ''): void {
    for (const match of text.matchAll(RUN)) {
      const run = match[0];
      const inRun = new Set<string>();
      for (let i = 0; i + WINDOW <= run.length; i++) {
        const token = this.byWindow.get(run.slice(i, i + WINDOW));
        if (token !== undefined) inRun.add(token);
      }
      for (const token of inRun) {
        this.occurrences++;
        this.found.add(token);
        if (this.where.length < 5) this.where.push(`${source}${context ? `: ${context}` : ''}`);
      }
    }
  }

  /** Scans JSON log lines, one per line; each finding names the line's `msg`. */
  scanLogLines(text: string, source: string): void {
    for (const line of text.split('\n')) {
      if (line.length < WINDOW) continue;
      this.scan(line, source, messageOf(line));
    }
  }

  /** The tokens found so far (to combine scanners; never print them). */
  foundTokens(): ReadonlySet<string> {
    return this.found;
  }

  findings(): TokenFindings {
    return { distinct: this.found.size, occurrences: this.occurrences, where: [...this.where] };
  }
}

function messageOf(line: string): string {
  try {
    const entry = JSON.parse(line) as { msg?: unknown };
    return typeof entry.msg === 'string' ? entry.msg : '';
  } catch {
    return 'not JSON';
  }
}
