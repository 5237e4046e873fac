// Alerts: the engaged ones on top, then every alert of the range (filters and paging), with
// acknowledge and exclude buttons for admins, and links to the host, its flows and the history
// around the alert. Every string here may have come off the wire: it goes in as text (dom.ts).

import { api, ApiError, type Alert, type AlertExclusion } from '../api';
import { card, el, heading, link, replace } from '../dom';
import * as fmt from '../format';
import { poll } from '../poll';
import { href, hostHref, replaceParams } from '../router';
import { pager, table, type Column } from '../table';
import { stopAll, type View } from './view';

const SEVERITIES = ['info', 'notice', 'warning', 'error', 'critical'];
const LIMIT = 50;

function severity(a: Alert): HTMLElement {
  return el('span', { class: 'badge', 'data-kind': a.severity === 'error' || a.severity === 'critical' ? 'noisy' : undefined, 'data-severity': a.severity }, a.severity);
}

function entity(a: Alert): HTMLElement | string {
  const v = a.entity?.value ?? '';
  if (a.entity?.kind === 'host' && a.host) return link(hostHref(a.host), v);
  return v;
}

/** Links to what the alert is about: the host, its flows, the history of the time around it;
 * for an admin, its trigger-capture files (served only under the admin API). */
function links(a: Alert, hasHistory: boolean, admin: boolean): HTMLElement {
  const out = el('span', { class: 'links' });
  for (const c of a.captures ?? []) {
    const label = `pcap ${fmt.count(c.packets)} pkts${c.complete ? '' : ' (writing)'}`;
    if (admin) {
      // The name comes from sonde's trigger directory (letters, digits, - _ .), still encoded.
      const url = `/api/v1/admin/alerts/${a.id}/captures/${encodeURIComponent(c.name)}`;
      out.append(el('a', { href: url, download: c.name, class: 'capture' }, label), ' · ');
    } else {
      out.append(el('span', { class: 'muted' }, label), ' · ');
    }
  }
  if (a.host) {
    out.append(link(href('flows', '', { host: a.host }), 'flows'));
    if (hasHistory) {
      const from = Math.max(0, a.start - 300);
      const to = (a.end ?? a.last_seen ?? a.start) + 300;
      out.append(' · ', link(href('history', '', { host: a.host, from, to }), 'history'));
    }
  }
  return out;
}

export const alerts: View = (root, route, ctx) => {
  const p = route.params;
  const admin = ctx.me.role === 'admin';
  const state = {
    type: p.get('type') ?? '',
    severity: p.get('severity') ?? '',
    state: p.get('state') ?? 'all',
    offset: Math.max(0, Number(p.get('offset')) || 0),
  };
  const message = el('p', { class: 'message', role: 'status' });
  const error = el('p', { class: 'error', role: 'alert' });
  const fail = (e: unknown) => {
    message.textContent = '';
    error.textContent = e instanceof ApiError ? e.message : String(e);
  };
  const done = (text: string) => {
    error.textContent = '';
    message.textContent = text;
  };

  const actions = (a: Alert): HTMLElement | string => {
    if (!admin) return a.acked_by ? `acknowledged by ${a.acked_by}` : '';
    const box = el('span', { class: 'actions' });
    if (a.acked_by) box.append(el('span', { class: 'muted' }, `ack: ${a.acked_by} `));
    else {
      const ack = el('button', { type: 'button', 'data-action': 'ack', 'aria-label': `Acknowledge alert ${a.id}` }, 'Ack');
      ack.addEventListener('click', async () => {
        try {
          await api.ackAlert(a.id);
          done(`Alert ${a.id} acknowledged.`);
          await refresh();
        } catch (e) {
          fail(e);
        }
      });
      box.append(ack);
    }
    const target = a.host ? { host: a.host } : {};
    const ex = el('button', { type: 'button', class: 'danger', 'data-action': 'exclude', 'aria-label': `Exclude ${a.type} alerts${a.host ? ` for ${a.host}` : ''}` }, 'Exclude');
    ex.addEventListener('click', async () => {
      const what = a.host ? `${a.type} alerts for ${a.host}` : `${a.type} alerts`;
      if (!confirm(`Stop raising ${what}?`)) return;
      try {
        await api.addExclusion({ type: a.type, ...target, comment: `from alert ${a.id}` });
        done(`Excluded ${what}.`);
        await refresh();
      } catch (e) {
        fail(e);
      }
    });
    box.append(' ', ex);
    return box;
  };

  const columns: Column<Alert>[] = [
    { label: 'ID', numeric: true, cell: (a) => a.id },
    { label: 'Severity', cell: severity },
    { label: 'Type', rowHeader: true, cell: (a) => a.type },
    { label: 'Entity', cell: entity },
    { label: 'Start', cell: (a) => fmt.time(a.start) },
    { label: 'End', cell: (a) => (a.end ? fmt.time(a.end) : el('span', { class: 'badge', 'data-kind': 'in-progress' }, 'engaged')) },
    { label: 'Summary', cell: (a) => a.summary },
    { label: 'See', cell: (a) => links(a, ctx.history, admin) },
    { label: 'Actions', cell: actions },
  ];
  const engagedT = table<Alert>({ caption: 'Engaged alerts', hideCaption: true, columns, empty: 'No alert is engaged.' });
  const allT = table<Alert>({ caption: 'Alerts', hideCaption: true, columns, empty: 'No alert matches.' });
  const pages = pager((offset) => {
    state.offset = offset;
    void refresh();
  });
  const counters = el('p', { class: 'muted', id: 'alert-counters' });

  const typeIn = el('input', { id: 'alert-type', name: 'type', value: state.type, placeholder: 'scan.* or ddos', size: 14 });
  const sevIn = el('select', { id: 'alert-severity', name: 'severity' }, el('option', { value: '' }, 'any'), ...SEVERITIES.map((s) => el('option', { value: s, selected: s === state.severity }, `${s} and above`)));
  const stateIn = el('select', { id: 'alert-state', name: 'state' }, ...['all', 'engaged', 'released'].map((s) => el('option', { value: s, selected: s === state.state }, s)));
  const form = el(
    'form',
    { class: 'filters', role: 'search' },
    el('label', { for: 'alert-type' }, 'Type '),
    typeIn,
    el('label', { for: 'alert-severity' }, ' Severity '),
    sevIn,
    el('label', { for: 'alert-state' }, ' State '),
    stateIn,
    ' ',
    el('button', { type: 'submit' }, 'Apply'),
  );
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    Object.assign(state, { type: typeIn.value.trim(), severity: sevIn.value, state: stateIn.value, offset: 0 });
    void refresh();
  });

  const exclusionsBox = el('div', { id: 'exclusions' });
  const exclusionsT = table<AlertExclusion>({
    caption: 'Exclusions',
    hideCaption: true,
    columns: [
      { label: 'ID', numeric: true, cell: (x) => x.id },
      { label: 'Type', cell: (x) => x.type ?? 'any' },
      { label: 'Host', cell: (x) => x.host ?? '' },
      { label: 'Network', cell: (x) => x.net ?? '' },
      { label: 'Application', cell: (x) => x.app ?? '' },
      { label: 'Comment', cell: (x) => x.comment },
      { label: 'By', cell: (x) => x.by },
      {
        label: 'Actions',
        cell: (x) => {
          if (!admin || !x.removable) return '';
          const b = el('button', { type: 'button', class: 'danger', 'aria-label': `Remove exclusion ${x.id}` }, 'Remove');
          b.addEventListener('click', async () => {
            try {
              await api.deleteExclusion(x.id);
              done(`Exclusion ${x.id} removed.`);
              await refresh();
            } catch (e) {
              fail(e);
            }
          });
          return b;
        },
      },
    ],
    empty: 'No exclusion: every alert is raised.',
  });
  exclusionsBox.append(exclusionsT.el);

  async function refresh(signal?: AbortSignal) {
    replaceParams('alerts', { type: state.type, severity: state.severity, state: state.state === 'all' ? '' : state.state, offset: state.offset || '' });
    const [r, x] = await Promise.all([
      api.alerts({ type: state.type, severity: state.severity, state: state.state, offset: state.offset, limit: LIMIT }, signal),
      api.exclusions(signal),
    ]);
    engagedT.update(r.engaged);
    allT.update(r.alerts);
    pages.update(r.total, r.offset, r.limit);
    exclusionsT.update(x.exclusions);
    const sum = (m: Record<string, number>) => Object.values(m).reduce((s, v) => s + v, 0);
    const c = r.counters;
    replace(
      counters,
      `This run: ${sum(c.engaged)} engaged, ${sum(c.released)} released; refused: ${sum(c.rate_limited)} by the rate limit, ${sum(c.entity_limited)} by the per-entity limit, ${sum(c.excluded)} excluded; ${sum(c.flaps)} flaps merged.`,
    );
  }

  root.append(
    heading('Alerts', el('p', { class: 'muted' }, 'Detections, built-in checks and scripts. A condition that comes back within the hold time stays one alert.')),
    message,
    error,
    card('Engaged', engagedT.el),
    card('All alerts', form, allT.el, pages.el, counters),
    card('Exclusions', exclusionsBox),
  );
  const stopPoll = poll(async (signal) => {
    try {
      await refresh(signal);
    } catch (e) {
      if (!signal.aborted) fail(e);
    }
  }, 2000);
  return stopAll(stopPoll);
};
