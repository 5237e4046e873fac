//! One flow's state and its per-packet update.
//!
//! Counters are kept per canonical direction (index 0 = a→b, 1 = b→a, see [`crate::key`]);
//! `client_is_a` says which side opened the flow, so exporters can report client→server as
//! "in" the way nProbe does. The first cache line holds what every packet touches.

use crate::key::{Dir, FlowKey};
use sonde_dpi::{Meta, L7};
use sonde_wire::{tcpflags, Decoded, Tunnel};

pub const NO_HOST: u32 = u32::MAX;

/// TCP connection state as far as a passive observer can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum TcpState {
    #[default]
    None = 0,
    SynSent,
    SynReceived,
    Established,
    /// A FIN was seen from one side.
    Closing,
    /// FIN from both sides, or a RST.
    Closed,
}

impl TcpState {
    pub fn name(self) -> &'static str {
        match self {
            TcpState::None => "none",
            TcpState::SynSent => "syn_sent",
            TcpState::SynReceived => "syn_received",
            TcpState::Established => "established",
            TcpState::Closing => "closing",
            TcpState::Closed => "closed",
        }
    }

    /// The state whose number (`state as u8`) is `n`, for stored records.
    pub fn from_number(n: u8) -> Option<TcpState> {
        [
            TcpState::None,
            TcpState::SynSent,
            TcpState::SynReceived,
            TcpState::Established,
            TcpState::Closing,
            TcpState::Closed,
        ]
        .into_iter()
        .find(|s| *s as u8 == n)
    }
}

/// Why a flow record was emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EndReason {
    IdleTimeout = 0,
    ActiveTimeout,
    TcpEnd,
    Evicted,
    EndOfCapture,
}

impl EndReason {
    pub const ALL: [EndReason; 5] = [
        EndReason::IdleTimeout,
        EndReason::ActiveTimeout,
        EndReason::TcpEnd,
        EndReason::Evicted,
        EndReason::EndOfCapture,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EndReason::IdleTimeout => "idle_timeout",
            EndReason::ActiveTimeout => "active_timeout",
            EndReason::TcpEnd => "tcp_end",
            EndReason::Evicted => "evicted",
            EndReason::EndOfCapture => "end_of_capture",
        }
    }

    /// NetFlow v9/IPFIX flowEndReason (IE 136) value.
    pub fn ipfix_code(self) -> u8 {
        match self {
            EndReason::IdleTimeout => 1,
            EndReason::ActiveTimeout => 2,
            EndReason::TcpEnd => 3,
            EndReason::EndOfCapture => 4,
            EndReason::Evicted => 5,
        }
    }
}

/// What a live TCP flow's packets say about the path, by direction of the key (index 0: a → b),
/// for the API's flow pages (the rows of a snapshot do not carry it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpHealth {
    pub retransmits: [u32; 2],
    pub out_of_order: [u32; 2],
    /// The handshake's round trip: client side (ACK after SYN/ACK) and server side (SYN/ACK
    /// after SYN), microseconds, 0 when not seen.
    pub rtt_client_us: u32,
    pub rtt_server_us: u32,
}

/// Per-direction TCP sequence tracking, for retransmission and out-of-order counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqTrack {
    /// Sequence number expected next (highest seq + len seen).
    pub next_seq: u32,
    /// When `next_seq` last moved forward ([`SeqTrack::stamp`]); 0: nothing seen yet.
    pub advanced_at: u32,
}

impl SeqTrack {
    /// A time in units of 1,024 ns, wrapping every 73 minutes (only differences below a
    /// round trip matter), never 0 (its lowest bit is set).
    #[inline(always)]
    pub fn stamp(ts_ns: u64) -> u32 {
        ((ts_ns >> 10) as u32) | 1
    }

    /// Nanoseconds since `next_seq` last moved forward.
    #[inline(always)]
    fn since_advanced_ns(&self, ts_ns: u64) -> u64 {
        (Self::stamp(ts_ns).wrapping_sub(self.advanced_at) as u64) << 10
    }

    #[inline(always)]
    fn advance(&mut self, next_seq: u32, ts_ns: u64) {
        self.next_seq = next_seq;
        self.advanced_at = Self::stamp(ts_ns);
    }
}

/// How close to the newest segment an older one must arrive to be out of order rather than
/// a retransmission when the handshake was not seen (Wireshark's default).
const OUT_OF_ORDER_DEFAULT_NS: u64 = 3_000_000;

/// What only TCP flows and collected flows use, kept beside the flow table in a slab of its
/// own, at the flow's slot ([`Flow::has_ext`]): a UDP or ICMP flow (a flood's) takes three
/// cache lines instead of four. One cache line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct FlowExt {
    pub syn_ns: u64,
    pub synack_ns: u64,
    /// Handshake RTT halves in microseconds: SYN → SYN/ACK (server side) and SYN/ACK → ACK
    /// (client side), as nProbe's SERVER_NW_LATENCY_MS / CLIENT_NW_LATENCY_MS.
    pub rtt_server_us: u32,
    pub rtt_client_us: u32,
    pub seq: [SeqTrack; 2],
    pub retransmits: [u32; 2],
    pub out_of_order: [u32; 2],
    /// Collected flows: input and output SNMP interfaces.
    pub in_if: u32,
    pub out_if: u32,
}

impl FlowExt {
    /// What the API's flow pages show of it.
    pub fn health(&self) -> TcpHealth {
        TcpHealth {
            retransmits: self.retransmits,
            out_of_order: self.out_of_order,
            rtt_client_us: self.rtt_client_us,
            rtt_server_us: self.rtt_server_us,
        }
    }
}

#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub struct Flow {
    // --- first cache line: touched by every packet ---
    pub key: FlowKey,
    pub last_ns: u64,
    pub pkts: [u64; 2],
    // --- second line ---
    pub bytes: [u64; 2],
    /// Counts not yet added to the host table (flushed every tick and at the end).
    pub pending_bytes: [u64; 2],
    pub pending_pkts: [u32; 2],
    pub hosts: [u32; 2],
    /// The filter-set expressions a flow caches (see `sonde_analytics::filterset`) that its
    /// packets match, per direction: read per packet, so on this line.
    pub filter_mask: [u32; 2],
    /// Bytes of both directions in the current analytics interval (added at each flush).
    pub ivl_bytes: u64,
    // --- the rest: times, TCP state and flags, label (the TCP tracking is in FlowExt) ---
    pub first_ns: u64,
    /// Start of the current record (first packet, or the last active-timeout export).
    pub record_start_ns: u64,
    pub mac_a: [u8; 6],
    pub mac_b: [u8; 6],
    pub tcp_flags: [u8; 2],
    pub tcp_state: TcpState,
    pub client_is_a: bool,
    /// Which ends are in `--local-networks` ([`locality`] bits), set once when the flow is
    /// created; with `client_is_a` it gives the flow's [`Flow::direction`].
    pub locality: u8,
    pub tunnel: Tunnel,
    pub tos: u8,
    pub icmp_type_code: u16,
    pub live: bool,
    /// The [`FlowExt`] at this flow's slot is this flow's (a TCP or collected flow): set when
    /// the flow is created or collected; the entry is stale otherwise.
    pub has_ext: bool,
    pub fragments: u32,
    /// Application label (protocol, service, category, how it was found).
    pub l7: L7,
    /// The flow has left the DPI path (or DPI is off): `l7` is final.
    pub dpi_done: bool,
    /// The last TCP segment was a retransmission (its bytes were seen before: DPI skips it).
    pub last_was_retransmit: bool,
    /// Collected flows: the exporter (index into the shard's exporter table, 0 = captured
    /// here) and the sampling rate (0 = captured here); their interfaces are in [`FlowExt`].
    pub exporter: u16,
    pub sampling: u32,
    /// Packets of both directions in the current analytics interval.
    pub ivl_pkts: u32,
}

impl Default for Flow {
    fn default() -> Self {
        Flow {
            key: FlowKey::default(),
            last_ns: 0,
            pkts: [0; 2],
            bytes: [0; 2],
            first_ns: 0,
            record_start_ns: 0,
            pending_bytes: [0; 2],
            pending_pkts: [0; 2],
            hosts: [NO_HOST; 2],
            filter_mask: [0; 2],
            ivl_bytes: 0,
            mac_a: [0; 6],
            mac_b: [0; 6],
            tcp_flags: [0; 2],
            tcp_state: TcpState::None,
            client_is_a: true,
            locality: 0,
            tunnel: Tunnel::None,
            tos: 0,
            icmp_type_code: 0,
            live: false,
            has_ext: false,
            fragments: 0,
            l7: L7::default(),
            dpi_done: false,
            last_was_retransmit: false,
            exporter: 0,
            sampling: 0,
            ivl_pkts: 0,
        }
    }
}

/// What a reader (the REST API) needs of a live flow, in about a third of a [`Flow`]'s
/// bytes: a snapshot of a million flows is copied on the shard's thread, so every byte left
/// out is time given back to packets.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowRow {
    pub key: FlowKey,
    pub pkts: [u64; 2],
    pub bytes: [u64; 2],
    pub first_ns: u64,
    pub last_ns: u64,
    pub l7: L7,
    /// `l7` is final (see [`Flow::dpi_done`]).
    pub dpi_done: bool,
    pub client_is_a: bool,
    pub locality: u8,
}

impl From<&Flow> for FlowRow {
    #[inline]
    fn from(f: &Flow) -> FlowRow {
        FlowRow {
            key: f.key,
            pkts: f.pkts,
            bytes: f.bytes,
            first_ns: f.first_ns,
            last_ns: f.last_ns,
            l7: f.l7,
            dpi_done: f.dpi_done,
            client_is_a: f.client_is_a,
            locality: f.locality,
        }
    }
}

impl FlowRow {
    /// Direction index of the client side (as [`Flow::client_dir`]).
    #[inline]
    pub fn client_dir(&self) -> Dir {
        usize::from(!self.client_is_a)
    }

    /// Addresses and ports seen from the client.
    pub fn ends(&self) -> crate::key::Ends<'_> {
        self.key.ends(self.client_dir())
    }

    #[inline]
    pub fn direction(&self) -> Direction {
        Direction::of(self.locality, self.client_is_a)
    }
}

/// Bits of [`Flow::locality`].
pub mod locality {
    /// End a of the canonical key is in a local network.
    pub const A: u8 = 1;
    /// End b is.
    pub const B: u8 = 2;
    /// Local networks are set: the flow was classified (without them no flow is, and the
    /// outputs leave its direction out).
    pub const CLASSIFIED: u8 = 0x80;

    /// The locality bits of a flow with `key` against the local networks `nets`.
    #[inline]
    pub fn of(nets: &sonde_analytics::Networks, key: &crate::key::FlowKey) -> u8 {
        let mut l = CLASSIFIED;
        if nets.contains_addr(&key.addr_a, key.ip_version) {
            l |= A;
        }
        if nets.contains_addr(&key.addr_b, key.ip_version) {
            l |= B;
        }
        l
    }
}

/// Where a flow goes relative to the local networks (`--local-networks`), client → server:
/// `in` (remote → local), `out` (local → remote), `internal` (local ↔ local), `transit`
/// (remote ↔ remote; every flow when no network is local). Both ways of a flow count under
/// its direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Direction {
    In = 0,
    Out,
    Internal,
    Transit,
}

impl Direction {
    pub const ALL: [Direction; 4] = [
        Direction::In,
        Direction::Out,
        Direction::Internal,
        Direction::Transit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
            Direction::Internal => "internal",
            Direction::Transit => "transit",
        }
    }

    pub fn from_name(s: &str) -> Option<Direction> {
        Direction::ALL.into_iter().find(|d| d.name() == s)
    }

    /// The direction of a flow whose ends have `locality` bits and whose client is end a
    /// when `client_is_a`.
    #[inline]
    pub fn of(locality: u8, client_is_a: bool) -> Direction {
        let (a, b) = (locality & locality::A != 0, locality & locality::B != 0);
        let (client, server) = if client_is_a { (a, b) } else { (b, a) };
        match (client, server) {
            (false, true) => Direction::In,
            (true, false) => Direction::Out,
            (true, true) => Direction::Internal,
            (false, false) => Direction::Transit,
        }
    }
}

/// Packets and bytes by [`Direction`] (index `Direction as usize`), both ways of each flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectionCounts {
    pub packets: [u64; 4],
    pub bytes: [u64; 4],
}

impl DirectionCounts {
    pub fn merge(&mut self, o: &DirectionCounts) {
        for i in 0..4 {
            self.packets[i] += o.packets[i];
            self.bytes[i] += o.bytes[i];
        }
    }
}

/// A flow as handed to sinks when it ends (or reaches its active timeout).
#[derive(Clone, Debug)]
pub struct FlowRecord {
    pub flow: Flow,
    /// The flow's TCP and collector fields (all 0 for a captured UDP or ICMP flow).
    pub ext: FlowExt,
    pub reason: EndReason,
    /// What DPI learned (server name, HTTP/DNS/TLS fields, …), when it learned anything.
    pub meta: Option<Box<Meta>>,
    /// The exporter and observation domain of a collected flow.
    pub exporter: Option<(std::net::SocketAddr, u32)>,
}

impl Flow {
    /// A new flow from its first packet.
    pub fn new(key: FlowKey, dir: Dir, d: &Decoded, ts_ns: u64) -> Flow {
        let mut f = Flow {
            key,
            first_ns: ts_ns,
            last_ns: ts_ns,
            record_start_ns: ts_ns,
            live: true,
            ..Flow::default()
        };
        // The sender of the first packet is the client, except that a SYN/ACK seen first was
        // sent by the server.
        let syn_ack = d.proto == sonde_wire::ipproto::TCP
            && d.tcp_flags & (tcpflags::SYN | tcpflags::ACK) == (tcpflags::SYN | tcpflags::ACK);
        let sender_is_a = dir == 0;
        f.client_is_a = if syn_ack { !sender_is_a } else { sender_is_a };
        if d.has_mac {
            if sender_is_a {
                f.mac_a = d.src_mac;
                f.mac_b = d.dst_mac;
            } else {
                f.mac_a = d.dst_mac;
                f.mac_b = d.src_mac;
            }
        }
        f.tunnel = d.tunnel;
        f.tos = d.tos;
        f.icmp_type_code = d.icmp_type_code;
        f
    }

    /// Accounts one packet. `dir` is relative to the canonical key.
    #[inline(always)]
    /// `ext` is the flow's [`FlowExt`], read and written only for TCP.
    pub fn update(&mut self, ext: &mut FlowExt, dir: Dir, d: &Decoded, ts_ns: u64) {
        let len = d.ip_len as u64;
        self.pkts[dir] += 1;
        self.bytes[dir] += len;
        self.pending_pkts[dir] += 1;
        self.pending_bytes[dir] += len;
        if ts_ns > self.last_ns {
            self.last_ns = ts_ns;
        }
        if d.is_fragment {
            self.fragments += 1;
        }
        if d.proto == sonde_wire::ipproto::TCP && !(d.is_fragment && d.sport == 0 && d.dport == 0) {
            self.tcp_update(ext, dir, d, ts_ns);
        }
    }

    /// Adds counts measured elsewhere (a collected record, an sFlow sample) to direction
    /// `dir`, widening the flow's time span to [first_ns, last_ns].
    pub fn add_counts(&mut self, dir: Dir, pkts: u64, bytes: u64, first_ns: u64, last_ns: u64) {
        self.pkts[dir] += pkts;
        self.bytes[dir] += bytes;
        self.pending_pkts[dir] =
            self.pending_pkts[dir].saturating_add(pkts.min(u32::MAX as u64) as u32);
        self.pending_bytes[dir] += bytes;
        if first_ns < self.first_ns {
            self.first_ns = first_ns;
            self.record_start_ns = self.record_start_ns.min(first_ns);
        }
        if last_ns > self.last_ns {
            self.last_ns = last_ns;
        }
    }

    /// Direction index of the client side.
    #[inline]
    pub fn client_dir(&self) -> Dir {
        if self.client_is_a {
            0
        } else {
            1
        }
    }

    /// Addresses and ports seen from the client.
    pub fn ends(&self) -> crate::key::Ends<'_> {
        self.key.ends(self.client_dir())
    }

    /// The flow's direction (see [`Direction`]): from its ends' locality, set at creation,
    /// and its client as known now.
    #[inline]
    pub fn direction(&self) -> Direction {
        Direction::of(self.locality, self.client_is_a)
    }

    /// Local networks were set when the flow was created.
    #[inline]
    pub fn classified(&self) -> bool {
        self.locality & locality::CLASSIFIED != 0
    }

    /// The client's and the server's MAC addresses.
    pub fn macs(&self) -> ([u8; 6], [u8; 6]) {
        if self.client_is_a {
            (self.mac_a, self.mac_b)
        } else {
            (self.mac_b, self.mac_a)
        }
    }

    #[cold]
    fn handshake(&mut self, x: &mut FlowExt, dir: Dir, flags: u8, ts_ns: u64) {
        let syn = flags & tcpflags::SYN != 0;
        let ack = flags & tcpflags::ACK != 0;
        if syn && !ack {
            if x.syn_ns == 0 {
                x.syn_ns = ts_ns;
                // A SYN names the client, whatever was seen before.
                self.client_is_a = dir == 0;
            }
            if self.tcp_state == TcpState::None {
                self.tcp_state = TcpState::SynSent;
            }
        } else if syn && ack {
            if x.synack_ns == 0 {
                x.synack_ns = ts_ns;
                if x.syn_ns != 0 && ts_ns >= x.syn_ns {
                    x.rtt_server_us = ((ts_ns - x.syn_ns) / 1000) as u32;
                }
            }
            if matches!(self.tcp_state, TcpState::None | TcpState::SynSent) {
                self.tcp_state = TcpState::SynReceived;
            }
        } else if ack && self.tcp_state == TcpState::SynReceived && dir == self.client_dir() {
            if x.rtt_client_us == 0 && ts_ns >= x.synack_ns {
                x.rtt_client_us = ((ts_ns - x.synack_ns) / 1000) as u32;
            }
            self.tcp_state = TcpState::Established;
        }
    }

    #[inline(always)]
    fn tcp_update(&mut self, x: &mut FlowExt, dir: Dir, d: &Decoded, ts_ns: u64) {
        self.last_was_retransmit = false;
        let flags = d.tcp_flags;
        self.tcp_flags[dir] |= flags;
        if flags & tcpflags::SYN != 0 || self.tcp_state == TcpState::SynReceived {
            self.handshake(x, dir, flags, ts_ns);
        }
        if flags & (tcpflags::FIN | tcpflags::RST) != 0 {
            self.tcp_close(flags);
        } else if self.tcp_state == TcpState::None && flags & tcpflags::ACK != 0 {
            // Picked up mid-stream.
            self.tcp_state = TcpState::Established;
        }
        let seg_len = d.payload_len
            + (flags & tcpflags::SYN != 0) as u32
            + (flags & tcpflags::FIN != 0) as u32;
        let seq = d.tcp_seq;
        let end = seq.wrapping_add(seg_len);
        let t = &mut x.seq[dir];
        if t.advanced_at == 0 || seq == t.next_seq || seq_after(seq, t.next_seq) {
            // The first segment, the next one, or one after a gap (what came between was
            // sent but not captured: a bare ACK beyond the newest segment says so too). A
            // RST's sequence number moves nothing: a forged one would make every later
            // segment look old.
            let bare = seg_len == 0;
            let moves = !bare || t.advanced_at == 0 || seq != t.next_seq;
            if moves && !(bare && flags & tcpflags::RST != 0) {
                t.advance(end, ts_ns);
            }
            return;
        }
        if seg_len == 0 {
            return; // A bare ACK repeating a sequence number: nothing was sent again.
        }
        if seq.wrapping_add(1) == t.next_seq {
            if seg_len == 1 && d.payload_len == 1 {
                // A keep-alive (RFC 1122 §4.2.3.6): one byte already acknowledged, sent to see
                // whether the peer is there. Not a loss; tshark does not count it either.
                return;
            }
            if seg_len > 1 {
                // Starts one byte early and brings new data: tshark takes it as new.
                t.advance(end, ts_ns);
                return;
            }
        }
        // Older than expected. As Wireshark decides: out of order when it comes within the
        // handshake's round trip (3 ms without one) of the newest segment and does not end
        // where that one did; a retransmission otherwise.
        let rtt_ns = if x.rtt_client_us > 0 && x.rtt_server_us > 0 {
            (x.rtt_client_us as u64 + x.rtt_server_us as u64) * 1000
        } else {
            OUT_OF_ORDER_DEFAULT_NS
        };
        if t.since_advanced_ns(ts_ns) < rtt_ns && end != t.next_seq {
            x.out_of_order[dir] += 1;
        } else {
            x.retransmits[dir] += 1;
            self.last_was_retransmit = true;
        }
        if seq_after(end, t.next_seq) {
            t.advance(end, ts_ns);
        }
    }

    #[cold]
    fn tcp_close(&mut self, flags: u8) {
        let both_fin =
            self.tcp_flags[0] & tcpflags::FIN != 0 && self.tcp_flags[1] & tcpflags::FIN != 0;
        if flags & tcpflags::RST != 0 || both_fin {
            self.tcp_state = TcpState::Closed;
        } else if self.tcp_state != TcpState::Closed {
            self.tcp_state = TcpState::Closing;
        }
    }

    /// Packets and bytes client→server and server→client.
    pub fn client_server(&self) -> ((u64, u64), (u64, u64)) {
        let c = self.client_dir();
        (
            (self.pkts[c], self.bytes[c]),
            (self.pkts[1 - c], self.bytes[1 - c]),
        )
    }
}

/// `a` is after `b` in 32-bit sequence space.
#[inline(always)]
fn seq_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(src: u8, dst: u8, sport: u16, dport: u16, flags: u8, seq: u32, payload: u32) -> Decoded {
        let mut d = Decoded {
            ip_version: 4,
            proto: 6,
            sport,
            dport,
            tcp_flags: flags,
            tcp_seq: seq,
            ..Default::default()
        };
        d.src[..4].copy_from_slice(&[10, 0, 0, src]);
        d.dst[..4].copy_from_slice(&[10, 0, 0, dst]);
        d.payload_len = payload;
        d.ip_len = 40 + payload;
        d
    }

    fn feed(f: &mut Option<(Flow, FlowExt)>, d: &Decoded, ts: u64) {
        let (key, dir) = FlowKey::from_packet(d);
        let (flow, ext) = f.get_or_insert_with(|| (Flow::new(key, dir, d, ts), FlowExt::default()));
        flow.update(ext, dir, d, ts);
    }

    #[test]
    fn handshake_rtt_direction_and_close() {
        use tcpflags::*;
        let mut f = None;
        // Client 10.0.0.9 (sorts after the server) so the client is side b.
        feed(&mut f, &pkt(9, 1, 40000, 80, SYN, 100, 0), 1_000_000);
        feed(&mut f, &pkt(1, 9, 80, 40000, SYN | ACK, 500, 0), 3_000_000);
        feed(&mut f, &pkt(9, 1, 40000, 80, ACK, 101, 0), 7_000_000);
        feed(&mut f, &pkt(9, 1, 40000, 80, ACK | PSH, 101, 10), 8_000_000);
        feed(&mut f, &pkt(1, 9, 80, 40000, ACK | FIN, 501, 0), 9_000_000);
        feed(&mut f, &pkt(9, 1, 40000, 80, ACK | FIN, 111, 0), 9_500_000);
        let (f, x) = f.unwrap();
        assert!(!f.client_is_a);
        assert_eq!(x.rtt_server_us, 2000);
        assert_eq!(x.rtt_client_us, 4000);
        assert_eq!(f.tcp_state, TcpState::Closed);
        let ((cp, cb), (sp, sb)) = f.client_server();
        assert_eq!((cp, cb, sp, sb), (4, 170, 2, 80));
        assert_eq!(x.retransmits, [0, 0]);
    }

    #[test]
    fn keep_alives_are_not_retransmissions() {
        use tcpflags::*;
        let mut f = None;
        feed(&mut f, &pkt(9, 1, 40000, 80, ACK | PSH, 100, 10), 1);
        // Keep-alives: the last byte again, twice; then the same 10 bytes again (a loss).
        feed(&mut f, &pkt(9, 1, 40000, 80, ACK, 109, 1), 2);
        feed(&mut f, &pkt(9, 1, 40000, 80, ACK, 109, 1), 3);
        feed(&mut f, &pkt(9, 1, 40000, 80, ACK | PSH, 100, 10), 4);
        // One byte that is not the last one sent, 10 ms on: a retransmission.
        feed(&mut f, &pkt(9, 1, 40000, 80, ACK, 105, 1), 10_000_000);
        let (f, x) = f.unwrap();
        let d = usize::from(f.key.addr_a[3] != 9);
        assert_eq!(x.retransmits[d], 2);
        assert_eq!(x.out_of_order, [0, 0]);
    }

    #[test]
    fn synack_first_names_receiver_as_client() {
        let mut f = None;
        feed(
            &mut f,
            &pkt(1, 9, 80, 40000, tcpflags::SYN | tcpflags::ACK, 0, 0),
            1,
        );
        let (f, _) = f.unwrap();
        // The SYN/ACK came from a (10.0.0.1): the client is b.
        assert!(!f.client_is_a);
    }

    #[test]
    fn retransmission_and_out_of_order() {
        use tcpflags::*;
        let mut f = None;
        let ms = 1_000_000;
        feed(&mut f, &pkt(1, 2, 1000, 80, ACK, 1000, 100), 1);
        feed(&mut f, &pkt(1, 2, 1000, 80, ACK, 1100, 100), 2);
        // The newest segment again, even at once: a retransmission.
        feed(&mut f, &pkt(1, 2, 1000, 80, ACK, 1100, 100), 3);
        // 1200..1300 missing, then it comes 1 ms later (no handshake seen: within 3 ms):
        // out of order.
        feed(&mut f, &pkt(1, 2, 1000, 80, ACK, 1300, 100), 10 * ms);
        feed(&mut f, &pkt(1, 2, 1000, 80, ACK, 1200, 100), 11 * ms);
        // A bare ACK beyond: 1400..1500 was sent but not captured.
        feed(&mut f, &pkt(1, 2, 1000, 80, ACK, 1500, 0), 12 * ms);
        // An old segment 50 ms after the newest: a retransmission.
        feed(&mut f, &pkt(1, 2, 1000, 80, ACK, 1400, 100), 62 * ms);
        let (f, x) = f.unwrap();
        assert_eq!(x.retransmits[0], 2);
        assert_eq!(x.out_of_order[0], 1);
        assert_eq!(f.pkts[0], 7);
        // A forged RST far ahead: the next segments are new, not old.
        let mut g = None;
        feed(&mut g, &pkt(1, 2, 1000, 80, ACK, 1000, 100), 1);
        feed(&mut g, &pkt(1, 2, 1000, 80, RST, 2_000_000_000, 0), 2 * ms);
        feed(&mut g, &pkt(1, 2, 1000, 80, ACK, 1100, 100), 30 * ms);
        feed(&mut g, &pkt(1, 2, 1000, 80, ACK, 1200, 100), 60 * ms);
        let (_, gx) = g.unwrap();
        assert_eq!((gx.retransmits[0], gx.out_of_order[0]), (0, 0));
    }

    #[test]
    fn first_line_layout() {
        // The per-packet fields must stay in the first cache line.
        let f = Flow::default();
        let base = &f as *const Flow as usize;
        let pkts_end = &f.pkts as *const _ as usize + 16;
        assert!(pkts_end - base <= 64);
        assert_eq!(std::mem::align_of::<Flow>(), 64);
        // The flush and the filter-set count read the second line only.
        let ivl_end = &f.ivl_bytes as *const _ as usize + 8;
        assert!(ivl_end - base <= 128);
        // Three cache lines, no more: a million UDP flows are 192 MB; TCP and collected flows
        // take one more line each in the FlowExt slab.
        assert_eq!(std::mem::size_of::<Flow>(), 192);
        assert_eq!(std::mem::size_of::<FlowExt>(), 64);
    }
}
