// Readable units. Decimal (SI) prefixes throughout, as network equipment counts:
// 1 kbit/s = 1000 bit/s, 1 KB = 1000 bytes.

const SI = ['', 'K', 'M', 'G', 'T', 'P'];

/** `n` scaled to at most 3 integer digits, with its prefix index. */
function scale(n: number): [number, number] {
  let i = 0;
  let v = Math.abs(n);
  while (v >= 1000 && i < SI.length - 1) {
    v /= 1000;
    i++;
  }
  return [Math.sign(n) * v, i];
}

function digits(v: number, i: number): string {
  // Whole numbers below 1000 need no decimals; scaled values get up to 3 significant digits.
  if (i === 0) return Number.isInteger(v) ? String(v) : v.toFixed(1);
  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
}

/** 1234567 → "1.23 MB". */
export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '–';
  const [v, i] = scale(n);
  return `${digits(v, i)} ${SI[i]}B`;
}

/** 1234567 → "1.23 Mbit/s" (lower-case k for kilo, as usual for bit rates). */
export function bits(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '–';
  const [v, i] = scale(n);
  const p = i === 1 ? 'k' : SI[i];
  return `${digits(v, i)} ${p}bit/s`;
}

/** 1234567 → "1.23 M" (packets, flows: plain counts). */
export function count(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '–';
  const [v, i] = scale(n);
  return i === 0 ? digits(v, 0) : `${digits(v, i)} ${SI[i]}`;
}

/** 1234.5 → "1.23 K pkt/s". */
export function pps(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '–';
  return `${count(Math.round(n * 10) / 10)} pkt/s`;
}

/** Exact integer with thousands separators, for titles: 1234567 → "1,234,567". */
export function exact(n: number): string {
  return n.toLocaleString('en-US');
}

/** Unix seconds (or ms with `ms`) → local "2026-11-23 08:00:01". */
export function time(t: number | null | undefined, ms = false): string {
  if (!t) return '–';
  const d = new Date(ms ? t : t * 1000);
  const p = (x: number) => String(x).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** Seconds → "3 s", "4 min 5 s", "2 h 3 min". */
export function duration(s: number): string {
  s = Math.max(0, Math.round(s));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

const PROTOS: Record<number, string> = { 1: 'ICMP', 6: 'TCP', 17: 'UDP', 47: 'GRE', 50: 'ESP', 58: 'ICMPv6', 132: 'SCTP' };

/** IP protocol number → name (the number when unknown). */
export function proto(n: number): string {
  return PROTOS[n] ?? String(n);
}
