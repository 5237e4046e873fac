// The interface: what sonde received and what it could not count (drops by sonde, by the
// capture's kernel buffer, by the interface), with live rates and drops per second, and with
// --data-dir its traffic over the stored series.

import { api, subscribe, type InputCounters, type Interface, type Sink } from '../api';
import { TimeChart } from '../chart';
import { card, el, heading } from '../dom';
import * as fmt from '../format';
import { poll } from '../poll';
import { recentCounts, recentRates, seriesCard } from '../series';
import { num, table } from '../table';
import { stopAll, type View } from './view';

const ROWS: [keyof Interface, string, (n: number) => string, string][] = [
  ['packets', 'Packets', fmt.count, 'every packet seen'],
  ['bytes', 'Bytes on the wire', fmt.bytes, 'frame lengths'],
  ['ip_packets', 'IP packets', fmt.count, 'counted in flows'],
  ['ip_bytes', 'IP bytes', fmt.bytes, 'IP total lengths'],
  ['non_ip', 'Non-IP packets', fmt.count, 'ARP, LLDP, …'],
  ['malformed', 'Malformed packets', fmt.count, 'could not be decoded'],
  ['table_full_dropped', 'Dropped by sonde', fmt.count, 'flow table full'],
  ['filtered', 'Rejected by the filter', fmt.count, '-f on a file'],
  ['capture_dropped', 'Dropped by the capture', fmt.count, 'kernel buffer full'],
  ['interface_dropped', 'Dropped by the interface', fmt.count, 'reported by the NIC'],
  ['flows_active', 'Active flows', fmt.count, ''],
  ['flows_created', 'Flows created', fmt.count, ''],
  ['hosts_active', 'Active hosts', fmt.count, ''],
];

export const iface: View = (root, _route, ctx) => {
  const chart = new TimeChart({
    label: 'Packets and drops per second over the last two minutes',
    window: 120,
    series: [
      { label: 'packets/s', colorVar: '--c2', axis: 'left', format: fmt.pps },
      // The overload signals only: what a filter rejected is not a drop.
      { label: 'kernel drops/s', colorVar: '--c3', axis: 'right', format: fmt.pps },
      { label: 'table-full drops/s', colorVar: '--c4', axis: 'right', format: fmt.pps },
    ],
  });
  // In the interface's series, "out" is client to server.
  const long = ctx.history ? seriesCard({ family: 'interface', key: 'total', label: 'Traffic of the interface', names: { in: 'server → client', out: 'client → server' } }) : null;
  const source = el('p', { class: 'muted' });
  const tbody = el('tbody');
  const cells = new Map<keyof Interface, HTMLElement>();
  for (const [k, label, , note] of ROWS) {
    const td = el('td', { class: 'num', 'data-counter': k }, '–');
    cells.set(k, td);
    tbody.append(el('tr', {}, el('th', { scope: 'row' }, label), td, el('td', { class: 'muted' }, note)));
  }
  const counters = el(
    'table',
    { class: 'data' },
    el('caption', { class: 'sr-only' }, 'Interface counters'),
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Counter'), el('th', { scope: 'col', class: 'num' }, 'Value'), el('th', { scope: 'col' }, 'What'))),
    tbody,
  );
  // The flow outputs: an outage shows as records pending (buffered) and then dropped.
  const state = (s: Sink) => (s.failed ? 'failed' : s.dropped + s.queue_dropped > 0 ? 'dropping' : s.pending > 0 ? 'buffering' : 'ok');
  const sinksT = table<Sink>({
    caption: 'Flow outputs',
    hideCaption: true,
    columns: [
      { label: 'Output', cell: (s) => s.name },
      { label: 'Written', numeric: true, cell: (s) => num(s.written, fmt.count(s.written)) },
      { label: 'Pending', numeric: true, cell: (s) => num(s.pending, fmt.count(s.pending)) },
      { label: 'Dropped', numeric: true, cell: (s) => num(s.dropped + s.queue_dropped, fmt.count(s.dropped + s.queue_dropped)) },
      { label: 'State', cell: (s) => el('span', { class: s.failed || s.dropped + s.queue_dropped > 0 ? 'error' : 'muted', 'data-sink-state': state(s) }, state(s)) },
    ],
    empty: 'No flow output (--flows-out, --export).',
    className: 'data sinks',
  });
  // Several interfaces (-i A -i B): each one's kernel counters, drops first in mind.
  const inputsT = table<InputCounters>({
    caption: 'Inputs',
    hideCaption: true,
    columns: [
      { label: 'Input', cell: (i) => i.name },
      { label: 'Received', numeric: true, cell: (i) => num(i.received, fmt.count(i.received)) },
      { label: 'Dropped by the capture', numeric: true, cell: (i) => num(i.capture_dropped, fmt.count(i.capture_dropped)) },
      { label: 'Dropped by the interface', numeric: true, cell: (i) => num(i.interface_dropped, fmt.count(i.interface_dropped)) },
    ],
    empty: 'No input.',
    className: 'data inputs',
  });
  // Egress (--egress-*): shown once the API says it is on.
  const egressCells = new Map<string, HTMLElement>();
  const egressBody = el('tbody');
  for (const [k, label, note] of [
    ['forwarded', 'Forwarded', 'to the pcap ring or interface'],
    ['forwarded_bytes', 'Bytes forwarded', 'as captured'],
    ['shunted', 'Shunted', 'not chosen'],
    ['dropped', 'Dropped', 'chosen, but the destination could not take them'],
  ]) {
    const td = el('td', { class: 'num', 'data-egress': k }, '–');
    egressCells.set(k, td);
    egressBody.append(el('tr', {}, el('th', { scope: 'row' }, label), td, el('td', { class: 'muted' }, note)));
  }
  const egressCard = card('Egress', el('div', { class: 'table-wrap', id: 'egress' }, el('table', { class: 'data' }, el('caption', { class: 'sr-only' }, 'Egress counters'), egressBody)));
  egressCard.hidden = true;
  root.append(
    heading('Interface', source),
    el('section', { class: 'card wide', 'aria-labelledby': 'if-rate' }, el('h2', { id: 'if-rate' }, 'Packets and drops'), chart.el),
    ...(long ? [long.el] : []),
    card('Counters', el('div', { class: 'table-wrap' }, counters)),
    card('Inputs', el('div', { class: 'table-wrap', id: 'inputs' }, inputsT.el)),
    egressCard,
    card('Flow outputs', el('div', { class: 'table-wrap', id: 'sinks' }, sinksT.el)),
  );

  // With --data-dir the chart opens with the last two minutes stored: the packets, and the
  // kernel's and the flow table's drops per second, which the series keep as they happen.
  if (ctx.history) {
    Promise.all([recentRates('interface', 'total', 120), recentCounts('gauge:capture_drops', 120), recentCounts('gauge:drops', 120)])
      .then(([r, kernel, full]) => {
        const at = (c: { t: number[]; v: (number | null)[] }, t: number) => {
          const i = c.t.indexOf(t);
          return i < 0 ? null : c.v[i];
        };
        chart.prefill(r.t, [r.pkts, r.t.map((t) => at(kernel, t)), r.t.map((t) => at(full, t))]);
      })
      .catch(() => undefined);
  }

  let last: { kernel: number; full: number } | null = null;
  const unsubscribe = subscribe((t) => {
    const now = { kernel: t.capture_dropped ?? 0, full: t.table_full_dropped ?? 0 };
    const rate = (k: 'kernel' | 'full') => (last === null ? 0 : Math.max(0, now[k] - last[k]));
    chart.push(t.t, [t.packets_per_s, rate('kernel'), rate('full')]);
    last = now;
  });
  const stopPoll = poll(async (signal) => {
    const i = await api.iface(signal);
    source.textContent = `Source: ${i.source}`;
    for (const [k, , f] of ROWS) {
      const v = i[k] as number;
      cells.get(k)?.replaceChildren(num(v, f(v)));
    }
    inputsT.update(i.inputs ?? []);
    egressCard.hidden = !i.egress;
    if (i.egress) {
      for (const [k, td] of egressCells) {
        const v = i.egress[k as keyof typeof i.egress];
        td.replaceChildren(num(v, k === 'forwarded_bytes' ? fmt.bytes(v) : fmt.count(v)));
      }
    }
    sinksT.update((await api.sinks(signal)).sinks);
  }, 2000);
  return stopAll(unsubscribe, stopPoll, () => chart.destroy(), long?.stop);
};
