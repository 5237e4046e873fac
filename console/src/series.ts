// A long-range traffic chart from the time series on disk (--data-dir, /api/v1/series): bits per
// second each way over the last hour, day, week or year, at the resolution the server picks.
// Gaps (no data) stay gaps. The ranges end at the newest second stored, which for a replayed
// capture is the capture's own time, not the clock.

import { api, type Series } from './api';
import { TimeChart } from './chart';
import { el } from './dom';
import * as fmt from './format';
import { num } from './table';

export const HOUR = 3600;
/** The spans a history chart offers: its button text and length in seconds. */
export const SPANS: [string, number][] = [
  ['1 h', HOUR],
  ['24 h', 24 * HOUR],
  ['7 d', 7 * 24 * HOUR],
  ['30 d', 30 * 24 * HOUR],
  ['1 y', 365 * 24 * HOUR],
];
/** The length of an interval of each resolution the server picks, in seconds. */
export const RESOLUTION: Record<string, number> = { '1s': 1, '1m': 60, '1h': HOUR, '1d': 24 * HOUR };
/** Where each total is in a point's `value` (the API's `metrics`). */
const BYTES_IN = 0;
const BYTES_OUT = 1;
const PACKETS_IN = 2;
const PACKETS_OUT = 3;

export interface SeriesChartOptions {
  family: 'interface' | 'hosts' | 'apps';
  key: string;
  /** What the chart shows, for screen readers ("Traffic of 10.0.0.1"). */
  label: string;
  /** Names of the two directions: `in` (bytes_in) and `out` (bytes_out). */
  names: { in: string; out: string };
}

/** A card with range buttons, the chart and the totals over the range; `stop` when leaving. */
export function seriesCard(opts: SeriesChartOptions): { el: HTMLElement; stop: () => void } {
  const { names } = opts;
  const chart = new TimeChart({
    label: `${opts.label}, bits per second ${names.out} and ${names.in}`,
    series: [
      { label: names.out, colorVar: '--c1', axis: 'left', format: fmt.bits },
      { label: names.in, colorVar: '--c2', axis: 'left', format: fmt.bits },
    ],
  });
  const status = el('p', { class: 'error', role: 'alert' });
  const totals = el('dl', { class: 'stats' });
  const buttons = SPANS.map(([label, seconds]) => {
    const b = el('button', { type: 'button', class: 'toggle', 'aria-pressed': 'false', 'data-range': label }, label);
    b.addEventListener('click', () => void load(seconds));
    return b;
  });
  const box = el(
    'section',
    { class: 'card wide series', 'aria-labelledby': 'series-h', 'data-state': 'loading' },
    el('div', { class: 'heading' }, el('h2', { id: 'series-h' }, 'Traffic history'), el('div', { class: 'ranges', role: 'group', 'aria-label': 'Range' }, ...buttons)),
    status,
    chart.el,
    totals,
  );

  // The end of every range: the newest second stored, plus one. The 1 h range asks with no
  // from/to (the server's default is the hour up to the newest second), which tells it.
  let end: number | null = null;
  let ctl: AbortController | null = null;

  async function fetchRange(seconds: number, signal: AbortSignal): Promise<{ s: Series; from: number; to: number }> {
    if (seconds === HOUR || end === null) {
      const s = await api.series({ family: opts.family, key: opts.key, resolution: 'auto' }, signal);
      const last = s.points[s.points.length - 1];
      end = last ? last.t + (RESOLUTION[s.resolution] ?? 1) : Math.floor(Date.now() / 1000);
      if (seconds === HOUR) return { s, from: end - HOUR, to: end };
    }
    const from = end - seconds;
    const s = await api.series({ family: opts.family, key: opts.key, from, to: end, resolution: 'auto' }, signal);
    return { s, from, to: end };
  }

  async function load(seconds: number) {
    ctl?.abort();
    const c = (ctl = new AbortController());
    buttons.forEach((b, i) => b.setAttribute('aria-pressed', String(SPANS[i][1] === seconds)));
    box.dataset.state = 'loading';
    try {
      const { s, from, to } = await fetchRange(seconds, c.signal);
      show(s, from, to);
      status.textContent = '';
      box.dataset.state = 'done';
    } catch (e) {
      if (c.signal.aborted) return;
      status.textContent = (e as Error).message;
      box.dataset.state = 'error';
    }
  }

  /** Each point's rate is its sums over the length of its interval (the mean over it). */
  function show(s: Series, from: number, to: number) {
    const step = RESOLUTION[s.resolution] ?? 1;
    const rate = (i: number) => s.points.map((p) => (p.value ? (p.value[i] * 8) / step : null));
    const sum = (i: number) => s.points.reduce((a, p) => a + (p.value ? p.value[i] : 0), 0);
    const filled = s.points.filter((p) => p.value).length;
    const [bytesOut, bytesIn, pktsOut, pktsIn] = [sum(BYTES_OUT), sum(BYTES_IN), sum(PACKETS_OUT), sum(PACKETS_IN)];
    const res = `${s.resolution} resolution, ${filled} of ${s.points.length} intervals with data`;
    chart.show(
      s.points.map((p) => p.t),
      [rate(BYTES_OUT), rate(BYTES_IN)],
      from,
      to,
      `From ${fmt.time(from)} to ${fmt.time(to)}, ${res}: ${fmt.bytes(bytesOut)} ${names.out}, ${fmt.bytes(bytesIn)} ${names.in}.`,
    );
    const stat = (label: string, key: string, v: number, f: (n: number) => string) =>
      el('div', { class: 'stat' }, el('dt', {}, label), el('dd', { 'data-total': key }, num(v, f(v))));
    totals.replaceChildren(
      stat(`Bytes ${names.out}`, 'bytes_out', bytesOut, fmt.bytes),
      stat(`Bytes ${names.in}`, 'bytes_in', bytesIn, fmt.bytes),
      stat(`Packets ${names.out}`, 'packets_out', pktsOut, fmt.count),
      stat(`Packets ${names.in}`, 'packets_in', pktsIn, fmt.count),
      el('div', { class: 'stat' }, el('dt', {}, 'Shown'), el('dd', { 'data-resolution': s.resolution, 'data-filled': filled }, res)),
    );
  }

  void load(HOUR);
  return {
    el: box,
    stop: () => {
      ctl?.abort();
      chart.destroy();
    },
  };
}

/**
 * The last minutes of a series as a live chart's past (its `prefill`): bits per second out and
 * in, and packets per second both ways, per second of the last `seconds`.
 */
export async function recentRates(
  family: 'interface' | 'hosts',
  key: string,
  seconds: number,
): Promise<{ t: number[]; bitsOut: (number | null)[]; bitsIn: (number | null)[]; pkts: (number | null)[] }> {
  const now = Math.floor(Date.now() / 1000);
  const s = await api.series({ family, key, resolution: '1s', from: now - seconds, to: now + 1 });
  const step = RESOLUTION[s.resolution] ?? 1;
  const col = (i: number, mult: number) => s.points.map((p) => (p.value ? (p.value[i] * mult) / step : null));
  const pkts = s.points.map((p) => (p.value ? (p.value[PACKETS_IN] + p.value[PACKETS_OUT]) / step : null));
  return { t: s.points.map((p) => p.t), bitsOut: col(BYTES_OUT, 8), bitsIn: col(BYTES_IN, 8), pkts };
}

/**
 * The last `seconds` of an interface gauge series kept as a per-second count (gauge:drops,
 * gauge:capture_drops): the value of each second, its time `t`; null where nothing is stored.
 */
export async function recentCounts(key: string, seconds: number): Promise<{ t: number[]; v: (number | null)[] }> {
  const now = Math.floor(Date.now() / 1000);
  const s = await api.series({ family: 'interface', key, resolution: '1s', from: now - seconds, to: now + 1 });
  const step = RESOLUTION[s.resolution] ?? 1;
  return { t: s.points.map((p) => p.t), v: s.points.map((p) => (p.value ? p.value[BYTES_IN] / step : null)) };
}
