// The dashboard: live throughput (one point a second from the event stream), the current
// figures, and what is largest right now: hosts, applications, flows.

import { api, DIRECTIONS, subscribe, type Direction, type Host, type Flow } from '../api';
import { TimeChart } from '../chart';
import { card, el, heading, link } from '../dom';
import { flowColumns, hostLink, appCell } from '../flowcols';
import * as fmt from '../format';
import { poll } from '../poll';
import { href } from '../router';
import { num, rankedTable, table } from '../table';
import { recentRates } from '../series';
import { placesCards } from '../geo';
import { stopAll, type View } from './view';

export const dashboard: View = (root, _route, ctx) => {
  const chart = new TimeChart({
    label: 'Throughput over the last two minutes, bits and packets per second',
    window: 120,
    series: [
      { label: 'bits/s', colorVar: '--c1', axis: 'left', format: fmt.bits },
      { label: 'packets/s', colorVar: '--c2', axis: 'right', format: fmt.pps },
    ],
  });

  // The figures under the chart, updated with each event.
  const figure = (label: string) => {
    const v = el('dd', {}, '–');
    return { el: el('div', { class: 'stat' }, el('dt', {}, label), v), v };
  };
  const fBits = figure('Throughput');
  const fPkts = figure('Packet rate');
  const fFlows = figure('Active flows');
  const fHosts = figure('Active hosts');
  // Overload only: packets the kernel or the full flow table dropped, not what -f rejected.
  const fDrops = figure('Dropped');
  const live = el('span', { class: 'live', 'data-state': 'connecting' }, 'connecting…');

  const hostsT = table<Host>({
    caption: 'Top hosts by traffic',
    hideCaption: true,
    columns: [
      { label: 'Host', rowHeader: true, cell: (h) => hostLink(h.ip) },
      { label: 'Sent', numeric: true, cell: (h) => num(h.sent_bytes, fmt.bytes(h.sent_bytes)) },
      { label: 'Received', numeric: true, cell: (h) => num(h.rcvd_bytes, fmt.bytes(h.rcvd_bytes)) },
    ],
    empty: 'No hosts yet.',
  });
  const appsT = rankedTable('Top applications by traffic', 'Application', (r) => appCell(r.application ?? null), 'No applications yet.');
  const flowsT = table<Flow>({
    caption: 'Top flows by traffic',
    hideCaption: true,
    columns: flowColumns({ sortable: false, direction: ctx.localNetworks.length > 0 }),
    empty: 'No flows yet.',
  });

  // With --local-networks: the IP bit rate of each flow direction (both ways of a flow under
  // its direction), a line each, with the latest figures under it.
  const directions = ctx.localNetworks.length > 0 ? directionCard(ctx.localNetworks) : null;
  // With --geoip-dir: where the hosts are.
  const places = ctx.geoip ? placesCards() : null;

  root.append(
    heading('Dashboard', live),
    el(
      'section',
      { class: 'card wide', 'aria-labelledby': 'tp' },
      el('h2', { id: 'tp' }, 'Throughput'),
      chart.el,
      el('dl', { class: 'stats' }, fBits.el, fPkts.el, fFlows.el, fHosts.el, fDrops.el),
    ),
    ...(directions ? [directions.el] : []),
    el(
      'div',
      { class: 'grid' },
      card('Top hosts', hostsT.el, link(href('hosts'), 'All hosts →', { class: 'more' })),
      card('Top applications', appsT.el, link(href('applications'), 'All applications →', { class: 'more' })),
    ),
    ...(places ? [el('div', { class: 'grid', 'data-card': 'places' }, ...places.els)] : []),
    el('div', { class: 'card wide' }, el('h2', {}, 'Top flows'), flowsT.el, link(href('flows'), 'All flows →', { class: 'more' })),
  );

  // With series on disk, the chart opens with the last two minutes instead of empty. (The
  // series count IP bytes, the live points wire bytes: the past runs a few percent lower.)
  if (ctx.history) {
    recentRates('interface', 'total', 120)
      .then((r) => chart.prefill(r.t, [r.t.map((_, i) => sumOrNull(r.bitsOut[i], r.bitsIn[i])), r.pkts]))
      .catch(() => undefined);
  }

  const unsubscribe = subscribe(
    (t) => {
      chart.push(t.t, [t.bits_per_s, t.packets_per_s]);
      fBits.v.textContent = fmt.bits(t.bits_per_s);
      fPkts.v.textContent = fmt.pps(t.packets_per_s);
      fFlows.v.textContent = fmt.count(t.flows_active);
      fHosts.v.textContent = fmt.count(t.hosts_active);
      fDrops.v.textContent = fmt.count((t.capture_dropped ?? 0) + (t.table_full_dropped ?? 0));
      if (directions && t.direction_bits_per_s) directions.push(t.t, t.direction_bits_per_s);
      live.textContent = 'live';
      live.dataset.state = 'live';
    },
    (open) => {
      if (!open) {
        live.textContent = 'reconnecting…';
        live.dataset.state = 'down';
      }
    },
  );

  const stopPoll = poll(async (signal) => {
    const [hosts, apps, flows] = await Promise.all([
      api.hosts({ sort: 'bytes', limit: 10 }, signal),
      api.top('applications', 10, signal),
      api.flows({ sort: 'bytes', limit: 10 }, signal),
    ]);
    hostsT.update(hosts.hosts);
    appsT.update(apps.rows);
    flowsT.update(flows.flows);
    await places?.refresh(signal);
  }, 3000);

  return stopAll(unsubscribe, stopPoll, () => chart.destroy(), () => directions?.chart.destroy());
};

const DIRECTION_LABELS: Record<Direction, string> = {
  in: 'In (remote → local)',
  out: 'Out (local → remote)',
  internal: 'Internal (local ↔ local)',
  transit: 'Transit (remote ↔ remote)',
};

/** The "Traffic by direction" card: a live chart of the four rates and their latest values. */
function directionCard(nets: string[]) {
  const colors: Record<Direction, string> = { in: '--c1', out: '--c2', internal: '--c4', transit: '--c8' };
  const chart = new TimeChart({
    label: 'IP traffic by direction over the last two minutes, bits per second',
    window: 120,
    series: DIRECTIONS.map((d) => ({ label: d, colorVar: colors[d], axis: 'left' as const, format: fmt.bits })),
  });
  const figures = DIRECTIONS.map((d) => {
    const v = el('dd', { 'data-direction': d }, '–');
    return { d, v, el: el('div', { class: 'stat' }, el('dt', {}, DIRECTION_LABELS[d]), v) };
  });
  const box = el(
    'section',
    { class: 'card wide', 'aria-labelledby': 'dir', 'data-card': 'directions' },
    el('h2', { id: 'dir' }, 'Traffic by direction'),
    el('p', { class: 'note' }, `Local networks: ${nets.join(', ')}. Flows by their client → server direction; both ways of a flow count under it.`),
    chart.el,
    el('dl', { class: 'stats' }, ...figures.map((f) => f.el)),
  );
  return {
    el: box,
    chart,
    push(t: number, rates: Record<Direction, number>) {
      chart.push(t, DIRECTIONS.map((d) => rates[d] ?? 0));
      for (const f of figures) f.v.textContent = fmt.bits(rates[f.d] ?? 0);
    },
  };
}

const sumOrNull = (a: number | null, b: number | null) => (a === null || b === null ? null : a + b);
