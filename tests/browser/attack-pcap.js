// A forged capture of attacks, deterministic and made without root or any tool (the builders of
// hostile-pcap.js): in its first seconds a TCP port scan, an IP scan and a UDP probe answered by
// ICMP port unreachables; then a SYN flood from spoofed sources on one victim. Every address is
// in the capture only (10.77.0.0/16, 198.18.0.0/15): nothing is sent anywhere.

import { checksum, ethIpv4, tcp, udp, writePcap } from './hostile-pcap.js';

/** Capture time of the first packet: a multiple of 10 s, so 5 s intervals start with it. */
export const T0 = 1_700_100_000;

/** The port scan: SYNs to ports 1..PORT_SCAN_PORTS of PORT_TARGET; 22 and 80 are open. */
export const PORT_SCANNER = '10.77.0.66';
export const PORT_TARGET = '10.77.0.10';
export const PORT_SCAN_PORTS = 200;
/** The IP scan: SYNs to port 23 of IP_SCAN_HOSTS hosts of 10.77.1.0/24, none answering. */
export const IP_SCANNER = '10.77.0.67';
export const IP_SCAN_HOSTS = 100;
/** UDP probes to ICMP_PORTS closed ports of ICMP_SENDER, each answered by a port unreachable. */
export const PROBER = '10.77.0.68';
export const ICMP_SENDER = '10.77.0.11';
export const ICMP_PORTS = 150;
/** The SYN flood: FLOOD_PPS SYNs a second for FLOOD_SECONDS to VICTIM:80, from spoofed sources. */
export const VICTIM = '10.77.0.80';
export const FLOOD_START = 2;
export const FLOOD_SECONDS = 10;
export const FLOOD_PPS = 2000;

/** ICMP destination unreachable (port) quoting `original` (its IP header and 8 bytes). */
function portUnreachable(src, dst, original) {
  const quoted = original.subarray(14, 14 + 28);
  const icmp = Buffer.concat([Buffer.from([3, 3, 0, 0, 0, 0, 0, 0]), quoted]);
  icmp.writeUInt16BE(checksum(icmp), 2);
  return ethIpv4(src, dst, 1, icmp);
}

/** Writes the capture to `file`; returns its packet count. */
export function writeAttackPcap(file) {
  const recs = [];
  const at = (seconds, frame) => recs.push({ usec: T0 * 1e6 + Math.round(seconds * 1e6), frame });

  // Port scan: over 1 s, each SYN answered 100 µs later.
  for (let port = 1; port <= PORT_SCAN_PORTS; port++) {
    const t = 0.1 + port / PORT_SCAN_PORTS;
    const sport = 40000 + (port % 7);
    at(t, tcp(PORT_SCANNER, sport, PORT_TARGET, port, 1000 + port, 0, 0x02));
    if (port === 22 || port === 80) {
      at(t + 0.0001, tcp(PORT_TARGET, port, PORT_SCANNER, sport, 9000, 1001 + port, 0x12));
      at(t + 0.0002, tcp(PORT_SCANNER, sport, PORT_TARGET, port, 1001 + port, 0, 0x04));
    } else {
      at(t + 0.0001, tcp(PORT_TARGET, port, PORT_SCANNER, sport, 0, 1001 + port, 0x14));
    }
  }
  // IP scan: port 23 of 10.77.1.1..100, unanswered.
  for (let i = 1; i <= IP_SCAN_HOSTS; i++) {
    at(0.2 + i / IP_SCAN_HOSTS, tcp(IP_SCANNER, 41000 + i, `10.77.1.${i}`, 23, 5000 + i, 0, 0x02));
  }
  // UDP probes, each answered by an ICMP port unreachable.
  for (let i = 0; i < ICMP_PORTS; i++) {
    const t = 0.5 + i / ICMP_PORTS;
    const probe = udp(PROBER, 42000, ICMP_SENDER, 1000 + i, Buffer.from('probe'));
    at(t, probe);
    at(t + 0.0001, portUnreachable(ICMP_SENDER, PROBER, probe));
  }
  // SYN flood from spoofed sources of 198.18.0.0/15 (a fixed pseudo-random sequence).
  let x = 12345;
  const next = () => (x = (Math.imul(x, 1103515245) + 12345) >>> 0);
  for (let i = 0; i < FLOOD_PPS * FLOOD_SECONDS; i++) {
    const r = next();
    const src = `198.${18 + ((r >>> 16) & 1)}.${(r >>> 8) & 255}.${(r & 255) || 1}`;
    at(FLOOD_START + i / FLOOD_PPS, tcp(src, 1024 + (next() % 60000), VICTIM, 80, next(), 0, 0x02));
  }
  recs.sort((a, b) => a.usec - b.usec);
  writePcap(file, recs);
  return recs.length;
}
