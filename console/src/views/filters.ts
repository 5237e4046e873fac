// Filters (#/filters): one chart per filter-set (--filter-set NAME=LABEL:EXPR;…), a line per
// expression, in packets or bytes per second. Live: the last five minutes of per-second counts
// from /api/v1/filtersets, refreshed every second. With --data-dir: the last hour, day, week or
// year from the stored series (/api/v1/series?family=filters&key=SET/LABEL), as the host page's
// traffic history does. #/filters?unit=bytes&range=24h. Set names, labels and expressions are
// the user's text: shown only as text.

import { api, ApiError, type FilterSets, type Series } from '../api';
import { TimeChart } from '../chart';
import { el, heading, replace } from '../dom';
import * as fmt from '../format';
import { poll } from '../poll';
import { replaceParams } from '../router';
import { RESOLUTION, SPANS } from '../series';
import { num, table } from '../table';
import { stopAll, type View } from './view';

/** Seconds the live charts show. */
const LIVE = 300;
const NONE =
  "No filter-set is configured. Start sonde with --filter-set 'web=http:tcp port 80;tls:tcp port 443;dns:port 53' " +
  '(repeatable, tcpdump syntax): each set gets a chart here, with a line per expression.';
/** Where packets and bytes are in a stored point's `value` (metrics bytes_in, …, packets_in). */
const STORED = { bytes: 0, packets: 2 } as const;
type Unit = keyof typeof STORED;

interface Expr {
  label: string;
  expr: string;
  native: boolean;
  packets: number;
  bytes: number;
}

/** A set's card: its chart (rebuilt when the unit changes) and its expressions' table. */
interface SetCard {
  name: string;
  exprs: Expr[];
  /** Where the set's first expression is in a second's `counts`. */
  offset: number;
  el: HTMLElement;
  chart: TimeChart;
  chartBox: HTMLElement;
  table: { update(rows: Expr[]): void };
  /** Sums over what the chart shows, per expression, in the current unit. */
  shown: number[];
}

const colorOf = (i: number) => `--c${(i % 8) + 1}`;

/** The colour of a chart line, beside its label (the CSS custom property, set through CSSOM). */
function swatch(i: number): HTMLElement {
  const s = el('span', { class: 'swatch', 'aria-hidden': 'true' });
  s.style.background = `var(${colorOf(i)})`;
  return s;
}

export const filters: View = (root, route, ctx) => {
  root.append(heading('Filters', el('p', { class: 'muted' }, 'Packets matching each filter-set expression (tcpdump syntax), per second.')));
  if (!ctx.filters) {
    root.append(el('p', { class: 'muted', id: 'no-filters' }, NONE));
    return;
  }
  const p = route.params;
  const state = {
    unit: (p.get('unit') === 'bytes' ? 'bytes' : 'packets') as Unit,
    range: p.get('range') ?? 'live',
  };
  if (!ctx.history || !SPANS.some(([l]) => l.replace(' ', '') === state.range)) state.range = 'live';

  const toggle = (label: string, pressed: boolean, data: Record<string, string>) => el('button', { type: 'button', 'aria-pressed': String(pressed), ...data }, label);
  const units = (['packets', 'bytes'] as Unit[]).map((u) => toggle(u === 'packets' ? 'Packets/s' : 'Bytes/s', state.unit === u, { 'data-unit': u }));
  const ranges = [['live', 'Live (5 min)'] as [string, string], ...(ctx.history ? SPANS.map(([l]) => [l.replace(' ', ''), l] as [string, string]) : [])].map(([v, l]) =>
    toggle(l, state.range === v, { 'data-range': v }),
  );
  const error = el('p', { class: 'error', role: 'alert' });
  const cardsBox = el('div', { id: 'filtersets', 'data-state': 'loading' });
  root.append(
    el(
      'div',
      { class: 'controls' },
      el('div', { role: 'group', 'aria-label': 'Unit' }, el('span', { class: 'label' }, 'Show'), ...units),
      el('div', { role: 'group', 'aria-label': 'Range' }, el('span', { class: 'label' }, 'Range'), ...ranges),
    ),
    error,
    cardsBox,
  );

  let cards: SetCard[] = [];
  const rate = (u: Unit) => (u === 'packets' ? fmt.pps : (v: number) => `${fmt.bytes(v)}/s`);
  const newChart = (c: Pick<SetCard, 'name' | 'exprs'>) =>
    new TimeChart({
      label: `Filter-set ${c.name}, ${state.unit} per second of each expression`,
      series: c.exprs.map((e, i) => ({ label: e.label, colorVar: colorOf(i), axis: 'left' as const, format: rate(state.unit) })),
      window: LIVE,
    });

  function build(f: FilterSets) {
    let offset = 0;
    cards = f.sets.map((s, si) => {
      const exprs = s.expressions.map((e) => ({ ...e }));
      const c: SetCard = {
        name: s.name,
        exprs,
        offset,
        el: el('section'),
        chart: newChart({ name: s.name, exprs }),
        chartBox: el('div'),
        table: { update: () => {} },
        shown: exprs.map(() => 0),
      };
      offset += exprs.length;
      c.chartBox.append(c.chart.el);
      const t = table<Expr & { i: number }>({
        caption: `Expressions of the filter-set ${s.name}`,
        hideCaption: true,
        columns: [
          { label: 'Label', rowHeader: true, cell: (e) => el('span', { class: 'label', 'data-label': e.label }, swatch(e.i), e.label) },
          { label: 'Expression', cell: (e) => el('code', { class: 'expr' }, e.expr) },
          { label: 'Evaluated by', cell: (e) => (e.native ? 'flow cache' : 'libpcap program') },
          { label: 'Packets since start', numeric: true, cell: (e) => num(e.packets, fmt.count(e.packets)) },
          { label: 'Bytes since start', numeric: true, cell: (e) => num(e.bytes, fmt.bytes(e.bytes)) },
          {
            label: 'In the chart',
            numeric: true,
            cell: (e) => el('span', { 'data-shown': e.label }, num(c.shown[e.i], state.unit === 'packets' ? `${fmt.count(c.shown[e.i])} packets` : fmt.bytes(c.shown[e.i]))),
          },
        ],
        empty: 'No expression.',
      });
      c.table = { update: (rows) => t.update(rows.map((r, i) => ({ ...r, i }))) };
      const id = `filterset-${si}-h`;
      c.el = el('section', { class: 'card wide filterset', 'data-set': s.name, 'data-state': 'loading', 'aria-labelledby': id }, el('h2', { id }, s.name), c.chartBox, t.el);
      c.table.update(exprs);
      return c;
    });
    replace(cardsBox, ...cards.map((c) => c.el));
  }

  /**
   * The per-second counts of the last LIVE seconds. A second the probe saw no packet in has no
   * row: between the first row and the last that is zero; before the first there is no data.
   */
  function showLive(f: FilterSets) {
    const rows = f.seconds;
    const last = rows.length ? rows[rows.length - 1].t : Math.floor(Date.now() / 1000);
    const first = last - LIVE + 1;
    const since = rows.length ? rows[0].t : last + 1;
    const byT = new Map(rows.map((r) => [r.t, r.counts]));
    const t: number[] = [];
    for (let s = first; s <= last; s++) t.push(s);
    const k = state.unit === 'packets' ? 0 : 1;
    for (const c of cards) {
      // Totals since the start, from the same answer.
      const set = f.sets.find((s) => s.name === c.name);
      if (set) c.exprs.forEach((e, i) => Object.assign(e, set.expressions[i] ?? {}));
      const cols = c.exprs.map((_, i) => t.map((s) => byT.get(s)?.[c.offset + i]?.[k] ?? (s >= since ? 0 : null)));
      c.shown = cols.map((col) => col.reduce<number>((a, v) => a + (v ?? 0), 0));
      const lastRow = byT.get(last);
      const summary = lastRow
        ? `At ${fmt.time(last)}: ${c.exprs.map((e, i) => `${e.label} ${rate(state.unit)(lastRow[c.offset + i]?.[k] ?? 0)}`).join(', ')}.`
        : 'No data yet.';
      c.chart.show(t, cols, first - 1, last + 1, summary);
      c.table.update(c.exprs);
      c.el.dataset.points = String(cols.reduce((a, col) => a + col.filter((v) => v !== null).length, 0));
      c.el.dataset.state = 'done';
      c.el.dataset.mode = 'live';
    }
  }

  // The end of the stored ranges: the newest second stored, plus one (as series.ts does).
  let end: number | null = null;
  async function loadStored(span: number, signal: AbortSignal) {
    const all = cards.flatMap((c) => c.exprs.map((e) => ({ c, e, key: `${c.name}/${e.label}` })));
    if (all.length === 0) return;
    if (end === null) {
      const s = await api.series({ family: 'filters', key: all[0].key, resolution: 'auto' }, signal);
      const lastPoint = s.points[s.points.length - 1];
      end = lastPoint ? lastPoint.t + (RESOLUTION[s.resolution] ?? 1) : Math.floor(Date.now() / 1000);
    }
    const from = end - span;
    const to = end;
    const answers: Series[] = await Promise.all(all.map((x) => api.series({ family: 'filters', key: x.key, from, to, resolution: 'auto' }, signal)));
    const idx = STORED[state.unit];
    let at = 0;
    for (const c of cards) {
      const mine = answers.slice(at, at + c.exprs.length);
      at += c.exprs.length;
      const step = RESOLUTION[mine[0]?.resolution ?? '1s'] ?? 1;
      const t = (mine[0]?.points ?? []).map((x) => x.t);
      // Each point's rate is its sum over its interval's length (the mean over it).
      const cols = mine.map((s) => {
        const byT = new Map(s.points.map((x) => [x.t, x.value]));
        return t.map((x) => {
          const v = byT.get(x);
          return v ? v[idx] / step : null;
        });
      });
      c.shown = mine.map((s) => s.points.reduce((a, x) => a + (x.value ? x.value[idx] : 0), 0));
      const filled = cols.reduce((a, col) => a + col.filter((v) => v !== null).length, 0);
      c.chart.show(
        t,
        cols,
        from,
        to,
        `From ${fmt.time(from)} to ${fmt.time(to)}, ${mine[0]?.resolution ?? ''} resolution: ${c.exprs.map((e, i) => `${e.label} ${state.unit === 'packets' ? `${fmt.exact(c.shown[i])} packets` : fmt.bytes(c.shown[i])}`).join(', ')}.`,
      );
      c.table.update(c.exprs);
      c.el.dataset.points = String(filled);
      c.el.dataset.resolution = mine[0]?.resolution ?? '';
      c.el.dataset.state = 'done';
      c.el.dataset.mode = state.range;
    }
  }

  let stopLoad: () => void = () => {};
  function start() {
    stopLoad();
    replaceParams('filters', { unit: state.unit === 'packets' ? undefined : state.unit, range: state.range === 'live' ? undefined : state.range });
    units.forEach((b) => b.setAttribute('aria-pressed', String(b.dataset.unit === state.unit)));
    ranges.forEach((b) => b.setAttribute('aria-pressed', String(b.dataset.range === state.range)));
    for (const c of cards) c.el.dataset.state = 'loading';
    if (state.range === 'live') {
      stopLoad = poll(async (signal) => {
        try {
          const f = await api.filtersets(LIVE, signal);
          if (cards.length === 0) build(f);
          showLive(f);
          error.textContent = '';
          cardsBox.dataset.state = 'done';
        } catch (e) {
          if (signal.aborted) return;
          error.textContent = e instanceof ApiError && e.status === 404 ? 'The traffic analytics are off (--analytics off).' : (e as Error).message;
          cardsBox.dataset.state = 'error';
        }
      }, 1000);
      return;
    }
    const span = SPANS.find(([l]) => l.replace(' ', '') === state.range)?.[1] ?? 3600;
    const ctl = new AbortController();
    stopLoad = () => ctl.abort();
    void (async () => {
      try {
        if (cards.length === 0) build(await api.filtersets(0, ctl.signal));
        else {
          const f = await api.filtersets(0, ctl.signal);
          for (const c of cards) {
            const set = f.sets.find((s) => s.name === c.name);
            if (set) c.exprs.forEach((e, i) => Object.assign(e, set.expressions[i] ?? {}));
          }
        }
        await loadStored(span, ctl.signal);
        error.textContent = '';
        cardsBox.dataset.state = 'done';
      } catch (e) {
        if (ctl.signal.aborted) return;
        error.textContent = (e as Error).message;
        cardsBox.dataset.state = 'error';
      }
    })();
  }

  for (const b of units) {
    b.addEventListener('click', () => {
      if (state.unit === b.dataset.unit) return;
      state.unit = b.dataset.unit as Unit;
      // The charts' axis and legend format the new unit: rebuilt.
      for (const c of cards) {
        c.chart.destroy();
        c.chart = newChart(c);
        replace(c.chartBox, c.chart.el);
      }
      start();
    });
  }
  for (const b of ranges) {
    b.addEventListener('click', () => {
      if (state.range === b.dataset.range) return;
      state.range = b.dataset.range ?? 'live';
      start();
    });
  }
  start();
  return stopAll(
    () => stopLoad(),
    () => cards.forEach((c) => c.chart.destroy()),
  );
};
