//! What an engaged capture writes: the packets of some hosts (taken from the alert), or the
//! packets a tcpdump expression of the user's accepts.

use serde_json::Value;
use sonde_analytics::bpf::Program;
use sonde_wire::{Decoded, LinkType};
use std::net::IpAddr;

/// Which hosts of an alert a capture follows (`--trigger-capture TYPE:victim|attacker|both`),
/// or a tcpdump expression instead (`TYPE:bpf=EXPR`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The alert's entity host, whatever its part (the default).
    Entity,
    /// The host under attack: a DDoS's entity for direction "in", its top destinations for
    /// "out", a scan's destinations.
    Victim,
    /// The attackers: a DDoS's top sources for direction "in", its entity for "out", a scan's
    /// entity (the scanner).
    Attacker,
    /// Victims and attackers.
    Both,
    Bpf(String),
}

/// An IP address as [`Decoded`] holds it (IPv4 in the first 4 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Host {
    pub ip_version: u8,
    pub addr: [u8; 16],
}

impl Host {
    pub fn parse(text: &str) -> Option<Host> {
        let mut addr = [0u8; 16];
        match text.trim().parse::<IpAddr>().ok()? {
            IpAddr::V4(a) => {
                addr[..4].copy_from_slice(&a.octets());
                Some(Host {
                    addr,
                    ip_version: 4,
                })
            }
            IpAddr::V6(a) => Some(Host {
                addr: a.octets(),
                ip_version: 6,
            }),
        }
    }
}

#[derive(Clone, Debug)]
pub enum Matcher {
    /// Packets from or to any of these hosts (at any VLAN, inside any tunnel the decoder peels).
    Hosts(Vec<Host>),
    /// Packets libpcap's program for the expression accepts (compiled per link type by each
    /// shard, see [`BpfCache`]).
    Bpf(String),
}

impl Matcher {
    /// The matcher for `alert` under `target`. Hosts named where the target's part is missing
    /// from the alert (a DDoS's first record may not list its sources yet) fall back to the
    /// entity host, so a capture never follows nobody.
    pub fn from_alert(alert: &Value, target: &Target) -> Matcher {
        if let Target::Bpf(expr) = target {
            return Matcher::Bpf(expr.clone());
        }
        let entity = entity_host(alert);
        let kind = alert["type"].as_str().unwrap_or("");
        let ev = &alert["evidence"];
        let list = |key: &str, field: &str| -> Vec<String> {
            ev[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e[field].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let (victims, attackers): (Vec<String>, Vec<String>) = match kind {
            "ddos" | "syn_flood" if alert["direction"] == "out" => (
                list("top_destinations", "host"),
                entity.clone().into_iter().collect(),
            ),
            "ddos" | "syn_flood" => (
                entity.clone().into_iter().collect(),
                list("top_sources", "host"),
            ),
            "scan.port" => (
                list("destinations", "destination"),
                entity.clone().into_iter().collect(),
            ),
            "scan.ip" => (
                ev["ports"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .flat_map(|g| g["sample"].as_array().cloned().unwrap_or_default())
                            .filter_map(|h| h.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
                entity.clone().into_iter().collect(),
            ),
            _ => (
                entity.clone().into_iter().collect(),
                entity.clone().into_iter().collect(),
            ),
        };
        let chosen: Vec<String> = match target {
            Target::Entity => entity.clone().into_iter().collect(),
            Target::Victim => victims,
            Target::Attacker => attackers,
            Target::Both => victims.into_iter().chain(attackers).collect(),
            Target::Bpf(_) => Vec::new(),
        };
        let mut hosts: Vec<Host> = chosen.iter().filter_map(|h| Host::parse(h)).collect();
        if hosts.is_empty() {
            hosts.extend(entity.as_deref().and_then(Host::parse));
        }
        hosts.sort_unstable();
        hosts.dedup();
        Matcher::Hosts(hosts)
    }

    pub fn needs_decode(&self) -> bool {
        matches!(self, Matcher::Hosts(_))
    }

    /// A decoded IP packet's answer (hosts only; false for a BPF matcher).
    #[inline]
    pub fn matches_decoded(&self, d: &Decoded) -> bool {
        match self {
            Matcher::Hosts(hosts) => hosts
                .iter()
                .any(|h| h.ip_version == d.ip_version && (h.addr == d.src || h.addr == d.dst)),
            Matcher::Bpf(_) => false,
        }
    }
}

/// The alert's host: `host` (the bare address detection alerts carry), else `entity.value`
/// when the entity is a host (without a `@VLAN` suffix).
pub fn entity_host(alert: &Value) -> Option<String> {
    if let Some(h) = alert["host"].as_str() {
        return Some(h.to_string());
    }
    let e = &alert["entity"];
    if e["kind"] == "host" {
        if let Some(v) = e["value"].as_str() {
            return Some(v.split('@').next().unwrap_or(v).to_string());
        }
    }
    None
}

/// A BPF matcher's programs in one shard, one per link type met (an expression that cannot
/// apply to a link type matches nothing there, as in tcpdump).
#[derive(Default)]
pub struct BpfCache {
    programs: Vec<(LinkType, Option<Program>)>,
}

impl BpfCache {
    pub fn matches(&mut self, expr: &str, link: LinkType, data: &[u8], wire_len: u32) -> bool {
        let i = match self.programs.iter().position(|(l, _)| *l == link) {
            Some(i) => i,
            None => {
                self.programs
                    .push((link, Program::compile(expr, link).ok()));
                self.programs.len() - 1
            }
        };
        self.programs[i]
            .1
            .as_ref()
            .is_some_and(|p| p.matches(data, wire_len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hosts(m: &Matcher) -> Vec<String> {
        match m {
            Matcher::Hosts(h) => h
                .iter()
                .map(|h| match h.ip_version {
                    4 => std::net::Ipv4Addr::new(h.addr[0], h.addr[1], h.addr[2], h.addr[3])
                        .to_string(),
                    _ => std::net::Ipv6Addr::from(h.addr).to_string(),
                })
                .collect(),
            Matcher::Bpf(e) => vec![format!("bpf {e}")],
        }
    }

    fn ddos_in() -> Value {
        json!({"id": 1, "type": "ddos", "state": "engaged", "direction": "in",
               "entity": {"kind": "host", "value": "10.0.0.5"}, "host": "10.0.0.5",
               "evidence": {"top_sources": [{"host": "192.0.2.1", "packets": 5},
                                            {"host": "2001:db8::7", "packets": 3},
                                            {"host": "not an address"}]}})
    }

    #[test]
    fn ddos_in_parts() {
        let a = ddos_in();
        assert_eq!(
            hosts(&Matcher::from_alert(&a, &Target::Entity)),
            ["10.0.0.5"]
        );
        assert_eq!(
            hosts(&Matcher::from_alert(&a, &Target::Victim)),
            ["10.0.0.5"]
        );
        assert_eq!(
            hosts(&Matcher::from_alert(&a, &Target::Attacker)),
            ["192.0.2.1", "2001:db8::7"]
        );
        assert_eq!(
            hosts(&Matcher::from_alert(&a, &Target::Both)),
            ["10.0.0.5", "192.0.2.1", "2001:db8::7"]
        );
    }

    #[test]
    fn ddos_out_and_scans_swap_the_parts() {
        let out = json!({"type": "syn_flood", "direction": "out", "host": "10.0.0.9",
                         "evidence": {"top_destinations": [{"host": "10.0.0.1"}]}});
        assert_eq!(
            hosts(&Matcher::from_alert(&out, &Target::Attacker)),
            ["10.0.0.9"]
        );
        assert_eq!(
            hosts(&Matcher::from_alert(&out, &Target::Victim)),
            ["10.0.0.1"]
        );
        let scan = json!({"type": "scan.port", "host": "10.0.0.66",
                          "evidence": {"destinations": [{"destination": "10.0.0.5", "targets": 900}]}});
        assert_eq!(
            hosts(&Matcher::from_alert(&scan, &Target::Attacker)),
            ["10.0.0.66"]
        );
        assert_eq!(
            hosts(&Matcher::from_alert(&scan, &Target::Victim)),
            ["10.0.0.5"]
        );
    }

    #[test]
    fn a_missing_part_falls_back_to_the_entity() {
        let first = json!({"type": "ddos", "direction": "in", "host": "10.0.0.5",
                           "evidence": {"top_sources": []}});
        assert_eq!(
            hosts(&Matcher::from_alert(&first, &Target::Attacker)),
            ["10.0.0.5"]
        );
        let bpf = Matcher::from_alert(&first, &Target::Bpf("tcp port 80".into()));
        assert_eq!(hosts(&bpf), ["bpf tcp port 80"]);
    }

    #[test]
    fn matches_either_direction_and_the_ip_version() {
        let m = Matcher::from_alert(&ddos_in(), &Target::Both);
        let mut d = Decoded {
            ip_version: 4,
            ..Decoded::default()
        };
        d.src[..4].copy_from_slice(&[192, 0, 2, 1]);
        d.dst[..4].copy_from_slice(&[10, 9, 9, 9]);
        assert!(m.matches_decoded(&d));
        std::mem::swap(&mut d.src, &mut d.dst);
        assert!(m.matches_decoded(&d));
        d.src[..4].copy_from_slice(&[10, 0, 0, 6]);
        d.dst[..4].copy_from_slice(&[10, 9, 9, 9]);
        assert!(!m.matches_decoded(&d));
        // The same 16 bytes as IPv6 are another address.
        d.ip_version = 6;
        d.src[..4].copy_from_slice(&[192, 0, 2, 1]);
        assert!(!m.matches_decoded(&d));
        d.src = Host::parse("2001:db8::7").unwrap().addr;
        assert!(m.matches_decoded(&d));
    }

    #[test]
    fn bpf_matches_frames() {
        let mut c = BpfCache::default();
        // Ethernet + IPv4 + UDP to port 53.
        let mut f = vec![0u8; 42];
        f[12] = 0x08;
        f[14] = 0x45;
        f[23] = 17;
        f[36..38].copy_from_slice(&53u16.to_be_bytes());
        assert!(c.matches("udp port 53", LinkType::Ethernet, &f, 42));
        f[37] = 54;
        assert!(!c.matches("udp port 53", LinkType::Ethernet, &f, 42));
    }
}
