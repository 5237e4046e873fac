// Top-N (#/top): the analytics' last interval (default 30 s of packet time, --top-interval) as
// ranked lists side by side: talkers (bytes sent), destinations (bytes received), server ports,
// applications, flows, SYN senders with their work weight and port signature, scanners, ICMP
// error senders and receivers, and Ourmon's worm graph (noisy hosts per interval). With
// --data-dir a time range adds the stored intervals' lists up instead:
// #/top?range=24h&sort=packets, #/top?from=2026-11-23T08:00:00Z&to=-2h.

import {
  api,
  ApiError,
  type HistoryIntervalTop,
  type IcmpEntry,
  type Interval,
  type IntervalAnswer,
  type IntervalApp,
  type IntervalFlow,
  type IntervalHost,
  type IntervalPort,
  type Scanner,
  type SynEntry,
  type TopList,
} from '../api';
import { bytes, count, hostCell, pct, portCell, probesText, signature, typeName, when } from '../analytics';
import { TimeChart } from '../chart';
import { el, heading, replace, type Child } from '../dom';
import { appCell, hostLink } from '../flowcols';
import * as fmt from '../format';
import { poll } from '../poll';
import { linkRangeFields, RANGES, rangeQuery } from '../range';
import { replaceParams } from '../router';
import { bar, table, type Column } from '../table';
import { stopAll, type View } from './view';

/** Rows asked for over a range. */
const LIMIT = 25;
const OFF = 'The traffic analytics are off (sonde was started with --analytics off).';
const NOT_YET = 'No interval has ended yet: the lists come at the end of each interval of packet time (--top-interval, 30 s by default).';

type Ranked<T> = T & { rank: number };
const ranked = <T>(rows: T[]): Ranked<T>[] => rows.map((r, i) => ({ ...r, rank: i + 1 }));
const rankCol = <T>(): Column<Ranked<T>> => ({ label: '#', numeric: true, cell: (r) => r.rank });

/** A card holding one list; `data-list` names it for tests and styles. */
function listCard(id: string, title: string, ...children: Child[]): HTMLElement {
  return el('section', { class: 'card', id: `top-${id}`, 'data-list': id, 'aria-labelledby': `top-${id}-h` }, el('h2', { id: `top-${id}-h` }, title), ...children);
}

export const top: View = (root, route, ctx) => {
  if (!ctx.analytics) {
    root.append(heading('Top-N'), el('p', { class: 'muted' }, OFF));
    return;
  }
  const p = route.params;
  const state = {
    range: p.get('range') ?? (p.has('from') || p.has('to') ? 'custom' : 'live'),
    from: p.get('from') ?? '',
    to: p.get('to') ?? '',
    sort: p.get('sort') === 'packets' ? 'packets' : 'bytes',
  };
  if (!ctx.history || (state.range !== 'live' && !RANGES.some(([v]) => v === state.range))) state.range = 'live';

  // The share bars are of the interval's bytes (live) or of the rows shown (a range).
  let whole = 0;
  const share: Column<{ bytes: number }> = { label: 'Share', cell: (r) => bar(r.bytes, whole) };
  const hostCols = (what: string): Column<Ranked<IntervalHost>>[] => [
    rankCol(),
    {
      label: what,
      rowHeader: true,
      cell: (h) =>
        el('span', {}, hostCell(h.host, h.vlan), h.error_bytes ? el('span', { class: 'muted', title: `counted by a sketch: may be over by up to ${fmt.exact(h.error_bytes)} bytes` }, ' ≈') : null),
    },
    { label: 'Packets', numeric: true, cell: (h) => count(h.packets) },
    { label: 'Bytes', numeric: true, cell: (h) => bytes(h.bytes) },
    share,
  ];
  const talkers = table<Ranked<IntervalHost>>({ caption: 'Top talkers: hosts by bytes sent', hideCaption: true, columns: hostCols('Host'), empty: 'None.' });
  const destinations = table<Ranked<IntervalHost>>({ caption: 'Top destinations: hosts by bytes received', hideCaption: true, columns: hostCols('Host'), empty: 'None.' });
  const ports = table<Ranked<IntervalPort>>({
    caption: 'Top server ports',
    hideCaption: true,
    columns: [
      rankCol(),
      { label: 'Port', rowHeader: true, cell: (r) => portCell(r.proto, r.port) },
      { label: 'Packets', numeric: true, cell: (r) => count(r.packets) },
      { label: 'Bytes', numeric: true, cell: (r) => bytes(r.bytes) },
      { label: 'Flows', numeric: true, cell: (r) => count(r.flows) },
      share,
    ],
    empty: 'None.',
  });
  const apps = table<Ranked<IntervalApp>>({
    caption: 'Top applications',
    hideCaption: true,
    columns: [
      rankCol(),
      { label: 'Application', rowHeader: true, cell: (r) => appCell(r.app) },
      { label: 'Packets', numeric: true, cell: (r) => count(r.packets) },
      { label: 'Bytes', numeric: true, cell: (r) => bytes(r.bytes) },
      { label: 'Flows', numeric: true, cell: (r) => count(r.flows) },
      share,
    ],
    empty: 'None.',
  });
  const flows = table<Ranked<IntervalFlow>>({
    caption: 'Top flows by bytes',
    hideCaption: true,
    columns: [
      rankCol(),
      { label: 'Client', cell: (f) => hostLink(f.client) },
      { label: 'Port', numeric: true, cell: (f) => f.client_port },
      { label: 'Server', cell: (f) => hostLink(f.server) },
      { label: 'Port', numeric: true, cell: (f) => f.server_port },
      { label: 'Proto', cell: (f) => f.proto.toUpperCase() },
      { label: 'Application', cell: (f) => appCell(f.app) },
      { label: 'Packets', numeric: true, cell: (f) => count(f.packets) },
      { label: 'Bytes', numeric: true, cell: (f) => bytes(f.bytes) },
    ],
    empty: 'None.',
  });
  const syn = table<Ranked<SynEntry>>({
    caption: 'SYN senders: TCP control packets per host',
    hideCaption: true,
    columns: [
      rankCol(),
      { label: 'Host', rowHeader: true, cell: (s) => el('span', {}, hostCell(s.host), s.noisy ? el('span', { class: 'badge', 'data-kind': 'noisy', title: 'many SYNs, few answered: worm-like' }, ' noisy') : null) },
      { label: 'SYNs', numeric: true, cell: (s) => count(s.syn_sent) },
      { label: 'SYN/ACKs back', numeric: true, cell: (s) => count(s.synack_received) },
      { label: 'FINs', numeric: true, cell: (s) => count(s.fin_sent) },
      { label: 'RSTs sent', numeric: true, cell: (s) => count(s.rst_sent) },
      { label: 'RSTs back', numeric: true, cell: (s) => count(s.rst_received) },
      { label: 'TCP packets', numeric: true, cell: (s) => count(s.tcp_packets) },
      { label: 'Work weight', numeric: true, cell: (s) => pct(s.work_weight) },
      { label: 'Answered', numeric: true, cell: (s) => pct(s.answered_pct) },
      { label: 'Port signature', cell: (s) => signature(s) },
    ],
    empty: 'No host sent a SYN in this interval.',
  });
  const scanners = table<Ranked<Scanner>>({
    caption: 'Scanners: sources trying many destinations or ports',
    hideCaption: true,
    columns: [
      rankCol(),
      { label: 'Host', rowHeader: true, cell: (s) => hostCell(s.host) },
      { label: 'Type', cell: (s) => typeName(s.type) },
      { label: 'Targets', numeric: true, cell: (s) => count(s.targets) },
      { label: 'Largest group', numeric: true, cell: (s) => count(s.largest_group) },
      { label: 'Where', cell: (s) => scanWhere(s) },
    ],
    empty: 'No scanner in this interval.',
  });
  const icmpCols = (): Column<Ranked<IcmpEntry>>[] => [
    rankCol(),
    { label: 'Host', rowHeader: true, cell: (i) => hostCell(i.host) },
    { label: 'Errors', numeric: true, cell: (i) => count(i.errors) },
    { label: 'Unreachable', numeric: true, cell: (i) => count(i.unreachable) },
    { label: 'Port unreachable', numeric: true, cell: (i) => count(i.port_unreachable) },
    { label: 'Time exceeded', numeric: true, cell: (i) => count(i.time_exceeded) },
    { label: 'Probes answered', cell: (i) => el('span', { class: 'sig' }, probesText(i)) },
  ];
  const icmpS = table<Ranked<IcmpEntry>>({ caption: 'Hosts sending ICMP errors', hideCaption: true, columns: icmpCols(), empty: 'None in this interval.' });
  const icmpR = table<Ranked<IcmpEntry>>({ caption: 'Hosts receiving ICMP errors', hideCaption: true, columns: icmpCols(), empty: 'None in this interval.' });
  const worm = new TimeChart({
    label: 'Noisy (worm-like) hosts per interval',
    height: 160,
    integer: true,
    series: [{ label: 'noisy hosts', colorVar: '--c3', axis: 'left', format: (v) => fmt.count(Math.round(v)) }],
  });

  const info = el('p', { class: 'muted', id: 'top-interval', 'aria-live': 'polite' });
  const note = el('p', { class: 'note', id: 'top-cut', role: 'status' });
  const error = el('p', { class: 'error', role: 'alert' });
  const liveOnly = el(
    'div',
    { id: 'top-live-only' },
    el('section', { class: 'card wide', id: 'top-syn', 'data-list': 'syn', 'aria-labelledby': 'top-syn-h' }, el('h2', { id: 'top-syn-h' }, 'SYN senders'), syn.el),
    el(
      'div',
      { class: 'grid wide-cols' },
      listCard('scanners', 'Scanners', scanners.el),
      listCard('icmp-senders', 'ICMP error senders', icmpS.el),
      listCard('icmp-receivers', 'ICMP error receivers', icmpR.el),
    ),
    el('section', { class: 'card wide', id: 'top-worm', 'aria-labelledby': 'top-worm-h' }, el('h2', { id: 'top-worm-h' }, 'Worm graph: noisy hosts per interval'), worm.el),
  );
  const rangeNote = el('p', { class: 'muted', id: 'top-live-note' }, 'SYN senders, scanners, ICMP errors and the worm graph are those of the live intervals: choose "Last interval".');
  const box = el(
    'div',
    { id: 'top-lists', 'data-state': 'loading' },
    el('div', { class: 'grid' }, listCard('talkers', 'Top talkers', talkers.el), listCard('destinations', 'Top destinations', destinations.el)),
    el('div', { class: 'grid' }, listCard('ports', 'Top ports', ports.el), listCard('apps', 'Top applications', apps.el)),
    el('section', { class: 'card wide', id: 'top-flows', 'data-list': 'flows', 'aria-labelledby': 'top-flows-h' }, el('h2', { id: 'top-flows-h' }, 'Top flows'), flows.el),
    rangeNote,
    liveOnly,
  );

  // The range form, with --data-dir only: "Last interval" (live) or a range of the history.
  let form: HTMLFormElement | null = null;
  if (ctx.history) {
    const text = (k: 'from' | 'to', label: string, placeholder: string) => {
      const input = el('input', { type: 'text', id: `top-${k}`, name: k, placeholder, autocomplete: 'off', spellcheck: 'false' });
      input.value = state[k];
      return el('div', { class: 'field' }, el('label', { for: input.id }, label), input);
    };
    const range = el('select', { id: 'top-range', name: 'range' }, el('option', { value: 'live' }, 'Last interval (live)'), ...RANGES.map(([v, t]) => el('option', { value: v }, t)));
    range.value = state.range;
    const sort = el('select', { id: 'top-sort', name: 'sort' }, el('option', { value: 'bytes' }, 'bytes'), el('option', { value: 'packets' }, 'packets'));
    sort.value = state.sort;
    const f = el(
      'form',
      { class: 'filters', role: 'search', 'aria-label': 'Interval or time range' },
      el('div', { class: 'field' }, el('label', { for: range.id }, 'Lists of'), range),
      text('from', 'From', '-2h, 2026-11-23, Unix s'),
      text('to', 'To', 'now'),
      el('div', { class: 'field' }, el('label', { for: sort.id }, 'Rank a range by'), sort),
      el('button', { type: 'submit' }, 'Apply'),
    );
    const input = (k: string) => f.elements.namedItem(k) as HTMLInputElement;
    linkRangeFields(f, range);
    const apply = () => {
      state.range = range.value;
      state.from = input('from').value.trim();
      state.to = input('to').value.trim();
      state.sort = sort.value === 'packets' ? 'packets' : 'bytes';
      if (state.range === 'custom' && !state.from && !state.to) state.range = 'all';
      range.value = state.range;
      start();
    };
    f.addEventListener('submit', (e) => {
      e.preventDefault();
      apply();
    });
    f.addEventListener('change', apply);
    form = f;
  }

  root.append(heading('Top-N', info), ...(form ? [form] : []), error, note, box);

  /** The last interval's lists (live). */
  let shown = '';
  function showInterval(a: IntervalAnswer) {
    const iv = a.interval;
    // The worm graph: a point per interval, at its start.
    if (a.worm.length > 0) {
      const t = a.worm.map((w) => w.start);
      worm.show(t, [a.worm.map((w) => w.noisy_hosts)], t[0], t[t.length - 1] + a.interval_s, `Noisy hosts in the last ${a.worm.length} intervals: ${a.worm.map((w) => w.noisy_hosts).join(', ')}.`);
    }
    const key = iv ? `${iv.start}-${iv.end}-${iv.packets}-${iv.bytes}` : 'none';
    if (key === shown) return;
    shown = key;
    if (!iv) {
      replace(info, NOT_YET);
      for (const t of [talkers, destinations, ports, apps, flows, syn, scanners, icmpS, icmpR]) t.update([]);
      return;
    }
    replace(
      info,
      el(
        'span',
        { 'data-start': iv.start, 'data-end': iv.end },
        'Interval ',
        when(iv.start),
        ' to ',
        when(iv.end),
        ` (${fmt.duration(iv.end - iv.start)} of ${a.interval_s} s): ${fmt.exact(iv.packets)} packets, ${fmt.bytes(iv.bytes)}, ${fmt.exact(iv.hosts)} hosts. Top ${a.top_n} of each list.`,
      ),
    );
    whole = iv.bytes;
    fill(iv);
  }
  function fill(iv: Interval) {
    talkers.update(ranked(iv.talkers));
    destinations.update(ranked(iv.destinations));
    ports.update(ranked(iv.ports));
    apps.update(ranked(iv.apps));
    flows.update(ranked(iv.flows));
    syn.update(ranked(iv.syn));
    scanners.update(ranked(iv.scanners));
    icmpS.update(ranked(iv.icmp_senders));
    icmpR.update(ranked(iv.icmp_receivers));
  }

  /** The five lists added up over a range of the history. */
  async function loadRange(signal: AbortSignal) {
    // "All" sends from=0: without `from` these endpoints take the last hour.
    const q = { ...rangeQuery(state.range, state.from, state.to), ...(state.range === 'all' ? { from: '0' } : {}), limit: LIMIT };
    const get = <R>(list: TopList, sort = state.sort) => api.historyIntervalTop<R>(list, { ...q, sort }, signal);
    const [t, d, po, ap, fl] = await Promise.all([
      get<IntervalHost>('talkers'),
      get<IntervalHost>('destinations'),
      get<IntervalPort>('ports'),
      get<IntervalApp>('apps'),
      get<IntervalFlow>('flows'),
    ]);
    const lists: [string, HistoryIntervalTop<unknown>][] = [
      ['talkers', t],
      ['destinations', d],
      ['ports', po],
      ['applications', ap],
      ['flows', fl],
    ];
    replace(
      info,
      el(
        'span',
        { 'data-from': t.from, 'data-to': t.to, 'data-intervals': t.intervals },
        t.from > 0 ? el('span', {}, 'From ', when(t.from)) : 'From the first stored interval',
        ' to ',
        when(t.to),
        `: ${fmt.exact(t.intervals)} interval${t.intervals === 1 ? '' : 's'} added up, ranked by ${state.sort}.`,
      ),
    );
    const cut = lists.filter(([, l]) => l.intervals_cut > 0);
    note.dataset.cut = String(Math.max(0, ...lists.map(([, l]) => l.intervals_cut)));
    note.textContent =
      cut.length === 0
        ? ''
        : `Some intervals listed only their top entries (--top-n): ${cut.map(([n, l]) => `${n} in ${l.intervals_cut} of ${l.intervals}`).join(', ')}. ` +
          'What fell below an interval’s cut is not in these sums, so they can be low, and a host or port that was never near the top can be missing.';
    const empty = t.intervals === 0;
    const sum = (rows: { bytes: number }[]) => rows.reduce((a, r) => a + r.bytes, 0);
    whole = sum(t.rows);
    talkers.update(ranked(t.rows));
    whole = sum(d.rows);
    destinations.update(ranked(d.rows));
    whole = sum(po.rows);
    ports.update(ranked(po.rows));
    whole = sum(ap.rows);
    apps.update(ranked(ap.rows));
    flows.update(ranked(fl.rows));
    if (empty) error.textContent = 'No interval is stored in this range. A replayed capture keeps its own time: try "All".';
  }

  let stopLoad: () => void = () => {};
  function start() {
    stopLoad();
    const live = state.range === 'live';
    const custom = state.range === 'custom';
    replaceParams('top', {
      range: live ? undefined : custom ? undefined : state.range,
      from: custom ? state.from : undefined,
      to: custom ? state.to : undefined,
      sort: !live && state.sort !== 'bytes' ? state.sort : undefined,
    });
    liveOnly.hidden = !live;
    rangeNote.hidden = live;
    note.textContent = '';
    shown = '';
    box.dataset.state = 'loading';
    box.dataset.mode = live ? 'live' : 'range';
    const sortSelect = form?.elements.namedItem('sort') as HTMLSelectElement | null;
    if (sortSelect) sortSelect.disabled = live;
    if (live) {
      stopLoad = poll(async (signal) => {
        try {
          const a = await api.interval(signal);
          error.textContent = '';
          showInterval(a);
          box.dataset.state = 'done';
        } catch (e) {
          if (signal.aborted) return;
          error.textContent = e instanceof ApiError && e.status === 404 ? OFF : (e as Error).message;
          box.dataset.state = 'error';
        }
      }, 5000);
    } else {
      const ctl = new AbortController();
      stopLoad = () => ctl.abort();
      error.textContent = '';
      loadRange(ctl.signal).then(
        () => {
          if (!ctl.signal.aborted) box.dataset.state = 'done';
        },
        (e: unknown) => {
          if (ctl.signal.aborted) return;
          error.textContent = (e as Error).message;
          box.dataset.state = 'error';
        },
      );
    }
  }
  start();
  return stopAll(() => stopLoad(), () => worm.destroy());
};

/** Where a scanner looked: the largest group of its targets. */
function scanWhere(s: Scanner): string {
  if (s.type === 'scan.ip') {
    const g = [...(s.ports ?? [])].sort((a, b) => b.targets - a.targets);
    if (g.length === 0) return '–';
    return `${g[0].port}/${g[0].proto}: ${fmt.exact(g[0].targets)} hosts${g.length > 1 ? `; ${g.length - 1} more ports` : ''}`;
  }
  const g = [...(s.destinations ?? [])].sort((a, b) => b.targets - a.targets);
  if (g.length === 0) return '–';
  return `${g[0].destination}: ${fmt.exact(g[0].targets)} ports${g.length > 1 ? `; ${g.length - 1} more hosts` : ''}`;
}
