//! Cento's "dummy interface": frames forged in memory, so benchmarks measure the engine and not
//! the capture path.
//!
//! `hosts=N` hosts talk over about N flows (flow j goes from host j to host j+1, UDP), and frame
//! `size=S` bytes. Consecutive packets visit flows in a scattered order (a stride coprime with N)
//! so large host counts really miss the caches, as live traffic does. Frames come from a ring
//! (like a NIC ring) whose addresses and ports are rewritten for each packet. With `random-src`
//! every packet gets a random source address: a flood of new flows, for testing bounds.
//! With `payload=http|tls|dns|mix` flows carry real application payloads (an HTTP GET over
//! TCP port 80, a TLS ClientHello with SNI over TCP 443, a DNS query over UDP 53; `mix` gives
//! flow j the kind j mod 3) so DPI has real work: frames are then as long as their payload
//! needs, or `size` if that is longer.

use crate::error::CaptureError;
use crate::Frame;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntheticSpec {
    pub hosts: u32,
    pub size: u32,
    /// Packets to produce; `None` runs until stopped.
    pub packets: Option<u64>,
    pub random_src: bool,
    /// Heavy hitters mixed into the traffic: one packet in 16 comes from one of this many
    /// fixed sources (172.16.0.1, .2, …, in turn), one flow each, to host 0 (a flood's real
    /// culprits among random sources, for the analytics' top lists).
    pub heavy: u32,
    pub seed: u64,
    pub payload: Payload,
}

/// What the synthetic frames carry after their transport header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Payload {
    /// UDP to port 80 with zero bytes (Cento's dummy traffic).
    #[default]
    Zero,
    Http,
    Tls,
    Dns,
    /// Flow j carries HTTP, TLS or DNS by j mod 3.
    Mix,
}

impl SyntheticSpec {
    pub fn parse(spec: &str) -> Result<SyntheticSpec, CaptureError> {
        let bad = |detail: String| CaptureError::BadSpec {
            spec: spec.to_string(),
            detail,
        };
        let mut s = SyntheticSpec {
            hosts: 0,
            size: 64,
            packets: None,
            random_src: false,
            heavy: 0,
            seed: 1,
            payload: Payload::Zero,
        };
        let mut have_hosts = false;
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let num = |v: &str| -> Result<u64, CaptureError> {
                let v = v.replace('_', "");
                let (digits, mult) = match v.chars().last() {
                    Some('k' | 'K') => (&v[..v.len() - 1], 1_000),
                    Some('m' | 'M') => (&v[..v.len() - 1], 1_000_000),
                    _ => (&v[..], 1),
                };
                digits
                    .parse::<u64>()
                    .map(|n| n * mult)
                    .map_err(|_| bad(format!("'{k}' needs a number, got '{v}'")))
            };
            match k {
                "hosts" => {
                    s.hosts = num(v)?
                        .try_into()
                        .map_err(|_| bad("hosts must be below 2^32".into()))?;
                    have_hosts = true;
                }
                "size" => s.size = num(v)? as u32,
                "packets" => s.packets = Some(num(v)?),
                "seed" => s.seed = num(v)?,
                "random-src" => s.random_src = true,
                "heavy" => {
                    s.heavy = num(v)?
                        .try_into()
                        .ok()
                        .filter(|&h: &u32| h <= 250)
                        .ok_or_else(|| bad("heavy must be at most 250".into()))?;
                }
                "payload" => {
                    s.payload = match v {
                        "zero" => Payload::Zero,
                        "http" => Payload::Http,
                        "tls" => Payload::Tls,
                        "dns" => Payload::Dns,
                        "mix" => Payload::Mix,
                        _ => {
                            return Err(bad(format!(
                                "payload must be zero, http, tls, dns or mix, got '{v}'"
                            )))
                        }
                    }
                }
                _ => return Err(bad(format!("unknown key '{k}'"))),
            }
        }
        if !have_hosts || s.hosts < 2 {
            return Err(bad("hosts=N with N >= 2 is required".into()));
        }
        if !(60..=9000).contains(&s.size) {
            return Err(bad(format!(
                "size must be between 60 and 9000 bytes, got {}",
                s.size
            )));
        }
        Ok(s)
    }
}

/// Frames of one payload kind, reused in turn (like a NIC ring).
struct Ring {
    bytes: Vec<u8>,
    frame_len: usize,
    frames: usize,
    next: usize,
    /// Offset of the transport header (source port) in a frame.
    l4: usize,
}

impl Ring {
    fn new(template: &[u8]) -> Ring {
        let frame_len = template.len();
        // At most 32k frames (Cento's dummy ring) and at most 16 MiB.
        let frames = (16usize << 20).div_ceil(frame_len).clamp(64, 32_768);
        let mut bytes = Vec::with_capacity(frames * frame_len);
        for _ in 0..frames {
            bytes.extend_from_slice(template);
        }
        Ring {
            bytes,
            frame_len,
            frames,
            next: 0,
            l4: ETH + 20,
        }
    }
}

pub struct SyntheticSource {
    spec: SyntheticSpec,
    /// One ring per payload kind the flows use (one for `zero`, three for `mix`).
    rings: Vec<Ring>,
    /// This shard owns flows j = shard + t·shards; `t` walks 0..local_flows by `stride`.
    t: u32,
    local_flows: u32,
    stride: u32,
    produced: u64,
    rng: u64,
    /// Shard number and count: each shard generates its own share of the flows.
    shard: u32,
    shards: u32,
    quota: u64,
}

const ETH: usize = 14;

impl SyntheticSource {
    /// A source for shard `shard` of `shards`; together they cover every flow once.
    pub fn new(spec: SyntheticSpec, shard: u32, shards: u32) -> SyntheticSource {
        let size = spec.size as usize;
        let kinds: &[Payload] = match spec.payload {
            Payload::Mix => &[Payload::Http, Payload::Tls, Payload::Dns],
            Payload::Zero => &[Payload::Zero],
            Payload::Http => &[Payload::Http],
            Payload::Tls => &[Payload::Tls],
            Payload::Dns => &[Payload::Dns],
        };
        let rings = kinds
            .iter()
            .map(|k| Ring::new(&template(*k, size)))
            .collect();
        let shards = shards.max(1);
        let local_flows = (spec.hosts.saturating_sub(shard)).div_ceil(shards).max(1);
        let stride = coprime_stride(local_flows);
        SyntheticSource {
            rng: spec.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            spec,
            rings,
            t: 0,
            local_flows,
            stride,
            produced: 0,
            shard,
            shards,
            quota: 0,
        }
        .with_quota()
    }

    fn with_quota(mut self) -> Self {
        self.quota = match self.spec.packets {
            Some(p) => {
                p / self.shards as u64 + u64::from((self.shard as u64) < p % self.shards as u64)
            }
            None => u64::MAX,
        };
        self
    }

    pub fn spec(&self) -> &SyntheticSpec {
        &self.spec
    }

    pub fn produced(&self) -> u64 {
        self.produced
    }

    /// This shard's quota of `packets`, if bounded.
    pub fn quota(&self) -> Option<u64> {
        self.spec.packets.map(|_| self.quota)
    }

    /// Up to `max` next frames at once (each in its own ring slot, so all stay valid together:
    /// the engine can read their payloads without copying). Returns fewer at the end of the
    /// quota, none after it.
    pub fn next_batch<'a>(&'a mut self, ts_ns: u64, max: usize, out: &mut Vec<Frame<'a>>) {
        out.clear();
        // Rewrite the slots first, then hand out shared views of them.
        let max = max.min(self.rings.iter().map(|r| r.frames).min().unwrap_or(0));
        let mut slots: [(u8, u32); 512] = [(0, 0); 512];
        let max = max.min(slots.len());
        let mut n = 0;
        while n < max {
            match self.advance() {
                Some(slot) => {
                    slots[n] = slot;
                    n += 1;
                }
                None => break,
            }
        }
        for &(ring, off) in &slots[..n] {
            let r = &self.rings[ring as usize];
            out.push(Frame {
                ts_ns,
                wire_len: r.frame_len as u32,
                data: &r.bytes[off as usize..off as usize + r.frame_len],
            });
        }
    }

    /// The next frame, rewritten in place in the ring; `None` once the quota is reached.
    #[inline]
    pub fn next(&mut self, ts_ns: u64) -> Option<Frame<'_>> {
        let (ring, off) = self.advance()?;
        let r = &self.rings[ring as usize];
        Some(Frame {
            ts_ns,
            wire_len: r.frame_len as u32,
            data: &r.bytes[off as usize..off as usize + r.frame_len],
        })
    }

    /// Writes the next packet into its ring slot; returns (ring, offset).
    #[inline]
    fn advance(&mut self) -> Option<(u8, u32)> {
        if self.produced >= self.quota {
            return None;
        }
        self.produced += 1;
        let n = self.spec.hosts;
        // Flows are split among shards by index so shards never share one (t < local_flows
        // keeps j below n without a division on this path).
        let j = self.shard + self.t * self.shards;
        self.t += self.stride;
        if self.t >= self.local_flows {
            self.t -= self.local_flows;
        }
        let heavy = self.spec.heavy > 0 && self.produced.is_multiple_of(16);
        let (src_ip, dst_ip) = if heavy {
            let h = (self.produced / 16 % self.spec.heavy as u64) as u32;
            (0xac10_0001 + h, host_ip(0))
        } else if self.spec.random_src {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            (
                (self.rng >> 16) as u32,
                host_ip(if j + 1 == n { 0 } else { j + 1 }),
            )
        } else {
            (host_ip(j), host_ip(if j + 1 == n { 0 } else { j + 1 }))
        };
        let kinds = self.rings.len() as u32;
        let ring_index = if kinds == 1 { 0 } else { (j % kinds) as usize };
        let ring = &mut self.rings[ring_index];
        let size = ring.frame_len;
        let off = ring.next * size;
        ring.next += 1;
        if ring.next == ring.frames {
            ring.next = 0;
        }
        let l4 = ring.l4;
        let f = &mut ring.bytes[off..off + size];
        f[ETH + 12..ETH + 16].copy_from_slice(&src_ip.to_be_bytes());
        f[ETH + 16..ETH + 20].copy_from_slice(&dst_ip.to_be_bytes());
        // Ports spread flows; ports repeat past 60k hosts, addresses keep flows distinct.
        let sport = if heavy {
            999
        } else {
            1024 + (j & 0x7fff) as u16
        };
        f[l4..l4 + 2].copy_from_slice(&sport.to_be_bytes());
        Some((ring_index as u8, off as u32))
    }
}

/// Host j's address: 10.0.0.0/8 from 10.0.0.1 upward (then 11/8, ... for > 16M hosts).
fn host_ip(j: u32) -> u32 {
    0x0a00_0001u32.wrapping_add(j)
}

/// A stride near N·0.618 that is coprime with N, so `j → j + stride mod N` visits every flow.
fn coprime_stride(n: u32) -> u32 {
    if n <= 2 {
        return 1 % n.max(1);
    }
    let mut s = ((n as u64 * 618) / 1000).max(1) as u32;
    while gcd(s, n) != 1 {
        s += 1;
    }
    s
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The frame every packet of a payload kind starts from: Ethernet / IPv4 / UDP or TCP and the
/// payload, padded with zeros to `size` (IPv4 checksum left for [`fix_ipv4_checksum`]; the
/// per-packet address rewrite leaves it stale, which no tool here verifies).
fn template(kind: Payload, size: usize) -> Vec<u8> {
    let (tcp, dport, payload): (bool, u16, Vec<u8>) = match kind {
        Payload::Zero | Payload::Mix => (false, 80, Vec::new()),
        Payload::Http => (
            true,
            80,
            b"GET /index.html HTTP/1.1\r\nHost: www.example.com\r\nUser-Agent: sonde-synthetic/1.0\r\nAccept: */*\r\n\r\n".to_vec(),
        ),
        Payload::Tls => (true, 443, client_hello("www.example.com")),
        Payload::Dns => (false, 53, dns_query("www.example.com")),
    };
    let l4_len = if tcp { 20 } else { 8 };
    let len = (ETH + 20 + l4_len + payload.len()).max(size);
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (len - ETH) as u16;
    let ip = &mut f[ETH..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = if tcp { 6 } else { 17 };
    ip[20..22].copy_from_slice(&1024u16.to_be_bytes());
    ip[22..24].copy_from_slice(&dport.to_be_bytes());
    if tcp {
        ip[24..28].copy_from_slice(&1u32.to_be_bytes());
        ip[32] = 0x50; // 20-byte header
        ip[33] = 0x18; // PSH|ACK
        ip[34..36].copy_from_slice(&65535u16.to_be_bytes());
    } else {
        ip[24..26].copy_from_slice(&(ip_len - 20).to_be_bytes());
    }
    let at = 20 + l4_len;
    ip[at..at + payload.len()].copy_from_slice(&payload);
    f
}

/// A TLS 1.3 ClientHello (as browsers send: TLS 1.2 legacy version, SNI, groups, ALPN,
/// signature algorithms, supported versions, a key share) for the synthetic TLS flows.
fn client_hello(sni: &str) -> Vec<u8> {
    fn ext(out: &mut Vec<u8>, ty: u16, body: &[u8]) {
        out.extend_from_slice(&ty.to_be_bytes());
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(body);
    }
    let mut exts = Vec::new();
    let name = sni.as_bytes();
    let mut sni_body = ((name.len() + 3) as u16).to_be_bytes().to_vec();
    sni_body.push(0);
    sni_body.extend_from_slice(&(name.len() as u16).to_be_bytes());
    sni_body.extend_from_slice(name);
    ext(&mut exts, 0x0000, &sni_body);
    ext(
        &mut exts,
        0x000a,
        &[0, 6, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x18],
    );
    ext(&mut exts, 0x000b, &[1, 0]);
    ext(&mut exts, 0x0010, b"\x00\x0c\x02h2\x08http/1.1");
    ext(
        &mut exts,
        0x000d,
        &[0, 8, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01, 0x05, 0x03],
    );
    ext(&mut exts, 0x002b, &[4, 0x03, 0x04, 0x03, 0x03]);
    let mut share = vec![0, 36, 0x00, 0x1d, 0, 32];
    share.extend_from_slice(&[0x42; 32]);
    ext(&mut exts, 0x0033, &share);
    let mut hello = vec![0x03, 0x03];
    hello.extend_from_slice(&[0x5a; 32]); // random
    hello.push(0); // no session id
    let suites = [0x1301u16, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030];
    hello.extend_from_slice(&((suites.len() * 2) as u16).to_be_bytes());
    for c in suites {
        hello.extend_from_slice(&c.to_be_bytes());
    }
    hello.extend_from_slice(&[1, 0]); // compression: null
    hello.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    hello.extend_from_slice(&exts);
    let mut hs = vec![1];
    hs.extend_from_slice(&(hello.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&hello);
    let mut rec = vec![0x16, 0x03, 0x01];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// A DNS query (recursion desired) for the A record of `name`.
fn dns_query(name: &str) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// Fixes the IPv4 header checksum of a frame built by this module (for files written to disk).
pub fn fix_ipv4_checksum(frame: &mut [u8]) {
    let ip = &mut frame[ETH..ETH + 20];
    ip[10] = 0;
    ip[11] = 0;
    let mut sum: u32 = 0;
    for c in ip.chunks_exact(2) {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn parses_specs_and_rejects_bad_ones() {
        let s = SyntheticSpec::parse("hosts=1k,size=128,packets=2M").unwrap();
        assert_eq!((s.hosts, s.size, s.packets), (1000, 128, Some(2_000_000)));
        assert!(
            SyntheticSpec::parse("hosts=10,random-src")
                .unwrap()
                .random_src
        );
        for bad in [
            "",
            "size=64",
            "hosts=abc",
            "hosts=10,size=20",
            "hosts=10,color=red",
        ] {
            assert!(SyntheticSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn visits_every_flow_and_shards_partition_them() {
        for n in [2u32, 3, 100, 1000, 4096, 999] {
            let spec = SyntheticSpec {
                hosts: n,
                size: 64,
                packets: Some(n as u64 * 2),
                random_src: false,
                heavy: 0,
                seed: 1,
                payload: Payload::Zero,
            };
            let mut all = HashSet::new();
            for shard in 0..2 {
                let mut src = SyntheticSource::new(spec.clone(), shard, 2);
                let mut mine = HashSet::new();
                while let Some(f) = src.next(0) {
                    mine.insert(f.data[ETH + 12..ETH + 16].to_vec());
                }
                for m in &mine {
                    assert!(all.insert(m.clone()), "flow in two shards");
                }
            }
            assert_eq!(all.len(), n as usize, "n={n}");
        }
    }
}
