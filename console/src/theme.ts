// Dark and light themes, set as <html data-theme="...">: the toggle's choice, remembered in
// localStorage, or else the system's (prefers-color-scheme), followed as it changes. The CSS
// then has one palette per theme.

const KEY = 'sonde-theme';
type Theme = 'light' | 'dark';

const system = () => matchMedia('(prefers-color-scheme: dark)');

/** The theme in effect now. */
export function current(): Theme {
  return document.documentElement.dataset.theme === 'dark' ? 'dark' : 'light';
}

/** Applies the remembered choice or the system's, and follows the system while no choice is
 * remembered (telling charts, which draw on canvas, to redraw). */
export function init(): void {
  const apply = () => {
    document.documentElement.dataset.theme = remembered() ?? (system().matches ? 'dark' : 'light');
  };
  apply();
  system().addEventListener('change', () => {
    apply();
    changed();
  });
}

/** The toggle's remembered choice, if any (none when storage is disabled). */
function remembered(): Theme | null {
  try {
    const v = localStorage.getItem(KEY);
    return v === 'light' || v === 'dark' ? v : null;
  } catch {
    return null;
  }
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
