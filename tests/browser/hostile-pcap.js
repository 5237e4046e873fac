// A capture whose names are attacks on the console: a TLS ClientHello whose SNI, an HTTP GET
// whose Host, URL and User-Agent, and a DNS query whose name carry markup, quotes and control
// characters. Built byte by byte (Ethernet, IPv4, TCP/UDP) so the test needs no other tool.

import { writeFileSync } from 'node:fs';

export const SCRIPT = '<script>window.__pwned=1</script>';
export const IMG = '"><img src=x onerror="window.__pwned=2">';
/** Quotes and control characters (sonde replaces the controls with U+FFFD). */
export const QUOTES = `'"\x01\x07\x1b\`x`;

export const CLIENT = '10.66.0.1';
export const TLS_SERVER = '10.66.0.2';
export const HTTP_SERVER = '10.66.0.3';
export const DNS_SERVER = '10.66.0.4';
/** The address the DNS answer gives the hostile name; the client then sends it a datagram. */
export const RESOLVED = '10.66.0.9';

export const SNI = `${SCRIPT}${IMG}${QUOTES}`;
export const HTTP_HOST = `${IMG}${SCRIPT}${QUOTES}`;
// No spaces in a request line's URL.
export const HTTP_URL = `/${SCRIPT}?"><svg/onload=window.__pwned=3>`;
export const USER_AGENT = `${IMG} ${SCRIPT}`;
/** DNS labels (each under 64 bytes); the name reads them joined by dots. */
export const DNS_LABELS = [SCRIPT, IMG, QUOTES, 'example'];

// The packet builders are shared with attack-pcap.js.
export const ip4 = (s) => Buffer.from(s.split('.').map(Number));
export const u16 = (n) => Buffer.from([n >> 8, n & 255]);
const u24 = (n) => Buffer.from([(n >> 16) & 255, (n >> 8) & 255, n & 255]);
export const u32 = (n) => Buffer.from([(n >>> 24) & 255, (n >> 16) & 255, (n >> 8) & 255, n & 255]);

export function checksum(buf) {
  let s = 0;
  for (let i = 0; i < buf.length; i += 2) s += (buf[i] << 8) + (i + 1 < buf.length ? buf[i + 1] : 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >> 16);
  return ~s & 0xffff;
}

/** An IPv4 header (checksummed) for a payload of `length` bytes. */
export function ipv4Header(src, dst, proto, length) {
  const ip = Buffer.concat([Buffer.from([0x45, 0]), u16(20 + length), u16(1), u16(0x4000), Buffer.from([64, proto]), u16(0), ip4(src), ip4(dst)]);
  ip.writeUInt16BE(checksum(ip), 10);
  return ip;
}

/** Ethernet + IPv4 around an L4 payload whose checksums are done. */
export function ethIpv4(src, dst, proto, l4) {
  const eth = Buffer.concat([Buffer.from([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]), u16(0x0800)]);
  return Buffer.concat([eth, ipv4Header(src, dst, proto, l4.length), l4]);
}

/** Ethernet + IPv4 around an L4 segment (with its checksum over the pseudo-header). */
function frame(src, dst, proto, l4, csumAt) {
  const pseudo = Buffer.concat([ip4(src), ip4(dst), Buffer.from([0, proto]), u16(l4.length)]);
  l4.writeUInt16BE(0, csumAt);
  l4.writeUInt16BE(checksum(Buffer.concat([pseudo, l4])) || 0xffff, csumAt);
  return ethIpv4(src, dst, proto, l4);
}

export function tcp(src, sport, dst, dport, seq, ack, flags, payload = Buffer.alloc(0)) {
  const h = Buffer.concat([u16(sport), u16(dport), u32(seq), u32(ack), Buffer.from([0x50, flags]), u16(65535), u16(0), u16(0)]);
  return frame(src, dst, 6, Buffer.concat([h, payload]), 16);
}

export function udp(src, sport, dst, dport, payload) {
  const h = Buffer.concat([u16(sport), u16(dport), u16(8 + payload.length), u16(0)]);
  return frame(src, dst, 17, Buffer.concat([h, payload]), 6);
}

function clientHello(sni) {
  const name = Buffer.from(sni, 'latin1');
  const sniExt = Buffer.concat([u16(0), u16(name.length + 5), u16(name.length + 3), Buffer.from([0]), u16(name.length), name]);
  const versions = Buffer.concat([u16(0x002b), u16(3), Buffer.from([2]), u16(0x0304)]);
  const exts = Buffer.concat([sniExt, versions]);
  const body = Buffer.concat([u16(0x0303), Buffer.alloc(32, 7), Buffer.from([0]), u16(4), u16(0x1301), u16(0xc02f), Buffer.from([1, 0]), u16(exts.length), exts]);
  const hs = Buffer.concat([Buffer.from([1]), u24(body.length), body]);
  return Buffer.concat([Buffer.from([0x16, 3, 1]), u16(hs.length), hs]);
}

function serverHello() {
  // TLS 1.3 (supported_versions): the certificate is encrypted, so DPI is done after this.
  const exts = Buffer.concat([u16(0x002b), u16(2), u16(0x0304)]);
  const body = Buffer.concat([u16(0x0303), Buffer.alloc(32, 9), Buffer.from([0]), u16(0x1301), Buffer.from([0]), u16(exts.length), exts]);
  const hs = Buffer.concat([Buffer.from([2]), u24(body.length), body]);
  return Buffer.concat([Buffer.from([0x16, 3, 3]), u16(hs.length), hs]);
}

/** A DNS query for `labels`, or its answer (one A record) with `answer`. */
function dns(labels, answer = false) {
  const parts = [u16(0x1234), u16(answer ? 0x8180 : 0x0100), u16(1), u16(answer ? 1 : 0), u16(0), u16(0)];
  for (const l of labels) {
    const b = Buffer.from(l, 'latin1');
    parts.push(Buffer.from([b.length]), b);
  }
  parts.push(Buffer.from([0]), u16(1), u16(1));
  if (answer) parts.push(u16(0xc00c), u16(1), u16(1), u32(60), u16(4), ip4(RESOLVED));
  return Buffer.concat(parts);
}

/** A TCP connection: handshake, the client's payload, the server's answer and the client's ACK. */
function conversation(server, sport, dport, payload, reply) {
  const [c, s] = [1000, 5000];
  return [
    tcp(CLIENT, sport, server, dport, c, 0, 0x02),
    tcp(server, dport, CLIENT, sport, s, c + 1, 0x12),
    tcp(CLIENT, sport, server, dport, c + 1, s + 1, 0x10),
    tcp(CLIENT, sport, server, dport, c + 1, s + 1, 0x18, payload),
    tcp(server, dport, CLIENT, sport, s + 1, c + 1 + payload.length, 0x18, reply),
    tcp(CLIENT, sport, server, dport, c + 1 + payload.length, s + 1 + reply.length, 0x10),
  ];
}

/** Writes the capture to `file`: packets spread over `seconds` of capture time. */
export function writeHostilePcap(file, seconds = 4) {
  const http = Buffer.from(`GET ${HTTP_URL} HTTP/1.1\r\nHost: ${HTTP_HOST}\r\nUser-Agent: ${USER_AGENT}\r\nAccept: */*\r\n\r\n`, 'latin1');
  const packets = [
    ...conversation(TLS_SERVER, 40001, 443, clientHello(SNI), serverHello()),
    ...conversation(HTTP_SERVER, 40002, 80, http, Buffer.from('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n\r\n')),
    udp(CLIENT, 40003, DNS_SERVER, 53, dns(DNS_LABELS)),
    udp(DNS_SERVER, 53, CLIENT, 40003, dns(DNS_LABELS, true)),
    udp(CLIENT, 40004, RESOLVED, 9999, Buffer.from('hello')),
  ];
  const start = 1_700_000_000;
  writePcap(
    file,
    packets.map((p, i) => ({ usec: start * 1e6 + Math.round((i * seconds * 1e6) / packets.length), frame: p })),
  );
}

/** A pcap file (Ethernet, microseconds) of `records`: {usec: Unix time in µs, frame}. */
export function writePcap(file, records) {
  const out = [Buffer.from([0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0])];
  for (const { usec, frame: p } of records) {
    const rec = Buffer.alloc(16);
    rec.writeUInt32LE(Math.floor(usec / 1e6), 0);
    rec.writeUInt32LE(usec % 1e6, 4);
    rec.writeUInt32LE(p.length, 8);
    rec.writeUInt32LE(p.length, 12);
    out.push(rec, p);
  }
  writeFileSync(file, Buffer.concat(out));
}
