// All live hosts: sorted, filtered and paged by the server (a probe may see millions), refreshed
// every few seconds. Sort, filters and page are in the URL:
// #/hosts?sort=bytes&order=desc&q=10.0.&name=google&app=TLS

import { api, type Host } from '../api';
import { el, heading } from '../dom';
import { hostLink } from '../flowcols';
import { asCell, countryCell } from '../geo';
import * as fmt from '../format';
import { poll } from '../poll';
import { replaceParams } from '../router';
import { num, pager, table, type Order } from '../table';
import type { View } from './view';

const LIMIT = 50;

export const hosts: View = (root, route, ctx) => {
  const p = route.params;
  // With --local-networks: local or remote hosts, or all.
  const localNets = ctx.localNetworks.length > 0;
  const localParam = p.get('local');
  const state = {
    local: localNets && (localParam === 'true' || localParam === 'false') ? localParam : '',
    sort: p.get('sort') ?? 'bytes',
    order: (p.get('order') === 'asc' ? 'asc' : 'desc') as Order,
    q: p.get('q') ?? '',
    name: p.get('name') ?? '',
    app: p.get('app') ?? '',
    country: p.get('country') ?? '',
    asn: p.get('asn') ?? '',
    offset: Math.max(0, Number(p.get('offset')) || 0),
  };

  const t = table<Host>({
    caption: 'Live hosts',
    hideCaption: true,
    sort: { key: state.sort, order: state.order },
    onSort: (key, order) => {
      Object.assign(state, { sort: key, order, offset: 0 });
      refresh();
    },
    columns: [
      { label: 'Host', rowHeader: true, cell: (h) => hostLink(h.ip) },
      { label: 'Names', cell: (h) => (h.names ?? []).join(', ') },
      { label: 'VLAN', numeric: true, cell: (h) => h.vlan },
      { label: 'MAC', cell: (h) => h.mac ?? '' },
      ...(localNets ? [{ label: 'Network', cell: (h: Host) => el('span', { 'data-local': String(h.local === true) }, h.local ? 'local' : 'remote') }] : []),
      ...(ctx.geoip
        ? [
            { label: 'Country', cell: (h: Host) => countryCell(h.country) },
            { label: 'AS', cell: (h: Host) => asCell(h.asn, h.as_name) },
          ]
        : []),
      { label: 'Bytes', sort: 'bytes', numeric: true, cell: (h) => num(h.sent_bytes + h.rcvd_bytes, fmt.bytes(h.sent_bytes + h.rcvd_bytes)) },
      { label: 'Packets', sort: 'packets', numeric: true, cell: (h) => num(h.sent_packets + h.rcvd_packets, fmt.count(h.sent_packets + h.rcvd_packets)) },
      { label: 'Sent', sort: 'sent_bytes', numeric: true, cell: (h) => num(h.sent_bytes, fmt.bytes(h.sent_bytes)) },
      { label: 'Received', sort: 'rcvd_bytes', numeric: true, cell: (h) => num(h.rcvd_bytes, fmt.bytes(h.rcvd_bytes)) },
      { label: 'Flows', sort: 'flows', numeric: true, cell: (h) => num(h.flows_as_client + h.flows_as_server, fmt.count(h.flows_as_client + h.flows_as_server)) },
      { label: 'Active flows', sort: 'active_flows', numeric: true, cell: (h) => h.active_flows },
      {
        label: 'Retransmits',
        sort: 'retransmits',
        numeric: true,
        cell: (h) => el('span', { class: (h.retransmits_sent ?? 0) > 0 ? 'tcp-bad' : undefined, 'data-retransmits': h.retransmits_sent ?? 0 }, fmt.count(h.retransmits_sent ?? 0)),
      },
      {
        // Segments sent again to this host: loss on its incoming path, or a slow receiver.
        label: 'Peer retransmits',
        sort: 'retransmits_rcvd',
        numeric: true,
        cell: (h) => el('span', { class: (h.retransmits_rcvd ?? 0) > 0 ? 'tcp-bad' : undefined, 'data-retransmits-rcvd': h.retransmits_rcvd ?? 0 }, fmt.count(h.retransmits_rcvd ?? 0)),
      },
      { label: 'First seen', sort: 'first_seen', cell: (h) => fmt.time(h.first_seen) },
      { label: 'Last seen', sort: 'last_seen', cell: (h) => fmt.time(h.last_seen) },
    ],
    empty: 'No host matches.',
  });
  const pages = pager((offset) => {
    state.offset = offset;
    refresh();
  });

  // The filters are applied as you type, a moment after the last key.
  let typing: number | undefined;
  const filter = (key: 'q' | 'name' | 'app' | 'country' | 'asn', label: string, placeholder: string) => {
    const input = el('input', { type: 'search', id: `hosts-${key}`, name: key, placeholder, autocomplete: 'off', spellcheck: 'false' });
    input.value = state[key];
    input.addEventListener('input', () => {
      window.clearTimeout(typing);
      typing = window.setTimeout(() => {
        Object.assign(state, { [key]: input.value.trim(), offset: 0 });
        refresh();
      }, 250);
    });
    return [el('label', { for: `hosts-${key}` }, label), input];
  };
  function localFilter() {
    const select = el(
      'select',
      { id: 'hosts-local', name: 'local' },
      el('option', { value: '' }, 'all'),
      el('option', { value: 'true' }, 'local'),
      el('option', { value: 'false' }, 'remote'),
    );
    select.value = state.local;
    select.addEventListener('change', () => {
      Object.assign(state, { local: select.value, offset: 0 });
      refresh();
    });
    return [el('label', { for: 'hosts-local' }, 'Network'), select];
  }
  const error = el('p', { class: 'error', role: 'alert' });

  root.append(
    heading('Hosts'),
    el(
      'form',
      { class: 'filters', role: 'search', 'aria-label': 'Filter hosts' },
      ...filter('q', 'Address contains', 'e.g. 10.0. or fe80::'),
      ...filter('name', 'DNS name contains', 'e.g. google'),
      ...filter('app', 'Application', 'e.g. TLS'),
      ...(localNets ? localFilter() : []),
      ...(ctx.geoip ? [...filter('country', 'Country', 'e.g. US'), ...filter('asn', 'AS', 'e.g. 15169')] : []),
    ),
    error,
    t.el,
    pages.el,
  );
  root.querySelector('form')?.addEventListener('submit', (e) => e.preventDefault());

  let stopPoll = () => {};
  function refresh() {
    replaceParams('hosts', { sort: state.sort, order: state.order === 'desc' ? undefined : 'asc', q: state.q, name: state.name, app: state.app, local: state.local, country: state.country, asn: state.asn, offset: state.offset || undefined });
    // Restart the cycle so the new view is fetched now.
    stopPoll();
    stopPoll = poll(async (signal) => {
      try {
        const r = await api.hosts({ sort: state.sort, order: state.order, q: state.q, name: state.name || undefined, app: state.app || undefined, local: state.local || undefined, country: state.country || undefined, asn: state.asn || undefined, offset: state.offset, limit: LIMIT }, signal);
        error.textContent = '';
        t.update(r.hosts);
        pages.update(r.total, r.offset, LIMIT);
      } catch (e) {
        if (!signal.aborted) error.textContent = (e as Error).message;
        throw e;
      }
    }, 5000);
  }
  refresh();
  return () => {
    window.clearTimeout(typing);
    stopPoll();
  };
};
