// The console's entry point: who is logged in, the navigation, and which view the URL asks for.
// Each view lives in views/ and is stopped (timers, event streams) when the user leaves it.

import './style.css';
import { api, ApiError, setUnauthorizedHandler, type FilterSets, type Me } from './api';
import { el, link, replace } from './dom';
import { href, parse } from './router';
import * as theme from './theme';
import { alerts } from './views/alerts';
import { anomalies } from './views/anomalies';
import { applications } from './views/applications';
import { dashboard } from './views/dashboard';
import { filters } from './views/filters';
import { flows } from './views/flows';
import { history } from './views/history';
import { host } from './views/host';
import { hosts } from './views/hosts';
import { iface } from './views/iface';
import { login } from './views/login';
import { top } from './views/top';
import { users } from './views/users';
import type { Stop, View } from './views/view';

interface Page {
  view: View;
  title: string;
  /** Shown in the navigation (the host page is reached through links). */
  nav?: boolean;
  adminOnly?: boolean;
  /** Shown in the navigation only when sonde keeps a history (--data-dir). */
  needsHistory?: boolean;
  /** Shown only when the traffic analytics are on (the default; not --analytics off). */
  needsAnalytics?: boolean;
  /** Shown only when a --filter-set is configured. */
  needsFilters?: boolean;
}

const PAGES: Record<string, Page> = {
  dashboard: { view: dashboard, title: 'Dashboard', nav: true },
  hosts: { view: hosts, title: 'Hosts', nav: true },
  flows: { view: flows, title: 'Flows', nav: true },
  applications: { view: applications, title: 'Applications', nav: true },
  interface: { view: iface, title: 'Interface', nav: true },
  top: { view: top, title: 'Top-N', nav: true, needsAnalytics: true },
  alerts: { view: alerts, title: 'Alerts', nav: true },
  anomalies: { view: anomalies, title: 'Anomalies', nav: true, needsAnalytics: true },
  filters: { view: filters, title: 'Filters', nav: true, needsFilters: true },
  history: { view: history, title: 'History', nav: true, needsHistory: true },
  users: { view: users, title: 'Users', nav: true, adminOnly: true },
  host: { view: host, title: 'Host' },
};

const main = document.getElementById('main') as HTMLElement;
const nav = document.getElementById('nav') as HTMLElement;
const meBox = document.getElementById('me') as HTMLElement;

let me: Me | null = null;
/** Whether sonde was started with --data-dir (from /api/v1/health). */
let hasHistory = false;
/** Whether the analytics are on, and whether filter-sets are configured (/api/v1/filtersets). */
let hasAnalytics = false;
let hasFilters = false;
let localNetworks: string[] = [];
let geoip = false;
let stop: Stop | undefined;

function stopView() {
  stop?.();
  stop = undefined;
}

/** The navigation, the current user and the buttons (theme, logout). */
function chrome() {
  const items = Object.entries(PAGES)
    .filter(
      ([, p]) =>
        p.nav &&
        (!p.adminOnly || me?.role === 'admin') &&
        (!p.needsHistory || hasHistory) &&
        (!p.needsAnalytics || hasAnalytics) &&
        (!p.needsFilters || hasFilters),
    )
    .map(([name, p]) => el('li', {}, link(href(name), p.title, { 'data-view': name })));
  replace(nav, me ? el('ul', {}, ...items) : null);

  const toggle = el('button', { type: 'button', class: 'theme', 'aria-label': 'Switch between dark and light theme' }, theme.current() === 'dark' ? '☀ Light' : '☾ Dark');
  toggle.addEventListener('click', () => {
    toggle.textContent = theme.toggle() === 'dark' ? '☀ Light' : '☾ Dark';
  });
  if (!me) {
    replace(meBox, toggle);
    return;
  }
  if (!me.auth) {
    replace(meBox, el('span', { class: 'who', title: 'sonde runs with --no-auth' }, 'no login (admin)'), toggle);
    return;
  }
  const logout = el('button', { type: 'button', id: 'logout' }, 'Log out');
  logout.addEventListener('click', async () => {
    try {
      await api.logout();
    } finally {
      showLogin();
    }
  });
  replace(meBox, el('span', { class: 'who' }, el('span', { class: 'user' }, me.user ?? ''), ' ', el('span', { class: 'role', 'data-role': me.role }, me.role)), toggle, logout);
}

function showLogin() {
  stopView();
  me = null;
  chrome();
  document.title = 'Log in · sonde';
  replace(main);
  login(main, (who) => void signedIn(who));
}

/** After a login (or with a session already open): what the server offers, then the page. */
async function signedIn(who: Me) {
  me = who;
  const [health, sets, iface] = await Promise.all([
    api.health().catch(() => null),
    api.filtersets(0).catch((e: unknown) => e),
    api.iface().catch(() => null),
  ]);
  hasHistory = health?.history === true;
  localNetworks = iface?.local_networks ?? [];
  geoip = !!iface?.geoip;
  // A 404 means --analytics off; any other failure leaves the pages in (they say what is wrong).
  hasAnalytics = !(sets instanceof ApiError && sets.status === 404);
  hasFilters = !(sets instanceof Error) && (sets as FilterSets).sets.length > 0;
  chrome();
  route(false);
}

/** Shows the view the URL names. `focus` moves focus to it (on navigation, for screen readers). */
function route(focus = true) {
  if (!me) return;
  stopView();
  const r = parse(location.hash);
  const page = PAGES[r.view];
  replace(main);
  for (const a of nav.querySelectorAll('a')) {
    if (a.dataset.view === r.view) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (!page) {
    document.title = 'Not found · sonde';
    main.append(el('h1', {}, 'Not found'), el('p', {}, 'There is no such page. ', link(href('dashboard'), 'Go to the dashboard')));
    return;
  }
  document.title = `${page.title}${r.arg ? ` ${r.arg}` : ''} · sonde`;
  stop = page.view(main, r, { me, history: hasHistory, analytics: hasAnalytics, filters: hasFilters, localNetworks, geoip }) ?? undefined;
  if (focus) main.focus({ preventScroll: true });
}

async function start() {
  theme.init();
  // The skip link targets <main> without touching the hash (the hash is the route).
  document.getElementById('skip')?.addEventListener('click', (e) => {
    e.preventDefault();
    main.focus();
  });
  setUnauthorizedHandler(() => {
    if (me) showLogin();
  });
  window.addEventListener('hashchange', () => route());
  let who: Me;
  try {
    who = await api.me();
  } catch {
    showLogin();
    return;
  }
  await signedIn(who);
}

void start();
