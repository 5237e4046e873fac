// The REST API (crates/server/src/openapi.json): typed fetch helpers. The console is served by
// sonde itself, so requests are same-origin and the session cookie (HttpOnly) goes along on its
// own. A 401 anywhere means the session ended: the app shows the login page.

export interface Me {
  user: string | null;
  role: 'admin' | 'viewer';
  auth: boolean;
}

/** A flow output (file, IPFIX, Kafka, ClickHouse, …) and its counters (`/api/v1/sinks`). */
export interface Sink {
  name: string;
  offered: number;
  queue_dropped: number;
  written: number;
  /** Held, not at the destination yet (buffered while it is away, not acknowledged). */
  pending: number;
  dropped: number;
  failed: boolean;
}

export interface Interface {
  source: string;
  packets: number;
  bytes: number;
  ip_packets: number;
  ip_bytes: number;
  non_ip: number;
  malformed: number;
  dropped: number;
  /** Packets the full flow table could not take. */
  table_full_dropped: number;
  /** Packets -f rejected (a file input). */
  filtered: number;
  capture_dropped: number;
  interface_dropped: number;
  /** Each input (-i, -r, --synthetic, --collect): the kernel's counts for live interfaces. */
  inputs?: InputCounters[];
  /** Each shard's ring drops. */
  shard_capture_dropped?: number[];
  /** With --egress-*: what became of the packets offered to egress (null without). */
  egress?: EgressCounters | null;
  flows_active: number;
  flows_created: number;
  hosts_active: number;
  packets_per_s: number | null;
  bits_per_s: number | null;
  /** The --local-networks prefixes (empty: none). */
  local_networks?: string[];
  /** With local networks: IP packets and bytes of flows by direction. */
  directions?: Record<Direction, { packets: number; bytes: number; bits_per_s: number | null }> | null;
  /** With --geoip-dir: what its databases give (null without). */
  geoip?: { countries: boolean; asns: boolean; cities?: boolean } | null;
}

/** Egress of `/api/v1/interface`: forwarded to the pcap ring or interface, shunted, dropped. */
export interface EgressCounters {
  forwarded: number;
  forwarded_bytes: number;
  shunted: number;
  dropped: number;
}

/** One input of `/api/v1/interface`: what the kernel delivered and dropped. */
export interface InputCounters {
  name: string;
  received: number;
  capture_dropped: number;
  interface_dropped: number;
}

/** A row of `/api/v1/top/countries` or `/asns`: the live hosts located there. */
export interface Place {
  country?: string;
  asn?: number;
  name?: string | null;
  bytes: number;
  hosts: number;
}

/** A flow's direction by --local-networks, client to server (transit: both ends remote). */
export type Direction = 'in' | 'out' | 'internal' | 'transit';
export const DIRECTIONS: Direction[] = ['in', 'out', 'internal', 'transit'];

/** One `interface` Server-Sent Event (each second). */
export interface Tick {
  /** Unix seconds of this point: the newest packet's for a file input, else the server's clock. */
  t: number;
  packets: number;
  bytes: number;
  flows_active: number;
  hosts_active: number;
  dropped: number;
  /** Packets the kernel dropped for lack of room in sonde's rings. */
  capture_dropped: number;
  /** Packets the full flow table could not take. */
  table_full_dropped: number;
  packets_per_s: number;
  bits_per_s: number;
  /** With local networks: the IP bit rate of each flow direction; null without. */
  direction_bits_per_s?: Record<Direction, number> | null;
}

export interface Host {
  ip: string;
  vlan: number;
  mac: string | null;
  sent_bytes: number;
  sent_packets: number;
  rcvd_bytes: number;
  rcvd_packets: number;
  flows_as_client: number;
  flows_as_server: number;
  active_flows: number;
  /** TCP segments it sent again, over all its flows so far. */
  retransmits_sent?: number;
  /** TCP segments its peers sent it again, over all its flows so far. */
  retransmits_rcvd?: number;
  /** In --local-networks (false when none are set). */
  local?: boolean;
  first_seen: number;
  last_seen: number;
  /** DNS names clients resolved to this address: attacker-controlled, shown only as text. */
  names?: string[];
  /** With --geoip-dir: ISO country code, AS number and name (null: placed nowhere). */
  country?: string | null;
  asn?: number | null;
  as_name?: string | null;
  /** With a City database in --geoip-dir: the city's name (null: not known). */
  city?: string | null;
}

/** Strings DPI read off the wire: attacker-controlled, shown only as text. */
export interface FlowInfo {
  server_name?: string;
  http_host?: string;
  http_url?: string;
  user_agent?: string;
  tls_sni?: string;
  dns_query?: string;
}

export interface Flow {
  client: string;
  client_port: number;
  server: string;
  server_port: number;
  protocol: number;
  vlan: number;
  /** By --local-networks (every flow is transit when none are set). */
  direction?: Direction;
  application: string | null;
  client_bytes: number;
  client_packets: number;
  server_bytes: number;
  server_packets: number;
  first_seen_ms: number;
  last_seen_ms: number;
  info?: FlowInfo;
  /**
   * Every metadata field the flow has, under its key in `/api/v1/schema` (generated from the
   * server's field table, so new fields arrive without a change here). Attacker data.
   */
  meta?: FlowMeta;
  /** TCP flows: retransmitted and out-of-order packets per side, the handshake's round trip halves (null until seen). */
  client_retransmits?: number;
  server_retransmits?: number;
  client_out_of_order?: number;
  server_out_of_order?: number;
  rtt_client_ms?: number | null;
  rtt_server_ms?: number | null;
}

/** A host's TCP health over its live flows (`/api/v1/hosts/{ip}`). */
export interface HostTcp {
  flows: number;
  retransmits_sent: number;
  retransmits_rcvd: number;
  out_of_order_sent: number;
  out_of_order_rcvd: number;
  handshakes: number;
  rtt_median_ms: number | null;
}

/** Metadata values: wire text, numbers (codes, durations), or lists of wire strings. */
export type FlowMeta = Record<string, string | number | string[]>;

/** One row of `GET /api/v1/schema`. */
export interface SchemaField {
  key: string;
  kind: string;
  unit: string;
  group: string;
  ipfix: { id: number; enterprise: number } | null;
  stored: 'fixed' | 'meta' | 'derived';
  tag: number | null;
  ingest: boolean;
  what: string;
}


export interface Ranked {
  bytes: number;
  flows: number;
  ip?: string;
  application?: string;
  port?: string;
  protocol?: string;
}

export interface HostDetail {
  host: Host[];
  tcp?: HostTcp;
  flows_total: number;
  flows: Flow[];
  peers: Ranked[];
  applications: Ranked[];
  server_ports: Ranked[];
}

/** `/api/v1/health`; `history` is whether sonde keeps a history on disk (--data-dir). */
export interface Health {
  status: string;
  version: string;
  source: string;
  uptime_s: number;
  history?: boolean;
}

/**
 * One interval of a time series: `value` holds the sums over it of bytes in, bytes out, packets
 * in, packets out and flows (`metrics`), or is null for a gap (no data, not zero); `seconds` is
 * how many of its seconds had data.
 */
export interface SeriesPoint {
  t: number;
  value: number[] | null;
  min?: number[];
  max?: number[];
  seconds?: number;
}

export interface Series {
  family: string;
  key: string;
  /** "1s", "1m", "1h" or "1d". */
  resolution: string;
  metrics: string[];
  points: SeriesPoint[];
}

/**
 * A flow from the history on disk: the `--flows-out` record, with nProbe's names. SRC is the
 * client. The strings DPI read off the wire are attacker data, shown only as text.
 */
export interface StoredFlow {
  IPV4_SRC_ADDR?: string;
  IPV6_SRC_ADDR?: string;
  IPV4_DST_ADDR?: string;
  IPV6_DST_ADDR?: string;
  L4_SRC_PORT: number;
  L4_DST_PORT: number;
  PROTOCOL: number;
  VLAN_ID?: number;
  IN_PKTS: number;
  IN_BYTES: number;
  OUT_PKTS: number;
  OUT_BYTES: number;
  FLOW_START_MILLISECONDS: number;
  FLOW_END_MILLISECONDS: number;
  L7_PROTO_NAME?: string;
  SERVER_NAME?: string;
  HTTP_HOST?: string;
  HTTP_URL?: string;
  HTTP_USER_AGENT?: string;
  TLS_SERVER_NAME?: string;
  DNS_QUERY?: string;
}

/** A host (its address; `vlan` too) or an application label, ranked over the history. */
export interface HistoryRow {
  name: string;
  vlan?: number;
  flows: number;
  packets: number;
  bytes: number;
}

/** A host of a top-N list (talkers: bytes sent; destinations: bytes received). */
export interface IntervalHost {
  host: string;
  packets: number;
  bytes: number;
  vlan?: number;
  /** How much the count may be over (a host counted in a sketch): 0 or absent when exact. */
  error_bytes?: number;
}

export interface IntervalFlow {
  client: string;
  client_port: number;
  server: string;
  server_port: number;
  /** "tcp", "udp", "icmp" … or the protocol number as text. */
  proto: string;
  packets: number;
  bytes: number;
  app: string;
}

export interface IntervalPort {
  proto: string;
  port: number;
  packets: number;
  bytes: number;
  flows: number;
}

export interface IntervalApp {
  app: string;
  packets: number;
  bytes: number;
  flows: number;
}

/** A host's TCP control packets in an interval (Ourmon's SYN list). */
export interface SynEntry {
  host: string;
  syn_sent: number;
  synack_received: number;
  fin_sent: number;
  rst_sent: number;
  rst_received: number;
  tcp_packets: number;
  /** (SYNs + FINs sent + RSTs received) / TCP packets, in percent. */
  work_weight: number;
  /** SYN/ACKs received per SYN sent, in percent. */
  answered_pct: number;
  /** The port signature: ports the SYNs went to, with their counts. */
  ports: { port: number; count: number }[];
  other_ports: number;
  noisy: boolean;
  error: number;
}

/** A source that tried many destinations on a port (scan.ip) or many ports of a destination (scan.port). */
export interface Scanner {
  type: 'scan.ip' | 'scan.port';
  host: string;
  targets: number;
  largest_group: number;
  ports?: { proto: string; port: number; targets: number; sample: string[] }[];
  destinations?: { destination: string; targets: number; sample: { proto: string; port: number }[] }[];
}

export interface IcmpEntry {
  host: string;
  errors: number;
  unreachable: number;
  port_unreachable: number;
  time_exceeded: number;
  /** What the errors answered: the probes' protocol, destination and port. */
  probes: { proto: string; dst: string; port: number; count: number }[];
  peers: { host: string; count: number }[];
  error?: number;
}

/** One merged interval of the analytics (start and end in Unix seconds of packet time). */
export interface Interval {
  start: number;
  end: number;
  packets: number;
  bytes: number;
  hosts: number;
  talkers: IntervalHost[];
  talkers_total: number;
  destinations: IntervalHost[];
  destinations_total: number;
  flows: IntervalFlow[];
  flows_total: number;
  ports: IntervalPort[];
  ports_total: number;
  apps: IntervalApp[];
  apps_total: number;
  syn: SynEntry[];
  noisy_hosts: number;
  scanners: Scanner[];
  icmp_senders: IcmpEntry[];
  icmp_receivers: IcmpEntry[];
}

export interface IntervalAnswer {
  interval_s: number;
  top_n: number;
  interval: Interval | null;
  /** Ourmon's worm graph: noisy hosts per interval. */
  worm: { start: number; noisy_hosts: number }[];
}

/** The lists `/api/v1/history/intervals/top/{list}` adds up over a range. */
export type TopList = 'talkers' | 'destinations' | 'ports' | 'apps' | 'flows';

export interface HistoryIntervalTop<R> {
  from: number;
  to: number;
  rows: R[];
  intervals: number;
  /** Intervals of the range whose list was cut at --top-n: the sums may then be low. */
  intervals_cut: number;
}

export type DetectionType = 'scan.ip' | 'scan.port' | 'syn_flood' | 'ddos' | 'icmp_errors' | 'noisy_host';

/** Per-second rates (peak) or sums over an attack (total). */
export interface Rates {
  packets: number;
  bytes: number;
  flows: number;
  syn: number;
  udp: number;
  icmp: number;
  tcp: number;
  fragments: number;
}

/** What a detection rests on; which fields are there depends on its type. */
export interface Evidence {
  /** Floods: the thresholds crossed, with the highest value seen. */
  crossed?: { metric: string; peak: number; threshold: number }[];
  seconds?: number;
  peak?: Rates;
  total?: Rates;
  protocols?: Record<string, number>;
  top_sources?: { host: string; packets: number; bytes: number }[];
  top_destinations?: { host: string; packets: number; bytes: number }[];
  top_ports?: { proto: string; port: number; packets: number; bytes: number }[];
  /** Scans (the last interval's groups). */
  largest_group?: number;
  ports?: Scanner['ports'];
  destinations?: Scanner['destinations'];
  /** ICMP errors: whether the host sent or received them. */
  role?: 'sender' | 'receiver';
  icmp?: IcmpEntry;
  /** Noisy hosts: the SYN list entry. */
  syn?: SynEntry;
}

/** A detection: in progress ("start", "active") or ended ("end"). Times are Unix seconds. */
export interface Detection {
  id: number;
  type: DetectionType;
  event: 'start' | 'active' | 'end';
  host: string;
  vlan?: number;
  first_seen: number;
  last_seen: number;
  targets?: number;
  direction?: 'in' | 'out';
  network?: string;
  evidence: Evidence;
}

export interface Anomalies {
  active: Detection[];
  /** Newest first. */
  recent: Detection[];
  totals: Record<string, number>;
}

export interface FilterSets {
  sets: { name: string; expressions: { label: string; expr: string; native: boolean; packets: number; bytes: number }[] }[];
  /** Per second: [packets, bytes] per expression, in the order of the sets and their expressions. */
  seconds: { t: number; counts: [number, number][] }[];
}

/** An alert (the alert engine's record; see ARCHITECTURE.md, "Alerts"). Times are Unix seconds. */
export interface Alert {
  id: number;
  type: string;
  severity: string;
  entity: { kind: string; value: string };
  state: 'engaged' | 'released';
  start: number;
  end: number | null;
  first_seen?: number;
  last_seen?: number;
  summary: string;
  source: string;
  host?: string;
  evidence: unknown;
  flaps?: number;
  acked_by?: string;
  acked_at?: number;
  released_by?: string;
  /** Trigger-capture files of the alert (--trigger-capture). */
  captures?: { name: string; packets: number; bytes: number; complete: boolean; truncated_by: string | null }[];
}

export interface AlertCounters {
  engaged: Record<string, number>;
  released: Record<string, number>;
  rate_limited: Record<string, number>;
  entity_limited: Record<string, number>;
  excluded: Record<string, number>;
  flaps: Record<string, number>;
}

export interface AlertExclusion {
  id: number;
  type: string | null;
  host: string | null;
  net: string | null;
  app: string | null;
  comment: string;
  by: string;
  created: number;
  removable: boolean;
}

export interface Accounts {
  users: { name: string; role: string }[];
  tokens: { name: string; role: string }[];
}

/** An answer other than 2xx, with the server's message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Called on any 401, so the app can show the login page. */
let onUnauthorized: () => void = () => {};
export function setUnauthorizedHandler(f: () => void): void {
  onUnauthorized = f;
}

async function request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const init: RequestInit = { method, signal, credentials: 'same-origin', headers: { Accept: 'application/json' } };
  if (body !== undefined) {
    init.headers = { ...init.headers, 'Content-Type': 'application/json' };
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  if (!r.ok) {
    let message = `${r.status} ${r.statusText}`;
    try {
      const e = (await r.json()) as { error?: unknown };
      if (typeof e.error === 'string') message = e.error;
    } catch {
      // not JSON: keep the status line
    }
    if (r.status === 401 && path !== '/api/v1/login') onUnauthorized();
    throw new ApiError(r.status, message);
  }
  if (r.status === 204) return undefined as T;
  return (await r.json()) as T;
}

/** `{a: 1, b: undefined}` → `?a=1` (empty and missing values left out). */
export function query(params: Record<string, string | number | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** Query parameters; empty and missing values are left out. */
type Params = Record<string, string | number | undefined>;

export const api = {
  me: () => request<Me>('GET', '/api/v1/me'),
  login: (user: string, password: string) => request<Me>('POST', '/api/v1/login', { user, password }),
  logout: () => request<void>('POST', '/api/v1/logout'),
  iface: (signal?: AbortSignal) => request<Interface>('GET', '/api/v1/interface', undefined, signal),
  sinks: (signal?: AbortSignal) => request<{ sinks: Sink[] }>('GET', '/api/v1/sinks', undefined, signal),
  hosts: (params: Params, signal?: AbortSignal) =>
    request<{ total: number; offset: number; limit: number; hosts: Host[] }>('GET', `/api/v1/hosts${query(params)}`, undefined, signal),
  host: (ip: string, signal?: AbortSignal) =>
    request<HostDetail>('GET', `/api/v1/hosts/${encodeURIComponent(ip)}`, undefined, signal),
  flows: (params: Params, signal?: AbortSignal) =>
    request<{ total: number; offset: number; limit: number; flows: Flow[] }>('GET', `/api/v1/flows${query(params)}`, undefined, signal),
  top: (what: 'talkers' | 'destinations' | 'applications' | 'ports' | 'protocols', n: number, signal?: AbortSignal) =>
    request<{ top: string; rows: Ranked[] }>('GET', `/api/v1/top/${what}${query({ n })}`, undefined, signal),
  places: (what: 'countries' | 'asns', n: number, signal?: AbortSignal) =>
    request<{ top: string; rows: Place[]; unknown: { bytes: number; hosts: number } }>('GET', `/api/v1/top/${what}${query({ n })}`, undefined, signal),
  health: () => request<Health>('GET', '/api/v1/health'),
  series: (params: Params, signal?: AbortSignal) => request<Series>('GET', `/api/v1/series${query(params)}`, undefined, signal),
  historyFlows: (params: Params, signal?: AbortSignal) =>
    request<{ flows: StoredFlow[]; offset: number; limit: number; more: boolean }>('GET', `/api/v1/history/flows${query(params)}`, undefined, signal),
  historyTop: (what: 'hosts' | 'apps' | 'exporters', params: Params, signal?: AbortSignal) =>
    request<{ rows: HistoryRow[] }>('GET', `/api/v1/history/top/${what}${query(params)}`, undefined, signal),
  interval: (signal?: AbortSignal) => request<IntervalAnswer>('GET', '/api/v1/interval', undefined, signal),
  historyIntervalTop: <R>(list: TopList, params: Params, signal?: AbortSignal) =>
    request<HistoryIntervalTop<R>>('GET', `/api/v1/history/intervals/top/${list}${query(params)}`, undefined, signal),
  alerts: (params: Params, signal?: AbortSignal) =>
    request<{ engaged: Alert[]; alerts: Alert[]; total: number; offset: number; limit: number; counters: AlertCounters }>('GET', `/api/v1/alerts${query(params)}`, undefined, signal),
  exclusions: (signal?: AbortSignal) => request<{ exclusions: AlertExclusion[] }>('GET', '/api/v1/alerts/exclusions', undefined, signal),
  addExclusion: (x: { type?: string; host?: string; net?: string; app?: string; comment?: string }) =>
    request<AlertExclusion>('POST', '/api/v1/admin/alerts/exclusions', x),
  deleteExclusion: (id: number) => request<void>('DELETE', `/api/v1/admin/alerts/exclusions/${id}`),
  ackAlert: (id: number) => request<Alert>('POST', `/api/v1/admin/alerts/${id}/ack`),
  anomalies: (params: Params, signal?: AbortSignal) => request<Anomalies>('GET', `/api/v1/anomalies${query(params)}`, undefined, signal),
  filtersets: (seconds: number, signal?: AbortSignal) => request<FilterSets>('GET', `/api/v1/filtersets${query({ seconds })}`, undefined, signal),
  accounts: () => request<Accounts>('GET', '/api/v1/admin/users'),
  addUser: (name: string, role: string, password: string) =>
    request<{ name: string; role: string }>('POST', '/api/v1/admin/users', { name, role, password }),
  deleteUser: (name: string) => request<void>('DELETE', `/api/v1/admin/users/${encodeURIComponent(name)}`),
  addToken: (name: string, role: string) =>
    request<{ name: string; role: string; token: string }>('POST', '/api/v1/admin/tokens', { name, role }),
  deleteToken: (name: string) => request<void>('DELETE', `/api/v1/admin/tokens/${encodeURIComponent(name)}`),
};

/**
 * Subscribes to the `interface` events (one a second). EventSource reconnects by itself after a
 * network error; the returned function closes the stream.
 */
export function subscribe(onTick: (t: Tick) => void, onState?: (open: boolean) => void): () => void {
  const es = new EventSource('/api/v1/events');
  es.addEventListener('interface', (e) => {
    try {
      onTick(JSON.parse((e as MessageEvent<string>).data) as Tick);
    } catch {
      // a malformed event is skipped; the next one comes in a second
    }
  });
  es.addEventListener('open', () => onState?.(true));
  es.addEventListener('error', () => {
    onState?.(false);
    // A closed stream (401 after logout, server gone) is not retried by the browser: ask the
    // API whether we are still logged in, which shows the login page on a 401.
    if (es.readyState === EventSource.CLOSED) api.me().catch(() => {});
  });
  return () => es.close();
}
