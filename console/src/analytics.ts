// Pieces shared by the analytics pages (Top-N, Anomalies): names of detection types and
// metrics, a host with its VLAN, ports and port signatures as text. Hosts and application names
// come off the wire (or from a user's configuration): they only ever become text nodes.

import type { DetectionType, IcmpEntry, SynEntry } from './api';
import { el, link } from './dom';
import { hostLink } from './flowcols';
import * as fmt from './format';
import { href } from './router';

export const TYPES: [DetectionType, string][] = [
  ['scan.port', 'Port scan'],
  ['scan.ip', 'IP scan'],
  ['syn_flood', 'SYN flood'],
  ['ddos', 'DDoS'],
  ['icmp_errors', 'ICMP errors'],
  ['noisy_host', 'Noisy host'],
];

/** "scan.port" → "Port scan" (the code itself when unknown). */
export function typeName(t: string): string {
  return TYPES.find(([k]) => k === t)?.[1] ?? t;
}

/** The thresholds of floods (`--threshold ddos.*`): metric → unit shown. */
const METRICS: Record<string, string> = {
  pps: 'packets/s',
  mbps: 'Mbit/s',
  flows: 'new flows/s',
  syn_pps: 'SYN/s',
  udp_pps: 'UDP packets/s',
  icmp_pps: 'ICMP packets/s',
  frag_pps: 'fragments/s',
};

export function metricName(m: string): string {
  return METRICS[m] ?? m;
}

/** A host as a link to its page, with its VLAN when not 0. */
export function hostCell(host: string, vlan?: number): HTMLElement {
  const a = hostLink(host);
  if (vlan) a.setAttribute('href', href('host', host, { vlan }));
  return vlan ? el('span', {}, a, el('span', { class: 'muted' }, ` VLAN ${vlan}`)) : a;
}

const PROTO_NUMBERS: Record<string, number> = { icmp: 1, tcp: 6, udp: 17, icmpv6: 58, sctp: 132 };

/** "443/tcp" as a link to the live flows on that port. */
export function portCell(proto: string, port: number): HTMLElement {
  const n = PROTO_NUMBERS[proto] ?? (/^\d+$/.test(proto) ? Number(proto) : undefined);
  const text = `${port}/${n !== undefined ? fmt.proto(n) : proto}`;
  return n !== undefined ? link(href('flows', '', { port, proto: n }), text) : el('span', {}, text);
}

/** Ourmon's port signature: the ports a host's SYNs went to, most first ("80×7 443×3 +2"). */
export function signature(s: Pick<SynEntry, 'ports' | 'other_ports'>): HTMLElement {
  const parts = [...s.ports].sort((a, b) => b.count - a.count || a.port - b.port).map((p) => `${p.port}×${p.count}`);
  if (s.other_ports > 0) parts.push(`+${fmt.count(s.other_ports)} other`);
  return el('span', { class: 'sig' }, parts.join(' ') || '–');
}

/** What the ICMP errors of a host answered: the first few probes. */
export function probesText(i: Pick<IcmpEntry, 'probes'>, n = 3): string {
  const shown = i.probes.slice(0, n).map((p) => `${p.proto} ${p.dst}:${p.port}${p.count > 1 ? ` ×${p.count}` : ''}`);
  if (i.probes.length > n) shown.push(`+${i.probes.length - n}`);
  return shown.join(', ') || '–';
}

/** A number shown readable with its exact value in <data> (as table.ts' `num`). */
export function count(n: number): HTMLElement {
  return el('data', { value: n, title: n.toLocaleString('en-US') }, fmt.count(n));
}

export function bytes(n: number): HTMLElement {
  return el('data', { value: n, title: n.toLocaleString('en-US') }, fmt.bytes(n));
}

/** A percentage (work weight, answered). */
export function pct(n: number): HTMLElement {
  return el('data', { value: n }, `${Number.isInteger(n) ? n : n.toFixed(1)} %`);
}

/** A Unix time as <time> with its ISO form (packet time for replayed captures). */
export function when(t: number): HTMLElement {
  return el('time', { datetime: new Date(t * 1000).toISOString(), 'data-t': t }, fmt.time(t));
}
