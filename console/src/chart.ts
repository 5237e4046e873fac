// Time charts with uPlot (canvas, small and fast). A live chart keeps a sliding window of points:
// its view pushes one point per second and the chart moves. A history chart is shown whole over
// a fixed span, gaps (null) left as gaps. Canvas cannot read CSS, so colours come from the
// theme's custom properties and the chart is rebuilt when the theme changes.

import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { el } from './dom';
import { color } from './theme';

export interface SeriesSpec {
  label: string;
  /** A CSS custom property with the line colour, e.g. "--c1". */
  colorVar: string;
  /** Which y axis: "left" or "right". */
  axis: 'left' | 'right';
  /** Formats a value for the legend and the axis ("1.2 Mbit/s"). */
  format: (v: number) => string;
}

export interface ChartOptions {
  /** Read by screen readers in place of the picture. */
  label: string;
  series: SeriesSpec[];
  /** Live charts: seconds kept and shown, up to the newest point. */
  window?: number;
  height?: number;
  /** Counts (noisy hosts): the y axis steps by whole numbers. */
  integer?: boolean;
}

export class TimeChart {
  readonly el: HTMLElement;
  private u: uPlot | null = null;
  private data: (number | null)[][];
  /** The fixed x span of a history chart (set by `show`); live charts have none. */
  private span: [number, number] | null = null;
  private readonly host: HTMLElement;
  private readonly summary: HTMLElement;
  private readonly resize: ResizeObserver;
  private readonly onTheme = () => this.build();
  private destroyed = false;

  constructor(private readonly opts: ChartOptions) {
    this.data = [[], ...opts.series.map(() => [])];
    this.host = el('div', { class: 'chart-canvas' });
    // The picture is for eyes; the latest values are text for everyone else.
    this.summary = el('p', { class: 'sr-only', 'aria-live': 'off' });
    this.el = el('figure', { class: 'chart', role: 'group', 'aria-label': opts.label }, this.host, this.summary);
    this.resize = new ResizeObserver(() => {
      if (this.u) this.u.setSize(this.size());
    });
    this.resize.observe(this.host);
    document.addEventListener('sonde-theme', this.onTheme);
    // Built once attached (it needs a width).
    requestAnimationFrame(() => this.build());
  }

  private size() {
    return { width: Math.max(200, this.host.clientWidth), height: this.opts.height ?? 220 };
  }

  private build() {
    if (this.destroyed) return;
    this.u?.destroy();
    const text = color('--fg-muted');
    const grid = color('--grid');
    const axis = (side: 'left' | 'right'): uPlot.Axis => {
      const s = this.opts.series.find((x) => x.axis === side);
      return {
        scale: side,
        side: side === 'left' ? 3 : 1,
        stroke: text,
        grid: { show: side === 'left', stroke: grid, width: 1 },
        ticks: { stroke: grid, width: 1 },
        // Wide enough for "999 Mbit/s": uPlot's default cuts long labels.
        size: 84,
        values: (_u, splits) => splits.map((v) => (s ? s.format(v) : String(v))),
        ...(this.opts.integer ? { incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 1e5, 1e6] } : {}),
      };
    };
    const hasRight = this.opts.series.some((s) => s.axis === 'right');
    const opts: uPlot.Options = {
      ...this.size(),
      cursor: { drag: { x: false, y: false } },
      legend: { show: true, live: true },
      scales: {
        // Live: the x axis spans the whole window and ends at the newest point, so the chart
        // scrolls. History: the span asked for.
        x: {
          time: true,
          range: (_u, _min, max) => {
            if (this.span) return this.span;
            const end = max ?? Date.now() / 1000;
            return [end - (this.opts.window ?? 300), end];
          },
        },
        // Rates start at zero, with some headroom above the largest.
        left: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] },
        right: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] },
      },
      axes: [
        {
          stroke: text,
          grid: { stroke: grid, width: 1 },
          ticks: { stroke: grid, width: 1 },
          // Room for "Nov 24 14:00" between ticks, so labels never overlap.
          space: 90,
          // Our own labels, from the tick's own time and the span shown: the clock for short
          // spans, the date for long ones (uPlot's defaults printed "8/19/29" for a 5-minute
          // window). The labels drawn are kept in data-x-labels (tests read them).
          values: (u, splits) => {
            const span = (u.scales.x.max ?? 0) - (u.scales.x.min ?? 0);
            const labels = splits.map((v) => timeLabel(v, span));
            this.el.dataset.xLabels = JSON.stringify(splits.map((v, i) => [v, labels[i]]));
            return labels;
          },
        },
        axis('left'),
        ...(hasRight ? [axis('right')] : []),
      ],
      series: [
        {},
        ...this.opts.series.map((s) => ({
          label: s.label,
          scale: s.axis,
          stroke: color(s.colorVar),
          width: 2,
          fill: s.axis === 'left' ? color(s.colorVar) + '22' : undefined,
          // A value between two gaps has no line to be part of: it is drawn as a dot.
          points: { show: false, filter: isolated, size: 7, fill: color(s.colorVar) },
          // Under the cursor its value; otherwise the latest one.
          value: (u: uPlot, v: number | null, si: number) => {
            const col = u.data[si] as (number | null)[];
            const x = v ?? (col.length ? col[col.length - 1] : null);
            return x === null || x === undefined ? '–' : s.format(x);
          },
        })),
      ],
    };
    this.u = new uPlot(opts, this.data as uPlot.AlignedData, this.host);
  }

  /** Adds a point at Unix time `t` (seconds) and drops what falls out of the window. */
  push(t: number, values: number[]): void {
    // A point older than the newest (a prefilled one from the series) would fold the line back.
    const newest = this.data[0][this.data[0].length - 1];
    if (newest !== undefined && newest !== null && t <= newest) return;
    this.data[0].push(t);
    values.forEach((v, i) => this.data[i + 1].push(v));
    const from = t - (this.opts.window ?? 300);
    while (this.data[0].length > 0 && (this.data[0][0] ?? 0) < from) for (const col of this.data) col.shift();
    this.u?.setData(this.data as uPlot.AlignedData);
    this.el.dataset.points = String(this.data[0].length);
    this.el.dataset.newest = String(t);
    this.summary.textContent = this.opts.series.map((s, i) => `${s.label}: ${s.format(values[i])}`).join(', ');
  }

  /**
   * A live chart's past, before its first pushed point: `columns` (one per series, null for a
   * gap) at times `t`. Only points inside the window up to now are kept, so a series in a
   * replayed file's own time (far from now) leaves the chart to the live points.
   */
  prefill(t: number[], columns: (number | null)[][]): void {
    if (this.data[0].length > 0) return;
    const now = Date.now() / 1000;
    const from = now - (this.opts.window ?? 300);
    const keep = t.map((x, i) => (x >= from && x <= now + 2 ? i : -1)).filter((i) => i >= 0);
    // The newest seconds may not be stored yet: no gap between the past and the live points.
    while (keep.length > 0 && columns.every((c) => c[keep[keep.length - 1]] === null)) keep.pop();
    if (keep.length === 0) return;
    this.data = [keep.map((i) => t[i]), ...columns.map((c) => keep.map((i) => c[i]))];
    this.u?.setData(this.data as uPlot.AlignedData);
    this.el.dataset.points = String(this.data[0].length);
    this.el.dataset.newest = String(this.data[0][this.data[0].length - 1]);
  }

  /**
   * Shows `columns` (one per series, null for a gap) at times `t` over the span `from`..`to`
   * (Unix seconds), in place of what was shown; `summary` is the text for screen readers.
   */
  show(t: number[], columns: (number | null)[][], from: number, to: number, summary: string): void {
    this.span = [from, to];
    this.data = [t, ...columns];
    this.u?.setData(this.data as uPlot.AlignedData);
    this.el.dataset.points = String(t.length);
    this.summary.textContent = summary;
  }

  destroy(): void {
    this.destroyed = true;
    this.resize.disconnect();
    document.removeEventListener('sonde-theme', this.onTheme);
    this.u?.destroy();
    this.u = null;
  }
}

/** The indices of the values with a gap (or nothing) on both sides. */
function isolated(u: uPlot, si: number): number[] | null {
  const col = u.data[si] as (number | null | undefined)[];
  const out: number[] = [];
  for (let i = 0; i < col.length; i++) {
    if (col[i] != null && col[i - 1] == null && col[i + 1] == null) out.push(i);
  }
  return out.length > 0 ? out : null;
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const pad = (n: number) => String(n).padStart(2, '0');

/**
 * The label of a time axis tick at Unix second `t` when `span` seconds are shown, in local
 * time: "14:05:30" up to 10 minutes, "14:05" up to 2 days, "Nov 24 14:00" up to 2 weeks,
 * "Nov 24" up to a year, "Nov 2026" beyond.
 */
export function timeLabel(t: number, span: number): string {
  const d = new Date(t * 1000);
  const clock = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  const day = `${MONTHS[d.getMonth()]} ${d.getDate()}`;
  if (span <= 600) return `${clock}:${pad(d.getSeconds())}`;
  if (span <= 2 * 86400) return clock;
  if (span <= 14 * 86400) return `${day} ${clock}`;
  if (span <= 366 * 86400) return day;
  return `${MONTHS[d.getMonth()]} ${d.getFullYear()}`;
}
