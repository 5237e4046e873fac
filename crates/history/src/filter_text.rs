//! Query filters written as text, the same for `sonde query` flags and REST API parameters:
//! times (`1700000000`, `2026-11-23T08:00:00Z`, `2026-11-23`, `-2h`), networks (`10.0.0.0/8`),
//! protocols (`tcp`, `17`) and applications (`TLS`, `Google`, an nDPI number).

use crate::store::{Filter, Network};

/// The text of each filter, as given; `None` is "no filter".
#[derive(Clone, Debug, Default)]
pub struct FilterText<'a> {
    pub from: Option<&'a str>,
    pub to: Option<&'a str>,
    pub host: Option<&'a str>,
    pub port: Option<&'a str>,
    pub proto: Option<&'a str>,
    pub app: Option<&'a str>,
}

impl FilterText<'_> {
    /// The filter, or an error naming the bad value. `name` turns a field name ("from") into
    /// how the caller spells it ("--from" for the CLI, "from=" for the API).
    pub fn parse(&self, now_ms: u64, name: impl Fn(&str) -> String) -> Result<Filter, String> {
        let with = |field: &str, v: &str, e: String| format!("{} '{v}': {e}", name(field));
        let time = |field: &str, v: Option<&str>| {
            v.map(|t| parse_time(t, now_ms).map_err(|e| with(field, t, e)))
                .transpose()
        };
        let (from_ms, to_ms) = (time("from", self.from)?, time("to", self.to)?);
        if let (Some(f), Some(t)) = (from_ms, to_ms) {
            if f > t {
                return Err(format!("{} is after {}", name("from"), name("to")));
            }
        }
        let host = self
            .host
            .map(|h| parse_network(h).map_err(|e| with("host", h, e)))
            .transpose()?;
        let port = self
            .port
            .map(|p| {
                p.parse::<u16>()
                    .map_err(|_| with("port", p, "use a port number 0-65535".into()))
            })
            .transpose()?;
        let proto = self
            .proto
            .map(|p| parse_proto(p).map_err(|e| with("proto", p, e)))
            .transpose()?;
        let app = self
            .app
            .map(|a| {
                a.parse::<u16>()
                    .ok()
                    .or_else(|| sonde_dpi::Proto::from_name(a).map(|p| p.0))
                    .ok_or_else(|| {
                        with(
                            "app",
                            a,
                            "not an application sonde knows (e.g. TLS, DNS, Google, or an nDPI number)"
                                .into(),
                        )
                    })
            })
            .transpose()?;
        Ok(Filter {
            from_ms,
            to_ms,
            host,
            port,
            proto,
            app,
            place: None,
        })
    }
}

/// `tcp`, `udp`, `icmp`, `icmpv6`, `sctp` or a protocol number.
pub fn parse_proto(p: &str) -> Result<u8, String> {
    match p.to_ascii_lowercase().as_str() {
        "tcp" => Ok(6),
        "udp" => Ok(17),
        "icmp" => Ok(1),
        "icmpv6" => Ok(58),
        "sctp" => Ok(132),
        n => n
            .parse::<u8>()
            .map_err(|_| "use tcp, udp, icmp, icmpv6, sctp or a number 0-255".into()),
    }
}

/// `10.1.2.3`, `10.0.0.0/8`, `2001:db8::/32`.
pub fn parse_network(s: &str) -> Result<Network, String> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let ip: std::net::IpAddr = addr
        .parse()
        .map_err(|_| format!("'{addr}' is not an IPv4 or IPv6 address"))?;
    let mut n = Network {
        addr: [0; 16],
        ip_version: 4,
        prefix: 32,
    };
    match ip {
        std::net::IpAddr::V4(a) => n.addr[..4].copy_from_slice(&a.octets()),
        std::net::IpAddr::V6(a) => {
            n.addr = a.octets();
            n.ip_version = 6;
            n.prefix = 128;
        }
    }
    if let Some(l) = len {
        let max = n.prefix;
        n.prefix = l
            .parse::<u8>()
            .ok()
            .filter(|&l| l <= max)
            .ok_or_else(|| format!("prefix length '{l}' must be 0 to {max}"))?;
    }
    Ok(n)
}

/// Unix seconds, `YYYY-MM-DD[THH:MM[:SS]][Z]` (UTC), or `-N{s,m,h,d}` before now; in ms.
pub fn parse_time(s: &str, now_ms: u64) -> Result<u64, String> {
    let bad = || {
        "not a time: use Unix seconds, 2026-11-23T08:00:00Z, 2026-11-23, or -90s/-15m/-2h/-7d"
            .to_string()
    };
    if let Some(rel) = s.strip_prefix('-') {
        // At a character boundary: the unit may be any character a user typed (`-1é`).
        let cut = rel.char_indices().last().map_or(0, |(i, _)| i);
        let (num, unit) = rel.split_at(cut);
        let n: u64 = num.parse().map_err(|_| bad())?;
        let ms = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        return Ok(now_ms.saturating_sub(n.saturating_mul(ms)));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) && !s.is_empty() {
        return s
            .parse::<u64>()
            .map(|secs| secs.saturating_mul(1000))
            .map_err(|_| bad());
    }
    let s = s.strip_suffix('Z').unwrap_or(s);
    let (date, time) = s.split_once(['T', ' ']).unwrap_or((s, "00:00:00"));
    let d: Vec<&str> = date.split('-').collect();
    let t: Vec<&str> = time.split(':').collect();
    if d.len() != 3 || !(2..=3).contains(&t.len()) {
        return Err(bad());
    }
    let num = |x: &str, lo: u64, hi: u64| -> Result<u64, String> {
        x.parse::<u64>()
            .ok()
            .filter(|v| (lo..=hi).contains(v))
            .ok_or_else(bad)
    };
    let (y, m, day) = (num(d[0], 1970, 9999)?, num(d[1], 1, 12)?, num(d[2], 1, 31)?);
    let (hh, mm) = (num(t[0], 0, 23)?, num(t[1], 0, 59)?);
    let ss = t.get(2).map_or(Ok(0), |x| num(x, 0, 60))?;
    Ok(
        (days_from_civil(y as i64, m as u32, day as u32) as u64 * 86_400
            + hh * 3600
            + mm * 60
            + ss)
            * 1000,
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of a day count since 1970-01-01: the inverse of `days_from_civil`.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 19): a relative time ending in a multi-byte character was split
    /// inside it, and the panic took an API request (and `sonde query`) down.
    #[test]
    fn non_ascii_times_are_errors() {
        for t in ["-1é", "-é", "-1€", "2026-11-2é", "-"] {
            assert!(parse_time(t, 1_800_000_000_000).is_err(), "{t}");
        }
    }

    #[test]
    fn times_parse_in_every_form() {
        let now = 1_800_000_000_000;
        assert_eq!(parse_time("1700000000", now).unwrap(), 1_700_000_000_000);
        assert_eq!(
            parse_time("2023-11-14T22:13:20Z", now).unwrap(),
            1_700_000_000_000
        );
        assert_eq!(parse_time("1970-01-01", now).unwrap(), 0);
        assert_eq!(
            parse_time("2000-03-01T00:00", now).unwrap(),
            951_868_800_000
        );
        assert_eq!(parse_time("-2h", now).unwrap(), now - 7_200_000);
        assert_eq!(parse_time("-90s", now).unwrap(), now - 90_000);
        for days in [0, 11_016, 19_675, 20_415, -1] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        for bad in ["yesterday", "2023-13-01", "-5y", "2023-11-14T25:00", ""] {
            assert!(parse_time(bad, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn networks_parse_and_match() {
        let n = parse_network("10.1.0.0/16").unwrap();
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[10, 1, 200, 3]);
        assert!(n.contains(&a, 4));
        a[1] = 2;
        assert!(!n.contains(&a, 4));
        assert!(parse_network("10.0.0.0/33").is_err());
        assert!(parse_network("example.com").is_err());
        let v6 = parse_network("2001:db8::/32").unwrap();
        assert_eq!((v6.ip_version, v6.prefix), (6, 32));
    }

    #[test]
    fn errors_name_the_field_as_the_caller_spells_it() {
        let api = |f: &str| format!("{f}=");
        let t = FilterText {
            port: Some("http"),
            ..FilterText::default()
        };
        let e = t.parse(0, api).unwrap_err();
        assert!(e.starts_with("port= 'http'"), "{e}");
        let t = FilterText {
            from: Some("-1h"),
            to: Some("-2h"),
            ..FilterText::default()
        };
        let e = t.parse(10_000_000, |f| format!("--{f}")).unwrap_err();
        assert_eq!(e, "--from is after --to");
        let t = FilterText {
            host: Some("10.0.0.0/8"),
            proto: Some("UDP"),
            app: Some("DNS"),
            ..FilterText::default()
        };
        let f = t.parse(0, api).unwrap();
        assert_eq!((f.proto, f.host.unwrap().prefix), (Some(17), 8));
        assert!(f.app.is_some());
    }
}
