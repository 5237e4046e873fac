//! Live capture: one interface, read by one of three backends behind [`LiveSource`].
//!
//! * `ring` ([`crate::ring`]): sonde's own AF_PACKET TPACKET_V3 ring, no library call per
//!   packet, the filter attached in the kernel. The default wherever it applies.
//! * `xdp` ([`crate::xdp`]): AF_XDP sockets, one per receive queue, fed by a small XDP program
//!   sonde loads; packets skip the kernel's stack (for span and tap ports).
//! * `pcap`: libpcap (its own TPACKET_V3 ring), for interfaces the others do not handle (the
//!   `any` pseudo-device, link types with headers of their own).
//!
//! Every handle is non-blocking and the caller waits on its descriptor with a timeout, so a
//! shutdown request is seen within [`LiveConfig::poll_ms`] even on an idle interface (a
//! blocking libpcap handle can wait forever). With `fanout_group`, several handles on one
//! interface join a PACKET_FANOUT_HASH group: the kernel splits packets by a symmetric flow
//! hash, so each shard gets both directions of its flows and no packet is seen twice.

use crate::error::CaptureError;
use crate::ring::RingSource;
use crate::xdp::{XdpGroup, XdpSource};
use crate::Frame;
use sonde_wire::LinkType;

/// Which capture path reads an interface (`--capture`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CaptureBackend {
    /// `ring` where it applies (Ethernet, loopback and raw-IP interfaces), else `pcap`.
    #[default]
    Auto,
    Ring,
    Pcap,
    Xdp,
}

#[derive(Clone, Debug)]
pub struct LiveConfig {
    pub interface: String,
    pub filter: Option<String>,
    pub snaplen: i32,
    pub promisc: bool,
    pub backend: CaptureBackend,
    /// Memory of each shard's ring (libpcap's buffer size; AF_XDP's frame area).
    pub ring_bytes: usize,
    /// TPACKET_V3 block size (a power of two, at least a page): the kernel hands the ring over
    /// a block at a time. 256 KiB: a few thousand small frames a block, and an allocation the
    /// kernel finds easily (1 MiB blocks are order-8 pages: slower to find and to clear).
    pub ring_block_bytes: usize,
    /// How long the kernel holds a partly filled ring block before handing it over
    /// (TPACKET_V3): packets reach sonde in batches, with at most this delay, instead of one
    /// wake-up per packet or two (libpcap's immediate mode).
    pub block_ms: i32,
    pub poll_ms: i32,
    /// PACKET_FANOUT group id shared by the shards of one run; `None` for a single handle.
    pub fanout_group: Option<u16>,
}

impl LiveConfig {
    pub fn new(interface: &str) -> LiveConfig {
        LiveConfig {
            interface: interface.to_string(),
            filter: None,
            // Enough for every header sonde decodes and the payload its DPI reads (2 KiB):
            // libpcap sizes each ring slot by the snap length, so 64 MiB hold ~16k packets
            // instead of ~1k at 256 KiB. Flow bytes come from the IP header, not the capture.
            snaplen: 4096,
            promisc: true,
            backend: CaptureBackend::Auto,
            ring_bytes: 64 << 20,
            ring_block_bytes: 256 << 10,
            block_ms: 50,
            poll_ms: 100,
            fanout_group: None,
        }
    }
}

/// Capture statistics from the kernel: packets it dropped for lack of buffer space, and packets
/// the interface itself dropped.
#[derive(Clone, Copy, Debug, Default)]
pub struct CaptureDrops {
    pub received: u64,
    pub dropped: u64,
    pub if_dropped: u64,
}

enum Backend {
    Ring(RingSource),
    Xdp(XdpSource),
    Pcap(PcapSource),
}

/// One shard's handle on a live interface, whichever backend reads it.
pub struct LiveSource {
    backend: Backend,
    /// What reads the interface, for the summary and the API ("ring", "xdp native zero-copy", …).
    description: String,
    /// True when the capture filter runs in sonde rather than in the kernel (AF_XDP, which
    /// has no socket filter; a `vlan` expression, whose tag the kernel moved out of the frame).
    user_filter: bool,
}

impl LiveSource {
    /// One handle on `cfg.interface` (no fanout unless `cfg.fanout_group` says so).
    pub fn open(cfg: LiveConfig) -> Result<LiveSource, CaptureError> {
        Ok(LiveSource::open_group(&cfg, 1)?.remove(0))
    }

    /// `shards` handles on one interface that share its traffic: fanout members of
    /// `cfg.fanout_group` (ring, pcap), or one AF_XDP socket per receive queue.
    pub fn open_group(cfg: &LiveConfig, shards: usize) -> Result<Vec<LiveSource>, CaptureError> {
        let shards = shards.max(1);
        let name = cfg.interface.as_str();
        let hw = crate::ring::hardware_type(name);
        let ring_link = hw.and_then(crate::ring::link_of_hardware);
        let backend = match cfg.backend {
            CaptureBackend::Auto if name != "any" && ring_link.is_some() => CaptureBackend::Ring,
            CaptureBackend::Auto => CaptureBackend::Pcap,
            b => b,
        };
        if backend != CaptureBackend::Pcap {
            if name == "any" {
                return Err(CaptureError::Live {
                    name: name.to_string(),
                    detail: "the 'any' pseudo-interface is read through libpcap only: use \
                             --capture pcap (or auto), or name the interfaces (-i eth0 -i eth1)"
                        .to_string(),
                });
            }
            // An interface that is not there is named before anything else is tried.
            interface_index(name)?;
        }
        let Some(link) = ring_link.filter(|_| backend != CaptureBackend::Pcap) else {
            if backend != CaptureBackend::Pcap {
                return Err(CaptureError::Live {
                    name: name.to_string(),
                    detail: format!(
                        "--capture {} reads Ethernet, loopback and raw-IP interfaces; this one \
                         has hardware type {}: use --capture pcap (or auto)",
                        if backend == CaptureBackend::Xdp {
                            "xdp"
                        } else {
                            "ring"
                        },
                        hw.map_or("unknown".to_string(), |h| h.to_string())
                    ),
                });
            }
            let mut out = Vec::with_capacity(shards);
            for _ in 0..shards {
                out.push(LiveSource {
                    backend: Backend::Pcap(PcapSource::open(cfg.clone())?),
                    description: "pcap".to_string(),
                    user_filter: false,
                });
            }
            return Ok(out);
        };
        // The kernel moves a frame's VLAN tag into the ring's header, where a program
        // compiled for a file cannot see it: such expressions run in sonde, on the rebuilt
        // frame.
        let vlan_expr = cfg.filter.as_deref().is_some_and(|f| {
            f.split(|c: char| !c.is_ascii_alphanumeric())
                .any(|w| w == "vlan")
        });
        if let Some(f) = &cfg.filter {
            // Checked here (whoever runs it) so a bad expression is named before anything
            // is attached.
            OfflineFilter::compile(f, link)?;
        }
        if backend == CaptureBackend::Xdp {
            let group = XdpGroup::attach(cfg, shards)?;
            let description = format!("xdp {}", group.mode());
            let mut out = Vec::with_capacity(shards);
            for queue in 0..shards {
                let src = XdpSource::open(cfg, link, &group, queue as u32)?;
                let description = format!("{description} {}", src.copy_mode());
                out.push(LiveSource {
                    backend: Backend::Xdp(src),
                    description,
                    user_filter: cfg.filter.is_some(),
                });
            }
            return Ok(out);
        }
        let in_kernel = cfg.filter.as_deref().filter(|_| !vlan_expr);
        let program = kernel_program(in_kernel, link, cfg.snaplen)?;
        let mut out = Vec::with_capacity(shards);
        for _ in 0..shards {
            out.push(LiveSource {
                backend: Backend::Ring(RingSource::open(cfg, link, &program)?),
                description: "ring".to_string(),
                user_filter: vlan_expr,
            });
        }
        Ok(out)
    }

    pub fn link_type(&self) -> LinkType {
        match &self.backend {
            Backend::Ring(r) => r.link_type(),
            Backend::Xdp(x) => x.link_type(),
            Backend::Pcap(p) => p.link,
        }
    }

    /// What reads the interface: "ring", "pcap", or "xdp" with its mode.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// True when the caller must apply the capture filter to each frame itself (and count
    /// what it rejects as filtered): the kernel could not.
    pub fn filters_in_user_space(&self) -> bool {
        self.user_filter
    }

    /// Waits up to the poll interval for the descriptor to become readable.
    pub fn wait(&mut self) {
        match &mut self.backend {
            Backend::Ring(r) => r.wait(),
            Backend::Xdp(x) => x.wait(),
            Backend::Pcap(p) => p.wait_ms(p.cfg.poll_ms),
        }
    }

    /// At stop: waits for what the kernel still holds (packets that arrived before the stop)
    /// and hands every remaining frame to `each`.
    pub fn drain(&mut self, each: impl FnMut(Frame<'_>)) {
        match &mut self.backend {
            Backend::Ring(r) => r.drain(each),
            Backend::Xdp(x) => x.drain(each),
            Backend::Pcap(p) => p.drain(each),
        }
    }

    /// The next captured frame, or `Ok(None)` when none is waiting right now.
    #[inline]
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, CaptureError> {
        match &mut self.backend {
            Backend::Ring(r) => r.next_frame(),
            Backend::Xdp(x) => x.next_frame(),
            Backend::Pcap(p) => p.next_frame(),
        }
    }

    /// The frames ready now (a few hundred at most), appended to `out`, valid together until
    /// the next call (the engine then reads their payloads in place): part of a ring block, or
    /// an AF_XDP batch. `None`
    /// when the backend hands frames out one at a time only (libpcap): use `next_frame`.
    pub fn next_batch<'a>(&'a mut self, out: &mut Vec<Frame<'a>>) -> Option<bool> {
        match &mut self.backend {
            Backend::Ring(r) => Some(r.next_batch(out)),
            Backend::Xdp(x) => Some(x.next_batch(out)),
            Backend::Pcap(_) => None,
        }
    }

    /// Whether [`LiveSource::next_batch`] works.
    pub fn has_batches(&self) -> bool {
        !matches!(self.backend, Backend::Pcap(_))
    }

    pub fn drops(&mut self) -> CaptureDrops {
        match &mut self.backend {
            Backend::Ring(r) => r.drops(),
            Backend::Xdp(x) => x.drops(),
            Backend::Pcap(p) => p.drops(),
        }
    }
}

/// The socket filter for a ring: the expression compiled by libpcap for the interface's link
/// type (or accept-all), every accepting return cut to the snap length, as libpcap's own
/// programs return it.
fn kernel_program(
    expr: Option<&str>,
    link: LinkType,
    snaplen: i32,
) -> Result<Vec<libc::sock_filter>, CaptureError> {
    const BPF_RET_K: u16 = 0x06;
    let snap = snaplen.max(64) as u32;
    let Some(expr) = expr else {
        return Ok(vec![libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: snap,
        }]);
    };
    let compiled = OfflineFilter::compile(expr, link)?;
    Ok(compiled
        .prog
        .instructions()
        .map(|(code, jt, jf, k)| libc::sock_filter {
            code,
            jt,
            jf,
            k: if code == BPF_RET_K && k != 0 { snap } else { k },
        })
        .collect())
}

/// The interface's index, or the error that names the interfaces there are.
pub(crate) fn interface_index(name: &str) -> Result<u32, CaptureError> {
    let c = std::ffi::CString::new(name).map_err(|_| CaptureError::NoSuchInterface {
        name: name.to_string(),
        available: interface_names(),
    })?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        return Err(CaptureError::NoSuchInterface {
            name: name.to_string(),
            available: interface_names(),
        });
    }
    Ok(index)
}

fn interface_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The interface's own receive drops (what libpcap reports as `ps_ifdrop`: missed and FIFO
/// errors), from sysfs.
pub(crate) fn interface_drops(name: &str) -> Option<u64> {
    let read = |what: &str| -> Option<u64> {
        std::fs::read_to_string(format!("/sys/class/net/{name}/statistics/{what}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some(read("rx_missed_errors").unwrap_or(0) + read("rx_fifo_errors").unwrap_or(0))
}

/// A failed system call on an interface, as the error a user can act on.
pub(crate) fn classify_os_error(name: &str, what: &str, e: std::io::Error) -> CaptureError {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => CaptureError::Permission {
            name: name.to_string(),
            detail: format!("{what}: {e}"),
        },
        Some(libc::ENODEV) | Some(libc::ENXIO) => CaptureError::NoSuchInterface {
            name: name.to_string(),
            available: interface_names(),
        },
        _ => CaptureError::Live {
            name: name.to_string(),
            detail: format!("{what}: {e}"),
        },
    }
}

/// libpcap's own handle (`--capture pcap`).
struct PcapSource {
    cap: pcap::Capture<pcap::Active>,
    link: LinkType,
    cfg: LiveConfig,
}

fn classify(name: &str, e: pcap::Error) -> CaptureError {
    let detail = e.to_string();
    let lower = detail.to_lowercase();
    if lower.contains("no such device")
        || lower.contains("doesn't exist")
        || lower.contains("not found")
    {
        let available = pcap::Device::list()
            .map(|l| l.into_iter().map(|d| d.name).collect())
            .unwrap_or_default();
        CaptureError::NoSuchInterface {
            name: name.to_string(),
            available,
        }
    } else if lower.contains("permission") || lower.contains("not permitted") {
        CaptureError::Permission {
            name: name.to_string(),
            detail,
        }
    } else {
        CaptureError::Live {
            name: name.to_string(),
            detail,
        }
    }
}

impl PcapSource {
    fn open(cfg: LiveConfig) -> Result<PcapSource, CaptureError> {
        use std::os::fd::AsRawFd;
        let name = cfg.interface.clone();
        let inactive = pcap::Capture::from_device(name.as_str()).map_err(|e| classify(&name, e))?;
        let cap = inactive
            .promisc(cfg.promisc)
            .snaplen(cfg.snaplen)
            .buffer_size(cfg.ring_bytes.min(i32::MAX as usize) as i32)
            .immediate_mode(false)
            .timeout(cfg.block_ms)
            .open()
            .map_err(|e| classify(&name, e))?;
        let mut cap = cap.setnonblock().map_err(|e| classify(&name, e))?;
        if let Some(f) = &cfg.filter {
            cap.filter(f, true).map_err(|e| CaptureError::BadFilter {
                filter: f.clone(),
                detail: e.to_string(),
            })?;
        }
        let link = LinkType::from_linktype(cap.get_datalink().0 as u32);
        if !link.is_supported() {
            return Err(CaptureError::Live {
                name,
                detail: format!("link type {} is not decoded by sonde", cap.get_datalink().0),
            });
        }
        if let Some(group) = cfg.fanout_group {
            join_fanout(cap.as_raw_fd(), group).map_err(|e| CaptureError::Live {
                name: name.clone(),
                detail: format!("PACKET_FANOUT: {e}"),
            })?;
        }
        Ok(PcapSource { cap, link, cfg })
    }

    fn wait_ms(&self, ms: i32) {
        use std::os::fd::AsRawFd;
        wait_readable(self.cap.as_raw_fd(), ms);
    }

    fn drain(&mut self, mut each: impl FnMut(Frame<'_>)) {
        let deadline = std::time::Instant::now()
            + std::time::Duration::from_millis(2 * self.cfg.block_ms as u64 + 10);
        loop {
            match self.next_frame() {
                Ok(Some(f)) => each(f),
                Ok(None) => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    self.wait_ms(left.as_millis().max(1) as i32);
                }
                Err(_) => break,
            }
        }
    }

    fn next_frame(&mut self) -> Result<Option<Frame<'_>>, CaptureError> {
        match self.cap.next_packet() {
            Ok(p) => {
                let ts = p.header.ts;
                let ts_ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_usec as u64 * 1000;
                Ok(Some(Frame {
                    ts_ns,
                    wire_len: p.header.len,
                    data: p.data,
                }))
            }
            Err(pcap::Error::TimeoutExpired) => Ok(None),
            Err(e) => Err(CaptureError::Live {
                name: self.cfg.interface.clone(),
                detail: e.to_string(),
            }),
        }
    }

    fn drops(&mut self) -> CaptureDrops {
        match self.cap.stats() {
            Ok(s) => CaptureDrops {
                received: s.received as u64,
                dropped: s.dropped as u64,
                if_dropped: s.if_dropped as u64,
            },
            Err(_) => CaptureDrops::default(),
        }
    }
}

/// Waits up to `ms` milliseconds for `fd` to become readable (or fail).
pub(crate) fn wait_readable(fd: std::os::fd::RawFd, ms: i32) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN | libc::POLLERR,
        revents: 0,
    };
    // SAFETY: `pfd` is a valid pollfd for the duration of the call; nfds is 1.
    unsafe {
        libc::poll(&mut pfd, 1, ms);
    }
}

/// Joins a PACKET_FANOUT_HASH group (with defragmentation, so a datagram's fragments reach
/// the shard of its first).
#[cfg(target_os = "linux")]
pub(crate) fn join_fanout(fd: std::os::fd::RawFd, group: u16) -> std::io::Result<()> {
    const PACKET_FANOUT: libc::c_int = 18;
    const PACKET_FANOUT_HASH: u32 = 0;
    const PACKET_FANOUT_FLAG_DEFRAG: u32 = 0x8000;
    let arg: u32 = group as u32 | ((PACKET_FANOUT_HASH | PACKET_FANOUT_FLAG_DEFRAG) << 16);
    // SAFETY: `fd` is an open AF_PACKET socket; the option value is a u32 of that size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            PACKET_FANOUT,
            &arg as *const u32 as *const libc::c_void,
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn join_fanout(_fd: i32, _group: u16) -> std::io::Result<()> {
    Err(std::io::Error::other("packet fanout needs Linux"))
}

/// A BPF expression applied to frames in user space, compiled once per link type met (pcapng
/// may mix them): `-r` with `--filter`, a live capture whose filter the kernel cannot run,
/// and egress selection. Run by sonde's own interpreter ([`crate::bpf`]): no library call
/// per packet.
pub struct LinkFilters {
    expr: Option<String>,
    compiled: Vec<(LinkType, OfflineFilter)>,
}

impl LinkFilters {
    pub fn new(expr: Option<String>, first: Option<(LinkType, OfflineFilter)>) -> LinkFilters {
        LinkFilters {
            expr,
            compiled: first.into_iter().collect(),
        }
    }

    /// Whether the frame (`data` captured of `wire_len` bytes on the wire) passes; always
    /// without an expression.
    #[inline]
    pub fn accepts(&mut self, link: LinkType, data: &[u8], wire_len: u32) -> bool {
        let Some(expr) = &self.expr else { return true };
        if let Some((_, f)) = self.compiled.iter().find(|(l, _)| *l == link) {
            return f.matches(data, wire_len);
        }
        match OfflineFilter::compile(expr, link) {
            Ok(f) => {
                let ok = f.matches(data, wire_len);
                self.compiled.push((link, f));
                ok
            }
            // The expression compiled for the first link type; one that cannot apply to
            // another link type matches nothing there, as in tcpdump.
            Err(_) => false,
        }
    }
}

/// A compiled BPF filter applied to frames in sonde: libpcap compiles it once, sonde's
/// interpreter runs it with libpcap's semantics.
pub struct OfflineFilter {
    prog: crate::bpf::Program,
}

impl OfflineFilter {
    pub fn compile(filter: &str, link: LinkType) -> Result<OfflineFilter, CaptureError> {
        let prog = crate::bpf::Program::compile(filter, link).map_err(|detail| {
            CaptureError::BadFilter {
                filter: filter.to_string(),
                detail,
            }
        })?;
        Ok(OfflineFilter { prog })
    }

    /// Whether a frame passes: `frame` as captured, `wire_len` its length on the wire (what
    /// tcpdump gives `len`, `less` and `greater`).
    #[inline]
    pub fn matches(&self, frame: &[u8], wire_len: u32) -> bool {
        self.prog.matches(frame, wire_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_program_cuts_accepted_frames_to_the_snap_length() {
        // No expression: one instruction, accept the first snaplen bytes.
        let all = kernel_program(None, LinkType::Ethernet, 4096).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].code, all[0].k), (0x06, 4096));
        // An expression: libpcap's program, its accepting returns cut to the snap length
        // (libpcap compiles them with 65535 for a dead handle), its rejecting ones kept at 0.
        let udp = kernel_program(Some("udp"), LinkType::Ethernet, 2048).unwrap();
        let rets: Vec<u32> = udp.iter().filter(|i| i.code == 0x06).map(|i| i.k).collect();
        assert!(rets.contains(&2048) && rets.contains(&0), "{rets:?}");
        assert!(rets.iter().all(|&k| k == 0 || k == 2048));
        let e = kernel_program(Some("udp port"), LinkType::Ethernet, 2048).unwrap_err();
        assert!(
            e.to_string().starts_with("bad capture filter 'udp port'"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_interface_is_named_with_those_there_are() {
        let e = interface_index("no-such-if0").unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("no such interface 'no-such-if0'"),
            "{text}"
        );
        assert!(text.contains("lo"), "{text}");
    }
}
