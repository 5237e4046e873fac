//! The hosts and flows the API answers from: one snapshot of every shard, shared by all the
//! requests of a second, and the page selection over it.
//!
//! A snapshot costs the shards time taken from packets (above 64k live flows, about 10 ms per
//! million flows and hosts: flow rows written during the shard's tick, hosts copied as of that
//! tick), so it is taken at most once per [`MAX_AGE`] however many requests come, and into the
//! buffers of the previous one, sized and touched on this side (a fresh allocation of that size
//! would cost the shard more in page faults than the copy).
//! Pages are chosen in O(n): filter, then `select_nth_unstable` for the first `offset + limit`,
//! then a sort of those only.

use sonde_flow::{FlowRow, Host};
use sonde_probe::ProbeView;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How old a snapshot may be when a request uses it: the console refreshes every second.
pub const MAX_AGE: Duration = Duration::from_secs(1);

pub struct Snapshot {
    pub taken: Instant,
    pub hosts: Vec<Host>,
    /// The live flows of each shard.
    pub flow_parts: Vec<Vec<FlowRow>>,
}

impl Snapshot {
    pub fn flows(&self) -> impl Iterator<Item = &FlowRow> {
        self.flow_parts.iter().flatten()
    }

    pub fn flow_slices(&self) -> Vec<&[FlowRow]> {
        self.flow_parts.iter().map(Vec::as_slice).collect()
    }
}

/// The current snapshot, refreshed on demand by the first request that finds it too old.
pub struct Cache {
    view: ProbeView,
    // An async mutex: requests that arrive during a refresh wait for it instead of starting
    // their own.
    slot: tokio::sync::Mutex<Option<Arc<Snapshot>>>,
}

impl Cache {
    pub fn new(view: ProbeView) -> Cache {
        Cache {
            view,
            slot: tokio::sync::Mutex::new(None),
        }
    }

    pub async fn get(&self) -> Result<Arc<Snapshot>, String> {
        let mut slot = self.slot.lock().await;
        if let Some(s) = slot.as_ref().filter(|s| s.taken.elapsed() < MAX_AGE) {
            return Ok(s.clone());
        }
        // Reuse the old buffers unless a request still reads them.
        let (hosts, flows) = match slot.take().and_then(|a| Arc::try_unwrap(a).ok()) {
            Some(old) => (old.hosts, old.flow_parts),
            None => (Vec::new(), Vec::new()),
        };
        let view = self.view.clone();
        let fresh = tokio::task::spawn_blocking(move || Snapshot {
            hosts: view.snapshot_hosts_into(hosts),
            flow_parts: view.snapshot_flows_into(flows),
            taken: Instant::now(),
        })
        .await
        .map_err(|e| format!("snapshot: {e}"))?;
        let fresh = Arc::new(fresh);
        *slot = Some(fresh.clone());
        Ok(fresh)
    }
}

thread_local! {
    /// The (sort key, position) pairs of the last page, kept to spare a large allocation per
    /// request (the server runs on one thread).
    static SCRATCH: std::cell::RefCell<Vec<(u64, u32)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The items of `parts` (taken as one list) that pass `keep`, how many passed, and those from
/// `offset` to `offset + limit` by `key` (largest first when `desc`); equal keys keep the
/// order of the list.
pub fn page<'a, T>(
    parts: &[&'a [T]],
    keep: impl Fn(&T) -> bool,
    key: impl Fn(&T) -> u64,
    desc: bool,
    offset: usize,
    limit: usize,
) -> (usize, Vec<&'a T>) {
    SCRATCH.with_borrow_mut(|m| {
        m.clear();
        let mut base = 0u32;
        for part in parts {
            for (i, t) in part.iter().enumerate() {
                if keep(t) {
                    let k = key(t);
                    m.push((if desc { !k } else { k }, base + i as u32));
                }
            }
            base += part.len() as u32;
        }
        let total = m.len();
        let end = offset.saturating_add(limit).min(total);
        if end == 0 {
            return (total, Vec::new());
        }
        // Comparing plain integer pairs: ten times faster than comparing the items.
        if end < total {
            m.select_nth_unstable(end - 1);
        }
        let top = &mut m[..end];
        top.sort_unstable();
        let rows = top[offset.min(end)..]
            .iter()
            .map(|&(_, at)| {
                let mut at = at as usize;
                let mut part = 0;
                while at >= parts[part].len() {
                    at -= parts[part].len();
                    part += 1;
                }
                &parts[part][at]
            })
            .collect();
        (total, rows)
    })
}

#[cfg(test)]
mod tests {
    use super::page;

    #[test]
    fn pages_equal_a_stable_full_sort() {
        // (key, id): many equal keys, so the order of ties is checked too.
        let v: Vec<(u64, u32)> = (0..1000u32)
            .map(|i| (u64::from(i * 7919 % 101), i))
            .collect();
        let (a, b) = v.split_at(377);
        for desc in [true, false] {
            let mut sorted: Vec<(u64, u32)> = v.iter().copied().filter(|x| x.1 % 3 != 0).collect();
            sorted.sort_by(|x, y| if desc { y.0.cmp(&x.0) } else { x.0.cmp(&y.0) });
            for (offset, limit) in [(0, 10), (5, 50), (600, 100), (660, 50), (0, 5000), (700, 1)] {
                let (total, p) = page(&[a, b], |x| x.1 % 3 != 0, |x| x.0, desc, offset, limit);
                assert_eq!(total, sorted.len());
                let want: Vec<(u64, u32)> =
                    sorted.iter().skip(offset).take(limit).copied().collect();
                let got: Vec<(u64, u32)> = p.into_iter().copied().collect();
                assert_eq!(got, want, "{desc} {offset} {limit}");
            }
        }
    }
}

/// A search in the text form of addresses (`10.1.` finds 10.1.x.x and 110.1.x.x, as a
/// substring does). IPv4 addresses are written into a stack buffer: no allocation per host.
pub struct AddrText {
    needle: String,
}

impl AddrText {
    pub fn new(needle: &str) -> AddrText {
        AddrText {
            needle: needle.to_ascii_lowercase(),
        }
    }

    pub fn matches(&self, addr: &[u8; 16], version: u8) -> bool {
        if version == 4 {
            let mut buf = [0u8; 15];
            let mut n = 0;
            for (i, octet) in addr[..4].iter().enumerate() {
                if i > 0 {
                    buf[n] = b'.';
                    n += 1;
                }
                let o = *octet;
                if o >= 100 {
                    buf[n] = b'0' + o / 100;
                    n += 1;
                }
                if o >= 10 {
                    buf[n] = b'0' + (o / 10) % 10;
                    n += 1;
                }
                buf[n] = b'0' + o % 10;
                n += 1;
            }
            let hay = &buf[..n];
            let needle = self.needle.as_bytes();
            needle.len() <= n && hay.windows(needle.len()).any(|w| w == needle)
        } else {
            std::net::Ipv6Addr::from(*addr)
                .to_string()
                .contains(&self.needle)
        }
    }
}

#[cfg(test)]
mod filter_tests {
    use super::AddrText;
    use sonde_analytics::Network as Net;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut x = [0u8; 16];
        x[..4].copy_from_slice(&a);
        x
    }

    #[test]
    fn prefixes_match_by_bits() {
        let n = Net::parse_prefix("10.1.0.0/15").unwrap();
        assert!(n.contains_addr(&v4([10, 1, 2, 3]), 4));
        assert!(n.contains_addr(&v4([10, 0, 2, 3]), 4));
        assert!(!n.contains_addr(&v4([10, 2, 0, 0]), 4));
        assert!(!n.contains_addr(&v4([10, 1, 2, 3]), 6));
        let one = Net::parse_prefix("192.168.1.7").unwrap();
        assert!(
            one.contains_addr(&v4([192, 168, 1, 7]), 4)
                && !one.contains_addr(&v4([192, 168, 1, 8]), 4)
        );
        let six = Net::parse_prefix("2001:db8::/32").unwrap();
        let a: std::net::Ipv6Addr = "2001:db8:1::5".parse().unwrap();
        assert!(six.contains_addr(&a.octets(), 6));
        assert!(Net::parse_prefix("10.0.0.0/33").is_err() && Net::parse_prefix("host").is_err());
    }

    #[test]
    fn text_search_equals_a_substring_of_the_address() {
        for (addr, needle) in [
            ([10, 1, 0, 200], "0.20"),
            ([110, 1, 2, 3], "10.1."),
            ([9, 9, 9, 9], "9.9.9.9"),
        ] {
            let text = std::net::Ipv4Addr::from(addr).to_string();
            assert_eq!(
                AddrText::new(needle).matches(&v4(addr), 4),
                text.contains(needle)
            );
        }
        assert!(!AddrText::new("10.2").matches(&v4([10, 1, 2, 3]), 4));
    }
}

/// Answers already given from the current snapshot, by request: the console asks the same few
/// pages over and over, and each full scan of a million rows costs the shards memory bandwidth.
#[derive(Default)]
pub struct Memo {
    inner: std::sync::Mutex<(
        Option<Instant>,
        std::collections::HashMap<String, serde_json::Value>,
    )>,
}

/// Distinct requests remembered per snapshot; more start the list afresh.
const MEMO_MAX: usize = 256;

impl Memo {
    pub fn get(&self, snap: &Snapshot, request: &str) -> Option<serde_json::Value> {
        let m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (m.0 == Some(snap.taken)).then(|| m.1.get(request).cloned())?
    }

    pub fn put(&self, snap: &Snapshot, request: String, answer: serde_json::Value) {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if m.0 != Some(snap.taken) || m.1.len() >= MEMO_MAX {
            m.1.clear();
            m.0 = Some(snap.taken);
        }
        m.1.insert(request, answer);
    }
}

#[cfg(test)]
mod memo_tests {
    use super::{Memo, Snapshot};
    use std::time::{Duration, Instant};

    #[test]
    fn answers_are_kept_for_their_snapshot_only() {
        let at = |t| Snapshot {
            taken: t,
            hosts: Vec::new(),
            flow_parts: Vec::new(),
        };
        let now = Instant::now();
        let (a, b) = (at(now), at(now + Duration::from_millis(1)));
        let memo = Memo::default();
        memo.put(&a, "hosts?limit=5".into(), serde_json::json!(1));
        assert_eq!(memo.get(&a, "hosts?limit=5"), Some(serde_json::json!(1)));
        assert_eq!(memo.get(&a, "hosts?limit=6"), None);
        assert_eq!(memo.get(&b, "hosts?limit=5"), None);
        memo.put(&b, "flows?".into(), serde_json::json!(2));
        assert_eq!(memo.get(&a, "hosts?limit=5"), None);
    }
}
