/**
 * A small self-contained SVG line chart (no dependency, no script): delivered/s over time per variant,
 * the provider's allowed rate as a dashed line, and 429s as red bars on the same time axis.
 */
export interface ChartSeries {
  name: string;
  color: string;
  /** [second, value] pairs. */
  points: Array<[number, number]>;
  /** 429s per second, drawn as bars under the line. */
  throttled?: Array<[number, number]>;
}

export interface ChartOptions {
  title: string;
  yLabel: string;
  series: ChartSeries[];
  /** A horizontal reference line (the allowed rate). */
  limit?: { value: number; label: string };
}

const WIDTH = 760;
const HEIGHT = 360;
const PAD = { left: 64, right: 20, top: 40, bottom: 70 };

export function lineChart(options: ChartOptions): string {
  const xs = options.series.flatMap((s) => s.points.map(([x]) => x));
  const ys = options.series.flatMap((s) => [...s.points, ...(s.throttled ?? [])].map(([, y]) => y));
  const xMax = Math.max(1, ...xs);
  const yMax = niceCeil(Math.max(1, options.limit?.value ?? 0, ...ys) * 1.1);
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const x = (v: number) => PAD.left + (v / xMax) * plotW;
  const y = (v: number) => PAD.top + plotH - (v / yMax) * plotH;
  const parts: string[] = [];
  parts.push(`<rect x="0" y="0" width="${WIDTH}" height="${HEIGHT}" fill="white"/>`);
  parts.push(
    `<text x="${WIDTH / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${escapeXml(options.title)}</text>`,
  );
  for (let i = 0; i <= 5; i++) {
    const value = (yMax / 5) * i;
    parts.push(
      `<line x1="${PAD.left}" x2="${WIDTH - PAD.right}" y1="${y(value)}" y2="${y(value)}" stroke="#eee"/>`,
    );
    parts.push(
      `<text x="${PAD.left - 6}" y="${y(value) + 4}" text-anchor="end" font-size="11">${Math.round(value)}</text>`,
    );
  }
  const xStep = Math.max(1, Math.ceil(xMax / 10));
  for (let v = 0; v <= xMax; v += xStep) {
    parts.push(
      `<text x="${x(v)}" y="${PAD.top + plotH + 16}" text-anchor="middle" font-size="11">${v}</text>`,
    );
  }
  parts.push(
    `<text x="${PAD.left + plotW / 2}" y="${PAD.top + plotH + 34}" text-anchor="middle" font-size="12">seconds since the consumers started</text>`,
  );
  parts.push(
    `<text x="16" y="${PAD.top + plotH / 2}" text-anchor="middle" font-size="12" transform="rotate(-90 16 ${PAD.top + plotH / 2})">${escapeXml(options.yLabel)}</text>`,
  );
  parts.push(
    `<line x1="${PAD.left}" x2="${PAD.left}" y1="${PAD.top}" y2="${PAD.top + plotH}" stroke="#333"/>`,
  );
  parts.push(
    `<line x1="${PAD.left}" x2="${WIDTH - PAD.right}" y1="${PAD.top + plotH}" y2="${PAD.top + plotH}" stroke="#333"/>`,
  );
  const barWidth = Math.max(2, (plotW / (xMax + 1)) * 0.35);
  options.series.forEach((series, index) => {
    for (const [sx, sy] of series.throttled ?? []) {
      if (sy <= 0) continue;
      const offset = index * barWidth;
      parts.push(
        `<rect x="${x(sx) + offset}" y="${y(sy)}" width="${barWidth}" height="${PAD.top + plotH - y(sy)}" fill="#d62728" fill-opacity="0.55"/>`,
      );
    }
  });
  if (options.limit) {
    parts.push(
      `<line x1="${PAD.left}" x2="${WIDTH - PAD.right}" y1="${y(options.limit.value)}" y2="${y(options.limit.value)}" stroke="#555" stroke-dasharray="6 4"/>`,
    );
    parts.push(
      `<text x="${WIDTH - PAD.right}" y="${y(options.limit.value) - 6}" text-anchor="end" font-size="11" fill="#555">${escapeXml(options.limit.label)}</text>`,
    );
  }
  for (const series of options.series) {
    const path = series.points
      .map(([px, py], i) => `${i === 0 ? 'M' : 'L'}${x(px).toFixed(1)},${y(py).toFixed(1)}`)
      .join(' ');
    parts.push(`<path d="${path}" fill="none" stroke="${series.color}" stroke-width="2"/>`);
  }
  const legend = [
    ...options.series.map((s) => ({ color: s.color, label: `${s.name}: delivered/s` })),
    { color: '#d62728', label: 'provider 429s per second' },
  ];
  legend.forEach((entry, i) => {
    const lx = PAD.left + i * 230;
    const ly = HEIGHT - 14;
    parts.push(`<rect x="${lx}" y="${ly - 9}" width="14" height="10" fill="${entry.color}"/>`);
    parts.push(`<text x="${lx + 20}" y="${ly}" font-size="12">${escapeXml(entry.label)}</text>`);
  });
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="sans-serif">\n${parts.join('\n')}\n</svg>\n`;
}

function niceCeil(value: number): number {
  const magnitude = 10 ** Math.floor(Math.log10(value));
  return Math.ceil(value / magnitude) * magnitude;
}

function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
