// Applications, protocols and server ports by traffic over the live flows. An application
// links to its flows.

import { api, type Ranked } from '../api';
import { card, el, heading, link } from '../dom';
import { appCell } from '../flowcols';
import * as fmt from '../format';
import { poll } from '../poll';
import { href } from '../router';
import { bar, num, table } from '../table';
import type { View } from './view';

function ranked(caption: string, first: string, cellOf: (r: Ranked) => HTMLElement | string) {
  let total = 0;
  const t = table<Ranked>({
    caption,
    hideCaption: true,
    columns: [
      { label: first, rowHeader: true, cell: cellOf },
      { label: 'Bytes', numeric: true, cell: (r) => num(r.bytes, fmt.bytes(r.bytes)) },
      { label: 'Flows', numeric: true, cell: (r) => num(r.flows, fmt.count(r.flows)) },
      { label: 'Share', cell: (r) => bar(r.bytes, total) },
    ],
    empty: 'Nothing yet.',
  });
  return {
    el: t.el,
    update(rows: Ranked[]) {
      total = rows.reduce((a, r) => a + r.bytes, 0);
      t.update(rows);
    },
  };
}

export const applications: View = (root) => {
  const apps = ranked('Applications by traffic', 'Application', (r) => appCell(r.application ?? null));
  const protos = ranked('IP protocols by traffic', 'Protocol', (r) => {
    const n = r.protocol ?? '';
    return link(href('flows', '', { proto: n }), fmt.proto(Number(n)));
  });
  const ports = ranked('Server ports by traffic', 'Port', (r) => {
    const [port, proto] = (r.port ?? '').split('/');
    return link(href('flows', '', { port, proto }), `${port}/${fmt.proto(Number(proto))}`);
  });
  root.append(
    heading('Applications', el('p', { class: 'muted' }, 'Over the flows in memory now: bytes both ways.')),
    el('section', { class: 'card wide', 'aria-labelledby': 'apps-h' }, el('h2', { id: 'apps-h' }, 'Applications'), apps.el),
    el('div', { class: 'grid' }, card('Protocols', protos.el), card('Server ports', ports.el)),
  );
  return poll(async (signal) => {
    const [a, p, s] = await Promise.all([api.top('applications', 100, signal), api.top('protocols', 20, signal), api.top('ports', 20, signal)]);
    apps.update(a.rows);
    protos.update(p.rows);
    ports.update(s.rows);
  }, 3000);
};
