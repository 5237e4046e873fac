//! Cento's "dummy interface": frames forged in memory, so benchmarks measure the engine and not
//! the capture path.
//!
//! `hosts=N` hosts talk over about N flows (flow j goes from host j to host j+1, UDP), and frame
//! `size=S` bytes. Consecutive packets visit flows in a scattered order (a stride coprime with N)
//! so large host counts really miss the caches, as live traffic does. Frames come from a ring
//! (like a NIC ring) whose addresses and ports are rewritten for each packet. With `random-src`
//! every packet gets a random source address: a flood of new flows, for testing bounds.

use crate::error::CaptureError;
use crate::Frame;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntheticSpec {
    pub hosts: u32,
    pub size: u32,
    /// Packets to produce; `None` runs until stopped.
    pub packets: Option<u64>,
    pub random_src: bool,
    pub seed: u64,
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
            seed: 1,
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

pub struct SyntheticSource {
    spec: SyntheticSpec,
    ring: Vec<u8>,
    ring_frames: usize,
    next_frame: usize,
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
        // At most 32k frames (Cento's dummy ring) and at most 16 MiB.
        let ring_frames = (16usize << 20).div_ceil(size).clamp(64, 32_768);
        let mut ring = vec![0u8; ring_frames * size];
        for f in ring.chunks_exact_mut(size) {
            build_frame(f);
        }
        let shards = shards.max(1);
        let local_flows = (spec.hosts.saturating_sub(shard)).div_ceil(shards).max(1);
        let stride = coprime_stride(local_flows);
        SyntheticSource {
            rng: spec.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            spec,
            ring,
            ring_frames,
            next_frame: 0,
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

    /// The next frame, rewritten in place in the ring; `None` once the quota is reached.
    #[inline]
    pub fn next(&mut self, ts_ns: u64) -> Option<Frame<'_>> {
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
        let src_ip = if self.spec.random_src {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            (self.rng >> 16) as u32
        } else {
            host_ip(j)
        };
        let dst_ip = host_ip(if j + 1 == n { 0 } else { j + 1 });
        let size = self.spec.size as usize;
        let off = self.next_frame * size;
        self.next_frame += 1;
        if self.next_frame == self.ring_frames {
            self.next_frame = 0;
        }
        let f = &mut self.ring[off..off + size];
        f[ETH + 12..ETH + 16].copy_from_slice(&src_ip.to_be_bytes());
        f[ETH + 16..ETH + 20].copy_from_slice(&dst_ip.to_be_bytes());
        // Ports spread flows; ports repeat past 60k hosts, addresses keep flows distinct.
        let sport = 1024 + (j & 0x7fff) as u16;
        f[ETH + 20..ETH + 22].copy_from_slice(&sport.to_be_bytes());
        Some(Frame {
            ts_ns,
            wire_len: size as u32,
            data: &self.ring[off..off + size],
        })
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

/// Ethernet / IPv4 / UDP frame template filling the whole buffer (checksum computed for the
/// template; the per-packet address rewrite leaves it stale, which no tool here verifies).
fn build_frame(f: &mut [u8]) {
    let size = f.len();
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (size - ETH) as u16;
    let ip = &mut f[ETH..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[20..22].copy_from_slice(&1024u16.to_be_bytes());
    ip[22..24].copy_from_slice(&80u16.to_be_bytes());
    ip[24..26].copy_from_slice(&(ip_len - 20).to_be_bytes());
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
                seed: 1,
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
