// Live flows with filters (host or prefix, port, protocol, application, VLAN), sorted and paged
// by the server and refreshed every 2 s (pausable). Every filter is in the URL:
// #/flows?port=443&proto=6&app=TLS

import { api, DIRECTIONS, type Flow } from '../api';
import { el, heading } from '../dom';
import { flowColumns } from '../flowcols';
import { poll } from '../poll';
import { replaceParams } from '../router';
import { pager, table, type Order } from '../table';
import type { View } from './view';

const LIMIT = 50;
const FILTERS = ['host', 'port', 'proto', 'app', 'vlan', 'direction'] as const;
type Filter = (typeof FILTERS)[number];

export const flows: View = (root, route, ctx) => {
  const p = route.params;
  const local = ctx.localNetworks.length > 0;
  const filter: Record<Filter, string> = { host: '', port: '', proto: '', app: '', vlan: '', direction: '' };
  for (const k of FILTERS) filter[k] = p.get(k) ?? '';
  const state = {
    sort: p.get('sort') ?? 'bytes',
    order: (p.get('order') === 'asc' ? 'asc' : 'desc') as Order,
    offset: Math.max(0, Number(p.get('offset')) || 0),
    paused: false,
  };

  const t = table<Flow>({
    caption: 'Live flows',
    hideCaption: true,
    sort: { key: state.sort, order: state.order },
    onSort: (key, order) => {
      Object.assign(state, { sort: key, order, offset: 0 });
      refresh();
    },
    columns: flowColumns({ sortable: true, direction: local }),
    empty: 'No flow matches.',
  });
  const pages = pager((offset) => {
    state.offset = offset;
    refresh();
  });

  // The filter form: a field per filter; applied on submit (Enter) or when a field changes.
  const field = (k: Filter, label: string, input: HTMLInputElement | HTMLSelectElement) => {
    input.id = `flows-${k}`;
    input.name = k;
    input.value = filter[k];
    return el('div', { class: 'field' }, el('label', { for: input.id }, label), input);
  };
  const text = (placeholder: string, mode = 'text') => el('input', { type: 'text', inputmode: mode, placeholder, autocomplete: 'off', spellcheck: 'false' });
  const proto = el(
    'select',
    {},
    el('option', { value: '' }, 'any'),
    el('option', { value: '6' }, 'TCP'),
    el('option', { value: '17' }, 'UDP'),
    el('option', { value: '1' }, 'ICMP'),
    el('option', { value: '58' }, 'ICMPv6'),
  );
  if (filter.proto && !['', '6', '17', '1', '58'].includes(filter.proto)) proto.append(el('option', { value: filter.proto }, filter.proto));
  const form = el(
    'form',
    { class: 'filters', role: 'search', 'aria-label': 'Filter flows' },
    field('host', 'Host or prefix', text('10.0.0.1 or 10.0.0.0/8')),
    field('port', 'Port', text('443', 'numeric')),
    field('proto', 'Protocol', proto),
    field('app', 'Application', text('TLS, DNS, Google…')),
    field('vlan', 'VLAN', text('0', 'numeric')),
    // By --local-networks, client to server.
    local &&
      field(
        'direction',
        'Direction',
        el(
          'select',
          {},
          el('option', { value: '' }, 'any'),
          ...DIRECTIONS.map((d) => el('option', { value: d }, d)),
        ),
      ),
    el('button', { type: 'submit' }, 'Apply'),
    el('button', { type: 'reset' }, 'Clear'),
  );
  const apply = () => {
    for (const k of FILTERS) filter[k] = ((form.elements.namedItem(k) as HTMLInputElement | null)?.value ?? '').trim();
    state.offset = 0;
    refresh();
  };
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    apply();
  });
  form.addEventListener('change', apply);
  form.addEventListener('reset', () => setTimeout(apply));

  const pause = el('button', { type: 'button', 'aria-pressed': 'false', class: 'toggle' }, 'Pause');
  pause.addEventListener('click', () => {
    state.paused = !state.paused;
    pause.setAttribute('aria-pressed', String(state.paused));
    pause.textContent = state.paused ? 'Resume' : 'Pause';
    refresh();
  });
  const error = el('p', { class: 'error', role: 'alert' });

  root.append(heading('Flows', pause), form, error, t.el, pages.el);

  let stopPoll = () => {};
  function refresh() {
    replaceParams('flows', { ...filter, sort: state.sort, order: state.order === 'desc' ? undefined : 'asc', offset: state.offset || undefined });
    stopPoll();
    const once = async (signal: AbortSignal) => {
      try {
        const r = await api.flows({ ...filter, sort: state.sort, order: state.order, offset: state.offset, limit: LIMIT }, signal);
        error.textContent = '';
        t.update(r.flows);
        pages.update(r.total, r.offset, LIMIT);
      } catch (e) {
        if (!signal.aborted) error.textContent = (e as Error).message;
        throw e;
      }
    };
    // Paused: one fetch for the new filters, then nothing until resumed.
    if (state.paused) {
      const ctl = new AbortController();
      void once(ctl.signal).catch(() => {});
      stopPoll = () => ctl.abort();
    } else {
      stopPoll = poll(once, 2000);
    }
  }
  refresh();
  return () => stopPoll();
};
