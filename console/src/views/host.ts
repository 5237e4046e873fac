// One host (#/host/10.0.0.1): its counters (one block per VLAN it was seen on), its traffic
// over time, applications, peers, server ports and largest flows. Refreshed every 2 s; the
// traffic chart is drawn from the differences between two refreshes. With --data-dir, a chart
// of its stored series too (#/host/10.0.0.1?vlan=5 for its traffic on VLAN 5).

import { api, ApiError, subscribe, type Flow, type Host, type HostDetail, type HostTcp } from '../api';
import { TimeChart } from '../chart';
import { card, el, heading, link, replace } from '../dom';
import { appCell, flowColumns, hostLink } from '../flowcols';
import * as fmt from '../format';
import { poll } from '../poll';
import { href } from '../router';
import { asCell, countryCell, countryName } from '../geo';
import { recentRates, seriesCard } from '../series';
import { num, rankedTable, table } from '../table';
import { stopAll, type View } from './view';

/** The counters shown for a host, with the API field each comes from. */
const COUNTERS: [keyof Host, string, (n: number) => string][] = [
  ['sent_bytes', 'Bytes sent', fmt.bytes],
  ['rcvd_bytes', 'Bytes received', fmt.bytes],
  ['sent_packets', 'Packets sent', fmt.count],
  ['rcvd_packets', 'Packets received', fmt.count],
  ['flows_as_client', 'Flows as client', fmt.count],
  ['flows_as_server', 'Flows as server', fmt.count],
  ['active_flows', 'Active flows', fmt.count],
];

/** `local`: whether --local-networks are set (then the host is said local or remote). */
function counters(h: Host, local: boolean): HTMLElement {
  const items: HTMLElement[] = [];
  if (local) items.push(el('div', { class: 'stat' }, el('dt', {}, 'Network'), el('dd', { 'data-local': String(h.local === true) }, h.local ? 'local' : 'remote')));
  for (const [k, label, f] of COUNTERS) {
    const v = h[k] as number;
    items.push(el('div', { class: 'stat' }, el('dt', {}, label), el('dd', { 'data-counter': k }, num(v, f(v)))));
  }
  if (h.country !== undefined) {
    // With --geoip-dir.
    const where = h.country ? el('span', {}, countryCell(h.country), ' ', countryName(h.country)) : '–';
    items.push(el('div', { class: 'stat' }, el('dt', {}, 'Country'), el('dd', { 'data-geo': 'country' }, where)));
    // With a City database only; the name is the database's, shown as text.
    if (h.city !== undefined) items.push(el('div', { class: 'stat' }, el('dt', {}, 'City'), el('dd', { 'data-geo': 'city' }, h.city ?? '–')));
    items.push(el('div', { class: 'stat' }, el('dt', {}, 'AS'), el('dd', { 'data-geo': 'asn' }, asCell(h.asn, h.as_name))));
  }
  items.push(el('div', { class: 'stat' }, el('dt', {}, 'MAC'), el('dd', {}, h.mac ?? '–')));
  items.push(el('div', { class: 'stat' }, el('dt', {}, 'First seen'), el('dd', {}, fmt.time(h.first_seen))));
  items.push(el('div', { class: 'stat' }, el('dt', {}, 'Last seen'), el('dd', {}, fmt.time(h.last_seen))));
  return el('dl', { class: 'stats', 'data-vlan': h.vlan }, ...items);
}

/** The host's TCP health over its live TCP flows: what it retransmitted and received again,
 * packets out of order, and the median handshake round trip. */
function tcpHealth(t: HostTcp): HTMLElement {
  const stat = (key: string, label: string, text: string, bad = false) =>
    el('div', { class: 'stat' }, el('dt', {}, label), el('dd', { 'data-tcp': key, class: bad ? 'tcp-bad' : undefined }, text));
  return el(
    'section',
    { class: 'card wide', 'aria-labelledby': 'host-tcp', 'data-card': 'tcp' },
    el('h2', { id: 'host-tcp' }, 'TCP health'),
    el('p', { class: 'note' }, `Over its ${fmt.count(t.flows)} live TCP flows.`),
    el(
      'dl',
      { class: 'stats' },
      stat('retransmits_sent', 'Retransmitted (sent)', fmt.count(t.retransmits_sent), t.retransmits_sent > 0),
      stat('retransmits_rcvd', 'Retransmitted (received)', fmt.count(t.retransmits_rcvd), t.retransmits_rcvd > 0),
      stat('out_of_order_sent', 'Out of order (sent)', fmt.count(t.out_of_order_sent), t.out_of_order_sent > 0),
      stat('out_of_order_rcvd', 'Out of order (received)', fmt.count(t.out_of_order_rcvd), t.out_of_order_rcvd > 0),
      stat('rtt_median_ms', `Handshake RTT, median of ${fmt.count(t.handshakes)}`, t.rtt_median_ms == null ? '–' : `${t.rtt_median_ms < 1 ? t.rtt_median_ms.toFixed(3) : t.rtt_median_ms.toFixed(1)} ms`),
    ),
  );
}

export const host: View = (root, route, ctx) => {
  const ip = route.arg;
  const vlan = Number(route.params.get('vlan')) || 0;
  // The series of a host is keyed by its address, with "@VLAN" when not 0.
  const long = ctx.history ? seriesCard({ family: 'hosts', key: vlan ? `${ip}@${vlan}` : ip, label: `Traffic of ${ip}`, names: { in: 'received', out: 'sent' } }) : null;
  const chart = new TimeChart({
    label: `Traffic of ${ip}, bits per second sent and received`,
    window: 300,
    series: [
      { label: 'sent', colorVar: '--c1', axis: 'left', format: fmt.bits },
      { label: 'received', colorVar: '--c2', axis: 'left', format: fmt.bits },
    ],
  });
  const blocks = el('div', { class: 'host-counters' });
  const tcpBox = el('div');
  const status = el('p', { class: 'error', role: 'alert' });
  const apps = rankedTable('Applications of this host', 'Application', (r) => appCell(r.application ?? null), 'None.');
  const peers = rankedTable('Peers of this host', 'Peer', (r) => hostLink(r.ip ?? ''), 'None.');
  const ports = rankedTable('Server ports of this host', 'Port/protocol', (r) => {
    const [port, proto] = (r.port ?? '').split('/');
    return link(href('flows', '', { host: ip, port, proto }), `${port}/${fmt.proto(Number(proto))}`);
  }, 'None.');
  const flowsT = table<Flow>({ caption: 'Largest flows of this host', hideCaption: true, columns: flowColumns({ sortable: false, direction: ctx.localNetworks.length > 0 }), empty: 'No flows.' });
  const flowsNote = el('p', { class: 'muted' });

  root.append(
    heading(`Host ${ip}`, link(href('flows', '', { host: ip }), 'All its flows →', { class: 'more' })),
    status,
    blocks,
    tcpBox,
    el('section', { class: 'card wide', 'aria-labelledby': 'host-tp' }, el('h2', { id: 'host-tp' }, 'Traffic'), chart.el),
    ...(long ? [long.el] : []),
    el('div', { class: 'grid' }, card('Applications', apps.el), card('Peers', peers.el), card('Server ports', ports.el)),
    el('section', { class: 'card wide', 'aria-labelledby': 'host-flows' }, el('h2', { id: 'host-flows' }, 'Flows'), flowsNote, flowsT.el),
  );

  // With series on disk, the chart opens with the host's last five minutes instead of empty.
  if (ctx.history) {
    recentRates('hosts', vlan ? `${ip}@${vlan}` : ip, 300)
      .then((r) => chart.prefill(r.t, [r.bitsOut, r.bitsIn]))
      .catch(() => undefined);
  }

  // The time of the points is the event stream's clock: the traffic's own for a replayed
  // capture (as the dashboard and the series on disk use), the wall clock for live traffic.
  let clock: number | null = null;
  const unsubscribe = subscribe((t) => {
    clock = t.t;
  });

  // Rates come from two consecutive refreshes: bytes now minus bytes then, over the time between.
  let prev: { t: number; sent: number; rcvd: number } | null = null;
  function show(d: HostDetail) {
    status.textContent = '';
    replace(
      blocks,
      ...d.host.map((h) =>
        d.host.length > 1
          ? el('section', { class: 'card wide' }, el('h2', {}, `VLAN ${h.vlan}`), counters(h, ctx.localNetworks.length > 0))
          : el('section', { class: 'card wide' }, counters(h, ctx.localNetworks.length > 0)),
      ),
    );
    replace(tcpBox, d.tcp && d.tcp.flows > 0 ? tcpHealth(d.tcp) : null);
    const now = clock ?? Date.now() / 1000;
    const sent = d.host.reduce((a, h) => a + h.sent_bytes, 0);
    const rcvd = d.host.reduce((a, h) => a + h.rcvd_bytes, 0);
    if (prev && now > prev.t) {
      const dt = now - prev.t;
      chart.push(now, [Math.max(0, ((sent - prev.sent) * 8) / dt), Math.max(0, ((rcvd - prev.rcvd) * 8) / dt)]);
    }
    prev = { t: now, sent, rcvd };
    apps.update(d.applications);
    peers.update(d.peers);
    ports.update(d.server_ports);
    flowsT.update(d.flows);
    flowsNote.textContent = d.flows_total > d.flows.length ? `The ${d.flows.length} largest of ${d.flows_total} flows.` : `${d.flows_total} flows.`;
  }

  const stopPoll = poll(async (signal) => {
    try {
      show(await api.host(ip, signal));
    } catch (e) {
      if (signal.aborted) return;
      status.textContent = e instanceof ApiError && e.status === 404 ? `${ip} is not a live host (never seen, or idle and purged).` : (e as Error).message;
    }
  }, 2000);
  return stopAll(stopPoll, unsubscribe, () => chart.destroy(), long?.stop);
};
