//! Analytics settings: the top-N interval, the filter-sets and the detection thresholds.
//!
//! Thresholds are given as `--threshold [NETWORK:]KEY=VALUE` (repeatable). Without a network a
//! value is the default for every host; with one (`10.0.0.0/8:ddos.pps=2M`) it applies to the
//! hosts of that network (FastNetMon's host groups). A host gets the defaults with the keys of
//! the longest network that holds it applied. VALUE is a number (suffixes k, M, G) or `off`.

use crate::filterset::FilterSets;
use crate::types::HostAddr;
use std::fmt;
use std::sync::Arc;

/// A threshold key: its name, what it means, its default and its largest sensible value.
pub struct KeyInfo {
    pub name: &'static str,
    pub what: &'static str,
    pub default: Option<u64>,
    pub max: u64,
}

/// Every threshold key (index = [`Key`] as usize).
pub const KEYS: [KeyInfo; 14] = [
    KeyInfo {
        name: "ddos.pps",
        what: "packets per second to (or from) one host",
        default: Some(20_000),
        max: 10_000_000_000,
    },
    KeyInfo {
        name: "ddos.mbps",
        what: "megabits per second to (or from) one host",
        default: Some(1_000),
        max: 10_000_000,
    },
    KeyInfo {
        name: "ddos.flows",
        what: "new flows per second to (or from) one host",
        default: Some(3_500),
        max: 1_000_000_000,
    },
    KeyInfo {
        name: "ddos.syn_pps",
        what: "TCP SYN packets per second to (or from) one host",
        default: Some(10_000),
        max: 10_000_000_000,
    },
    KeyInfo {
        name: "ddos.udp_pps",
        what: "UDP packets per second to (or from) one host",
        default: Some(20_000),
        max: 10_000_000_000,
    },
    KeyInfo {
        name: "ddos.icmp_pps",
        what: "ICMP packets per second to (or from) one host",
        default: Some(10_000),
        max: 10_000_000_000,
    },
    KeyInfo {
        name: "ddos.frag_pps",
        what: "IP fragments per second to (or from) one host",
        default: Some(10_000),
        max: 10_000_000_000,
    },
    KeyInfo {
        name: "ddos.hold",
        what: "seconds a host's rates must stay below every threshold before its attack ends",
        default: Some(5),
        max: 86_400,
    },
    KeyInfo {
        name: "scan.ip_targets",
        what: "distinct destinations one source tried on one port in an interval (IP scan)",
        default: Some(32),
        max: 1 << 32,
    },
    KeyInfo {
        name: "scan.port_targets",
        what: "distinct ports one source tried on one destination in an interval (port scan)",
        default: Some(32),
        max: 65_536,
    },
    KeyInfo {
        name: "syn.min",
        what: "SYNs a host must send in an interval before it can be a noisy (wormy) host",
        default: Some(20),
        max: 1 << 40,
    },
    KeyInfo {
        name: "syn.work_weight",
        what: "work weight in percent (SYNs + FINs sent + RSTs received over TCP packets) that \
               makes a host noisy",
        default: Some(50),
        max: 100,
    },
    KeyInfo {
        name: "icmp.errors",
        what: "ICMP errors (unreachable, time exceeded) one host sends or receives in an \
               interval",
        default: Some(100),
        max: 1 << 40,
    },
    KeyInfo {
        name: "syn.answered_below",
        what: "percent of SYNs answered below which a noisy host is reported (100: report \
               every noisy host)",
        default: Some(100),
        max: 100,
    },
];

/// Index into [`KEYS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Key {
    DdosPps = 0,
    DdosMbps,
    DdosFlows,
    DdosSynPps,
    DdosUdpPps,
    DdosIcmpPps,
    DdosFragPps,
    DdosHold,
    ScanIpTargets,
    ScanPortTargets,
    SynMin,
    SynWorkWeight,
    IcmpErrors,
    SynAnsweredBelow,
}

/// The per-second rate keys, in the order [`Limits::rate_limits`] returns them.
pub const RATE_KEYS: [Key; 7] = [
    Key::DdosPps,
    Key::DdosMbps,
    Key::DdosFlows,
    Key::DdosSynPps,
    Key::DdosUdpPps,
    Key::DdosIcmpPps,
    Key::DdosFragPps,
];

/// One value per key (`None`: off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits(pub [Option<u64>; KEYS.len()]);

impl Default for Limits {
    fn default() -> Self {
        Limits(KEYS.map(|k| k.default))
    }
}

impl Limits {
    pub fn get(&self, k: Key) -> Option<u64> {
        self.0[k as usize]
    }
}

/// An IPv4 or IPv6 network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    pub addr: [u8; 16],
    pub ip_version: u8,
    pub len: u8,
}

impl Network {
    pub fn parse(s: &str) -> Option<Network> {
        let (a, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l.parse::<u8>().ok()?)),
            None => (s, None),
        };
        let ip: std::net::IpAddr = a.parse().ok()?;
        let (addr, ip_version, max) = match ip {
            std::net::IpAddr::V4(v4) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&v4.octets());
                (b, 4, 32)
            }
            std::net::IpAddr::V6(v6) => (v6.octets(), 6, 128),
        };
        let len = len.unwrap_or(max);
        if len > max {
            return None;
        }
        let mut n = Network {
            addr,
            ip_version,
            len,
        };
        // Keep only the network bits, so 10.1.2.3/8 is 10.0.0.0/8.
        for i in 0..16 {
            let bits = (len as usize).saturating_sub(i * 8).min(8);
            n.addr[i] &= if bits == 0 { 0 } else { 0xffu8 << (8 - bits) };
        }
        Some(n)
    }

    /// [`Network::parse`] with an error that names the text and shows what is expected:
    /// what a flag or an API parameter reports.
    pub fn parse_prefix(text: &str) -> Result<Network, String> {
        Network::parse(text.trim()).ok_or_else(|| {
            format!("{text:?}: expected an address or a prefix such as 10.0.0.0/8 or 2001:db8::/32")
        })
    }

    pub fn contains(&self, h: &HostAddr) -> bool {
        self.contains_addr(&h.addr, h.ip_version)
    }

    /// Whether an address as the engine keeps it (IPv4 in the first 4 of 16 bytes) is in the
    /// network.
    #[inline]
    pub fn contains_addr(&self, addr: &[u8; 16], ip_version: u8) -> bool {
        if ip_version != self.ip_version {
            return false;
        }
        let full = (self.len / 8) as usize;
        if addr[..full] != self.addr[..full] {
            return false;
        }
        let rest = self.len % 8;
        rest == 0 || (addr[full] & (0xffu8 << (8 - rest))) == self.addr[full]
    }
}

/// A set of networks (`--local-networks`): whether an address is in any of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Networks(Vec<Network>);

impl Networks {
    /// `10.0.0.0/8,192.168.0.0/16,2001:db8::/32`: a comma list of prefixes (a bare address is
    /// that host alone). Empty items are skipped; a bad one is an error naming it.
    pub fn parse(list: &str) -> Result<Networks, String> {
        let mut n = Networks::default();
        n.add(list)?;
        Ok(n)
    }

    /// Adds the prefixes of a comma list (see [`Networks::parse`]); a network given twice is
    /// kept once.
    pub fn add(&mut self, list: &str) -> Result<(), String> {
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let net = Network::parse_prefix(item)?;
            if !self.0.contains(&net) {
                self.0.push(net);
            }
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn list(&self) -> &[Network] {
        &self.0
    }

    #[inline]
    pub fn contains_addr(&self, addr: &[u8; 16], ip_version: u8) -> bool {
        self.0.iter().any(|n| n.contains_addr(addr, ip_version))
    }
}

impl From<Vec<Network>> for Networks {
    fn from(v: Vec<Network>) -> Networks {
        let mut n = Networks::default();
        for net in v {
            if !n.0.contains(&net) {
                n.0.push(net);
            }
        }
        n
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}",
            crate::types::addr_text(&self.addr, self.ip_version),
            self.len
        )
    }
}

/// The default limits and those of each network named in a threshold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Thresholds {
    pub default: Limits,
    /// Longest prefix first.
    pub groups: Vec<(Network, Limits)>,
}

impl Thresholds {
    /// Applies `--threshold` texts in order (a later one wins for the same network and key).
    pub fn parse(texts: &[String]) -> Result<Thresholds, String> {
        let mut t = Thresholds::default();
        // Keys set per network, applied over the defaults once all defaults are known.
        type KeyValues = Vec<(usize, Option<u64>)>;
        let mut per_net: Vec<(Network, KeyValues)> = Vec::new();
        for text in texts {
            let (net, kv) = split_network(text)?;
            let (k, v) = kv.split_once('=').ok_or_else(|| {
                format!("--threshold '{text}': expected [NETWORK:]KEY=VALUE, e.g. ddos.pps=50k or 10.0.0.0/8:ddos.mbps=5000")
            })?;
            let (k, v) = (k.trim(), v.trim());
            let key = KEYS.iter().position(|i| i.name == k).ok_or_else(|| {
                let names: Vec<&str> = KEYS.iter().map(|i| i.name).collect();
                format!(
                    "--threshold '{text}': unknown key '{k}'; the keys are {}",
                    names.join(", ")
                )
            })?;
            let value =
                parse_value(v, &KEYS[key]).map_err(|e| format!("--threshold '{text}': {e}"))?;
            match net {
                None => t.default.0[key] = value,
                Some(n) => match per_net.iter_mut().find(|(m, _)| *m == n) {
                    Some((_, kvs)) => kvs.push((key, value)),
                    None => per_net.push((n, vec![(key, value)])),
                },
            }
        }
        for (n, kvs) in per_net {
            let mut l = t.default;
            for (k, v) in kvs {
                l.0[k] = v;
            }
            t.groups.push((n, l));
        }
        t.groups.sort_by_key(|g| std::cmp::Reverse(g.0.len));
        Ok(t)
    }

    /// The limits that apply to `h`, and the network they come from (None: the defaults).
    pub fn for_host(&self, h: &HostAddr) -> (&Limits, Option<Network>) {
        for (n, l) in &self.groups {
            if n.contains(h) {
                return (l, Some(*n));
            }
        }
        (&self.default, None)
    }

    /// The smallest value of `k` over the defaults and every network (None when off
    /// everywhere): below it, no host can cross.
    pub fn lowest(&self, k: Key) -> Option<u64> {
        std::iter::once(&self.default)
            .chain(self.groups.iter().map(|(_, l)| l))
            .filter_map(|l| l.get(k))
            .min()
    }
}

/// Splits `[NETWORK:]KEY=VALUE` into its network and `KEY=VALUE`. Keys never hold ':', IPv6
/// networks do: the key is what follows the last ':' before the '='.
fn split_network(text: &str) -> Result<(Option<Network>, &str), String> {
    let lhs_end = text.find('=').unwrap_or(text.len());
    match text[..lhs_end].rfind(':') {
        Some(i) => {
            let net = text[..i].trim();
            let n = Network::parse(net).ok_or_else(|| {
                format!(
                    "--threshold '{text}': '{net}' is not a network; write e.g. 10.0.0.0/8 or \
                     2001:db8::/32"
                )
            })?;
            Ok((Some(n), &text[i + 1..]))
        }
        None => Ok((None, text)),
    }
}

fn parse_value(v: &str, key: &KeyInfo) -> Result<Option<u64>, String> {
    if v.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let (digits, mult) = match v.chars().last() {
        Some('k' | 'K') => (&v[..v.len() - 1], 1e3),
        Some('m' | 'M') => (&v[..v.len() - 1], 1e6),
        Some('g' | 'G') => (&v[..v.len() - 1], 1e9),
        _ => (v, 1.0),
    };
    let n: f64 = digits
        .trim()
        .replace('_', "")
        .parse()
        .map_err(|_| format!("'{v}' is not a number (examples: 500, 20k, 1.5M, off)"))?;
    let n = n * mult;
    if !n.is_finite() || n < 1.0 {
        return Err(format!(
            "{}: {v} is not a positive number; use a value of at least 1, or 'off'",
            key.name
        ));
    }
    if n > key.max as f64 {
        return Err(format!(
            "{}: {v} is beyond any real rate (at most {}); use a smaller value or 'off'",
            key.name, key.max
        ));
    }
    Ok(Some(n.round() as u64))
}

/// Everything the analytics of a run need, shared by its shards and its merger.
#[derive(Clone, Debug)]
pub struct AnalyticsConfig {
    /// Length of a top-N interval in seconds (Ourmon's 30 s lists).
    pub interval_s: u64,
    /// Entries kept per list and interval.
    pub top_n: usize,
    pub thresholds: Thresholds,
    pub filter_sets: Option<Arc<FilterSets>>,
    /// Shards sharing the work (a host's traffic is split among them).
    pub shards: usize,
}

impl Default for AnalyticsConfig {
    fn default() -> Self {
        AnalyticsConfig {
            interval_s: 30,
            top_n: 25,
            thresholds: Thresholds::default(),
            filter_sets: None,
            shards: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> HostAddr {
        let n = Network::parse(s).unwrap();
        HostAddr::new(n.addr, n.ip_version, 0)
    }

    #[test]
    fn networks() {
        let n = Network::parse("10.1.2.3/8").unwrap();
        assert_eq!(n.to_string(), "10.0.0.0/8");
        assert!(n.contains(&host("10.200.0.1")));
        assert!(!n.contains(&host("11.0.0.1")));
        let v6 = Network::parse("2001:db8::/33").unwrap();
        assert!(v6.contains(&host("2001:db8:7fff::1")));
        assert!(!v6.contains(&host("2001:db8:8000::1")));
        assert!(Network::parse("10.0.0.0/33").is_none());
        assert!(Network::parse("nope/8").is_none());
    }

    #[test]
    fn network_lists_parse_and_name_a_bad_prefix() {
        let n = Networks::parse("10.0.0.0/8, 192.168.0.0/16,2001:db8::/32,,10.0.0.0/8").unwrap();
        assert_eq!(n.list().len(), 3);
        let v4 = |s: &str| {
            let ip: std::net::Ipv4Addr = s.parse().unwrap();
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&ip.octets());
            a
        };
        assert!(n.contains_addr(&v4("10.200.1.1"), 4));
        assert!(n.contains_addr(&v4("192.168.7.7"), 4));
        assert!(!n.contains_addr(&v4("192.169.0.1"), 4));
        assert!(!n.contains_addr(&v4("8.8.8.8"), 4));
        let six: std::net::Ipv6Addr = "2001:db8:1::5".parse().unwrap();
        assert!(n.contains_addr(&six.octets(), 6));
        let other: std::net::Ipv6Addr = "2001:db9::5".parse().unwrap();
        assert!(!n.contains_addr(&other.octets(), 6));
        // The v4 bytes of 10.x in an IPv6 address are not 10.0.0.0/8.
        assert!(!n.contains_addr(&v4("10.0.0.1"), 6));
        for bad in [
            "10.0.0.0/33",
            "10.0.0/8",
            "lan",
            "2001:db8::/129",
            "10.0.0.0/x",
        ] {
            let e = Networks::parse(&format!("192.168.0.0/16,{bad}")).unwrap_err();
            assert!(e.contains(bad) && e.contains("10.0.0.0/8"), "{e}");
        }
        assert!(Networks::parse("").unwrap().is_empty());
    }

    #[test]
    fn defaults_groups_and_longest_match() {
        let t = Thresholds::parse(&[
            "ddos.pps=50k".into(),
            "10.0.0.0/8:ddos.pps=1M".into(),
            "10.1.0.0/16:ddos.mbps=off".into(),
            "2001:db8::/32:ddos.flows=100".into(),
        ])
        .unwrap();
        assert_eq!(t.default.get(Key::DdosPps), Some(50_000));
        let (l, n) = t.for_host(&host("10.1.2.3"));
        assert_eq!(n.unwrap().to_string(), "10.1.0.0/16");
        // The /16 takes the defaults (not the /8's) with its own keys applied.
        assert_eq!(l.get(Key::DdosPps), Some(50_000));
        assert_eq!(l.get(Key::DdosMbps), None);
        let (l, _) = t.for_host(&host("10.9.9.9"));
        assert_eq!(l.get(Key::DdosPps), Some(1_000_000));
        let (l, n) = t.for_host(&host("2001:db8::5"));
        assert_eq!((l.get(Key::DdosFlows), n.is_some()), (Some(100), true));
        assert_eq!(t.lowest(Key::DdosPps), Some(50_000));
        assert_eq!(t.lowest(Key::DdosMbps), Some(1_000));
    }

    #[test]
    fn bad_thresholds_say_what_is_wrong() {
        for (text, says) in [
            ("ddos.ppps=5", "unknown key 'ddos.ppps'"),
            ("ddos.pps=-5", "not a positive number"),
            ("ddos.pps=0", "not a positive number"),
            ("ddos.pps=1e30", "beyond any real rate"),
            ("ddos.pps=fast", "is not a number"),
            ("ddos.pps", "expected [NETWORK:]KEY=VALUE"),
            ("10.0.0.0/99:ddos.pps=5", "is not a network"),
            ("syn.work_weight=150", "beyond any real rate"),
        ] {
            let e = Thresholds::parse(&[text.to_string()]).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
            assert!(e.starts_with("--threshold '"), "{e}");
        }
    }
}
