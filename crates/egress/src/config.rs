//! `--egress-*`: what is forwarded, and where.

use sonde_dpi::Proto;
use std::net::IpAddr;
use std::path::PathBuf;

/// What egress does with the packets of a flow whose application is not known yet, when
/// selecting by application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undecided {
    /// Forwarded until the flow's application is known (an IDS sees each flow's start).
    Forward,
    /// Shunted until then: only packets of flows already known to match go out.
    Shunt,
}

#[derive(Clone, Debug)]
pub struct EgressConfig {
    /// `--egress-bpf`: a tcpdump expression each frame must match.
    pub bpf: Option<String>,
    /// `--egress-hosts`: addresses and networks; a frame goes out when either end is in one.
    pub hosts: Vec<(IpAddr, u8)>,
    /// `--egress-app`: protocols or applications (DNS, TLS, YouTube, …); a frame goes out when
    /// its flow's label names one of them.
    pub apps: Vec<Proto>,
    pub undecided: Undecided,
    /// `--egress-shunt-after N`: only the first N packets of each flow go out (0: all).
    pub shunt_after: u64,
    /// `--egress-pcap DIR`: a ring of pcap files per shard.
    pub pcap_dir: Option<PathBuf>,
    /// A ring file is closed at this size (`--egress-file-mb`).
    pub file_bytes: u64,
    /// Files kept per shard; the oldest is deleted past this (`--egress-files`).
    pub files: usize,
    /// `--egress-iface IFACE`: frames sent out of this interface as they came in.
    pub iface: Option<String>,
}

impl Default for EgressConfig {
    fn default() -> Self {
        EgressConfig {
            bpf: None,
            hosts: Vec::new(),
            apps: Vec::new(),
            undecided: Undecided::Forward,
            shunt_after: 0,
            pcap_dir: None,
            file_bytes: 64 << 20,
            files: 16,
            iface: None,
        }
    }
}

impl EgressConfig {
    /// Whether a frame's fate waits for its flow (selection by application, or a packet limit
    /// per flow): the engine must account it first.
    pub fn needs_flow(&self) -> bool {
        !self.apps.is_empty() || self.shunt_after > 0
    }

    /// The BPF program each frame must pass: `--egress-bpf` and the host list together (the
    /// host list as `net` primitives, so it means what tcpdump means by them).
    pub fn bpf_expr(&self) -> Option<String> {
        let hosts = (!self.hosts.is_empty()).then(|| {
            self.hosts
                .iter()
                .map(|(addr, len)| format!("net {addr}/{len}"))
                .collect::<Vec<_>>()
                .join(" or ")
        });
        match (&self.bpf, hosts) {
            (Some(b), Some(h)) => Some(format!("({b}) and ({h})")),
            (Some(b), None) => Some(b.clone()),
            (None, Some(h)) => Some(h),
            (None, None) => None,
        }
    }
}

/// Parses `--egress-hosts`: addresses or networks (`10.0.0.0/8`, `2001:db8::/32`, `192.0.2.7`)
/// separated by commas or whitespace, or `@FILE` with one per line (`#` starts a comment).
pub fn parse_hosts(text: &str) -> Result<Vec<(IpAddr, u8)>, String> {
    let owned;
    let (body, from) = match text.strip_prefix('@') {
        Some(path) => {
            owned = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the host list {path}: {e}"))?;
            (owned.as_str(), Some(path))
        }
        None => (text, None),
    };
    let mut out = Vec::new();
    for (n, line) in body.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        for item in line.split([',', ' ', '\t']).filter(|s| !s.is_empty()) {
            let where_ = from.map_or(String::new(), |p| format!(" ({p} line {})", n + 1));
            out.push(parse_net(item).map_err(|e| format!("'{item}'{where_}: {e}"))?);
        }
    }
    if out.is_empty() {
        return Err(
            "the host list is empty: give addresses or networks, e.g. 10.0.0.0/8,192.0.2.7".into(),
        );
    }
    Ok(out)
}

fn parse_net(item: &str) -> Result<(IpAddr, u8), String> {
    let (addr, len) = match item.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (item, None),
    };
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| "not an IPv4 or IPv6 address (write 10.0.0.0/8 or 192.0.2.7)".to_string())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(l) => match l.parse::<u8>() {
            Ok(l) if l <= max => l,
            _ => {
                return Err(format!(
                    "the prefix length must be a number from 0 to {max}"
                ))
            }
        },
    };
    // libpcap refuses a network with bits set past its prefix ("non-network bits set").
    let masked = mask(addr, len);
    if masked != addr {
        return Err(format!(
            "bits are set past the /{len} prefix: write {masked}/{len}"
        ));
    }
    Ok((addr, len))
}

fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

/// Parses `--egress-app`: protocol or application names as sonde labels flows (`DNS`, `TLS`,
/// `HTTP`, `YouTube`; case-insensitive), separated by commas.
pub fn parse_apps(text: &str) -> Result<Vec<Proto>, String> {
    let mut out = Vec::new();
    for name in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match Proto::from_name(name) {
            Some(p) if p != Proto::UNKNOWN => out.push(p),
            _ => {
                return Err(format!(
                    "'{name}' is not an application sonde knows: use the names in the flow \
                     records' L7_PROTO_NAME (DNS.Google is DNS and Google), e.g. DNS,TLS,HTTP"
                ))
            }
        }
    }
    if out.is_empty() {
        return Err("no application given: e.g. --egress-app DNS,TLS".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_become_bpf_and_bad_entries_are_named() {
        let h = parse_hosts("10.0.0.0/8, 192.0.2.7 2001:db8::/32").unwrap();
        assert_eq!(h.len(), 3);
        let cfg = EgressConfig {
            hosts: h,
            bpf: Some("udp".into()),
            ..EgressConfig::default()
        };
        assert_eq!(
            cfg.bpf_expr().unwrap(),
            "(udp) and (net 10.0.0.0/8 or net 192.0.2.7/32 or net 2001:db8::/32)"
        );
        assert!(parse_hosts("10.0.0.1/8")
            .unwrap_err()
            .contains("write 10.0.0.0/8"));
        assert!(parse_hosts("10.0.0.0/33").unwrap_err().contains("0 to 32"));
        assert!(parse_hosts("example.com")
            .unwrap_err()
            .starts_with("'example.com'"));
        assert!(parse_hosts(" , ").unwrap_err().contains("empty"));
    }

    #[test]
    fn host_list_files_name_the_bad_line() {
        let path = std::env::temp_dir().join(format!("sonde-egress-hosts-{}", std::process::id()));
        std::fs::write(
            &path,
            "# servers\n192.0.2.1\n\n198.51.100.0/24 # lab\nbad\n",
        )
        .unwrap();
        let e = parse_hosts(&format!("@{}", path.display())).unwrap_err();
        assert!(e.contains("line 5"), "{e}");
        std::fs::write(&path, "192.0.2.1\n198.51.100.0/24 # lab\n").unwrap();
        assert_eq!(
            parse_hosts(&format!("@{}", path.display())).unwrap().len(),
            2
        );
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn applications_by_name() {
        let a = parse_apps("dns, TLS").unwrap();
        assert_eq!(
            a,
            vec![
                Proto::from_name("DNS").unwrap(),
                Proto::from_name("TLS").unwrap()
            ]
        );
        assert!(parse_apps("NoSuchApp").unwrap_err().contains("'NoSuchApp'"));
        assert!(parse_apps(",").is_err());
    }
}
