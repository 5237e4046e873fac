// The columns of a flow, shared by the flows page, the dashboard and the host page.

import type { Flow, FlowInfo, FlowMeta } from './api';
import { el, link } from './dom';
import * as fmt from './format';
import { hostHref, href } from './router';
import { num, type Column } from './table';

/** A host address as a link to its page. */
export function hostLink(ip: string): HTMLAnchorElement {
  return link(hostHref(ip), ip, { class: 'ip' });
}

/** Labels of the wire strings, in the order shown. */
const INFO: [keyof FlowInfo, string][] = [
  ['tls_sni', 'SNI'],
  ['http_host', 'Host'],
  ['http_url', 'URL'],
  ['dns_query', 'Query'],
  ['user_agent', 'User-Agent'],
  ['server_name', 'Server'],
];

/**
 * What DPI read off the wire (names, URLs): attacker data, so text nodes only. The server name
 * is left out when it repeats the SNI, Host or query it came from.
 */
export function infoCell(info: FlowInfo | undefined, meta?: FlowMeta): HTMLElement {
  const box = el('span', { class: 'info' });
  // Every metadata field, one "KEY: value" line each, as the cell's tooltip (a text
  // attribute: the browser never parses it as markup).
  const lines = Object.entries(meta ?? {}).map(([k, v]) => `${k}: ${Array.isArray(v) ? v.join(', ') : v}`);
  if (lines.length) box.title = lines.join('\n');
  if (!info) return box;
  const seen = new Set<string>();
  for (const [k, label] of INFO) {
    const v = info[k];
    if (typeof v !== 'string' || v === '' || seen.has(v)) continue;
    seen.add(v);
    box.append(el('span', { class: 'kv', 'data-key': k }, el('span', { class: 'k' }, `${label} `), el('span', { class: 'v' }, v)));
  }
  return box;
}

/** The application as a link to the flows of that application. */
export function appCell(app: string | null): HTMLElement | string {
  if (!app) return '–';
  const filter = appFilter(app);
  return filter ? link(href('flows', '', { app: filter }), app) : app;
}

/**
 * The name the flows filter takes for a label: "TLS.Google" → "Google" (the service, the more
 * specific), "DNS" → "DNS"; none for "Unknown".
 */
export function appFilter(label: string): string | null {
  if (!label || label === 'Unknown') return null;
  const dot = label.lastIndexOf('.');
  return dot >= 0 ? label.slice(dot + 1) : label;
}

/** A flow's direction by --local-networks, as a tag (`data-direction` for styles and tests). */
export function directionCell(d: string | undefined): HTMLElement | string {
  if (!d) return '–';
  return el('span', { class: 'direction', 'data-direction': d }, d);
}

/**
 * A TCP flow's retransmitted and out-of-order packets, both sides together ("2 / 0"), with each
 * side's in the tooltip; marked when there are any. Other flows: a dash.
 */
export function tcpHealthCell(f: Flow): HTMLElement | string {
  if (f.client_retransmits === undefined) return '–';
  const retr = f.client_retransmits + (f.server_retransmits ?? 0);
  const ooo = (f.client_out_of_order ?? 0) + (f.server_out_of_order ?? 0);
  const title = `retransmitted: client ${f.client_retransmits}, server ${f.server_retransmits ?? 0}; out of order: client ${f.client_out_of_order ?? 0}, server ${f.server_out_of_order ?? 0}`;
  return el('span', { class: retr + ooo > 0 ? 'tcp-bad' : 'tcp-ok', title, 'data-retransmits': retr, 'data-ooo': ooo }, `${fmt.count(retr)} / ${fmt.count(ooo)}`);
}

/** The handshake's round trip (client and server halves added), when both were seen. */
export function rttCell(f: Flow): HTMLElement | string {
  if (f.rtt_client_ms == null || f.rtt_server_ms == null) return '–';
  const total = f.rtt_client_ms + f.rtt_server_ms;
  return el('span', { title: `client side ${f.rtt_client_ms.toFixed(3)} ms, server side ${f.rtt_server_ms.toFixed(3)} ms`, 'data-rtt': total.toFixed(3) }, `${total < 1 ? total.toFixed(3) : total.toFixed(1)} ms`);
}

/** `direction`: a Direction column (only when --local-networks are set). */
export function flowColumns(opts: { sortable: boolean; direction?: boolean }): Column<Flow>[] {
  const s = (k: string) => (opts.sortable ? k : undefined);
  return [
    { label: 'Client', cell: (f) => hostLink(f.client) },
    { label: 'Port', numeric: true, cell: (f) => f.client_port },
    { label: 'Server', cell: (f) => hostLink(f.server) },
    { label: 'Port', numeric: true, cell: (f) => f.server_port },
    ...(opts.direction ? [{ label: 'Direction', cell: (f: Flow) => directionCell(f.direction) }] : []),
    { label: 'Proto', cell: (f) => fmt.proto(f.protocol) },
    { label: 'VLAN', numeric: true, cell: (f) => f.vlan },
    { label: 'Application', cell: (f) => appCell(f.application) },
    { label: 'Info', cell: (f) => infoCell(f.info, f.meta) },
    {
      label: 'Bytes',
      sort: s('bytes'),
      numeric: true,
      cell: (f) => num(f.client_bytes + f.server_bytes, fmt.bytes(f.client_bytes + f.server_bytes)),
    },
    {
      label: 'Packets',
      sort: s('packets'),
      numeric: true,
      cell: (f) => num(f.client_packets + f.server_packets, fmt.count(f.client_packets + f.server_packets)),
    },
    { label: 'Duration', numeric: true, cell: (f) => fmt.duration((f.last_seen_ms - f.first_seen_ms) / 1000) },
    { label: 'Retr. / OOO', numeric: true, cell: tcpHealthCell },
    { label: 'RTT', numeric: true, cell: rttCell },
    { label: 'Last seen', sort: s('last_seen'), cell: (f) => fmt.time(f.last_seen_ms, true) },
  ];
}
