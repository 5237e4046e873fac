// Applications, protocols and server ports by traffic over the live flows. An application
// links to its flows.

import { api } from '../api';
import { card, el, heading, link } from '../dom';
import { appCell } from '../flowcols';
import * as fmt from '../format';
import { poll } from '../poll';
import { href } from '../router';
import { rankedTable } from '../table';
import type { View } from './view';

export const applications: View = (root) => {
  const apps = rankedTable('Applications by traffic', 'Application', (r) => appCell(r.application ?? null), 'Nothing yet.');
  const protos = rankedTable('IP protocols by traffic', 'Protocol', (r) => {
    const n = r.protocol ?? '';
    return link(href('flows', '', { proto: n }), fmt.proto(Number(n)));
  }, 'Nothing yet.');
  const ports = rankedTable('Server ports by traffic', 'Port', (r) => {
    const [port, proto] = (r.port ?? '').split('/');
    return link(href('flows', '', { port, proto }), `${port}/${fmt.proto(Number(proto))}`);
  }, 'Nothing yet.');
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
