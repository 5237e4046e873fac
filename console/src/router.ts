// Hash routing: every view and filter has a URL, so a page can be bookmarked, shared and
// reloaded. `#/hosts?sort=bytes&q=10.0.` is view "hosts" with parameters sort and q;
// `#/host/10.0.0.1` is view "host" with argument "10.0.0.1".

export interface Route {
  /** The view's name: "dashboard", "hosts", "host", "flows", ... */
  view: string;
  /** What follows the view in the path, decoded ("10.0.0.1" in #/host/10.0.0.1). */
  arg: string;
  params: URLSearchParams;
}

export function parse(hash: string): Route {
  const h = hash.replace(/^#\/?/, '');
  const qi = h.indexOf('?');
  const path = qi < 0 ? h : h.slice(0, qi);
  const params = new URLSearchParams(qi < 0 ? '' : h.slice(qi + 1));
  const slash = path.indexOf('/');
  const view = (slash < 0 ? path : path.slice(0, slash)) || 'dashboard';
  let arg = slash < 0 ? '' : path.slice(slash + 1);
  try {
    arg = decodeURIComponent(arg);
  } catch {
    // a malformed escape: keep it as typed
  }
  return { view, arg, params };
}

/** The URL of a view: href('flows', '', {port: 443}) → "#/flows?port=443". Empty values are left out. */
export function href(view: string, arg = '', params: Record<string, string | number | undefined | null> = {}): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const qs = q.toString();
  return `#/${view}${arg ? `/${encodeURIComponent(arg)}` : ''}${qs ? `?${qs}` : ''}`;
}

/** The page of one host. */
export const hostHref = (ip: string) => href('host', ip);

/**
 * Records a view's new parameters in the URL without re-rendering the view (it already shows
 * them): the back button and bookmarks still work.
 */
export function replaceParams(view: string, params: Record<string, string | number | undefined | null>): void {
  const url = href(view, '', params);
  if (location.hash !== url) history.replaceState(null, '', url);
}
