// Data tables that keyboards and screen readers can use: a real <table> with a <caption>,
// <th scope="col">, sortable headers that are buttons (focusable, Enter/Space) and carry
// aria-sort, and numbers right-aligned. Rows are rebuilt in place so focus on the headers stays.

import type { Ranked } from './api';
import { el, replace, type Child } from './dom';
import * as fmt from './format';

export type Order = 'asc' | 'desc';

export interface Column<T> {
  /** Header text. */
  label: string;
  /** The server's sort key (hosts: bytes, packets, ...); sortable when set. */
  sort?: string;
  /** Right-aligned, tabular digits. */
  numeric?: boolean;
  /** The cell's content (text or elements built with `el`). */
  cell: (row: T) => Child;
  /** A row header cell (<th scope="row">): the column that names the row. */
  rowHeader?: boolean;
}

export interface TableOptions<T> {
  caption: string;
  columns: Column<T>[];
  sort?: { key: string; order: Order };
  /** Called when a sortable header is activated; first click sorts descending. */
  onSort?: (key: string, order: Order) => void;
  /** Shown in a single row when there is nothing. */
  empty?: string;
  /** Hide the caption visually (it stays for screen readers). */
  hideCaption?: boolean;
  /** A class for the <table>. */
  className?: string;
}

export interface Table<T> {
  el: HTMLElement;
  table: HTMLTableElement;
  update(rows: T[]): void;
  setSort(key: string, order: Order): void;
}

const ARIA: Record<Order, string> = { asc: 'ascending', desc: 'descending' };

export function table<T>(opts: TableOptions<T>): Table<T> {
  let sort = opts.sort;
  const heads: HTMLTableCellElement[] = [];
  const headRow = el('tr');
  for (const c of opts.columns) {
    const th = el('th', { scope: 'col', class: c.numeric ? 'num' : undefined });
    if (c.sort && opts.onSort) {
      const key = c.sort;
      const b = el('button', { type: 'button', class: 'sort', 'data-sort': key }, c.label, el('span', { class: 'arrow', 'aria-hidden': 'true' }));
      b.addEventListener('click', () => {
        const order: Order = sort?.key === key && sort.order === 'desc' ? 'asc' : 'desc';
        sort = { key, order };
        paint();
        opts.onSort?.(key, order);
      });
      th.append(b);
    } else {
      th.append(c.label);
    }
    heads.push(th);
    headRow.append(th);
  }
  const tbody = el('tbody');
  const t = el(
    'table',
    { class: opts.className ?? 'data' },
    el('caption', { class: opts.hideCaption ? 'sr-only' : undefined }, opts.caption),
    el('thead', {}, headRow),
    tbody,
  );

  // aria-sort on the sorted column only; arrows show the same to sighted users.
  function paint() {
    opts.columns.forEach((c, i) => {
      const th = heads[i];
      const arrow = th.querySelector('.arrow');
      if (c.sort && sort?.key === c.sort) {
        th.setAttribute('aria-sort', ARIA[sort.order]);
        if (arrow) arrow.textContent = sort.order === 'desc' ? ' ▼' : ' ▲';
      } else {
        th.removeAttribute('aria-sort');
        if (arrow) arrow.textContent = '';
      }
    });
  }
  paint();

  return {
    el: el('div', { class: 'table-wrap' }, t),
    table: t,
    update(rows: T[]) {
      if (rows.length === 0) {
        replace(tbody, el('tr', { class: 'empty' }, el('td', { colspan: opts.columns.length }, opts.empty ?? 'Nothing yet.')));
        return;
      }
      replace(
        tbody,
        ...rows.map((r) =>
          el(
            'tr',
            {},
            ...opts.columns.map((c) =>
              c.rowHeader
                ? el('th', { scope: 'row', class: c.numeric ? 'num' : undefined }, c.cell(r))
                : el('td', { class: c.numeric ? 'num' : undefined }, c.cell(r)),
            ),
          ),
        ),
      );
    },
    setSort(key: string, order: Order) {
      sort = { key, order };
      paint();
    },
  };
}

/** Previous/Next buttons around a text, for server-side paging. */
function pagerParts(onPage: (offset: number) => void) {
  const text = el('span', { class: 'range', 'aria-live': 'polite' });
  const prev = el('button', { type: 'button' }, '‹ Previous');
  const next = el('button', { type: 'button' }, 'Next ›');
  const at = { offset: 0, limit: 50 };
  prev.addEventListener('click', () => onPage(Math.max(0, at.offset - at.limit)));
  next.addEventListener('click', () => onPage(at.offset + at.limit));
  return { el: el('nav', { class: 'pager', 'aria-label': 'Pages' }, prev, text, next), text, prev, next, at };
}

/** "1–50 of 123" with Previous/Next buttons for server-side paging. */
export function pager(onPage: (offset: number) => void): { el: HTMLElement; update(total: number, offset: number, limit: number): void } {
  const p = pagerParts(onPage);
  return {
    el: p.el,
    update(total, offset, limit) {
      Object.assign(p.at, { offset, limit });
      const last = Math.min(total, offset + limit);
      p.text.textContent = total === 0 ? '0 of 0' : `${offset + 1}–${last} of ${total}`;
      p.text.dataset.total = String(total);
      p.prev.disabled = offset === 0;
      p.next.disabled = last >= total;
    },
  };
}

/** The same where the total is not known: the server says whether more rows follow. */
export function pagerMore(onPage: (offset: number) => void): { el: HTMLElement; update(offset: number, rows: number, limit: number, more: boolean): void } {
  const p = pagerParts(onPage);
  return {
    el: p.el,
    update(offset, rows, limit, more) {
      Object.assign(p.at, { offset, limit });
      p.text.textContent = rows === 0 ? 'none' : `${offset + 1}–${offset + rows}${more ? ', more follow' : ''}`;
      p.prev.disabled = offset === 0;
      p.next.disabled = !more;
    },
  };
}

/** A number shown readable ("1.23 MB") with its exact value kept machine-readable in <data>. */
export function num(value: number, shown: string): HTMLElement {
  return el('data', { value, title: value.toLocaleString('en-US') }, shown);
}

/** A horizontal bar showing `part` of `whole` next to a label (top lists). */
export function bar(part: number, whole: number): HTMLElement {
  const pct = whole > 0 ? Math.max(0.5, (part / whole) * 100) : 0;
  const b = el('span', { class: 'bar', 'aria-hidden': 'true' });
  b.style.width = `${pct.toFixed(1)}%`;
  return el('span', { class: 'bar-track' }, b);
}

/** A top-N table (applications, protocols, ports, peers): its first column, bytes, flows and
 * each row's share of the bytes shown. */
export function rankedTable<R extends { bytes: number; flows: number } = Ranked>(caption: string, first: string, cellOf: (r: R) => Child, empty: string) {
  let total = 0;
  const t = table<R>({
    caption,
    hideCaption: true,
    columns: [
      { label: first, rowHeader: true, cell: cellOf },
      { label: 'Bytes', numeric: true, cell: (r) => num(r.bytes, fmt.bytes(r.bytes)) },
      { label: 'Flows', numeric: true, cell: (r) => num(r.flows, fmt.count(r.flows)) },
      { label: 'Share', cell: (r) => bar(r.bytes, total) },
    ],
    empty,
  });
  return {
    el: t.el,
    update(rows: R[]) {
      total = rows.reduce((a, r) => a + r.bytes, 0);
      t.update(rows);
    },
  };
}
