// Anomalies (#/anomalies, #/anomalies?type=scan.port): what the analytics detected. Detections
// in progress first (floods checked every second, scans, ICMP errors and noisy hosts every
// interval), then those that ended, newest first; each row opens onto its evidence (top
// sources and ports of a flood, the targets of a scan, the probes an ICMP error answered, a
// noisy host's port signature). Refreshed every 3 s: rows are kept and changed in place (keyed
// by the detection's id), so the page does not flicker and an opened row stays open.

import { api, ApiError, type Detection, type Evidence, type Rates } from '../api';
import { bytes, count, hostCell, metricName, pct, portCell, signature, TYPES, typeName, when } from '../analytics';
import { el, heading, replace, type Child } from '../dom';
import * as fmt from '../format';
import { poll } from '../poll';
import { replaceParams } from '../router';
import { table, type Column } from '../table';
import { stopAll, type View } from './view';

const OFF = 'The traffic analytics are off (sonde was started with --analytics off).';
const WHAT =
  'Nothing detected yet. This page lists port and IP scans, SYN floods and other DDoS traffic to or from a host ' +
  '(rates checked every second against thresholds per network), hosts that send or receive many ICMP errors, and noisy ' +
  '(worm-like) hosts whose SYNs go mostly unanswered, as sonde detects them. Set the thresholds with --threshold ' +
  '(sonde --threshold help lists them); --alerts-out writes the same detections as JSON lines.';

/** The columns after the toggle; `fill` rebuilds them in place when a detection changes. */
const HEADS = ['Type', 'Host', 'Direction', 'First seen', 'Last seen', 'Duration', 'What'];

interface Row {
  main: HTMLTableRowElement;
  detail: HTMLTableRowElement;
  button: HTMLButtonElement;
  /** The detection as last shown (JSON), to skip unchanged rows. */
  sig: string;
}

/** A table of detections whose rows are kept by id across refreshes. */
class DetectionTable {
  readonly el: HTMLElement;
  private readonly tbody = el('tbody');
  private readonly rows = new Map<number, Row>();
  private readonly emptyRow: HTMLTableRowElement;

  constructor(
    caption: string,
    private readonly prefix: string,
    private readonly open: Set<number>,
  ) {
    this.emptyRow = el('tr', { class: 'empty' }, el('td', { colspan: HEADS.length + 1 }, 'Loading…'));
    this.tbody.append(this.emptyRow);
    this.el = el(
      'div',
      { class: 'table-wrap' },
      el(
        'table',
        { class: 'data detections' },
        el('caption', { class: 'sr-only' }, caption),
        el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, el('span', { class: 'sr-only' }, 'Evidence')), ...HEADS.map((h) => el('th', { scope: 'col' }, h)))),
        this.tbody,
      ),
    );
  }

  update(list: Detection[], empty: string): void {
    if (list.length === 0) {
      for (const r of this.rows.values()) {
        r.main.remove();
        r.detail.remove();
      }
      this.rows.clear();
      replace(this.emptyRow.cells[0], empty);
      if (this.emptyRow.parentNode !== this.tbody) this.tbody.append(this.emptyRow);
      return;
    }
    this.emptyRow.remove();
    const seen = new Set<number>();
    let prev: Node | null = null;
    for (const d of list) {
      seen.add(d.id);
      const sig = JSON.stringify(d);
      let r = this.rows.get(d.id);
      if (!r) {
        r = this.make(d);
        this.rows.set(d.id, r);
      } else if (r.sig !== sig) {
        this.fill(r, d);
      }
      r.sig = sig;
      // Moved only when out of place (a moved element would lose focus).
      const want: Node | null = prev ? prev.nextSibling : this.tbody.firstChild;
      if (want !== r.main) this.tbody.insertBefore(r.main, want);
      if (r.main.nextSibling !== r.detail) this.tbody.insertBefore(r.detail, r.main.nextSibling);
      prev = r.detail;
    }
    for (const [id, r] of this.rows) {
      if (seen.has(id)) continue;
      r.main.remove();
      r.detail.remove();
      this.rows.delete(id);
    }
  }

  private make(d: Detection): Row {
    const detailId = `${this.prefix}-evidence-${d.id}`;
    const button = el('button', { type: 'button', class: 'expand', 'aria-expanded': 'false', 'aria-controls': detailId }, '▸');
    const main = el('tr', { class: 'detection' }, el('td', {}, button));
    for (let i = 0; i < HEADS.length; i++) main.append(i === 1 ? el('th', { scope: 'row' }) : el('td'));
    const detail = el('tr', { class: 'evidence', id: detailId }, el('td', { colspan: HEADS.length + 1 }));
    const r: Row = { main, detail, button, sig: '' };
    const show = (open: boolean) => {
      button.setAttribute('aria-expanded', String(open));
      button.textContent = open ? '▾' : '▸';
      detail.hidden = !open;
    };
    button.addEventListener('click', () => {
      const open = button.getAttribute('aria-expanded') !== 'true';
      if (open) this.open.add(d.id);
      else this.open.delete(d.id);
      show(open);
    });
    this.fill(r, d);
    show(this.open.has(d.id));
    return r;
  }

  private fill(r: Row, d: Detection): void {
    const m = r.main;
    m.dataset.id = String(d.id);
    m.dataset.type = d.type;
    m.dataset.host = d.host;
    m.dataset.event = d.event;
    if (d.targets !== undefined) m.dataset.targets = String(d.targets);
    if (d.direction) m.dataset.direction = d.direction;
    r.button.setAttribute('aria-label', `Evidence of the ${typeName(d.type).toLowerCase()} of ${d.host}`);
    const cells: Child[] = [
      typeName(d.type),
      hostCell(d.host, d.vlan),
      d.direction ? (d.direction === 'in' ? 'to it (in)' : 'from it (out)') : '–',
      when(d.first_seen),
      when(d.last_seen),
      fmt.duration(d.last_seen - d.first_seen),
      what(d),
    ];
    cells.forEach((c, i) => replace(m.cells[i + 1], c));
    replace(r.detail.cells[0], evidence(d));
  }
}

/** The one-line reason: thresholds crossed, targets, errors, work weight. */
function what(d: Detection): HTMLElement {
  const ev = d.evidence ?? {};
  if (ev.crossed && ev.crossed.length > 0) {
    return el(
      'span',
      { class: 'crossed' },
      ev.crossed.map((c) => `${metricName(c.metric)} ${fmt.exact(c.peak)} (threshold ${fmt.exact(c.threshold)})`).join('; '),
    );
  }
  if (d.type === 'scan.ip' || d.type === 'scan.port') {
    const n = d.targets ?? 0;
    return el('span', { class: 'targets', 'data-targets': n }, `${fmt.exact(n)} ${d.type === 'scan.ip' ? 'hosts' : 'ports'} tried`);
  }
  if (ev.icmp) return el('span', {}, `${fmt.exact(ev.icmp.errors)} ICMP errors ${ev.role === 'receiver' ? 'received' : 'sent'}`);
  if (ev.syn) return el('span', {}, `${fmt.exact(ev.syn.syn_sent)} SYNs, work weight ${ev.syn.work_weight} %, ${ev.syn.answered_pct} % answered`);
  return el('span', {}, '–');
}

const stat = (label: string, v: Child) => el('div', { class: 'stat' }, el('dt', {}, label), el('dd', {}, v));
const block = (key: string, title: string, ...c: Child[]) => el('div', { class: 'ev', 'data-ev': key }, el('h3', {}, title), ...c);
function small<T>(caption: string, columns: Column<T>[], rows: T[]): HTMLElement {
  const t = table<T>({ caption, hideCaption: true, columns, empty: 'None.' });
  t.update(rows);
  return t.el;
}

/** What an attack added up to, over its seconds above a threshold. */
function totals(r: Rates | undefined): HTMLElement {
  if (!r) return el('p', { class: 'muted' }, '–');
  return el(
    'dl',
    { class: 'stats' },
    stat('Packets', count(r.packets)),
    stat('Bytes', bytes(r.bytes)),
    stat('SYN', count(r.syn)),
    stat('UDP', count(r.udp)),
    stat('ICMP', count(r.icmp)),
    stat('Fragments', count(r.fragments)),
    stat('New flows', count(r.flows)),
  );
}

/** Everything the detection's record says, by kind of evidence. */
function evidence(d: Detection): HTMLElement {
  const ev: Evidence = d.evidence ?? {};
  const blocks: HTMLElement[] = [];
  if (ev.crossed) {
    blocks.push(
      block(
        'crossed',
        'Thresholds crossed',
        small<{ metric: string; peak: number; threshold: number }>(
          'Thresholds crossed',
          [
            { label: 'Rate', rowHeader: true, cell: (c) => metricName(c.metric) },
            { label: 'Peak', numeric: true, cell: (c) => count(c.peak) },
            { label: 'Threshold', numeric: true, cell: (c) => count(c.threshold) },
          ],
          ev.crossed,
        ),
        el(
          'dl',
          { class: 'stats' },
          stat('Seconds above', fmt.exact(ev.seconds ?? 0)),
          stat('Peak', el('span', { class: 'sig' }, ev.peak ? `${fmt.pps(ev.peak.packets)}, ${fmt.bits(ev.peak.bytes * 8)}` : '–')),
          d.network ? stat('Thresholds of', d.network) : null,
        ),
      ),
      block('total', 'Over the attack', totals(ev.total)),
    );
    const peers = ev.top_sources ?? ev.top_destinations;
    if (peers) {
      const title = ev.top_sources ? 'Top sources' : 'Top destinations';
      blocks.push(
        block(
          ev.top_sources ? 'top_sources' : 'top_destinations',
          title,
          small<{ host: string; packets: number; bytes: number }>(
            title,
            [
              { label: 'Host', rowHeader: true, cell: (p) => hostCell(p.host) },
              { label: 'Packets', numeric: true, cell: (p) => count(p.packets) },
              { label: 'Bytes', numeric: true, cell: (p) => bytes(p.bytes) },
            ],
            peers,
          ),
        ),
      );
    }
    if (ev.top_ports) {
      blocks.push(
        block(
          'top_ports',
          'Top ports',
          small<{ proto: string; port: number; packets: number; bytes: number }>(
            'Top ports',
            [
              { label: 'Port', rowHeader: true, cell: (p) => portCell(p.proto, p.port) },
              { label: 'Packets', numeric: true, cell: (p) => count(p.packets) },
              { label: 'Bytes', numeric: true, cell: (p) => bytes(p.bytes) },
            ],
            ev.top_ports,
          ),
        ),
      );
    }
  }
  if (ev.destinations) {
    blocks.push(
      block(
        'scan_targets',
        'Ports tried, by destination (a sample of each)',
        small<NonNullable<Evidence['destinations']>[number]>(
          'Ports tried by destination',
          [
            { label: 'Destination', rowHeader: true, cell: (g) => hostCell(g.destination) },
            { label: 'Ports', numeric: true, cell: (g) => count(g.targets) },
            { label: 'Sample', cell: (g) => el('span', { class: 'sig' }, g.sample.map((s) => `${s.port}/${s.proto}`).join(' ')) },
          ],
          ev.destinations,
        ),
      ),
    );
  }
  if (ev.ports && !ev.crossed) {
    blocks.push(
      block(
        'scan_targets',
        'Destinations tried, by port (a sample of each)',
        small<NonNullable<Evidence['ports']>[number]>(
          'Destinations tried by port',
          [
            { label: 'Port', rowHeader: true, cell: (g) => portCell(g.proto, g.port) },
            { label: 'Hosts', numeric: true, cell: (g) => count(g.targets) },
            { label: 'Sample', cell: (g) => el('span', { class: 'sig' }, g.sample.join(' ')) },
          ],
          ev.ports,
        ),
      ),
    );
  }
  if (ev.icmp) {
    const i = ev.icmp;
    blocks.push(
      block(
        'icmp',
        ev.role === 'receiver' ? 'ICMP errors received' : 'ICMP errors sent',
        el(
          'dl',
          { class: 'stats' },
          stat('Errors', count(i.errors)),
          stat('Unreachable', count(i.unreachable)),
          stat('Port unreachable', count(i.port_unreachable)),
          stat('Time exceeded', count(i.time_exceeded)),
        ),
      ),
      block(
        'probes',
        'Probes the errors answered',
        small<IcmpProbe>(
          'Probes the errors answered',
          [
            { label: 'Proto', cell: (p) => p.proto },
            { label: 'Destination', rowHeader: true, cell: (p) => hostCell(p.dst) },
            { label: 'Port', numeric: true, cell: (p) => p.port },
            { label: 'Errors', numeric: true, cell: (p) => count(p.count) },
          ],
          i.probes,
        ),
      ),
      block(
        'peers',
        ev.role === 'receiver' ? 'Sent by' : 'Sent to',
        small<{ host: string; count: number }>(
          'Peers',
          [
            { label: 'Host', rowHeader: true, cell: (p) => hostCell(p.host) },
            { label: 'Errors', numeric: true, cell: (p) => count(p.count) },
          ],
          i.peers,
        ),
      ),
    );
  }
  if (ev.syn) {
    const s = ev.syn;
    blocks.push(
      block(
        'syn',
        'TCP control packets (last interval)',
        el(
          'dl',
          { class: 'stats' },
          stat('SYNs sent', count(s.syn_sent)),
          stat('SYN/ACKs back', count(s.synack_received)),
          stat('FINs sent', count(s.fin_sent)),
          stat('RSTs sent', count(s.rst_sent)),
          stat('RSTs back', count(s.rst_received)),
          stat('TCP packets', count(s.tcp_packets)),
          stat('Work weight', pct(s.work_weight)),
          stat('Answered', pct(s.answered_pct)),
        ),
      ),
      block('signature', 'Port signature (ports its SYNs went to, ×SYNs)', el('p', {}, signature(s))),
    );
  }
  if (blocks.length === 0) blocks.push(el('p', { class: 'muted' }, 'No evidence recorded.'));
  return el('div', { class: 'evidence-box' }, ...blocks);
}

type IcmpProbe = { proto: string; dst: string; port: number; count: number };

export const anomalies: View = (root, route, ctx) => {
  if (!ctx.analytics) {
    root.append(heading('Anomalies'), el('p', { class: 'muted' }, OFF));
    return;
  }
  let type = route.params.get('type') ?? '';
  if (!TYPES.some(([k]) => k === type)) type = '';

  // Opened rows, by detection id: they stay open across refreshes and from one table to the other.
  const open = new Set<number>();
  const active = new DetectionTable('Detections in progress', 'active', open);
  const ended = new DetectionTable('Detections that ended, newest first', 'ended', open);
  const select = el('select', { id: 'anomalies-type', name: 'type' }, el('option', { value: '' }, 'All types'), ...TYPES.map(([k, name]) => el('option', { value: k }, name)));
  select.value = type;
  const totals = el('ul', { class: 'totals', id: 'anomalies-totals', 'aria-label': 'Detections since the start, by type' });
  const intro = el('p', { class: 'muted', id: 'anomalies-empty' }, WHAT);
  const error = el('p', { class: 'error', role: 'alert' });
  const live = el('span', { class: 'live', 'data-state': 'connecting' }, 'loading…');
  const activeBox = el('section', { class: 'card wide', id: 'anomalies-active', 'aria-labelledby': 'anomalies-active-h' }, el('h2', { id: 'anomalies-active-h' }, 'In progress'), active.el);
  const endedBox = el('section', { class: 'card wide', id: 'anomalies-recent', 'aria-labelledby': 'anomalies-recent-h' }, el('h2', { id: 'anomalies-recent-h' }, 'Ended, newest first'), ended.el);
  const page = el('div', { id: 'anomalies', 'data-state': 'loading' }, intro, totals, activeBox, endedBox);
  root.append(
    heading('Anomalies', live),
    el('form', { class: 'filters', role: 'search', 'aria-label': 'Filter detections' }, el('div', { class: 'field' }, el('label', { for: select.id }, 'Type'), select)),
    error,
    page,
  );
  root.querySelector('form')?.addEventListener('submit', (e) => e.preventDefault());

  let stopPoll = () => {};
  function start() {
    replaceParams('anomalies', { type });
    stopPoll();
    page.dataset.state = 'loading';
    page.dataset.type = type;
    const kind = type ? typeName(type).toLowerCase() : 'detection';
    stopPoll = poll(async (signal) => {
      try {
        const a = await api.anomalies({ type, limit: 100 }, signal);
        const now = new Set(a.active.map((d) => d.id));
        active.update(a.active, `No ${kind} in progress.`);
        ended.update(
          a.recent.filter((d) => !now.has(d.id)),
          `No ${kind} has ended since sonde started.`,
        );
        const all = Object.entries(a.totals).filter(([, n]) => n > 0);
        replace(totals, ...all.map(([k, n]) => el('li', { class: 'badge', 'data-type': k }, `${typeName(k)}: ${fmt.exact(n)} since the start`)));
        intro.hidden = all.length > 0 || a.active.length > 0;
        error.textContent = '';
        page.dataset.state = 'done';
        live.textContent = `updated ${fmt.time(Date.now() / 1000)}`;
        live.dataset.state = 'live';
      } catch (e) {
        if (signal.aborted) return;
        error.textContent = e instanceof ApiError && e.status === 404 ? OFF : (e as Error).message;
        page.dataset.state = 'error';
        live.dataset.state = 'down';
      }
    }, 3000);
  }
  select.addEventListener('change', () => {
    type = select.value;
    start();
  });
  start();
  return stopAll(() => stopPoll());
};
