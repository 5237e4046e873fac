//! Live capture straight from the kernel's AF_PACKET TPACKET_V3 ring, with no library call per
//! packet.
//!
//! Why it exists: libpcap reads the same kind of ring, but hands every packet through a
//! callback and its own bookkeeping. Here a shard walks the ring's blocks itself: a frame is a
//! slice of the mapped ring, decoded where the kernel wrote it, and a block goes back to the
//! kernel as soon as its last frame was read. The capture filter is compiled once by libpcap
//! and attached to the socket (SO_ATTACH_FILTER), so the kernel discards what it rejects
//! before copying it into the ring; with no filter a one-instruction program applies the snap
//! length. Several rings on one interface join a PACKET_FANOUT_HASH group.
//!
//! The kernel moves a VLAN tag out of the frame into the ring's packet header; it is put back
//! (into a scratch buffer, the only copy this source makes) so the frame is the one on the
//! wire, as libpcap does.

use crate::error::CaptureError;
use crate::live::{
    classify_os_error, interface_drops, interface_index, join_fanout, wait_readable, CaptureDrops,
    LiveConfig,
};
use crate::Frame;
use sonde_wire::LinkType;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

// linux/if_packet.h
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const TPACKET_V3: libc::c_int = 2;
const PACKET_MR_PROMISC: libc::c_ushort = 1;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const ETH_P_8021Q: u16 = 0x8100;
// linux/if_arp.h: the hardware types whose frames sonde decodes without libpcap's help.
const ARPHRD_ETHER: u16 = 1;
const ARPHRD_LOOPBACK: u16 = 772;
const ARPHRD_RAWIP: u16 = 519;
const ARPHRD_NONE: u16 = 0xfffe;

/// `struct tpacket_req3`.
#[repr(C)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

/// `struct tpacket_stats_v3`.
#[repr(C)]
#[derive(Default)]
struct TpacketStatsV3 {
    packets: u32,
    drops: u32,
    freeze_q_cnt: u32,
}

/// `struct packet_mreq`.
#[repr(C)]
struct PacketMreq {
    ifindex: libc::c_int,
    kind: libc::c_ushort,
    alen: libc::c_ushort,
    address: [u8; 8],
}

// Offsets in `struct tpacket_block_desc` (its `tpacket_hdr_v1` starts at 8).
const BLOCK_STATUS: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST_PKT: usize = 16;
const BLOCK_DESC_LEN: usize = 48;
// Offsets in `struct tpacket3_hdr`.
const PKT_NEXT: usize = 0;
const PKT_SEC: usize = 4;
const PKT_NSEC: usize = 8;
const PKT_SNAPLEN: usize = 12;
const PKT_LEN: usize = 16;
const PKT_STATUS: usize = 20;
const PKT_MAC: usize = 24;
const PKT_VLAN_TCI: usize = 32;
const PKT_VLAN_TPID: usize = 36;
/// The `sockaddr_ll` after the header (at TPACKET_ALIGN(sizeof(tpacket3_hdr))): its packet
/// type byte.
const PKT_SLL_PKTTYPE: usize = 48 + 10;
const PACKET_OUTGOING: u8 = 4;

/// The most frames [`RingSource::next_batch`] hands out at once.
pub const BATCH_FRAMES: usize = 256;

/// Which link type an interface's frames have, from its hardware type (`None`: one this
/// source does not handle, e.g. a tunnel with its own header; libpcap knows more of them).
pub(crate) fn link_of_hardware(hw: u16) -> Option<LinkType> {
    match hw {
        // Linux gives the loopback device an all-zero Ethernet header, as libpcap's DLT_EN10MB.
        ARPHRD_ETHER | ARPHRD_LOOPBACK => Some(LinkType::Ethernet),
        // A tun device or a raw-IP modem: the frame starts at the IP header.
        ARPHRD_RAWIP | ARPHRD_NONE => Some(LinkType::Raw),
        _ => None,
    }
}

/// The ring's shape from the configuration: blocks of `ring_block_bytes` (a power of two of
/// at least a page), as many as fit in `ring_bytes` (at least 2).
pub(crate) fn ring_shape(cfg: &LiveConfig) -> (u32, u32) {
    let page = 4096usize;
    let block = cfg.ring_block_bytes.max(page).next_power_of_two();
    let blocks = (cfg.ring_bytes / block).max(2);
    (block as u32, blocks as u32)
}

/// One TPACKET_V3 ring on one interface (a fanout member when the interface has several).
pub struct RingSource {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    blocks: usize,
    /// The block being read, and where in it: the next packet's offset and how many remain.
    block: usize,
    next_pkt: usize,
    left_in_block: u32,
    /// True while `block` is ours (status USER) and not yet handed back.
    holding: bool,
    link: LinkType,
    /// The loopback device, whose outgoing copies are skipped.
    loopback: bool,
    /// Tagged frames rebuilt with their VLAN tag (the kernel moved it out of the frame).
    scratch: Vec<u8>,
    /// Where each frame of a block is, for `next_block`: (timestamp, wire length, in
    /// `scratch`, offset, length).
    locs: Vec<(u64, u32, bool, usize, usize)>,
    name: String,
    poll_ms: i32,
    block_ms: i32,
    /// The kernel's counters since open (reading them resets the kernel's own).
    received: u64,
    dropped: u64,
    /// The interface's own drop counter at open, and its last reading (read at most twice a
    /// second: it is a sysfs file, and the stats path runs at every housekeeping point).
    if_dropped_base: u64,
    if_dropped_last: u64,
    if_read_at: Option<Instant>,
    promisc: bool,
}

// SAFETY: the mapping belongs to this source alone (its socket's ring, unmapped in Drop); the
// source is moved to its shard's thread and used there only.
unsafe impl Send for RingSource {}

/// The hardware type of an interface (`ARPHRD_*`), from sysfs.
pub(crate) fn hardware_type(name: &str) -> Option<u16> {
    std::fs::read_to_string(format!("/sys/class/net/{name}/type"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

impl RingSource {
    /// Opens a ring on `cfg.interface`; `program` is the compiled capture filter (or the
    /// snap-length program), attached before the socket is bound so no unfiltered packet
    /// reaches the ring.
    pub(crate) fn open(
        cfg: &LiveConfig,
        link: LinkType,
        program: &[libc::sock_filter],
    ) -> Result<RingSource, CaptureError> {
        let name = cfg.interface.as_str();
        let ifindex = interface_index(name)?;
        let os = |what: &str| classify_os_error(name, what, std::io::Error::last_os_error());
        // Protocol 0: the socket receives nothing until it is bound, after the filter is on.
        // SAFETY: plain socket(2) call; the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(os("socket(AF_PACKET)"));
        }
        // SAFETY: `raw` is a new descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        setsockopt(&fd, libc::SOL_PACKET, PACKET_VERSION, &TPACKET_V3)
            .map_err(|e| classify_os_error(name, "PACKET_VERSION (TPACKET_V3)", e))?;
        let (block_size, blocks) = ring_shape(cfg);
        // Frames are variable in V3; the frame fields only have to describe the same memory.
        let frame_size = 2048u32.min(block_size);
        let req = TpacketReq3 {
            block_size,
            block_nr: blocks,
            frame_size,
            frame_nr: (block_size / frame_size) * blocks,
            retire_blk_tov: cfg.block_ms.max(1) as u32,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        setsockopt(&fd, libc::SOL_PACKET, PACKET_RX_RING, &req).map_err(|e| {
            classify_os_error(
                name,
                &format!(
                    "PACKET_RX_RING ({blocks} blocks of {} KiB; try a smaller --ring-mb)",
                    block_size >> 10
                ),
                e,
            )
        })?;
        let map_len = block_size as usize * blocks as usize;
        // The kernel maps every page of the ring here (no faults later while reading it).
        // SAFETY: maps the ring the kernel just allocated for this socket, shared with it.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(os("mmap of the ring"));
        }
        let mut src = RingSource {
            fd,
            map: map as *mut u8,
            map_len,
            block_size: block_size as usize,
            blocks: blocks as usize,
            block: 0,
            next_pkt: 0,
            left_in_block: 0,
            holding: false,
            link,
            loopback: hardware_type(name) == Some(ARPHRD_LOOPBACK),
            scratch: Vec::new(),
            locs: Vec::new(),
            name: name.to_string(),
            poll_ms: cfg.poll_ms,
            block_ms: cfg.block_ms,
            received: 0,
            dropped: 0,
            if_dropped_base: 0,
            if_dropped_last: 0,
            if_read_at: None,
            promisc: cfg.promisc,
        };
        let prog = libc::sock_fprog {
            len: program.len() as u16,
            filter: program.as_ptr() as *mut libc::sock_filter,
        };
        setsockopt(&src.fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
            .map_err(|e| classify_os_error(name, "SO_ATTACH_FILTER", e))?;
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value to fill in.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll of the size passed.
        let rc = unsafe {
            libc::bind(
                src.fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(os("bind"));
        }
        if cfg.promisc {
            let mreq = PacketMreq {
                ifindex: ifindex as i32,
                kind: PACKET_MR_PROMISC,
                alen: 0,
                address: [0; 8],
            };
            setsockopt(&src.fd, libc::SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)
                .map_err(|e| classify_os_error(name, "promiscuous mode", e))?;
        }
        if let Some(group) = cfg.fanout_group {
            join_fanout(src.fd.as_raw_fd(), group).map_err(|e| CaptureError::Live {
                name: name.to_string(),
                detail: format!("PACKET_FANOUT: {e}"),
            })?;
        }
        src.if_dropped_base = interface_drops(name).unwrap_or(0);
        src.if_dropped_last = src.if_dropped_base;
        Ok(src)
    }

    pub fn link_type(&self) -> LinkType {
        self.link
    }

    fn status(&self, block: usize) -> &AtomicU32 {
        // SAFETY: `block < blocks`, so the word lies inside the mapping, 4-aligned (blocks are
        // page-aligned); the kernel and this source hand the block over through this word.
        unsafe { &*(self.map.add(block * self.block_size + BLOCK_STATUS) as *const AtomicU32) }
    }

    /// The current block's bytes. Only while `holding`: the kernel writes a block only while
    /// its status says it owns it.
    fn block_bytes(&self) -> &[u8] {
        debug_assert!(self.holding);
        // SAFETY: inside the mapping (block < blocks); the kernel does not write a block whose
        // status is USER, which `holding` says it is, until this source sets it back.
        unsafe {
            std::slice::from_raw_parts(self.map.add(self.block * self.block_size), self.block_size)
        }
    }

    fn release_block(&mut self) {
        if self.holding {
            // Release: every read of the block happens before the kernel may write it again.
            self.status(self.block)
                .store(TP_STATUS_KERNEL, Ordering::Release);
            self.holding = false;
            self.block = (self.block + 1) % self.blocks;
        }
    }

    /// Takes the next block if the kernel has handed it over.
    fn take_block(&mut self) -> bool {
        // Acquire: the block's contents are read only after its status says USER.
        if self.status(self.block).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            return false;
        }
        self.holding = true;
        let b = self.block_bytes();
        let (n, first) = (
            u32_at(b, BLOCK_NUM_PKTS),
            u32_at(b, BLOCK_FIRST_PKT) as usize,
        );
        self.left_in_block = n;
        self.next_pkt = first;
        true
    }

    /// The next captured frame, or `Ok(None)` when none is waiting right now.
    #[inline]
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, CaptureError> {
        loop {
            if self.left_in_block == 0 {
                self.release_block();
                if !self.take_block() {
                    return Ok(None);
                }
                continue;
            }
            let Some(h) = self.next_header() else {
                continue;
            };
            if !self.is_tagged(&h) {
                // A slice of the held block: valid until the next call, which the borrow of
                // `self` guarantees.
                return Ok(Some(Frame {
                    ts_ns: h.ts_ns,
                    wire_len: h.wire,
                    data: &self.block_bytes()[h.mac..h.mac + h.snap],
                }));
            }
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            push_tagged(&mut scratch, &self.block_bytes()[h.mac..h.mac + h.snap], &h);
            self.scratch = scratch;
            return Ok(Some(Frame {
                ts_ns: h.ts_ns,
                wire_len: h.wire + 4,
                data: &self.scratch,
            }));
        }
    }

    /// The next frames of the current block (at most [`BATCH_FRAMES`]), or of the next block
    /// the kernel handed over (the last one given back first), appended to `out`; false when
    /// none is ready. The frames stay valid together until the next call, so the engine reads
    /// their payloads in place, while the header walk has left them in the cache (a whole
    /// block is larger than it).
    pub fn next_batch<'a>(&'a mut self, out: &mut Vec<Frame<'a>>) -> bool {
        if !self.holding || self.left_in_block == 0 {
            self.release_block();
            if !self.take_block() {
                return false;
            }
        }
        // First every header (rebuilding tagged frames in the scratch buffer), then the
        // slices: the scratch buffer must not move once a frame points into it.
        let mut locs = std::mem::take(&mut self.locs);
        locs.clear();
        self.scratch.clear();
        while locs.len() < BATCH_FRAMES {
            let Some(h) = self.next_header() else {
                break;
            };
            if !self.is_tagged(&h) {
                locs.push((h.ts_ns, h.wire, false, h.mac, h.snap));
                continue;
            }
            let start = self.scratch.len();
            let mut scratch = std::mem::take(&mut self.scratch);
            push_tagged(&mut scratch, &self.block_bytes()[h.mac..h.mac + h.snap], &h);
            self.scratch = scratch;
            locs.push((h.ts_ns, h.wire + 4, true, start, self.scratch.len() - start));
        }
        self.locs = locs;
        let (block, scratch) = (self.block_bytes(), &self.scratch[..]);
        out.extend(
            self.locs
                .iter()
                .map(|&(ts_ns, wire_len, tagged, at, len)| Frame {
                    ts_ns,
                    wire_len,
                    data: if tagged {
                        &scratch[at..at + len]
                    } else {
                        &block[at..at + len]
                    },
                }),
        );
        true
    }

    /// The next header of the held block, moved past; `None` when the block has no more.
    #[inline]
    fn next_header(&mut self) -> Option<PacketHeader> {
        while self.left_in_block > 0 {
            self.left_in_block -= 1;
            let Some(h) = PacketHeader::read(self.block_bytes(), self.next_pkt) else {
                // The kernel never writes this; give the rest of the block up rather than
                // read outside it.
                self.left_in_block = 0;
                return None;
            };
            if h.next == 0 {
                self.left_in_block = 0;
            }
            self.next_pkt += h.next;
            if self.loopback && h.pkttype == PACKET_OUTGOING {
                // The loopback device hands every packet over twice, going out and coming in;
                // libpcap keeps the second, and so does this.
                continue;
            }
            return Some(h);
        }
        None
    }

    fn is_tagged(&self, h: &PacketHeader) -> bool {
        self.link == LinkType::Ethernet
            && (h.vlan_tci != 0 || h.status & TP_STATUS_VLAN_VALID != 0)
            && h.snap >= 12
    }

    /// Waits up to the poll interval for a block.
    pub fn wait(&self) {
        self.wait_ms(self.poll_ms);
    }

    fn wait_ms(&self, ms: i32) {
        if self.status(self.block).load(Ordering::Acquire) & TP_STATUS_USER != 0 {
            return;
        }
        wait_readable(self.fd.as_raw_fd(), ms);
    }

    /// At stop: waits for the block the kernel still holds (retired at the block timeout) and
    /// hands every remaining frame to `each`.
    pub fn drain(&mut self, mut each: impl FnMut(Frame<'_>)) {
        let deadline =
            Instant::now() + std::time::Duration::from_millis(2 * self.block_ms as u64 + 10);
        loop {
            match self.next_frame() {
                Ok(Some(f)) => each(f),
                _ => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    self.wait_ms(left.as_millis().max(1) as i32);
                }
            }
        }
    }

    /// The kernel's counters since open: packets that passed the filter (delivered or
    /// dropped, as libpcap's `ps_recv`), packets dropped for lack of ring space, and the
    /// interface's own drops (libpcap's `ps_ifdrop`, counted in promiscuous mode).
    pub fn drops(&mut self) -> CaptureDrops {
        let mut st = TpacketStatsV3::default();
        let mut len = std::mem::size_of::<TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: `st` is writable for `len` bytes; the kernel writes at most that.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                &mut st as *mut TpacketStatsV3 as *mut libc::c_void,
                &mut len,
            )
        };
        if rc == 0 {
            // The kernel's tp_packets already counts the dropped ones.
            self.received += st.packets as u64;
            self.dropped += st.drops as u64;
        }
        if self.promisc
            && self
                .if_read_at
                .is_none_or(|t| t.elapsed().as_millis() >= 500)
        {
            self.if_read_at = Some(Instant::now());
            if let Some(n) = interface_drops(&self.name) {
                self.if_dropped_last = n;
            }
        }
        CaptureDrops {
            received: self.received,
            dropped: self.dropped,
            if_dropped: self.if_dropped_last.saturating_sub(self.if_dropped_base),
        }
    }
}

impl Drop for RingSource {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`; nothing borrows it past `self`.
        unsafe {
            libc::munmap(self.map as *mut libc::c_void, self.map_len);
        }
    }
}

/// Appends `frame` to `out` with the VLAN tag the kernel took out of it put back after the
/// MAC addresses.
fn push_tagged(out: &mut Vec<u8>, frame: &[u8], h: &PacketHeader) {
    let tpid = if h.status & TP_STATUS_VLAN_TPID_VALID != 0 {
        h.vlan_tpid
    } else {
        ETH_P_8021Q
    };
    out.extend_from_slice(&frame[..12]);
    out.extend_from_slice(&tpid.to_be_bytes());
    out.extend_from_slice(&(h.vlan_tci as u16).to_be_bytes());
    out.extend_from_slice(&frame[12..]);
}

/// A `tpacket3_hdr` as read from a block, its offsets checked against the block.
struct PacketHeader {
    /// Offset of the next packet from this one (0: the last of the block).
    next: usize,
    ts_ns: u64,
    snap: usize,
    wire: u32,
    status: u32,
    /// Where the frame starts in the block.
    mac: usize,
    vlan_tci: u32,
    vlan_tpid: u16,
    pkttype: u8,
}

impl PacketHeader {
    #[inline]
    fn read(b: &[u8], at: usize) -> Option<PacketHeader> {
        if at < BLOCK_DESC_LEN || at + PKT_SLL_PKTTYPE + 1 > b.len() {
            return None;
        }
        let h = PacketHeader {
            next: u32_at(b, at + PKT_NEXT) as usize,
            ts_ns: u32_at(b, at + PKT_SEC) as u64 * 1_000_000_000 + u32_at(b, at + PKT_NSEC) as u64,
            snap: u32_at(b, at + PKT_SNAPLEN) as usize,
            wire: u32_at(b, at + PKT_LEN),
            status: u32_at(b, at + PKT_STATUS),
            mac: at + u16_at(b, at + PKT_MAC) as usize,
            vlan_tci: u32_at(b, at + PKT_VLAN_TCI),
            vlan_tpid: u16_at(b, at + PKT_VLAN_TPID),
            pkttype: b[at + PKT_SLL_PKTTYPE],
        };
        (h.mac + h.snap <= b.len()).then_some(h)
    }
}

#[inline]
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

/// setsockopt(2) with a value of type `T`.
pub(crate) fn setsockopt<T>(
    fd: &OwnedFd,
    level: libc::c_int,
    opt: libc::c_int,
    val: &T,
) -> std::io::Result<()> {
    // SAFETY: `val` points to a `T` of the size passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            val as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block with one packet header at `at`, its frame `mac_off` bytes after the header.
    fn block(at: usize, mac_off: u16, snap: u32, next: u32, status: u32, tci: u32) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        let put = |b: &mut Vec<u8>, off: usize, v: &[u8]| b[off..off + v.len()].copy_from_slice(v);
        put(&mut b, at + PKT_NEXT, &next.to_ne_bytes());
        put(&mut b, at + PKT_SEC, &7u32.to_ne_bytes());
        put(&mut b, at + PKT_NSEC, &5u32.to_ne_bytes());
        put(&mut b, at + PKT_SNAPLEN, &snap.to_ne_bytes());
        put(&mut b, at + PKT_LEN, &(snap + 100).to_ne_bytes());
        put(&mut b, at + PKT_STATUS, &status.to_ne_bytes());
        put(&mut b, at + PKT_MAC, &mac_off.to_ne_bytes());
        put(&mut b, at + PKT_VLAN_TCI, &tci.to_ne_bytes());
        put(&mut b, at + PKT_VLAN_TPID, &0x88a8u16.to_ne_bytes());
        b[at + PKT_SLL_PKTTYPE] = PACKET_OUTGOING;
        b
    }

    #[test]
    fn a_packet_header_is_read_with_its_offsets_checked() {
        let b = block(48, 82, 64, 160, TP_STATUS_USER | TP_STATUS_VLAN_VALID, 100);
        let h = PacketHeader::read(&b, 48).unwrap();
        assert_eq!((h.next, h.snap, h.wire, h.mac), (160, 64, 164, 130));
        assert_eq!(h.ts_ns, 7_000_000_005);
        assert_eq!(
            (h.vlan_tci, h.vlan_tpid, h.pkttype),
            (100, 0x88a8, PACKET_OUTGOING)
        );
        // A header inside the block descriptor, one past the block's end, or a frame that
        // would run past it: refused, never read outside the block.
        assert!(PacketHeader::read(&b, 16).is_none());
        assert!(PacketHeader::read(&b, 4090).is_none());
        let long = block(48, 82, 4000, 0, TP_STATUS_USER, 0);
        assert!(PacketHeader::read(&long, 48).is_none());
        let fits = block(48, 82, 4096 - 130, 0, TP_STATUS_USER, 0);
        assert!(PacketHeader::read(&fits, 48).is_some());
    }

    #[test]
    fn the_ring_is_whole_blocks_of_a_power_of_two() {
        let mut cfg = LiveConfig::new("eth0");
        assert_eq!(ring_shape(&cfg), (256 << 10, 256));
        cfg.ring_block_bytes = 3000;
        cfg.ring_bytes = 1 << 20;
        assert_eq!(ring_shape(&cfg), (4096, 256));
        // Never fewer than two blocks: the kernel fills one while sonde reads the other.
        cfg.ring_block_bytes = 4 << 20;
        assert_eq!(ring_shape(&cfg), (4 << 20, 2));
    }

    #[test]
    fn hardware_types_map_to_the_link_types_sonde_decodes() {
        assert_eq!(link_of_hardware(ARPHRD_ETHER), Some(LinkType::Ethernet));
        assert_eq!(link_of_hardware(ARPHRD_LOOPBACK), Some(LinkType::Ethernet));
        assert_eq!(link_of_hardware(ARPHRD_NONE), Some(LinkType::Raw));
        // A GRE tunnel (778) has a header of its own: libpcap's to read.
        assert_eq!(link_of_hardware(778), None);
    }
}
