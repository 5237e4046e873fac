// The history on disk (--data-dir), or in ClickHouse (--history clickhouse://…, every probe's):
// the flows that ended in a time range, oldest first and paged, and the hosts and applications
// with the most traffic over the same range and filters. The range and every filter are in the
// URL: #/history?range=24h&port=53&proto=udp, or #/history?from=2026-11-23T08:00:00Z&to=-2h&app=TLS.
// With several probes in ClickHouse, a Probe field picks one (exporter=).

import { api, ApiError, type HistoryRow, type StoredFlow } from '../api';
import { card, el, heading, link } from '../dom';
import { appFilter, hostLink, infoCell } from '../flowcols';
import * as fmt from '../format';
import { linkRangeFields, RANGES, rangeQuery } from '../range';
import { href, replaceParams } from '../router';
import { num, pagerMore, rankedTable, table, type Column } from '../table';
import type { View } from './view';

const LIMIT = 50;
const TOP = 10;
const FILTERS = ['host', 'port', 'proto', 'app', 'exporter'] as const;
type Field = (typeof FILTERS)[number] | 'from' | 'to';

const NO_HISTORY = 'sonde keeps no history: start it with --data-dir DIR to keep every flow and the traffic over time on disk.';

/** Client and server addresses: one of the IPv4 or IPv6 names is set. */
const src = (f: StoredFlow) => f.IPV4_SRC_ADDR ?? f.IPV6_SRC_ADDR ?? '';
const dst = (f: StoredFlow) => f.IPV4_DST_ADDR ?? f.IPV6_DST_ADDR ?? '';

export const history: View = (root, route, ctx) => {
  if (!ctx.history) {
    root.append(heading('History'), el('p', { class: 'muted', id: 'no-history' }, NO_HISTORY));
    return;
  }
  const p = route.params;
  const state: Record<Field, string> & { range: string; offset: number } = {
    range: p.get('range') ?? (p.has('from') || p.has('to') ? 'custom' : '1h'),
    from: p.get('from') ?? '',
    to: p.get('to') ?? '',
    host: p.get('host') ?? '',
    port: p.get('port') ?? '',
    proto: p.get('proto') ?? '',
    app: p.get('app') ?? '',
    exporter: p.get('exporter') ?? '',
    offset: Math.max(0, Number(p.get('offset')) || 0),
  };

  /** The filters as the API takes them: a preset range is a `from` relative to now. */
  const filters = () => ({
    ...rangeQuery(state.range, state.from, state.to),
    host: state.host,
    port: state.port,
    proto: state.proto,
    app: state.app,
    exporter: state.exporter,
  });
  /** The page's parameters in the URL (the default range, 1h, left out). */
  const urlParams = (change: Partial<Record<Field, string>> = {}) => {
    const custom = state.range === 'custom';
    const { host, port, proto, app, exporter } = state;
    return { range: custom || state.range === '1h' ? undefined : state.range, from: custom ? state.from : undefined, to: custom ? state.to : undefined, host, port, proto, app, exporter, ...change };
  };
  /** A link to this page with another filter (an application), from the first page. */
  const here = (change: Partial<Record<Field, string>>) => href('history', '', urlParams(change));
  const appLink = (label: string | undefined) => {
    if (!label) return '–';
    const f = appFilter(label);
    return f ? link(here({ app: f }), label) : label;
  };

  const columns: Column<StoredFlow>[] = [
    { label: 'Client', cell: (f) => hostLink(src(f)) },
    { label: 'Port', numeric: true, cell: (f) => f.L4_SRC_PORT },
    { label: 'Server', cell: (f) => hostLink(dst(f)) },
    { label: 'Port', numeric: true, cell: (f) => f.L4_DST_PORT },
    { label: 'Proto', cell: (f) => fmt.proto(f.PROTOCOL) },
    { label: 'VLAN', numeric: true, cell: (f) => f.VLAN_ID ?? 0 },
    { label: 'Application', cell: (f) => appLink(f.L7_PROTO_NAME) },
    {
      label: 'Info',
      cell: (f) =>
        infoCell({ tls_sni: f.TLS_SERVER_NAME, http_host: f.HTTP_HOST, http_url: f.HTTP_URL, dns_query: f.DNS_QUERY, user_agent: f.HTTP_USER_AGENT, server_name: f.SERVER_NAME }),
    },
    { label: 'Bytes', numeric: true, cell: (f) => num(f.IN_BYTES + f.OUT_BYTES, fmt.bytes(f.IN_BYTES + f.OUT_BYTES)) },
    { label: 'Packets', numeric: true, cell: (f) => num(f.IN_PKTS + f.OUT_PKTS, fmt.count(f.IN_PKTS + f.OUT_PKTS)) },
    { label: 'Start', cell: (f) => fmt.time(f.FLOW_START_MILLISECONDS, true) },
    { label: 'Duration', numeric: true, cell: (f) => fmt.duration((f.FLOW_END_MILLISECONDS - f.FLOW_START_MILLISECONDS) / 1000) },
  ];
  const flowsT = table<StoredFlow>({
    caption: 'Flows that ended in the range, oldest first',
    hideCaption: true,
    columns,
    empty: 'No flow ended in this range with these filters. A replayed capture keeps its own time: try the range "All".',
    className: 'data history-flows',
  });
  const pages = pagerMore((offset) => {
    state.offset = offset;
    void load(false);
  });
  const hostsT = rankedTable<HistoryRow>('Hosts by traffic over the range', 'Host', (r) => el('span', {}, hostLink(r.name), r.vlan ? ` VLAN ${r.vlan}` : null), 'None.');
  const appsT = rankedTable<HistoryRow>('Applications by traffic over the range', 'Application', (r) => appLink(r.name), 'None.');

  // The filter form, applied on submit (Enter) or when a field changes. Typing a time makes the
  // range custom; choosing a preset clears the times.
  const text = (k: Field, label: string, placeholder: string, mode = 'text') => {
    const input = el('input', { type: 'text', id: `history-${k}`, name: k, inputmode: mode, placeholder, autocomplete: 'off', spellcheck: 'false' });
    input.value = state[k];
    return el('div', { class: 'field' }, el('label', { for: input.id }, label), input);
  };
  const range = el('select', { id: 'history-range', name: 'range' }, ...RANGES.map(([v, t]) => el('option', { value: v }, t)));
  range.value = RANGES.some(([v]) => v === state.range) ? state.range : '1h';
  const proto = el('select', { id: 'history-proto', name: 'proto' }, el('option', { value: '' }, 'any'), ...['tcp', 'udp', 'icmp', 'icmpv6', 'sctp'].map((v) => el('option', { value: v }, v.toUpperCase())));
  if (![...proto.options].some((o) => o.value === state.proto)) proto.append(el('option', { value: state.proto }, state.proto));
  proto.value = state.proto;
  // The probes (exporters) of a ClickHouse history; hidden when the history is this sonde's own.
  const probe = el('select', { id: 'history-exporter', name: 'exporter' }, el('option', { value: '' }, 'all'));
  if (state.exporter) probe.append(el('option', { value: state.exporter }, state.exporter));
  probe.value = state.exporter;
  const probeField = el('div', { class: 'field', hidden: '' }, el('label', { for: probe.id }, 'Probe'), probe);
  if (state.exporter) probeField.hidden = false;
  void api.historyTop('exporters', { limit: 100 }).then(
    (r) => {
      const names = r.rows.map((x) => x.name).filter((n) => n && n !== state.exporter);
      probe.append(...names.map((n) => el('option', { value: n }, n)));
      probeField.hidden = names.length === 0 && !state.exporter;
    },
    () => undefined,
  );
  const form = el(
    'form',
    { class: 'filters', role: 'search', 'aria-label': 'Filter the history' },
    el('div', { class: 'field' }, el('label', { for: range.id }, 'Time range'), range),
    text('from', 'From', '-2h, 2026-11-23, Unix s'),
    text('to', 'To', 'now'),
    text('host', 'Host or prefix', '10.0.0.1 or 10.0.0.0/8'),
    text('port', 'Port', '443', 'numeric'),
    el('div', { class: 'field' }, el('label', { for: proto.id }, 'Protocol'), proto),
    text('app', 'Application', 'TLS, DNS, Google…'),
    probeField,
    el('button', { type: 'submit' }, 'Apply'),
    el('button', { type: 'reset' }, 'Clear'),
  );
  const input = (k: Field | 'range') => form.elements.namedItem(k) as HTMLInputElement | HTMLSelectElement;
  linkRangeFields(form, range);
  const apply = () => {
    state.range = range.value;
    for (const k of [...FILTERS, 'from', 'to'] as const) state[k] = input(k).value.trim();
    if (state.range === 'custom' && !state.from && !state.to) state.range = 'all';
    state.offset = 0;
    void load(true);
  };
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    apply();
  });
  form.addEventListener('change', apply);
  form.addEventListener('reset', () => setTimeout(apply));
  const error = el('p', { class: 'error', role: 'alert' });

  // data-state: loading, done or error (the last answer shown), for tests and styles.
  const flowsCard = el('section', { class: 'card wide', 'aria-labelledby': 'history-flows-h', id: 'history-flows' }, el('h2', { id: 'history-flows-h' }, 'Flows'), flowsT.el, pages.el);
  root.append(
    heading('History', el('p', { class: 'muted' }, 'Flows as they ended, from the history on disk.')),
    form,
    error,
    flowsCard,
    el('div', { class: 'grid' }, card('Top hosts', hostsT.el), card('Top applications', appsT.el)),
  );

  // One load at a time: a newer one aborts the one in flight. Paging reloads the flows only.
  let ctl: AbortController | null = null;
  async function load(withTop: boolean) {
    const f = filters();
    replaceParams('history', { ...urlParams(), offset: state.offset || undefined });
    ctl?.abort();
    const c = (ctl = new AbortController());
    flowsCard.dataset.state = 'loading';
    try {
      const [flows, hosts, apps] = await Promise.all([
        api.historyFlows({ ...f, offset: state.offset, limit: LIMIT }, c.signal),
        withTop ? api.historyTop('hosts', { ...f, limit: TOP }, c.signal) : null,
        withTop ? api.historyTop('apps', { ...f, limit: TOP }, c.signal) : null,
      ]);
      error.textContent = '';
      flowsT.update(flows.flows);
      pages.update(flows.offset, flows.flows.length, LIMIT, flows.more);
      if (hosts) hostsT.update(hosts.rows);
      if (apps) appsT.update(apps.rows);
      flowsCard.dataset.state = 'done';
    } catch (e) {
      if (c.signal.aborted) return;
      error.textContent = e instanceof ApiError && e.status === 404 ? NO_HISTORY : (e as Error).message;
      flowsCard.dataset.state = 'error';
    }
  }
  void load(true);
  return () => ctl?.abort();
};
