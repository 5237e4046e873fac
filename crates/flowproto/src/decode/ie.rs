//! IANA IPFIX information elements (and their NetFlow v9 namesakes, same numbers below 128)
//! mapped into [`CollectedFlow`].

use crate::record::CollectedFlow;

/// Private enterprise number of RFC 5103 reverse elements.
pub(super) const PEN_REVERSE: u32 = 29305;
/// Marker "enterprise" for NetFlow v9 options scope fields, whose type numbers (1 System,
/// 2 Interface, 3 Line card, 4 Cache, 5 Template) are not information elements.
pub(super) const PEN_V9_SCOPE: u32 = u32::MAX;
pub(super) const V9_SCOPE_INTERFACE: u16 = 2;

pub(super) const OCTET_DELTA: u16 = 1;
pub(super) const PACKET_DELTA: u16 = 2;
pub(super) const PROTOCOL: u16 = 4;
pub(super) const TOS: u16 = 5;
pub(super) const TCP_FLAGS: u16 = 6;
pub(super) const SRC_PORT: u16 = 7;
pub(super) const SRC_V4: u16 = 8;
pub(super) const INGRESS_IF: u16 = 10;
pub(super) const DST_PORT: u16 = 11;
pub(super) const DST_V4: u16 = 12;
pub(super) const EGRESS_IF: u16 = 14;
pub(super) const LAST_SWITCHED: u16 = 21;
pub(super) const FIRST_SWITCHED: u16 = 22;
pub(super) const POST_OCTET_DELTA: u16 = 23;
pub(super) const POST_PACKET_DELTA: u16 = 24;
pub(super) const SRC_V6: u16 = 27;
pub(super) const DST_V6: u16 = 28;
pub(super) const SAMPLING_INTERVAL: u16 = 34;
pub(super) const SAMPLER_ID: u16 = 48;
pub(super) const SAMPLER_RANDOM_INTERVAL: u16 = 50;
pub(super) const SRC_MAC: u16 = 56;
pub(super) const POST_DST_MAC: u16 = 57;
pub(super) const VLAN: u16 = 58;
pub(super) const POST_VLAN: u16 = 59;
pub(super) const IP_VERSION: u16 = 60;
pub(super) const DST_MAC: u16 = 80;
pub(super) const POST_SRC_MAC: u16 = 81;
pub(super) const INTERFACE_NAME: u16 = 82;
pub(super) const OCTET_TOTAL: u16 = 85;
pub(super) const PACKET_TOTAL: u16 = 86;
pub(super) const APPLICATION_ID: u16 = 95;
pub(super) const APPLICATION_NAME: u16 = 96;
pub(super) const FLOW_START_SECONDS: u16 = 150;
pub(super) const FLOW_END_SECONDS: u16 = 151;
pub(super) const FLOW_START_MS: u16 = 152;
pub(super) const FLOW_END_MS: u16 = 153;
pub(super) const FLOW_START_US: u16 = 154;
pub(super) const FLOW_END_US: u16 = 155;
pub(super) const FLOW_START_NS: u16 = 156;
pub(super) const FLOW_END_NS: u16 = 157;
pub(super) const FLOW_START_DELTA_US: u16 = 158;
pub(super) const FLOW_END_DELTA_US: u16 = 159;
pub(super) const SYSTEM_INIT_MS: u16 = 160;
pub(super) const UDP_SRC_PORT: u16 = 180;
pub(super) const UDP_DST_PORT: u16 = 181;
pub(super) const TCP_SRC_PORT: u16 = 182;
pub(super) const TCP_DST_PORT: u16 = 183;
pub(super) const DOT1Q_VLAN: u16 = 243;
pub(super) const DOT1Q_CUSTOMER_VLAN: u16 = 245;
pub(super) const INGRESS_PHYS_IF: u16 = 252;
pub(super) const EGRESS_PHYS_IF: u16 = 253;
pub(super) const SELECTOR_ID: u16 = 302;
pub(super) const SAMPLING_PACKET_INTERVAL: u16 = 305;
pub(super) const SAMPLING_PACKET_SPACE: u16 = 306;
pub(super) const SAMPLING_SIZE: u16 = 309;
pub(super) const SAMPLING_POPULATION: u16 = 310;

/// Seconds between the NTP epoch (1900) and the Unix epoch.
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// An unsigned integer in 1 to 8 bytes (reduced-size encoding), None otherwise.
pub(super) fn uint(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 8 {
        return None;
    }
    Some(v.iter().fold(0u64, |a, &b| a << 8 | b as u64))
}

fn ntp_ms(v: &[u8]) -> Option<u64> {
    if v.len() != 8 {
        return None;
    }
    let secs = uint(&v[..4])?;
    let frac = uint(&v[4..])?;
    Some(secs.saturating_sub(NTP_UNIX_OFFSET) * 1000 + ((frac * 1000) >> 32))
}

/// The elements of one data or options record that matter, gathered field by field.
#[derive(Default)]
pub(super) struct Acc {
    pub flow: CollectedFlow,
    bytes_delta: Option<u64>,
    bytes_total: Option<u64>,
    pkts_delta: Option<u64>,
    pkts_total: Option<u64>,
    rev_bytes_delta: Option<u64>,
    rev_bytes_total: Option<u64>,
    rev_pkts_delta: Option<u64>,
    rev_pkts_total: Option<u64>,
    v4: Option<([u8; 4], [u8; 4])>,
    v6: Option<([u8; 16], [u8; 16])>,
    ip_version: Option<u8>,
    ports_alt: Option<(u16, u16)>,
    in_phys: u32,
    out_phys: u32,
    post_vlan: u16,
    customer_vlan: u16,
    post_src_mac: Option<[u8; 6]>,
    post_dst_mac: Option<[u8; 6]>,
    /// Uptime-relative first/last switched (21/22), milliseconds.
    uptime_first: Option<u32>,
    uptime_last: Option<u32>,
    start_ms: Option<u64>,
    end_ms: Option<u64>,
    start_delta_us: Option<u64>,
    end_delta_us: Option<u64>,
    pub system_init_ms: Option<u64>,
    // Sampling announcements (options or data records).
    sampling_interval: Option<u64>,
    random_interval: Option<u64>,
    packet_interval: Option<u64>,
    packet_space: Option<u64>,
    sampling_size: Option<u64>,
    sampling_population: Option<u64>,
    pub sampler_id: Option<u64>,
    pub if_index: Option<u32>,
    pub if_name: Option<String>,
}

fn mac(v: &[u8]) -> Option<[u8; 6]> {
    v.try_into().ok()
}

fn addr4(v: &[u8]) -> Option<[u8; 4]> {
    v.try_into().ok()
}

fn addr16(v: &[u8]) -> Option<[u8; 16]> {
    v.try_into().ok()
}

fn text(v: &[u8]) -> String {
    let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

impl Acc {
    /// Keeps an element sonde does not interpret, to be shown by number; all-zero values (an
    /// ICMP type of a TCP flow, an unset application id) say nothing and are not kept.
    fn keep_extra(&mut self, pen: u32, id: u16, v: &[u8]) {
        if v.iter().any(|&b| b != 0) {
            self.flow.extra.push((pen, id, v.to_vec()));
        }
    }

    /// One field of the record. `v9`: NetFlow v9 meanings for 23/24 (OUT_BYTES/OUT_PKTS).
    pub fn field(&mut self, pen: u32, id: u16, v: &[u8], v9: bool) {
        if pen == PEN_V9_SCOPE {
            if id == V9_SCOPE_INTERFACE {
                self.if_index = uint(v).map(|x| x as u32);
            }
            return;
        }
        if pen == PEN_REVERSE {
            let u = uint(v);
            match id {
                OCTET_DELTA if u.is_some() => self.rev_bytes_delta = u,
                PACKET_DELTA if u.is_some() => self.rev_pkts_delta = u,
                OCTET_TOTAL if u.is_some() => self.rev_bytes_total = u,
                PACKET_TOTAL if u.is_some() => self.rev_pkts_total = u,
                _ => self.keep_extra(pen, id, v),
            }
            return;
        }
        if pen != 0 {
            self.keep_extra(pen, id, v);
            return;
        }
        let u = uint(v);
        let f = &mut self.flow;
        let handled = match (id, u) {
            (OCTET_DELTA, Some(x)) => {
                self.bytes_delta = Some(x);
                true
            }
            (PACKET_DELTA, Some(x)) => {
                self.pkts_delta = Some(x);
                true
            }
            (OCTET_TOTAL, Some(x)) => {
                self.bytes_total = Some(x);
                true
            }
            (PACKET_TOTAL, Some(x)) => {
                self.pkts_total = Some(x);
                true
            }
            (POST_OCTET_DELTA, Some(x)) if v9 => {
                self.rev_bytes_delta = Some(x);
                true
            }
            (POST_PACKET_DELTA, Some(x)) if v9 => {
                self.rev_pkts_delta = Some(x);
                true
            }
            (PROTOCOL, Some(x)) => {
                f.proto = x as u8;
                true
            }
            (TOS, Some(x)) => {
                f.tos = x as u8;
                true
            }
            (TCP_FLAGS, Some(x)) => {
                f.tcp_flags = x as u8;
                true
            }
            (SRC_PORT, Some(x)) => {
                f.sport = x as u16;
                true
            }
            (DST_PORT, Some(x)) => {
                f.dport = x as u16;
                true
            }
            (UDP_SRC_PORT | TCP_SRC_PORT, Some(x)) => {
                let p = self.ports_alt.get_or_insert((0, 0));
                p.0 = x as u16;
                true
            }
            (UDP_DST_PORT | TCP_DST_PORT, Some(x)) => {
                let p = self.ports_alt.get_or_insert((0, 0));
                p.1 = x as u16;
                true
            }
            (SRC_V4, _) if v.len() == 4 => {
                let a = self.v4.get_or_insert(([0; 4], [0; 4]));
                a.0 = addr4(v).unwrap_or_default();
                true
            }
            (DST_V4, _) if v.len() == 4 => {
                let a = self.v4.get_or_insert(([0; 4], [0; 4]));
                a.1 = addr4(v).unwrap_or_default();
                true
            }
            (SRC_V6, _) if v.len() == 16 => {
                let a = self.v6.get_or_insert(([0; 16], [0; 16]));
                a.0 = addr16(v).unwrap_or_default();
                true
            }
            (DST_V6, _) if v.len() == 16 => {
                let a = self.v6.get_or_insert(([0; 16], [0; 16]));
                a.1 = addr16(v).unwrap_or_default();
                true
            }
            (IP_VERSION, Some(x)) => {
                self.ip_version = Some(x as u8);
                true
            }
            (INGRESS_IF, Some(x)) => {
                f.in_if = x as u32;
                self.if_index = Some(x as u32);
                true
            }
            (EGRESS_IF, Some(x)) => {
                f.out_if = x as u32;
                true
            }
            (INGRESS_PHYS_IF, Some(x)) => {
                self.in_phys = x as u32;
                true
            }
            (EGRESS_PHYS_IF, Some(x)) => {
                self.out_phys = x as u32;
                true
            }
            (LAST_SWITCHED, Some(x)) => {
                self.uptime_last = Some(x as u32);
                true
            }
            (FIRST_SWITCHED, Some(x)) => {
                self.uptime_first = Some(x as u32);
                true
            }
            (FLOW_START_SECONDS, Some(x)) => {
                self.start_ms = Some(x.saturating_mul(1000));
                true
            }
            (FLOW_END_SECONDS, Some(x)) => {
                self.end_ms = Some(x.saturating_mul(1000));
                true
            }
            (FLOW_START_MS, Some(x)) => {
                self.start_ms = Some(x);
                true
            }
            (FLOW_END_MS, Some(x)) => {
                self.end_ms = Some(x);
                true
            }
            (FLOW_START_US | FLOW_START_NS, _) if v.len() == 8 => {
                self.start_ms = ntp_ms(v);
                true
            }
            (FLOW_END_US | FLOW_END_NS, _) if v.len() == 8 => {
                self.end_ms = ntp_ms(v);
                true
            }
            (FLOW_START_DELTA_US, Some(x)) => {
                self.start_delta_us = Some(x);
                true
            }
            (FLOW_END_DELTA_US, Some(x)) => {
                self.end_delta_us = Some(x);
                true
            }
            (SYSTEM_INIT_MS, Some(x)) => {
                self.system_init_ms = Some(x);
                true
            }
            (SRC_MAC, _) if v.len() == 6 => {
                f.src_mac = mac(v);
                true
            }
            (DST_MAC, _) if v.len() == 6 => {
                f.dst_mac = mac(v);
                true
            }
            (POST_SRC_MAC, _) if v.len() == 6 => {
                self.post_src_mac = mac(v);
                true
            }
            (POST_DST_MAC, _) if v.len() == 6 => {
                self.post_dst_mac = mac(v);
                true
            }
            (VLAN | DOT1Q_VLAN, Some(x)) => {
                if f.vlan == 0 {
                    f.vlan = (x & 0x0fff) as u16;
                }
                true
            }
            (DOT1Q_CUSTOMER_VLAN, Some(x)) => {
                self.customer_vlan = (x & 0x0fff) as u16;
                self.keep_extra(0, id, v);
                true
            }
            (POST_VLAN, Some(x)) => {
                self.post_vlan = (x & 0x0fff) as u16;
                true
            }
            (APPLICATION_ID, _) if !v.is_empty() => {
                // classificationEngineId (1 byte) then a selector: keep the low 32 bits.
                let tail = &v[v.len().saturating_sub(4)..];
                f.app_id = uint(tail).unwrap_or(0) as u32;
                self.keep_extra(0, id, v);
                true
            }
            (APPLICATION_NAME, _) => {
                f.app_name = Some(text(v));
                true
            }
            (SAMPLING_INTERVAL, Some(x)) => {
                self.sampling_interval = Some(x);
                true
            }
            (SAMPLER_RANDOM_INTERVAL, Some(x)) => {
                self.random_interval = Some(x);
                true
            }
            (SAMPLING_PACKET_INTERVAL, Some(x)) => {
                self.packet_interval = Some(x);
                true
            }
            (SAMPLING_PACKET_SPACE, Some(x)) => {
                self.packet_space = Some(x);
                true
            }
            (SAMPLING_SIZE, Some(x)) => {
                self.sampling_size = Some(x);
                true
            }
            (SAMPLING_POPULATION, Some(x)) => {
                self.sampling_population = Some(x);
                true
            }
            (SAMPLER_ID | SELECTOR_ID, Some(x)) => {
                self.sampler_id = Some(x);
                true
            }
            (INTERFACE_NAME, _) => {
                self.if_name = Some(text(v));
                true
            }
            _ => false,
        };
        if !handled {
            self.keep_extra(0, id, v);
        }
    }

    /// The sampling rate this record announces (1 in N), if any.
    pub fn announced_rate(&self) -> Option<u32> {
        let clamp = |x: u64| x.clamp(1, u32::MAX as u64) as u32;
        if let (Some(size), Some(pop)) = (self.sampling_size, self.sampling_population) {
            if size > 0 && pop > 0 {
                return Some(clamp(pop / size));
            }
        }
        if let (Some(i), Some(s)) = (self.packet_interval, self.packet_space) {
            if let Some(r) = i.saturating_add(s).checked_div(i) {
                return Some(clamp(r));
            }
        }
        if let Some(x) = self.sampling_interval.filter(|&x| x > 0) {
            return Some(clamp(x));
        }
        if let Some(x) = self.random_interval.filter(|&x| x > 0) {
            return Some(clamp(x));
        }
        None
    }

    /// Completes the flow: addresses, counters × `rate`, timestamps.
    /// `export_ms`: export time of the message; `uptime_ms`: v9 sysUptime of the header;
    /// `system_init_ms`: IPFIX system init time known from options (for 21/22 in IPFIX).
    pub fn finish(
        mut self,
        rate: u32,
        export_ms: u64,
        uptime_ms: Option<u32>,
        system_init_ms: Option<u64>,
    ) -> CollectedFlow {
        let f = &mut self.flow;
        let v4_set = self.v4.is_some_and(|(s, d)| s != [0; 4] || d != [0; 4]);
        let v6_set = self.v6.is_some_and(|(s, d)| s != [0; 16] || d != [0; 16]);
        let version = match self.ip_version {
            Some(4) if self.v4.is_some() => 4,
            Some(6) if self.v6.is_some() => 6,
            _ if v4_set => 4,
            _ if v6_set => 6,
            _ if self.v4.is_some() => 4,
            _ if self.v6.is_some() => 6,
            _ => 0,
        };
        match version {
            4 => {
                let (s, d) = self.v4.unwrap_or_default();
                f.src[..4].copy_from_slice(&s);
                f.dst[..4].copy_from_slice(&d);
                f.ip_version = 4;
            }
            6 => {
                let (s, d) = self.v6.unwrap_or_default();
                f.src = s;
                f.dst = d;
                f.ip_version = 6;
            }
            _ => f.ip_version = self.ip_version.filter(|v| *v == 4 || *v == 6).unwrap_or(0),
        }
        if f.sport == 0 && f.dport == 0 {
            if let Some((s, d)) = self.ports_alt {
                f.sport = s;
                f.dport = d;
            }
        }
        if f.in_if == 0 {
            f.in_if = self.in_phys;
        }
        if f.out_if == 0 {
            f.out_if = self.out_phys;
        }
        if f.vlan == 0 {
            f.vlan = if self.customer_vlan != 0 {
                self.customer_vlan
            } else {
                self.post_vlan
            };
        }
        if f.src_mac.is_none() {
            f.src_mac = self.post_src_mac;
        }
        if f.dst_mac.is_none() {
            f.dst_mac = self.post_dst_mac;
        }
        let r = rate.max(1) as u64;
        f.sampling = rate.max(1);
        f.bytes = self
            .bytes_delta
            .or(self.bytes_total)
            .unwrap_or(0)
            .saturating_mul(r);
        f.packets = self
            .pkts_delta
            .or(self.pkts_total)
            .unwrap_or(0)
            .saturating_mul(r);
        f.rev_bytes = self
            .rev_bytes_delta
            .or(self.rev_bytes_total)
            .unwrap_or(0)
            .saturating_mul(r);
        f.rev_packets = self
            .rev_pkts_delta
            .or(self.rev_pkts_total)
            .unwrap_or(0)
            .saturating_mul(r);

        let init = self.system_init_ms.or(system_init_ms);
        let rel = |t: Option<u32>| -> Option<u64> {
            let t = t?;
            match (uptime_ms, init) {
                (Some(up), _) => Some(export_ms.saturating_sub(up.wrapping_sub(t) as u64)),
                (None, Some(i)) => Some(i.saturating_add(t as u64)),
                _ => None,
            }
        };
        let delta = |d: Option<u64>| d.map(|us| export_ms.saturating_sub(us / 1000));
        f.first_ms = self
            .start_ms
            .or_else(|| rel(self.uptime_first))
            .or_else(|| delta(self.start_delta_us))
            .unwrap_or(0);
        f.last_ms = self
            .end_ms
            .or_else(|| rel(self.uptime_last))
            .or_else(|| delta(self.end_delta_us))
            .unwrap_or(0);
        self.flow
    }
}
