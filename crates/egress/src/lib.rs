//! Egress: nProbe Cento's place between the wire and the tools behind it. The packets of
//! chosen flows go out, to another interface or to a ring of pcap files, and the rest are
//! shunted, so an IDS or a packet recorder sees only what matters.
//!
//! What is chosen: a frame must pass every selector given. `--egress-bpf` (a tcpdump
//! expression) and `--egress-hosts` (addresses and networks, either end) are decided on the
//! frame itself, as soon as it arrives. `--egress-app` (the flow's protocol or application)
//! and `--egress-shunt-after N` (the first N packets of each flow) need the frame's flow as it
//! stands after the frame, so such frames wait, copied, until the engine has accounted them
//! (a batch of at most a few dozen packets) and are then decided in arrival order.
//!
//! Every frame offered is counted once: forwarded, shunted (not chosen), or dropped (chosen,
//! but a destination could not take it: a full socket queue, a disk error).

pub mod config;
pub mod iface;
pub mod ring;

pub use config::{parse_apps, parse_hosts, EgressConfig, Undecided};

use sonde_capture::{LinkFilters, OfflineFilter};
use sonde_flow::FlowVerdict;
use sonde_wire::LinkType;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// What egress did with the frames offered to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EgressCounts {
    pub offered: u64,
    pub forwarded: u64,
    /// Captured bytes of the forwarded frames.
    pub forwarded_bytes: u64,
    pub shunted: u64,
    pub dropped: u64,
}

impl EgressCounts {
    fn add(&mut self, o: &EgressCounts) {
        self.offered += o.offered;
        self.forwarded += o.forwarded;
        self.forwarded_bytes += o.forwarded_bytes;
        self.shunted += o.shunted;
        self.dropped += o.dropped;
    }
}

/// The end of a run: the counts and the ring's files still on disk.
#[derive(Clone, Debug, Default)]
pub struct EgressReport {
    pub counts: EgressCounts,
    pub files: Vec<PathBuf>,
    /// Ring files deleted to keep the ring at `--egress-files`.
    pub files_deleted: u64,
    /// The first error each destination met (the frames are in `dropped`).
    pub errors: Vec<String>,
}

/// Egress for a whole run: the settings, and what every shard published.
#[derive(Clone)]
pub struct Egress {
    cfg: Arc<EgressConfig>,
    /// The BPF program of the selectors on the frame (`--egress-bpf` and `--egress-hosts`).
    expr: Option<String>,
    shared: Arc<Mutex<Published>>,
}

#[derive(Default)]
struct Published {
    shards: Vec<EgressCounts>,
    files: Vec<PathBuf>,
    files_deleted: u64,
    errors: Vec<String>,
}

impl Egress {
    /// Checks the settings (the BPF expression compiles, the directory is writable, the
    /// interface can be opened) so a mistake stops the run before it starts.
    pub fn start(cfg: EgressConfig) -> Result<Egress, String> {
        if cfg.pcap_dir.is_none() && cfg.iface.is_none() {
            return Err(
                "egress needs a destination: --egress-pcap DIR (a ring of pcap files) or \
                 --egress-iface IFACE"
                    .into(),
            );
        }
        let expr = cfg.bpf_expr();
        if let Some(e) = &expr {
            OfflineFilter::compile(e, LinkType::Ethernet)
                .map_err(|e| format!("--egress-bpf/--egress-hosts: {e}"))?;
        }
        if let Some(dir) = &cfg.pcap_dir {
            check_dir(dir)?;
        }
        if let Some(name) = &cfg.iface {
            iface::IfaceTx::open(name)?;
        }
        Ok(Egress {
            cfg: Arc::new(cfg),
            expr,
            shared: Arc::default(),
        })
    }

    pub fn config(&self) -> &EgressConfig {
        &self.cfg
    }

    /// Egress for shard `index` (its own socket, its own ring files).
    pub fn shard(&self, index: usize) -> Result<ShardEgress, String> {
        let tx = match &self.cfg.iface {
            Some(name) => Some(iface::IfaceTx::open(name)?),
            None => None,
        };
        let ring = self
            .cfg
            .pcap_dir
            .as_ref()
            .map(|d| ring::PcapRing::new(d, index, self.cfg.file_bytes, self.cfg.files));
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if shared.shards.len() <= index {
            shared.shards.resize(index + 1, EgressCounts::default());
        }
        Ok(ShardEgress {
            index,
            cfg: self.cfg.clone(),
            filters: LinkFilters::new(self.expr.clone(), None),
            ring,
            tx,
            held: VecDeque::new(),
            spare: Vec::new(),
            counts: EgressCounts::default(),
            errors: Vec::new(),
            shared: self.shared.clone(),
        })
    }

    /// What every shard counted so far.
    pub fn counts(&self) -> EgressCounts {
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let mut total = EgressCounts::default();
        for c in &shared.shards {
            total.add(c);
        }
        total
    }

    /// The end of the run (after every shard finished).
    pub fn report(&self) -> EgressReport {
        let counts = self.counts();
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        EgressReport {
            counts,
            files: shared.files.clone(),
            files_deleted: shared.files_deleted,
            errors: shared.errors.clone(),
        }
    }
}

fn check_dir(dir: &std::path::Path) -> Result<(), String> {
    if !dir.is_dir() {
        return Err(format!(
            "--egress-pcap {}: not a directory (create it first: mkdir -p {})",
            dir.display(),
            dir.display()
        ));
    }
    let probe = dir.join(format!(".sonde-egress-check-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .map_err(|e| format!("--egress-pcap {}: cannot write there: {e}", dir.display()))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// A frame waiting for its flow's verdict.
struct Held {
    link: LinkType,
    ts_ns: u64,
    wire_len: u32,
    /// The frame (empty when the frame-level selectors already shunted it).
    data: Vec<u8>,
    /// Passed `--egress-bpf`/`--egress-hosts`.
    frame_ok: bool,
    /// An IP packet the engine accounts: a verdict will come for it.
    in_flow: bool,
}

/// One shard's egress: its selectors, destinations and counts.
pub struct ShardEgress {
    index: usize,
    cfg: Arc<EgressConfig>,
    filters: LinkFilters,
    ring: Option<ring::PcapRing>,
    tx: Option<iface::IfaceTx>,
    /// Frames offered but not decided yet, in arrival order.
    held: VecDeque<Held>,
    /// Buffers of decided frames, used again.
    spare: Vec<Vec<u8>>,
    counts: EgressCounts,
    errors: Vec<String>,
    shared: Arc<Mutex<Published>>,
}

impl ShardEgress {
    /// Whether frames wait for the engine's verdicts ([`sonde_flow::Engine::record_verdicts`]).
    pub fn needs_flow(&self) -> bool {
        self.cfg.needs_flow()
    }

    /// Offers one frame, right after the engine took it; `in_flow` is what
    /// [`sonde_flow::Engine::push_frame`] returned.
    #[inline]
    pub fn offer(&mut self, link: LinkType, ts_ns: u64, wire_len: u32, data: &[u8], in_flow: bool) {
        self.counts.offered += 1;
        let frame_ok = self.filters.accepts(link, data, wire_len);
        if !self.needs_flow() || (self.held.is_empty() && !in_flow) {
            // Nothing to wait for, and nothing ahead of it to keep the order with.
            if self.select(frame_ok, None) {
                self.forward(link, ts_ns, wire_len, data);
            } else {
                self.counts.shunted += 1;
            }
            return;
        }
        let mut buf = self.spare.pop().unwrap_or_default();
        if frame_ok {
            buf.extend_from_slice(data);
        }
        self.held.push_back(Held {
            link,
            ts_ns,
            wire_len,
            data: buf,
            frame_ok,
            in_flow,
        });
    }

    /// Decides the held frames whose verdicts have come (the engine accounted them), in
    /// order, and removes the verdicts used.
    pub fn settle(&mut self, verdicts: Option<&mut Vec<FlowVerdict>>) {
        let mut used = 0;
        let empty = &mut Vec::new();
        let verdicts = verdicts.unwrap_or(empty);
        while let Some(h) = self.held.front() {
            let verdict = if h.in_flow {
                match verdicts.get(used) {
                    Some(v) => {
                        used += 1;
                        Some(*v)
                    }
                    None => break, // its batch is not accounted yet
                }
            } else {
                None
            };
            let h = self.held.pop_front().expect("front exists");
            if self.select(h.frame_ok, verdict) {
                self.forward(h.link, h.ts_ns, h.wire_len, &h.data);
            } else {
                self.counts.shunted += 1;
            }
            let mut buf = h.data;
            buf.clear();
            if self.spare.len() < 256 {
                self.spare.push(buf);
            }
        }
        verdicts.drain(..used);
    }

    /// Whether a frame goes out: it passed the frame's selectors, and its flow (if the
    /// selectors look at it) matches.
    fn select(&self, frame_ok: bool, v: Option<FlowVerdict>) -> bool {
        if !frame_ok {
            return false;
        }
        let cfg = &*self.cfg;
        let flow = v.filter(|v| v.flowed);
        if !cfg.apps.is_empty() {
            // A frame in no flow (not IP, or the flow table was full) has no application.
            let Some(v) = flow else { return false };
            let hit = cfg.apps.iter().any(|&a| a == v.l7.proto || a == v.l7.app);
            if !hit && (v.decided || cfg.undecided == Undecided::Shunt) {
                return false;
            }
        }
        if cfg.shunt_after > 0 {
            if let Some(v) = flow {
                if v.packets > cfg.shunt_after {
                    return false;
                }
            }
        }
        true
    }

    fn forward(&mut self, link: LinkType, ts_ns: u64, wire_len: u32, data: &[u8]) {
        let mut ok = true;
        if let Some(ring) = self.ring.as_mut() {
            if let Err(e) = ring.write(link, ts_ns, wire_len, data) {
                ok = false;
                note(&mut self.errors, format!("--egress-pcap: {e}"));
            }
        }
        if let Some(tx) = &self.tx {
            if link != LinkType::Ethernet {
                ok = false;
                note(
                    &mut self.errors,
                    format!(
                        "--egress-iface {}: only Ethernet frames can be sent, this input's are \
                         {link:?} (use --egress-pcap for them)",
                        tx.name
                    ),
                );
            } else if let Err(e) = tx.send(data) {
                ok = false;
                note(&mut self.errors, format!("--egress-iface {}: {e}", tx.name));
            }
        }
        if ok {
            self.counts.forwarded += 1;
            self.counts.forwarded_bytes += data.len() as u64;
        } else {
            self.counts.dropped += 1;
        }
    }

    /// Makes this shard's counts visible to [`Egress::counts`] (the API, `/metrics`); the
    /// shard calls it at its housekeeping, not per packet.
    pub fn publish(&self) {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = shared.shards.get_mut(self.index) {
            *slot = self.counts;
        }
    }

    /// The end of the shard: decides what is still held (the engine accounted everything
    /// by now), closes the ring's file and hands its list over.
    pub fn finish(&mut self, verdicts: Option<&mut Vec<FlowVerdict>>) {
        self.settle(verdicts);
        // Anything still held never got a verdict: shunted, and counted so.
        self.counts.shunted += self.held.len() as u64;
        self.held.clear();
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = shared.shards.get_mut(self.index) {
            *slot = self.counts;
        }
        if let Some(ring) = self.ring.as_mut() {
            if let Err(e) = ring.finish() {
                note(&mut self.errors, format!("--egress-pcap: {e}"));
            }
            shared.files.extend(ring.files().cloned());
            shared.files_deleted += ring.deleted;
        }
        for e in self.errors.drain(..) {
            if !shared.errors.contains(&e) {
                shared.errors.push(e);
            }
        }
    }
}

/// Keeps the first error of each kind (a full queue can fail a million sends).
fn note(errors: &mut Vec<String>, e: String) {
    if errors.len() < 8 && !errors.contains(&e) {
        errors.push(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_dpi::{Proto, L7};

    fn ring_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sonde-egress-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn verdict(app: &str, decided: bool, packets: u64) -> FlowVerdict {
        FlowVerdict {
            flowed: true,
            l7: L7 {
                proto: Proto::from_name(app).unwrap_or(Proto::UNKNOWN),
                ..L7::default()
            },
            decided,
            packets,
        }
    }

    /// The frames in the ring's files, as (timestamp, first byte).
    fn written(report: &EgressReport) -> Vec<(u64, u8)> {
        let mut out = Vec::new();
        for f in &report.files {
            let mut src = sonde_capture::FileSource::open(f).unwrap();
            while let Some((_, fr)) = src.next_frame().unwrap() {
                out.push((fr.ts_ns, fr.data[0]));
            }
        }
        out
    }

    #[test]
    fn frames_wait_for_their_verdicts_and_keep_their_order() {
        let dir = ring_dir("order");
        let egress = Egress::start(EgressConfig {
            apps: vec![Proto::from_name("DNS").unwrap()],
            undecided: Undecided::Shunt,
            pcap_dir: Some(dir.clone()),
            ..EgressConfig::default()
        })
        .unwrap();
        let mut shard = egress.shard(0).unwrap();
        assert!(shard.needs_flow());
        let frame = |b: u8| vec![b; 60];
        // 1: DNS, 2: not IP (no flow: no application), 3: undecided, 4: TLS, 5: DNS.
        let kinds = [true, false, true, true, true];
        for (i, &in_flow) in kinds.iter().enumerate() {
            let b = i as u8 + 1;
            shard.offer(LinkType::Ethernet, b as u64 * 1000, 60, &frame(b), in_flow);
        }
        // Only the first packet's batch is accounted so far: frame 2 waits behind nothing,
        // frame 3 waits for its verdict.
        let mut v = vec![verdict("DNS", true, 1)];
        shard.settle(Some(&mut v));
        assert!(v.is_empty(), "the verdict used is removed");
        assert_eq!((shard.counts.forwarded, shard.counts.shunted), (1, 1));
        let mut v = vec![
            verdict("Unknown", false, 1),
            verdict("TLS", true, 2),
            verdict("DNS", true, 2),
        ];
        shard.finish(Some(&mut v));
        let report = egress.report();
        assert_eq!(report.counts.offered, 5);
        assert_eq!(
            (
                report.counts.forwarded,
                report.counts.shunted,
                report.counts.dropped
            ),
            (2, 3, 0)
        );
        assert_eq!(written(&report), [(1000, 1), (5000, 5)]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn undecided_flows_forwarded_and_first_packets_only() {
        let dir = ring_dir("undecided");
        let egress = Egress::start(EgressConfig {
            apps: vec![Proto::from_name("DNS").unwrap()],
            shunt_after: 2,
            pcap_dir: Some(dir.clone()),
            ..EgressConfig::default()
        })
        .unwrap();
        let mut shard = egress.shard(0).unwrap();
        for i in 1..=4u8 {
            shard.offer(LinkType::Ethernet, i as u64 * 1000, 60, &[i; 60], true);
        }
        // Undecided (forwarded), a decided other application (shunted), a DNS flow's 2nd
        // packet (forwarded) and its 3rd (past the limit: shunted).
        let mut v = vec![
            verdict("Unknown", false, 1),
            verdict("TLS", true, 1),
            verdict("DNS", true, 2),
            verdict("DNS", true, 3),
        ];
        shard.finish(Some(&mut v));
        let report = egress.report();
        assert_eq!(written(&report), [(1000, 1), (3000, 3)]);
        assert_eq!((report.counts.forwarded, report.counts.shunted), (2, 2));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn frame_selectors_decide_at_once_and_bad_settings_are_refused() {
        let dir = ring_dir("bpf");
        let egress = Egress::start(EgressConfig {
            bpf: Some("udp".into()),
            hosts: parse_hosts("10.0.0.0/8").unwrap(),
            pcap_dir: Some(dir.clone()),
            ..EgressConfig::default()
        })
        .unwrap();
        let mut shard = egress.shard(0).unwrap();
        let udp = |src: [u8; 4]| {
            let mut f = vec![0u8; 14 + 20 + 8];
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x45;
            f[16..18].copy_from_slice(&28u16.to_be_bytes());
            f[23] = 17;
            f[26..30].copy_from_slice(&src);
            f[30..34].copy_from_slice(&[192, 0, 2, 1]);
            f
        };
        shard.offer(LinkType::Ethernet, 1, 42, &udp([10, 1, 2, 3]), true);
        shard.offer(LinkType::Ethernet, 2, 42, &udp([198, 51, 100, 1]), true);
        assert_eq!((shard.counts.forwarded, shard.counts.shunted), (1, 1));
        shard.finish(None);
        assert_eq!(egress.report().files.len(), 1);
        assert!(Egress::start(EgressConfig::default())
            .err()
            .unwrap()
            .contains("needs a destination"));
        let bad = EgressConfig {
            bpf: Some("udp and".into()),
            pcap_dir: Some(dir.clone()),
            ..EgressConfig::default()
        };
        assert!(Egress::start(bad).err().unwrap().contains("--egress-bpf"));
        let missing = EgressConfig {
            pcap_dir: Some(dir.join("nope")),
            ..EgressConfig::default()
        };
        assert!(Egress::start(missing).err().unwrap().contains("mkdir -p"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
