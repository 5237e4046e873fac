// The REST API (crates/server/src/openapi.json): typed fetch helpers. The console is served by
// sonde itself, so requests are same-origin and the session cookie (HttpOnly) goes along on its
// own. A 401 anywhere means the session ended: the app shows the login page.

export interface Me {
  user: string | null;
  role: 'admin' | 'viewer';
  auth: boolean;
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
  capture_dropped: number;
  interface_dropped: number;
  flows_active: number;
  flows_created: number;
  hosts_active: number;
  packets_per_s: number | null;
  bits_per_s: number | null;
}

/** One `interface` Server-Sent Event (each second). */
export interface Tick {
  packets: number;
  bytes: number;
  flows_active: number;
  hosts_active: number;
  dropped: number;
  packets_per_s: number;
  bits_per_s: number;
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
  first_seen: number;
  last_seen: number;
  /** DNS names clients resolved to this address: attacker-controlled, shown only as text. */
  names?: string[];
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
  application: string | null;
  client_bytes: number;
  client_packets: number;
  server_bytes: number;
  server_packets: number;
  first_seen_ms: number;
  last_seen_ms: number;
  info?: FlowInfo;
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
  hosts: (params: Params, signal?: AbortSignal) =>
    request<{ total: number; offset: number; limit: number; hosts: Host[] }>('GET', `/api/v1/hosts${query(params)}`, undefined, signal),
  host: (ip: string, signal?: AbortSignal) =>
    request<HostDetail>('GET', `/api/v1/hosts/${encodeURIComponent(ip)}`, undefined, signal),
  flows: (params: Params, signal?: AbortSignal) =>
    request<{ total: number; offset: number; limit: number; flows: Flow[] }>('GET', `/api/v1/flows${query(params)}`, undefined, signal),
  top: (what: 'talkers' | 'destinations' | 'applications' | 'ports' | 'protocols', n: number, signal?: AbortSignal) =>
    request<{ top: string; rows: Ranked[] }>('GET', `/api/v1/top/${what}${query({ n })}`, undefined, signal),
  health: () => request<Health>('GET', '/api/v1/health'),
  series: (params: Params, signal?: AbortSignal) => request<Series>('GET', `/api/v1/series${query(params)}`, undefined, signal),
  historyFlows: (params: Params, signal?: AbortSignal) =>
    request<{ flows: StoredFlow[]; offset: number; limit: number; more: boolean }>('GET', `/api/v1/history/flows${query(params)}`, undefined, signal),
  historyTop: (what: 'hosts' | 'apps', params: Params, signal?: AbortSignal) =>
    request<{ rows: HistoryRow[] }>('GET', `/api/v1/history/top/${what}${query(params)}`, undefined, signal),
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
