//! Live capture through libpcap (TPACKET_V3 on Linux, blocks handed over when full or after
//! [`LiveConfig::block_ms`]).
//!
//! The handle is non-blocking and the caller waits on its file descriptor with a timeout, so a
//! shutdown request is seen within [`LiveConfig::poll_ms`] even on an idle interface (a blocking
//! libpcap handle can wait forever). With `fanout_group`, several handles on one interface join
//! a PACKET_FANOUT_HASH group: the kernel splits packets by a symmetric flow hash, so each shard
//! gets both directions of its flows and no packet is seen twice.

use crate::error::CaptureError;
use crate::Frame;
use sonde_wire::LinkType;

#[derive(Clone, Debug)]
pub struct LiveConfig {
    pub interface: String,
    pub filter: Option<String>,
    pub snaplen: i32,
    pub promisc: bool,
    pub buffer_bytes: i32,
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
            buffer_bytes: 64 << 20,
            block_ms: 50,
            poll_ms: 100,
            fanout_group: None,
        }
    }
}

pub struct LiveSource {
    cap: pcap::Capture<pcap::Active>,
    link: LinkType,
    cfg: LiveConfig,
}

/// Capture statistics from the kernel: packets it dropped for lack of buffer space, and packets
/// the interface itself dropped.
#[derive(Clone, Copy, Debug, Default)]
pub struct CaptureDrops {
    pub received: u64,
    pub dropped: u64,
    pub if_dropped: u64,
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

impl LiveSource {
    pub fn open(cfg: LiveConfig) -> Result<LiveSource, CaptureError> {
        let name = cfg.interface.clone();
        let inactive = pcap::Capture::from_device(name.as_str()).map_err(|e| classify(&name, e))?;
        let cap = inactive
            .promisc(cfg.promisc)
            .snaplen(cfg.snaplen)
            .buffer_size(cfg.buffer_bytes)
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
            join_fanout(&cap, group).map_err(|e| CaptureError::Live {
                name: name.clone(),
                detail: format!("PACKET_FANOUT: {e}"),
            })?;
        }
        Ok(LiveSource { cap, link, cfg })
    }

    pub fn link_type(&self) -> LinkType {
        self.link
    }

    /// Waits up to the poll interval for the descriptor to become readable.
    pub fn wait(&self) {
        self.wait_ms(self.cfg.poll_ms);
    }

    fn wait_ms(&self, ms: i32) {
        use std::os::fd::AsRawFd;
        let mut pfd = libc::pollfd {
            fd: self.cap.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is a valid pollfd for the duration of the call; nfds is 1.
        unsafe {
            libc::poll(&mut pfd, 1, ms);
        }
    }

    /// At stop: waits for the block the kernel still holds (packets that arrived before the
    /// stop, handed over at the block timeout) and hands every remaining frame to `each`.
    pub fn drain(&mut self, mut each: impl FnMut(Frame<'_>)) {
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

    /// The next captured frame, or `Ok(None)` when none is waiting right now.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, CaptureError> {
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

    pub fn drops(&mut self) -> CaptureDrops {
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

#[cfg(target_os = "linux")]
fn join_fanout(cap: &pcap::Capture<pcap::Active>, group: u16) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    const PACKET_FANOUT: libc::c_int = 18;
    const PACKET_FANOUT_HASH: u32 = 0;
    const PACKET_FANOUT_FLAG_DEFRAG: u32 = 0x8000;
    let arg: u32 = group as u32 | ((PACKET_FANOUT_HASH | PACKET_FANOUT_FLAG_DEFRAG) << 16);
    // SAFETY: the fd is libpcap's open AF_PACKET socket; the option value is a u32 of that size.
    let rc = unsafe {
        libc::setsockopt(
            cap.as_raw_fd(),
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
fn join_fanout(_cap: &pcap::Capture<pcap::Active>, _group: u16) -> std::io::Result<()> {
    Err(std::io::Error::other("packet fanout needs Linux"))
}

/// A BPF expression applied to frames in user space, compiled once per link type met (pcapng
/// may mix them): `-r` with `--filter`, and egress selection.
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

    #[inline]
    pub fn accepts(&mut self, link: LinkType, data: &[u8]) -> bool {
        let Some(expr) = &self.expr else { return true };
        if let Some((_, f)) = self.compiled.iter().find(|(l, _)| *l == link) {
            return f.matches(data);
        }
        match OfflineFilter::compile(expr, link) {
            Ok(f) => {
                let ok = f.matches(data);
                self.compiled.push((link, f));
                ok
            }
            // The expression compiled for the first link type; one that cannot apply to
            // another link type matches nothing there, as in tcpdump.
            Err(_) => false,
        }
    }
}

/// A compiled BPF filter applied to frames read from a file (libpcap's offline filter).
pub struct OfflineFilter {
    prog: pcap::BpfProgram,
}

impl OfflineFilter {
    pub fn compile(filter: &str, link: LinkType) -> Result<OfflineFilter, CaptureError> {
        let dead = pcap::Capture::dead(pcap::Linktype(link.to_dlt() as i32)).map_err(|e| {
            CaptureError::BadFilter {
                filter: filter.to_string(),
                detail: e.to_string(),
            }
        })?;
        let prog = dead
            .compile(filter, true)
            .map_err(|e| CaptureError::BadFilter {
                filter: filter.to_string(),
                detail: e.to_string(),
            })?;
        Ok(OfflineFilter { prog })
    }

    #[inline]
    pub fn matches(&self, frame: &[u8]) -> bool {
        self.prog.filter(frame)
    }
}
