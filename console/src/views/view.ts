// What every view is: a function that fills `root` for a route and returns how to stop it
// (timers, event streams, charts), called when the user goes elsewhere.

import type { Me } from '../api';
import type { Route } from '../router';

export interface Ctx {
  me: Me;
  /** Whether sonde keeps a history on disk (--data-dir): the History page and long-range charts. */
  history: boolean;
  /** Whether the traffic analytics are on (not --analytics off): Anomalies and Top-N. */
  analytics: boolean;
  /** Whether any --filter-set is configured: the Filters page. */
  filters: boolean;
  /** The --local-networks prefixes (empty: none, and nothing is split by direction). */
  localNetworks: string[];
  /** Whether --geoip-dir is set: countries and ASes of hosts. */
  geoip: boolean;
}

export type Stop = () => void;
export type View = (root: HTMLElement, route: Route, ctx: Ctx) => Stop | void;

/** Runs all of `stops`. */
export function stopAll(...stops: (Stop | undefined)[]): Stop {
  return () => stops.forEach((s) => s?.());
}
