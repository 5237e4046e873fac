// Dark and light themes. The default follows the system (prefers-color-scheme, in CSS); the
// toggle's choice is remembered in localStorage and set as <html data-theme="...">.

const KEY = 'sonde-theme';
type Theme = 'light' | 'dark';

/** The theme in effect now. */
export function current(): Theme {
  const set = document.documentElement.dataset.theme;
  if (set === 'light' || set === 'dark') return set;
  return matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}

/** Applies the remembered choice, and tells charts when the system theme changes. */
export function init(): void {
  let saved: string | null = null;
  try {
    saved = localStorage.getItem(KEY);
  } catch {
    // storage disabled: follow the system
  }
  if (saved === 'light' || saved === 'dark') document.documentElement.dataset.theme = saved;
  matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => changed());
}

function changed(): void {
  document.dispatchEvent(new CustomEvent('sonde-theme'));
}

/** Switches to the other theme and remembers it. */
export function toggle(): Theme {
  const next: Theme = current() === 'dark' ? 'light' : 'dark';
  document.documentElement.dataset.theme = next;
  try {
    localStorage.setItem(KEY, next);
  } catch {
    // not remembered; still applied
  }
  changed();
  return next;
}

/** A CSS custom property of the theme (charts draw on canvas, which cannot use CSS). */
export function color(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}
