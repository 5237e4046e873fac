// Building the DOM safely. Every string the API returns came off the wire (host names, URLs,
// user agents...) and is attacker data, so pages are built only with createElement and text
// nodes: there is no innerHTML anywhere in the console, and strings never become markup.

/** What `el` accepts as a child: text (as a text node), an element, or nothing. */
export type Child = Node | string | number | null | undefined | false;

/** Attributes `el` may set. Values are always set with setAttribute (never parsed as HTML). */
export type Attrs = Record<string, string | number | boolean | null | undefined>;

/**
 * Creates `<tag>` with attributes and children. Strings become text nodes, so `el('td', {},
 * '<script>')` shows the characters `<script>`. An attribute that is `false`, `null` or
 * `undefined` is left out; `true` sets it empty.
 */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === false || v === null || v === undefined) continue;
    // Event handlers go through addEventListener, never through on* attributes.
    if (/^on/i.test(k)) throw new Error(`el: refusing attribute ${k}`);
    e.setAttribute(k, v === true ? '' : String(v));
  }
  append(e, ...children);
  return e;
}

/** Appends children to `parent` (strings as text nodes). */
export function append(parent: Node, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    parent.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
}

/** Replaces all children of `parent`. */
export function replace(parent: Node, ...children: Child[]): void {
  while (parent.firstChild) parent.removeChild(parent.firstChild);
  append(parent, ...children);
}

/** A link inside the console: `#/` + path. Parts are URI-encoded by `routes.ts`' helpers. */
export function link(href: string, text: Child, attrs: Attrs = {}): HTMLAnchorElement {
  if (!href.startsWith('#/')) throw new Error('link: console links start with #/');
  return el('a', { ...attrs, href }, text);
}

/** A page title plus an optional line of explanation. */
export function heading(title: string, ...rest: Child[]): HTMLElement {
  return el('div', { class: 'heading' }, el('h1', {}, title), ...rest);
}

/** A labelled box for a dashboard or a host page section. */
export function card(title: string, ...children: Child[]): HTMLElement {
  const id = `card-${title.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;
  return el('section', { class: 'card', 'aria-labelledby': id }, el('h2', { id }, title), ...children);
}
