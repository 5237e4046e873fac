//! `--data-dir`: the host cache thread. Shards send it the hosts they purge (and, at the end,
//! every host they still hold) and the keys of hosts they create; it answers each shard with
//! the counters of its returning hosts ([`sonde_history::hostcache`]).
//!
//! A shard's last message is a `Sync`: the thread answers every lookup before it, then says
//! `Synced`, so no returning host's counters are in flight when the shard hands over its final
//! hosts. Counters the thread cannot deliver (the shard is gone) go back into the cache.
//!
//! With `--hosts-out` too, the purged hosts' records are written from here, with the counters
//! the cache holds once each is added in: a host's record then covers all its visits however
//! the shards' lookups and purges raced (with several shards, one may purge a host while
//! another, which has flows of it too, asks for it). For the same reason the run, not the
//! shards, hands over the last hosts then (`Final`, merged across shards, each host once), and
//! their records take the counters the cache holds once they are in.

use crossbeam_channel::{Receiver, Sender};
use sonde_flow::host::HostKey;
use sonde_flow::Host;
use sonde_history::hostcache::{CachedHost, HostCache};
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub(crate) enum CacheMsg {
    /// Hosts that left a shard's memory (purged: written to `--hosts-out` from here).
    Purged(Vec<Host>),
    /// Hosts handed back (a shard's last hosts, or counters that came back too late).
    Put(Vec<Host>),
    /// The run's last hosts, merged across shards, kept as `Put` keeps them; answered with
    /// them carrying the counters of all their visits.
    Final(Vec<Host>, Sender<Vec<Host>>),
    /// Hosts a shard just created: are they returning?
    Lookup(usize, Vec<HostKey>),
    /// Answer everything asked before, then `Synced`.
    Sync(usize),
}

pub(crate) enum CacheReply {
    Found(Vec<(HostKey, CachedHost)>),
    Synced,
}

/// What the host cache did, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostCacheReport {
    /// Hosts written to the cache during the run, and given back to returning hosts.
    pub stored: u64,
    pub restored: u64,
    /// Hosts in the cache at the end.
    pub cached: u64,
    /// Hosts dropped from the cache, seen longest ago, to keep it within its capacity.
    pub evicted: u64,
}

pub(crate) fn cached(h: &Host) -> CachedHost {
    CachedHost {
        mac: h.has_mac.then_some(h.mac),
        sent_pkts: h.sent_pkts,
        sent_bytes: h.sent_bytes,
        rcvd_pkts: h.rcvd_pkts,
        rcvd_bytes: h.rcvd_bytes,
        first_ns: h.first_ns,
        last_ns: h.last_ns,
        flows_as_client: h.flows_as_client,
        flows_as_server: h.flows_as_server,
    }
}

/// `h` with the counters of all its visits, `c` (the cache's, this stay included); what the
/// cache does not keep (retransmissions, locality, live flows) stays `h`'s.
fn with_totals(h: &Host, c: &CachedHost) -> Host {
    let mut t = host_from_cache(h.key, c);
    if h.has_mac {
        (t.mac, t.has_mac) = (h.mac, true);
    }
    if t.first_ns == 0 {
        t.first_ns = h.first_ns;
    }
    t.last_ns = t.last_ns.max(h.last_ns);
    Host {
        live: h.live,
        active_flows: h.active_flows,
        retransmits_sent: h.retransmits_sent,
        retransmits_rcvd: h.retransmits_rcvd,
        local: h.local,
        ..t
    }
}

/// Adds what a host did before it left memory to its live entry.
pub(crate) fn restore(h: &mut Host, c: &CachedHost) {
    if !h.has_mac {
        if let Some(m) = c.mac {
            h.mac = m;
            h.has_mac = true;
        }
    }
    h.sent_pkts += c.sent_pkts;
    h.sent_bytes += c.sent_bytes;
    h.rcvd_pkts += c.rcvd_pkts;
    h.rcvd_bytes += c.rcvd_bytes;
    if c.first_ns != 0 {
        h.first_ns = h.first_ns.min(c.first_ns);
    }
    h.flows_as_client += c.flows_as_client;
    h.flows_as_server += c.flows_as_server;
}

/// A cached host as a host that is not in memory (one purged again before its counters came
/// back): all the cache keeps, first and last seen included, so that putting it back loses
/// nothing ([`restore`] into a fresh host would leave both at 0: the host would look seen in
/// 1970 and be the first the cache evicts).
pub(crate) fn host_from_cache(key: HostKey, c: &CachedHost) -> Host {
    Host {
        key,
        has_mac: c.mac.is_some(),
        mac: c.mac.unwrap_or_default(),
        sent_pkts: c.sent_pkts,
        sent_bytes: c.sent_bytes,
        rcvd_pkts: c.rcvd_pkts,
        rcvd_bytes: c.rcvd_bytes,
        first_ns: c.first_ns,
        last_ns: c.last_ns,
        flows_as_client: c.flows_as_client,
        flows_as_server: c.flows_as_server,
        ..Host::default()
    }
}

/// Hosts per message when a shard hands over all it holds at the end.
pub(crate) const HANDOVER_CHUNK: usize = 2048;

type CacheThread = JoinHandle<Result<HostCacheReport, String>>;

/// Opens the cache of `dir`, holding at most `max_entries` hosts, and starts its thread;
/// `replies[i]` answers shard i; purged hosts go to `hosts_out` (`--hosts-out`'s writer).
pub(crate) fn start(
    dir: &Path,
    max_entries: usize,
    replies: Vec<Sender<CacheReply>>,
    hosts_out: Option<Sender<Vec<Host>>>,
) -> Result<(Sender<CacheMsg>, CacheThread), String> {
    let cache = HostCache::open_with_capacity(dir, max_entries)
        .map_err(|e| format!("--data-dir {}: {e}", dir.display()))?;
    // Messages, not hosts: a shard's last hand-over is up to HANDOVER_CHUNK hosts a message,
    // so at most 256 × 2048 × 104 B (54 MB) of hosts wait here while the log is written.
    let (tx, rx) = crossbeam_channel::bounded::<CacheMsg>(256);
    let h = std::thread::Builder::new()
        .name("host-cache".into())
        .spawn(move || run(cache, rx, replies, hosts_out))
        .map_err(|e| format!("cannot start the host cache thread: {e}"))?;
    Ok((tx, h))
}

/// Keeps `hosts` in the cache; returns them with the counters of all their visits.
fn put_totalled(
    cache: &mut HostCache,
    hosts: &[Host],
) -> Result<Vec<Host>, sonde_history::store::StoreError> {
    let mut rows = Vec::with_capacity(hosts.len());
    cache.put_many_with(hosts.iter().map(|h| (&h.key, cached(h))), |c| {
        rows.push(with_totals(&hosts[rows.len()], c));
    })?;
    Ok(rows)
}

fn run(
    mut cache: HostCache,
    rx: Receiver<CacheMsg>,
    replies: Vec<Sender<CacheReply>>,
    mut hosts_out: Option<Sender<Vec<Host>>>,
) -> Result<HostCacheReport, String> {
    let err = |e: sonde_history::store::StoreError| format!("host cache: {e}");
    let mut last_checkpoint = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(CacheMsg::Purged(hosts)) => match &hosts_out {
                Some(tx) => {
                    let rows = put_totalled(&mut cache, &hosts).map_err(err)?;
                    if tx.send(rows).is_err() {
                        hosts_out = None;
                    }
                }
                None => cache
                    .put_many(hosts.iter().map(|h| (&h.key, cached(h))))
                    .map_err(err)?,
            },
            // Each host once: what the cache adds is its remainder (visits purged by a shard
            // and not given back), whatever it evicts meanwhile.
            Ok(CacheMsg::Final(hosts, reply)) => match put_totalled(&mut cache, &hosts) {
                Ok(rows) => {
                    let _ = reply.send(rows);
                }
                Err(e) => {
                    // The records keep what the shards held; the error ends the run.
                    let _ = reply.send(hosts);
                    return Err(err(e));
                }
            },
            Ok(CacheMsg::Put(hosts)) => {
                cache
                    .put_many(hosts.iter().map(|h| (&h.key, cached(h))))
                    .map_err(err)?;
            }
            Ok(CacheMsg::Lookup(shard, keys)) => {
                let mut found = Vec::new();
                for k in keys {
                    if let Some(c) = cache.take(&k).map_err(err)? {
                        found.push((k, c));
                    }
                }
                if !found.is_empty() {
                    let sent = replies
                        .get(shard)
                        .map(|tx| tx.send(CacheReply::Found(found.clone())));
                    if !matches!(sent, Some(Ok(()))) {
                        // Nobody to give them to: they stay cached.
                        cache
                            .put_many(found.iter().map(|(k, c)| (k, *c)))
                            .map_err(err)?;
                    }
                }
            }
            Ok(CacheMsg::Sync(shard)) => {
                if let Some(tx) = replies.get(shard) {
                    let _ = tx.send(CacheReply::Synced);
                }
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        }
        if last_checkpoint.elapsed() >= Duration::from_secs(1) {
            cache.checkpoint().map_err(err)?;
            last_checkpoint = Instant::now();
        }
    }
    cache.checkpoint().map_err(err)?;
    Ok(HostCacheReport {
        stored: cache.stored,
        restored: cache.restored,
        cached: cache.len() as u64,
        evicted: cache.evicted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_host_put_back_keeps_all_the_cache_knew() {
        let with_mac = CachedHost {
            mac: Some([2, 0, 0, 0, 0, 7]),
            sent_pkts: 3,
            sent_bytes: 300,
            rcvd_pkts: 4,
            rcvd_bytes: 400,
            first_ns: 1_000,
            last_ns: 9_000,
            flows_as_client: 2,
            flows_as_server: 1,
        };
        let without = CachedHost {
            mac: None,
            ..with_mac
        };
        for c in [with_mac, without] {
            let h = host_from_cache(HostKey::default(), &c);
            assert_eq!(cached(&h), c);
        }
    }
}
