// Countries and autonomous systems (--geoip-dir): cells that link to the hosts located there,
// and the dashboard's "Top countries" and "Top ASes" cards. AS names come from the databases,
// not the wire, but are shown as text like everything else.

import { api, type Place } from './api';
import { card, el, link } from './dom';
import * as fmt from './format';
import { href } from './router';
import { bar, num, table } from './table';

const regions = typeof Intl !== 'undefined' && 'DisplayNames' in Intl ? new Intl.DisplayNames(['en'], { type: 'region' }) : null;

/** "Germany" for "DE" (the code itself where the browser has no name for it). */
export function countryName(code: string): string {
  try {
    return regions?.of(code) ?? code;
  } catch {
    return code;
  }
}

/** A country as a link to its hosts, or a dash when the address is placed nowhere. */
export function countryCell(code: string | null | undefined): HTMLElement | string {
  if (!code) return '–';
  return link(href('hosts', '', { country: code }), el('span', { class: 'cc' }, code), { title: countryName(code), 'data-country': code });
}

/** An AS as a link to its hosts ("AS15169 Google LLC"). */
export function asCell(asn: number | null | undefined, name: string | null | undefined): HTMLElement | string {
  if (!asn) return '–';
  return link(href('hosts', '', { asn }), `AS${asn}${name ? ` ${name}` : ''}`, { 'data-asn': asn });
}

/** The note under the geo cards: where the answers come from, with the credit DB-IP's licence asks for. */
function credit(): HTMLElement {
  const a = el('a', { href: 'https://db-ip.com', rel: 'noopener noreferrer', target: '_blank' }, 'DB-IP');
  return el('p', { class: 'note' }, 'By the databases of --geoip-dir (make geoip: ip-location-db with IP data by ', a, ', CC BY 4.0). Private and special addresses are placed nowhere.');
}

/** A ranked card of countries or ASes: hosts, bytes and each row's share. */
function placesTable(kind: 'countries' | 'asns') {
  let total = 0;
  const t = table<Place>({
    caption: kind === 'countries' ? 'Top countries by traffic' : 'Top autonomous systems by traffic',
    hideCaption: true,
    columns: [
      kind === 'countries'
        ? { label: 'Country', rowHeader: true, cell: (r) => el('span', {}, countryCell(r.country), ' ', countryName(r.country ?? '')) }
        : { label: 'AS', rowHeader: true, cell: (r) => asCell(r.asn, r.name) },
      { label: 'Hosts', numeric: true, cell: (r) => num(r.hosts, fmt.count(r.hosts)) },
      { label: 'Bytes', numeric: true, cell: (r) => num(r.bytes, fmt.bytes(r.bytes)) },
      { label: 'Share', cell: (r) => bar(r.bytes, total) },
    ],
    empty: 'No located host yet.',
  });
  const unknown = el('p', { class: 'muted', 'data-unknown': kind });
  return {
    el: el('div', {}, t.el, unknown),
    update(rows: Place[], rest: { bytes: number; hosts: number }) {
      total = rows.reduce((a, r) => a + r.bytes, 0) + rest.bytes;
      t.update(rows);
      unknown.textContent = rest.hosts > 0 ? `Not located: ${fmt.count(rest.hosts)} hosts, ${fmt.bytes(rest.bytes)}.` : '';
    },
  };
}

/** The dashboard's two geo cards and their refresh. */
export function placesCards() {
  const countries = placesTable('countries');
  const asns = placesTable('asns');
  return {
    els: [card('Top countries', countries.el), card('Top ASes', asns.el, credit())],
    async refresh(signal: AbortSignal) {
      const [c, a] = await Promise.all([api.places('countries', 10, signal), api.places('asns', 10, signal)]);
      countries.update(c.rows, c.unknown);
      asns.update(a.rows, a.unknown);
    },
  };
}
