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
      axes: [{ stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } }, axis('left'), ...(hasRight ? [axis('right')] : [])],
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
    this.data[0].push(t);
    values.forEach((v, i) => this.data[i + 1].push(v));
    const from = t - (this.opts.window ?? 300);
    while (this.data[0].length > 0 && (this.data[0][0] ?? 0) < from) for (const col of this.data) col.shift();
    this.u?.setData(this.data as uPlot.AlignedData);
    this.summary.textContent = this.opts.series.map((s, i) => `${s.label}: ${s.format(values[i])}`).join(', ');
  }

  /**
   * Shows `columns` (one per series, null for a gap) at times `t` over the span `from`..`to`
   * (Unix seconds), in place of what was shown; `summary` is the text for screen readers.
   */
  show(t: number[], columns: (number | null)[][], from: number, to: number, summary: string): void {
    this.span = [from, to];
    this.data = [t, ...columns];
    this.u?.setData(this.data as uPlot.AlignedData);
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
