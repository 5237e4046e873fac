//! Live capture through AF_XDP (`--capture xdp`): packets leave the driver for sonde's memory
//! before the kernel builds a socket buffer for them.
//!
//! Why it exists: on a span or tap port nothing on the host needs the packets, and the
//! kernel's receive path (socket buffers, AF_PACKET's copy into its ring) is most of what
//! capture costs. AF_XDP binds one socket to one receive queue: sonde gives each shard one
//! queue, registers a frame area (UMEM) per socket, and loads a five-instruction XDP program
//! that redirects every packet of a queue to that queue's socket (a queue without one passes
//! its packets to the kernel as usual). The program is attached through a BPF link, which the
//! kernel removes when sonde's descriptor closes, so a killed sonde leaves nothing behind.
//!
//! Modes, each tried in turn and named in the summary: the driver's own XDP hook ("native")
//! or the kernel's generic one for any driver ("generic"); frames written by the driver
//! straight into the UMEM ("zero-copy") or copied there ("copy").
//!
//! What AF_XDP does not give: a kernel timestamp (frames are stamped with the clock when
//! sonde reads them, once per batch), a socket filter (`-f` runs in sonde, on each frame), and
//! a copy for the host: the packets no longer reach its own stack.

use crate::error::CaptureError;
use crate::live::{classify_os_error, interface_index, wait_readable, CaptureDrops, LiveConfig};
use crate::ring::setsockopt;
use crate::Frame;
use sonde_wire::LinkType;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

// linux/bpf.h
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const XDP_PASS: i32 = 2;
// linux/if_link.h
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
// linux/if_xdp.h
const XDP_RING_NEED_WAKEUP: u32 = 1;
const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

/// Bytes of UMEM per frame: half a page holds a frame of a standard MTU (2048 less the
/// kernel's 256-byte headroom), twice as many frames in the same memory; interfaces with a
/// larger MTU get a whole page a frame.
fn chunk_for(name: &str) -> u64 {
    let mtu: u64 = std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1500);
    if mtu + 18 <= 2048 - 256 {
        2048
    } else {
        4096
    }
}

/// How many frames ahead of the one being read the next are prefetched.
const PREFETCH_AHEAD: u32 = 4;

/// How many frames are read before they go back to the fill ring.
const RELEASE_EVERY: u32 = 64;

/// The most frames [`XdpSource::next_batch`] hands out at once.
const MAX_BATCH: u32 = 256;

/// `struct xdp_umem_reg` (its last two fields are newer than some kernels, which take the
/// shorter form and ignore the rest).
#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

/// One `bpf(2)` call with an attribute block of 128 bytes (zeroes past the fields set).
fn bpf_call(cmd: libc::c_long, attr: &mut [u8; 128]) -> std::io::Result<i64> {
    // SAFETY: `attr` is a valid, writable block of the size passed; the kernel reads the
    // union member of `cmd` from it.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(rc)
}

/// A `bpf(2)` command that returns a new descriptor (map, program, link).
fn bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> std::io::Result<OwnedFd> {
    let fd = bpf_call(cmd, attr)?;
    // SAFETY: these commands return a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn put_u32(attr: &mut [u8; 128], at: usize, v: u32) {
    attr[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put_u64(attr: &mut [u8; 128], at: usize, v: u64) {
    attr[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

/// `struct bpf_insn` bytes: opcode, destination and source registers, offset, immediate.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = (src << 4) | (dst & 0x0f);
    b[2..4].copy_from_slice(&off.to_ne_bytes());
    b[4..8].copy_from_slice(&imm.to_ne_bytes());
    b
}

/// The XDP program: `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)`.
fn redirect_program(map_fd: i32) -> Vec<u8> {
    [
        // r2 = ctx->rx_queue_index (struct xdp_md, offset 16)
        insn(0x61, 2, 1, 16, 0),
        // r1 = the XSKMAP (a 64-bit immediate in two instructions)
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
        // r3 = XDP_PASS: what a queue with no socket does
        insn(0xb7, 3, 0, 0, XDP_PASS),
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        insn(0x95, 0, 0, 0, 0),
    ]
    .concat()
}

/// The program, its socket map and its attachment on one interface, shared by the shards'
/// sockets (the last one to go detaches it).
pub(crate) struct XdpGroup {
    inner: Arc<Attachment>,
}

struct Attachment {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    native: bool,
}

/// How many receive queues an interface has (sysfs `queues/rx-N`).
fn rx_queues(name: &str) -> usize {
    std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(0)
}

impl XdpGroup {
    /// Loads the program on `cfg.interface` for `shards` sockets, one per receive queue: the
    /// driver's hook if it has one, else the generic hook.
    pub(crate) fn attach(cfg: &LiveConfig, shards: usize) -> Result<XdpGroup, CaptureError> {
        let name = cfg.interface.as_str();
        let ifindex = interface_index(name)?;
        let queues = rx_queues(name).max(1);
        if shards != queues {
            return Err(CaptureError::Live {
                name: name.to_string(),
                detail: format!(
                    "it has {queues} receive queue(s) and --capture xdp reads each with a shard \
                     of its own, so it needs --threads {queues} (or change the queues: \
                     'ethtool -L {name} combined N'); --capture ring takes any --threads"
                ),
            });
        }
        let fail = |what: &str, e: std::io::Error| match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => CaptureError::Permission {
                name: name.to_string(),
                detail: format!("{what}: {e} (AF_XDP needs CAP_NET_ADMIN and CAP_BPF, or root)"),
            },
            _ => CaptureError::Live {
                name: name.to_string(),
                detail: format!("{what}: {e}; --capture ring works without AF_XDP"),
            },
        };
        let mut attr = [0u8; 128];
        put_u32(&mut attr, 0, BPF_MAP_TYPE_XSKMAP);
        put_u32(&mut attr, 4, 4);
        put_u32(&mut attr, 8, 4);
        put_u32(&mut attr, 12, queues as u32);
        attr[28..38].copy_from_slice(b"sonde_xsks");
        let map = bpf(BPF_MAP_CREATE, &mut attr).map_err(|e| fail("creating the XSKMAP", e))?;
        let code = redirect_program(map.as_raw_fd());
        let license = b"Apache-2.0\0";
        let mut log = vec![0u8; 4096];
        let load = |log_level: u32, log: &mut [u8]| {
            let mut attr = [0u8; 128];
            put_u32(&mut attr, 0, BPF_PROG_TYPE_XDP);
            put_u32(&mut attr, 4, (code.len() / 8) as u32);
            put_u64(&mut attr, 8, code.as_ptr() as u64);
            put_u64(&mut attr, 16, license.as_ptr() as u64);
            if log_level > 0 {
                put_u32(&mut attr, 24, log_level);
                put_u32(&mut attr, 28, log.len() as u32);
                put_u64(&mut attr, 32, log.as_mut_ptr() as u64);
            }
            attr[48..58].copy_from_slice(b"sonde_xdp\0");
            put_u32(&mut attr, 68, BPF_XDP);
            bpf(BPF_PROG_LOAD, &mut attr)
        };
        let prog = match load(0, &mut log) {
            Ok(p) => p,
            Err(e) => {
                // Again with the verifier's log, to say why.
                let _ = load(1, &mut log);
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let why = String::from_utf8_lossy(&log[..end])
                    .trim()
                    .replace('\n', "; ");
                return Err(fail(&format!("loading the XDP program ({why})"), e));
            }
        };
        let link_with = |flags: u32| {
            let mut attr = [0u8; 128];
            put_u32(&mut attr, 0, prog.as_raw_fd() as u32);
            put_u32(&mut attr, 4, ifindex);
            put_u32(&mut attr, 8, BPF_XDP);
            put_u32(&mut attr, 12, flags);
            bpf(BPF_LINK_CREATE, &mut attr)
        };
        let busy =
            |e: &std::io::Error| matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EEXIST));
        let (link, native) = match link_with(XDP_FLAGS_DRV_MODE) {
            Ok(l) => (l, true),
            Err(e) if busy(&e) => return Err(already_attached(name)),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
                return Err(fail("attaching the XDP program", e))
            }
            // The driver has no XDP hook of its own (EOPNOTSUPP) or refuses this one: the
            // generic hook takes any driver, after the socket buffer is built.
            Err(_) => match link_with(XDP_FLAGS_SKB_MODE) {
                Ok(l) => (l, false),
                Err(e) if busy(&e) => return Err(already_attached(name)),
                Err(e) => return Err(fail("attaching the XDP program (generic mode)", e)),
            },
        };
        Ok(XdpGroup {
            inner: Arc::new(Attachment {
                map,
                _prog: prog,
                _link: link,
                native,
            }),
        })
    }

    /// "native" (the driver's hook) or "generic".
    pub(crate) fn mode(&self) -> &'static str {
        if self.inner.native {
            "native"
        } else {
            "generic"
        }
    }
}

fn already_attached(name: &str) -> CaptureError {
    CaptureError::Live {
        name: name.to_string(),
        detail: format!(
            "it already has an XDP program ('ip link show dev {name}' shows it; 'ip link set dev \
             {name} xdp off' removes one attached without a link): --capture ring works beside it"
        ),
    }
}

/// One mapped ring of the socket (fill or receive): producer and consumer words, flags, and
/// `size` entries of `T`.
struct MappedRing {
    base: *mut u8,
    len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut u8,
    mask: u32,
}

impl MappedRing {
    fn map(
        fd: &OwnedFd,
        off: &libc::xdp_ring_offset,
        entry: usize,
        size: u32,
        pgoff: libc::off_t,
    ) -> std::io::Result<MappedRing> {
        let len = off.desc as usize + entry * size as usize;
        // SAFETY: maps the socket's ring at the offset the kernel gave for it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                pgoff,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = base as *mut u8;
        // SAFETY: the kernel's offsets lie inside the mapping it sized.
        unsafe {
            Ok(MappedRing {
                base,
                len,
                producer: base.add(off.producer as usize) as *const AtomicU32,
                consumer: base.add(off.consumer as usize) as *const AtomicU32,
                flags: base.add(off.flags as usize) as *const AtomicU32,
                desc: base.add(off.desc as usize),
                mask: size - 1,
            })
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: a 4-aligned word inside the mapping, shared with the kernel.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }

    fn needs_wakeup(&self) -> bool {
        // SAFETY: as for `producer`.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }
}

impl Drop for MappedRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly this ring's mapping.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

/// One AF_XDP socket bound to one receive queue, with its own UMEM.
pub struct XdpSource {
    // Field order is drop order: the rings and the socket before the UMEM they point into.
    rx: MappedRing,
    fill: MappedRing,
    _completion: MappedRing,
    fd: OwnedFd,
    umem: *mut u8,
    umem_len: usize,
    chunk: u64,
    _group: Arc<Attachment>,
    zero_copy: bool,
    link: LinkType,
    poll_ms: i32,
    /// Receive-ring entries read (`rx_cons`) out of those the kernel had produced when last
    /// looked (`rx_seen`); read entries are handed back together, when all are read.
    rx_cons: u32,
    rx_seen: u32,
    rx_released: u32,
    fill_prod: u32,
    /// The clock at the last look at the ring: the timestamp of the frames found then.
    batch_ns: u64,
    /// Whether frames came since the last wait (see `wait`).
    found_since_wait: bool,
    delivered: u64,
}

// SAFETY: the mappings belong to this source alone (its own socket and UMEM); it is moved to
// its shard's thread and used there only. The shared attachment is only fds.
unsafe impl Send for XdpSource {}

impl XdpSource {
    pub(crate) fn open(
        cfg: &LiveConfig,
        link: LinkType,
        group: &XdpGroup,
        queue: u32,
    ) -> Result<XdpSource, CaptureError> {
        let name = cfg.interface.as_str();
        let ifindex = interface_index(name)?;
        let err = |what: &str, e: std::io::Error| classify_os_error(name, what, e);
        // SAFETY: plain socket(2) call; the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(err(
                "socket(AF_XDP) (a kernel without AF_XDP: use --capture ring)",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `raw` is a new descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let chunk = chunk_for(name);
        let frames = ((cfg.ring_bytes as u64 / chunk).max(64) as u32).next_power_of_two();
        let umem_len = frames as usize * chunk as usize;
        // SAFETY: a private anonymous mapping, checked below.
        let umem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                umem_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if umem == libc::MAP_FAILED {
            return Err(err("mmap of the UMEM", std::io::Error::last_os_error()));
        }
        // Every frame is in a chunk of its own, so each packet read touches a new page: with
        // transparent huge pages (where the system allows them) that is a TLB entry per 512
        // frames instead of one each. The pages are faulted in when the UMEM is registered.
        // SAFETY: advice on the mapping just made; failure only means small pages.
        unsafe { libc::madvise(umem, umem_len, libc::MADV_HUGEPAGE) };
        let umem = umem as *mut u8;
        // From here on the UMEM is unmapped by `XdpSource`'s Drop, or by this guard.
        struct Unmap(*mut u8, usize, bool);
        impl Drop for Unmap {
            fn drop(&mut self) {
                if self.2 {
                    // SAFETY: the mapping made just above, not yet owned by a source.
                    unsafe { libc::munmap(self.0 as *mut libc::c_void, self.1) };
                }
            }
        }
        let mut guard = Unmap(umem, umem_len, true);
        let reg = UmemReg {
            addr: umem as u64,
            len: umem_len as u64,
            chunk_size: chunk as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(&fd, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg).map_err(|e| {
            let hint = if e.raw_os_error() == Some(libc::ENOBUFS)
                || e.raw_os_error() == Some(libc::ENOMEM)
            {
                " (the locked-memory limit: raise 'ulimit -l' or lower --ring-mb)"
            } else {
                ""
            };
            err(
                &format!("registering {} MiB of UMEM{hint}", umem_len >> 20),
                e,
            )
        })?;
        let ring_size = frames;
        setsockopt(&fd, libc::SOL_XDP, libc::XDP_UMEM_FILL_RING, &ring_size)
            .map_err(|e| err("XDP fill ring", e))?;
        // Unused (sonde sends nothing) but the kernel binds no socket without one.
        setsockopt(&fd, libc::SOL_XDP, libc::XDP_UMEM_COMPLETION_RING, &64u32)
            .map_err(|e| err("XDP completion ring", e))?;
        setsockopt(&fd, libc::SOL_XDP, libc::XDP_RX_RING, &ring_size)
            .map_err(|e| err("XDP receive ring", e))?;
        // SAFETY: plain data, filled in by the kernel.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
        // SAFETY: `off` is writable for `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                &mut off as *mut libc::xdp_mmap_offsets as *mut libc::c_void,
                &mut len,
            )
        };
        if rc != 0 {
            return Err(err("XDP_MMAP_OFFSETS", std::io::Error::last_os_error()));
        }
        let rx = MappedRing::map(&fd, &off.rx, 16, ring_size, libc::XDP_PGOFF_RX_RING)
            .map_err(|e| err("mmap of the receive ring", e))?;
        let fill = MappedRing::map(&fd, &off.fr, 8, ring_size, XDP_UMEM_PGOFF_FILL_RING)
            .map_err(|e| err("mmap of the fill ring", e))?;
        let completion = MappedRing::map(&fd, &off.cr, 8, 64, XDP_UMEM_PGOFF_COMPLETION_RING)
            .map_err(|e| err("mmap of the completion ring", e))?;
        // Every frame starts on the fill ring, for the kernel to write into.
        for i in 0..frames {
            // SAFETY: entry i of `ring_size` 8-byte entries of the fill ring.
            unsafe {
                (fill.desc as *mut u64)
                    .add(i as usize)
                    .write(i as u64 * chunk)
            };
        }
        fill.producer().store(frames, Ordering::Release);
        let bind = |flags: u16| {
            let sxdp = libc::sockaddr_xdp {
                sxdp_family: libc::AF_XDP as u16,
                sxdp_flags: flags,
                sxdp_ifindex: ifindex,
                sxdp_queue_id: queue,
                sxdp_shared_umem_fd: 0,
            };
            // SAFETY: `sxdp` is a valid sockaddr_xdp of the size passed.
            let rc = unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    &sxdp as *const libc::sockaddr_xdp as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        let zero_copy = match bind(libc::XDP_ZEROCOPY | libc::XDP_USE_NEED_WAKEUP) {
            Ok(()) => true,
            Err(_) => {
                bind(libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP).map_err(|e| {
                    err(
                        &format!("binding an AF_XDP socket to receive queue {queue}"),
                        e,
                    )
                })?;
                false
            }
        };
        let mut attr = [0u8; 128];
        let (key, value) = (queue, fd.as_raw_fd() as u32);
        put_u32(&mut attr, 0, group.inner.map.as_raw_fd() as u32);
        put_u64(&mut attr, 8, &key as *const u32 as u64);
        put_u64(&mut attr, 16, &value as *const u32 as u64);
        bpf_call(BPF_MAP_UPDATE_ELEM, &mut attr)
            .map_err(|e| err("adding the socket to the XSKMAP", e))?;
        guard.2 = false;
        Ok(XdpSource {
            rx,
            fill,
            _completion: completion,
            fd,
            umem,
            umem_len,
            chunk,
            _group: group.inner.clone(),
            zero_copy,
            link,
            poll_ms: cfg.poll_ms,
            rx_cons: 0,
            rx_seen: 0,
            rx_released: 0,
            fill_prod: frames,
            batch_ns: 0,
            found_since_wait: false,
            delivered: 0,
        })
    }

    pub fn link_type(&self) -> LinkType {
        self.link
    }

    /// "zero-copy" or "copy".
    pub(crate) fn copy_mode(&self) -> &'static str {
        if self.zero_copy {
            "zero-copy"
        } else {
            "copy"
        }
    }

    /// Hands the frames read since the last release back to the kernel: the receive ring's
    /// entries, and their frames to the fill ring.
    fn release(&mut self) {
        let n = self.rx_cons.wrapping_sub(self.rx_released);
        if n == 0 {
            return;
        }
        for i in 0..n {
            let slot = (self.rx_released.wrapping_add(i) & self.rx.mask) as usize;
            // SAFETY: entry `slot` of the receive ring (16-byte descriptors: addr, len,
            // options), read before its consumer index is published below.
            let addr = unsafe { (self.rx.desc as *const u64).add(slot * 2).read() };
            let fslot = (self.fill_prod.wrapping_add(i) & self.fill.mask) as usize;
            // SAFETY: the fill ring has room for every frame there is, and these were not on
            // it; entry `fslot` is inside the ring.
            unsafe {
                (self.fill.desc as *mut u64)
                    .add(fslot)
                    .write(addr & !(self.chunk - 1))
            };
        }
        self.rx.consumer().store(self.rx_cons, Ordering::Release);
        self.fill_prod = self.fill_prod.wrapping_add(n);
        self.fill
            .producer()
            .store(self.fill_prod, Ordering::Release);
        self.rx_released = self.rx_cons;
        if self.fill.needs_wakeup() {
            // SAFETY: a zero-length non-blocking receive only kicks the driver.
            unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
    }

    /// The next captured frame, or `Ok(None)` when none is waiting right now.
    #[inline]
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, CaptureError> {
        loop {
            // Frames go back to the kernel in groups, also in the middle of a long batch, so
            // the fill ring never runs dry while the engine works through one.
            if self.rx_cons.wrapping_sub(self.rx_released) >= RELEASE_EVERY {
                self.release();
            }
            if self.rx_cons == self.rx_seen {
                self.release();
                self.rx_seen = self.rx.producer().load(Ordering::Acquire);
                if self.rx_cons == self.rx_seen {
                    return Ok(None);
                }
                self.batch_ns = realtime_ns();
                self.found_since_wait = true;
                for i in 0..PREFETCH_AHEAD - 1 {
                    self.prefetch(self.rx_cons.wrapping_add(i));
                }
            }
            let slot = (self.rx_cons & self.rx.mask) as usize;
            // SAFETY: entry `slot` of the receive ring, produced by the kernel (the Acquire
            // load of the producer index above orders this read after its write).
            let (addr, len) = unsafe {
                let d = self.rx.desc.add(slot * 16);
                (
                    (d as *const u64).read() as usize,
                    (d.add(8) as *const u32).read() as usize,
                )
            };
            self.rx_cons = self.rx_cons.wrapping_add(1);
            self.delivered += 1;
            self.prefetch(self.rx_cons.wrapping_add(PREFETCH_AHEAD - 1));
            if addr.checked_add(len).is_none_or(|end| end > self.umem_len) {
                // The kernel never writes this; skip it rather than read outside the UMEM.
                continue;
            }
            // SAFETY: inside the UMEM (checked above); the kernel gave this frame to sonde and
            // takes it back only after `release`, which the borrow of `self` keeps until the
            // next call.
            let data = unsafe { std::slice::from_raw_parts(self.umem.add(addr), len) };
            return Ok(Some(Frame {
                ts_ns: self.batch_ns,
                wire_len: len as u32,
                data,
            }));
        }
    }

    /// After a wake-up that found frames, a short sleep instead of `poll`: AF_XDP wakes a
    /// poller for every packet, a context switch each under load, where a TPACKET_V3 ring
    /// wakes it once a block. The receive ring holds thousands of frames, so 200 µs of
    /// traffic waits there and is read as one batch; on a quiet link the next wait blocks.
    /// The frames the kernel has produced (at most [`MAX_BATCH`]), appended to `out`, after
    /// handing back those of the last call; false when none is ready. They stay valid together
    /// until the next call, so the engine reads their payloads in place.
    pub fn next_batch<'a>(&'a mut self, out: &mut Vec<Frame<'a>>) -> bool {
        self.release();
        if self.rx_cons == self.rx_seen {
            self.rx_seen = self.rx.producer().load(Ordering::Acquire);
            if self.rx_cons == self.rx_seen {
                return false;
            }
        }
        self.batch_ns = realtime_ns();
        self.found_since_wait = true;
        let n = self.rx_seen.wrapping_sub(self.rx_cons).min(MAX_BATCH);
        let first = self.rx_cons;
        for i in 0..n {
            // Every frame of the batch starts loading before the engine reads the first.
            self.prefetch(first.wrapping_add(i));
        }
        self.rx_cons = first.wrapping_add(n);
        self.delivered += n as u64;
        let (umem, umem_len, ts_ns) = (self.umem, self.umem_len, self.batch_ns);
        for i in 0..n {
            let slot = (first.wrapping_add(i) & self.rx.mask) as usize;
            // SAFETY: entry `slot` of the receive ring, produced by the kernel (the Acquire
            // load of the producer index orders this read after its write).
            let (addr, len) = unsafe {
                let d = self.rx.desc.add(slot * 16);
                (
                    (d as *const u64).read() as usize,
                    (d.add(8) as *const u32).read() as usize,
                )
            };
            if addr.checked_add(len).is_none_or(|end| end > umem_len) {
                continue;
            }
            // SAFETY: inside the UMEM (checked above); the kernel gets these frames back only
            // at the next call, which the borrow of `self` in `out` prevents until then.
            let data = unsafe { std::slice::from_raw_parts(umem.add(addr), len) };
            out.push(Frame {
                ts_ns,
                wire_len: len as u32,
                data,
            });
        }
        true
    }

    /// Starts loading the first bytes of receive-ring entry `at` (if the kernel has produced
    /// it) a few frames before the engine decodes it: the frames are a chunk apart, too far
    /// for the hardware's own prefetching, and fresh from another core's cache.
    #[inline]
    fn prefetch(&self, at: u32) {
        if at.wrapping_sub(self.rx_cons) >= self.rx_seen.wrapping_sub(self.rx_cons) {
            return;
        }
        let slot = (at & self.rx.mask) as usize;
        // SAFETY: entry `slot` of the receive ring is produced (checked above).
        let addr = unsafe { (self.rx.desc.add(slot * 16) as *const u64).read() } as usize;
        if addr < self.umem_len {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch is only a hint; the address is inside the UMEM.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(self.umem.add(addr) as *const i8);
            }
        }
    }

    pub fn wait(&mut self) {
        if std::mem::take(&mut self.found_since_wait) {
            std::thread::sleep(std::time::Duration::from_micros(200));
        } else {
            self.wait_ms(self.poll_ms);
        }
    }

    fn wait_ms(&self, ms: i32) {
        wait_readable(self.fd.as_raw_fd(), ms);
    }

    /// At stop: what the receive ring still holds, within a few milliseconds.
    pub fn drain(&mut self, mut each: impl FnMut(Frame<'_>)) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(20);
        loop {
            match self.next_frame() {
                Ok(Some(f)) => each(f),
                _ => {
                    if std::time::Instant::now() >= deadline {
                        break;
                    }
                    self.wait_ms(5);
                }
            }
        }
        self.release();
    }

    /// Frames delivered plus those the kernel dropped for this socket (as libpcap's
    /// `ps_recv` counts them), and the drops: no free frame in the fill ring, or a full
    /// receive ring.
    pub fn drops(&mut self) -> CaptureDrops {
        // SAFETY: plain data, filled in by the kernel.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
        // SAFETY: `st` is writable for `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                &mut st as *mut libc::xdp_statistics as *mut libc::c_void,
                &mut len,
            )
        };
        let dropped = if rc == 0 {
            st.rx_dropped + st.rx_ring_full
        } else {
            0
        };
        CaptureDrops {
            received: self.delivered + dropped,
            dropped,
            if_dropped: 0,
        }
    }
}

impl Drop for XdpSource {
    fn drop(&mut self) {
        // The kernel pinned the UMEM's pages when it was registered and keeps them until the
        // socket (closed right after this, with the fields) lets go, so unmapping sonde's view
        // first is safe; nothing here reads it again.
        // SAFETY: unmaps exactly the UMEM mapped in `open`.
        unsafe {
            libc::munmap(self.umem as *mut libc::c_void, self.umem_len);
        }
    }
}

fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redirect_program_is_the_six_instructions_it_says() {
        let p = redirect_program(0x0a0b);
        let expect: [[u8; 8]; 6] = [
            [0x61, 0x12, 0x10, 0, 0, 0, 0, 0],    // r2 = *(u32 *)(r1 + 16)
            [0x18, 0x11, 0, 0, 0x0b, 0x0a, 0, 0], // r1 = map fd 0x0a0b (pseudo map fd)
            [0; 8],                               // its upper half
            [0xb7, 0x03, 0, 0, 2, 0, 0, 0],       // r3 = XDP_PASS
            [0x85, 0, 0, 0, 51, 0, 0, 0],         // call bpf_redirect_map
            [0x95, 0, 0, 0, 0, 0, 0, 0],          // exit
        ];
        assert_eq!(p, expect.concat());
    }

    #[test]
    fn frames_of_a_standard_mtu_get_half_a_page() {
        // No such interface: the standard MTU is assumed.
        assert_eq!(chunk_for("no-such-interface-here"), 2048);
    }
}
