//! Canonical bidirectional flow keys and their hash.

use sonde_wire::Decoded;

/// A flow's identity. Endpoints are stored in canonical order (the smaller (address, port) pair
/// first), so both directions of a conversation produce the same key and the same hash.
#[derive(Clone, Copy, Debug, Default, Eq)]
#[repr(C)]
pub struct FlowKey {
    pub addr_a: [u8; 16],
    pub addr_b: [u8; 16],
    pub port_a: u16,
    pub port_b: u16,
    pub proto: u8,
    pub ip_version: u8,
    pub vlan: u16,
}

/// Direction of a packet relative to the canonical key: 0 = a→b, 1 = b→a.
pub type Dir = usize;

impl PartialEq for FlowKey {
    /// Compared as five 64-bit words: the hot-path comparison of every lookup.
    #[inline(always)]
    fn eq(&self, o: &FlowKey) -> bool {
        let (a, b) = (self.words(), o.words());
        ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4])) == 0
    }
}

impl std::hash::Hash for FlowKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.words().hash(state)
    }
}

/// A flow key seen from its client: what every output writes as source and destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ends<'a> {
    pub client_addr: &'a [u8; 16],
    pub server_addr: &'a [u8; 16],
    pub client_port: u16,
    pub server_port: u16,
}

impl FlowKey {
    /// The key seen from the client, whose direction is `client` (0: a sent first).
    #[inline]
    pub fn ends(&self, client: Dir) -> Ends<'_> {
        if client == 0 {
            Ends {
                client_addr: &self.addr_a,
                server_addr: &self.addr_b,
                client_port: self.port_a,
                server_port: self.port_b,
            }
        } else {
            Ends {
                client_addr: &self.addr_b,
                server_addr: &self.addr_a,
                client_port: self.port_b,
                server_port: self.port_a,
            }
        }
    }

    #[inline(always)]
    fn words(&self) -> [u64; 5] {
        let w = |b: &[u8; 16], i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_ne_bytes(x)
        };
        [
            w(&self.addr_a, 0),
            w(&self.addr_a, 8),
            w(&self.addr_b, 0),
            w(&self.addr_b, 8),
            self.port_a as u64
                | (self.port_b as u64) << 16
                | (self.proto as u64) << 32
                | (self.ip_version as u64) << 40
                | (self.vlan as u64) << 48,
        ]
    }

    /// Builds the canonical key of a decoded packet and the packet's direction.
    #[inline(always)]
    pub fn from_packet(d: &Decoded) -> (FlowKey, Dir) {
        // Compared as big-endian integers: the same order as comparing the byte arrays.
        let (s, t) = (u128::from_be_bytes(d.src), u128::from_be_bytes(d.dst));
        let src_first = s < t || (s == t && d.sport <= d.dport);
        let (a, pa, b, pb, dir) = if src_first {
            (d.src, d.sport, d.dst, d.dport, 0)
        } else {
            (d.dst, d.dport, d.src, d.sport, 1)
        };
        (
            FlowKey {
                addr_a: a,
                addr_b: b,
                port_a: pa,
                port_b: pb,
                proto: d.proto,
                ip_version: d.ip_version,
                vlan: d.vlan,
            },
            dir,
        )
    }

    /// 64-bit hash: the low 32 bits place the key in a shard's table, the high 32 bits pick
    /// the shard, so the two uses do not correlate.
    #[inline(always)]
    pub fn hash(&self) -> u64 {
        #[inline(always)]
        fn w(b: &[u8; 16], i: usize) -> u64 {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        }
        #[inline(always)]
        fn mix(a: u64, b: u64) -> u64 {
            let r = (a as u128).wrapping_mul(b as u128);
            (r as u64) ^ ((r >> 64) as u64)
        }
        const K0: u64 = 0xa076_1d64_78bd_642f;
        const K1: u64 = 0xe703_7ed1_a0b4_28db;
        const K2: u64 = 0x8ebc_6af0_9c88_c6e3;
        let tail = (self.port_a as u64)
            | (self.port_b as u64) << 16
            | (self.proto as u64) << 32
            | (self.vlan as u64) << 40;
        let h = if self.ip_version == 4 {
            let v4 = (w(&self.addr_a, 0) & 0xffff_ffff) | (w(&self.addr_b, 0) << 32);
            mix(v4 ^ K0, tail ^ K1)
        } else {
            let h1 = mix(w(&self.addr_a, 0) ^ K0, w(&self.addr_a, 8) ^ K1);
            let h2 = mix(w(&self.addr_b, 0) ^ K2, w(&self.addr_b, 8) ^ K0);
            mix(h1 ^ tail, h2 ^ K1)
        };
        mix(h ^ K2, K1 ^ 0x6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_directions_share_key_and_hash() {
        let mut d = Decoded {
            ip_version: 4,
            proto: 6,
            sport: 1234,
            dport: 80,
            ..Default::default()
        };
        d.src[..4].copy_from_slice(&[10, 0, 0, 2]);
        d.dst[..4].copy_from_slice(&[10, 0, 0, 1]);
        let (k1, dir1) = FlowKey::from_packet(&d);
        std::mem::swap(&mut d.src, &mut d.dst);
        std::mem::swap(&mut d.sport, &mut d.dport);
        let (k2, dir2) = FlowKey::from_packet(&d);
        assert_eq!(k1, k2);
        assert_eq!(k1.hash(), k2.hash());
        assert_ne!(dir1, dir2);
        // Same addresses with ports swapped between them is a different flow.
        d.sport = 1234;
        d.dport = 80;
        assert_ne!(FlowKey::from_packet(&d).0.hash(), k1.hash());
    }
}
