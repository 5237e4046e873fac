// Periodic refresh that never piles up: the next request starts only after the previous one
// finished, and none runs while the tab is hidden.

export function poll(fn: (signal: AbortSignal) => Promise<void>, everyMs: number): () => void {
  const ctl = new AbortController();
  let timer: number | undefined;
  const tick = async () => {
    if (ctl.signal.aborted) return;
    if (!document.hidden) {
      try {
        await fn(ctl.signal);
      } catch (e) {
        if (!ctl.signal.aborted) console.warn('refresh failed', e);
      }
    }
    if (!ctl.signal.aborted) timer = window.setTimeout(tick, everyMs);
  };
  void tick();
  return () => {
    ctl.abort();
    window.clearTimeout(timer);
  };
}
