//! Names learnt from DNS answers, per client: when a client resolved `www.netflix.com` to X
//! and later opens a flow to X without telling the name (no SNI, no Host), the flow still gets
//! that name and so its service. ntopng and nDPI (its "FPC" DNS cache) do the same.
//!
//! Shared by all shards (a DNS flow and the flow it announces hash to different shards), so it
//! is striped: a lookup locks one small stripe, once per flow when its label is settled, never
//! per packet. Bounded: a full stripe is emptied and the eviction counted.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const STRIPES: usize = 16;

/// (client address, answered address), both as 128-bit (IPv4 mapped).
type Key = (u128, u128);

#[derive(Debug)]
pub struct DnsCache {
    stripes: Vec<Mutex<HashMap<Key, Arc<str>>>>,
    per_stripe: usize,
    evictions: AtomicU64,
    /// Set by the first answer learnt: until then lookups take no lock (traffic without DNS).
    used: AtomicBool,
}

impl Default for DnsCache {
    fn default() -> Self {
        DnsCache::new(1 << 18)
    }
}

impl DnsCache {
    /// A cache of at most about `capacity` (client, address) pairs.
    pub fn new(capacity: usize) -> DnsCache {
        DnsCache {
            stripes: (0..STRIPES).map(|_| Mutex::new(HashMap::new())).collect(),
            per_stripe: capacity.div_ceil(STRIPES).max(1),
            evictions: AtomicU64::new(0),
            used: AtomicBool::new(false),
        }
    }

    fn stripe(&self, k: &Key) -> &Mutex<HashMap<Key, Arc<str>>> {
        let h = (k.0 ^ k.1.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
        &self.stripes[(h >> 120) as usize % STRIPES]
    }

    /// Remembers that `client` resolved `name` to each of `answers` (text addresses; names
    /// among them, e.g. CNAMEs, are skipped).
    pub fn learn(&self, client: u128, name: &str, answers: &[String]) {
        let name: Arc<str> = Arc::from(name);
        for a in answers {
            let Ok(ip) = a.parse::<IpAddr>() else {
                continue;
            };
            let k = (client, addr_u128(ip));
            let mut m = self.stripe(&k).lock().unwrap_or_else(|e| e.into_inner());
            if m.len() >= self.per_stripe && !m.contains_key(&k) {
                self.evictions.fetch_add(m.len() as u64, Ordering::Relaxed);
                m.clear();
            }
            m.insert(k, name.clone());
            self.used.store(true, Ordering::Relaxed);
        }
    }

    /// The name `client` resolved to `server`, if it did.
    pub fn name_of(&self, client: u128, server: u128) -> Option<Arc<str>> {
        if !self.used.load(Ordering::Relaxed) {
            return None;
        }
        let k = (client, server);
        let m = self.stripe(&k).lock().unwrap_or_else(|e| e.into_inner());
        m.get(&k).cloned()
    }

    /// Calls `f` with every (answered address, name) pair the cache holds, one stripe locked
    /// at a time: for readers (the API's host names), never for packets.
    pub fn for_each(&self, mut f: impl FnMut(u128, &Arc<str>)) {
        for s in &self.stripes {
            let m = s.lock().unwrap_or_else(|e| e.into_inner());
            for ((_, addr), name) in m.iter() {
                f(*addr, name);
            }
        }
    }

    /// Entries dropped because the cache was full.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.stripes
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An address as sonde keys it: IPv6 as is, IPv4 mapped (::ffff:a.b.c.d).
pub fn addr_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => (0xffff_u128 << 32) | u32::from(v4) as u128,
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// A flow address (16 bytes, IPv4 in the first 4) as sonde keys it.
pub fn flow_addr_u128(addr: &[u8; 16], ip_version: u8) -> u128 {
    if ip_version == 4 {
        (0xffff_u128 << 32) | u32::from_be_bytes([addr[0], addr[1], addr[2], addr[3]]) as u128
    } else {
        u128::from_be_bytes(*addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_per_client_and_stays_bounded() {
        let c = DnsCache::new(32);
        let client = addr_u128("192.168.1.2".parse().unwrap());
        let other = addr_u128("192.168.1.3".parse().unwrap());
        c.learn(
            client,
            "www.netflix.com",
            &["54.1.2.3".into(), "www.x.net".into(), "2a00::1".into()],
        );
        let server = addr_u128("54.1.2.3".parse().unwrap());
        assert_eq!(
            c.name_of(client, server).as_deref(),
            Some("www.netflix.com")
        );
        assert_eq!(
            c.name_of(client, addr_u128("2a00::1".parse().unwrap()))
                .as_deref(),
            Some("www.netflix.com")
        );
        // Another client did not ask.
        assert_eq!(c.name_of(other, server), None);
        for i in 0..10_000u32 {
            c.learn(
                client,
                "flood.example",
                &[std::net::Ipv4Addr::from(i).to_string()],
            );
        }
        assert!(c.len() <= 32 + STRIPES, "{}", c.len());
        assert!(c.evictions() > 0);
    }
}
