// The time ranges the history pages offer (History, Top-N): presets relative to now, "All", or
// typed times (Unix seconds, ISO dates, -2h…, the server's filter text). The same values go in
// the URL (`range=24h`, or `from=…&to=…`) and to the API (`from=-24h`).

/** `range` in the URL, and its text. */
export const RANGES: [string, string][] = [
  ['15m', 'Last 15 min'],
  ['1h', 'Last hour'],
  ['24h', 'Last 24 h'],
  ['7d', 'Last 7 days'],
  ['all', 'All'],
  ['custom', 'From … to …'],
];

/** The `from` and `to` the API takes for a range: a preset is a `from` relative to now. */
export function rangeQuery(range: string, from: string, to: string): { from?: string; to?: string } {
  if (range === 'custom') return { from, to };
  if (range === 'all') return {};
  return { from: `-${range}` };
}

/**
 * Keeps a range select and its From/To fields consistent: typing a time selects "From … to …",
 * choosing a preset clears the typed times.
 */
export function linkRangeFields(form: HTMLFormElement, range: HTMLSelectElement) {
  const field = (k: string) => form.elements.namedItem(k) as HTMLInputElement;
  form.addEventListener('input', (e) => {
    const t = e.target as HTMLInputElement;
    if (t.name === 'from' || t.name === 'to') range.value = 'custom';
  });
  range.addEventListener('change', () => {
    if (range.value === 'custom') return;
    field('from').value = '';
    field('to').value = '';
  });
}
