//! Service mapping: which application (Google, Netflix, WhatsApp, …) a flow belongs to, from
//! the server name the client asked for (SNI, HTTP Host, DNS query) or from well-known address
//! blocks. The mapping is data, not code: `data/services.txt` is built in, and users add their
//! own files in the same format (`--dpi-services FILE`).
//!
//! Format, one rule per line (`#` starts a comment):
//!
//! ```text
//! host  googlevideo.com   YouTube           # the name and every name under it
//! ip    157.240.0.0/16    Facebook          # IPv4 or IPv6 CIDR
//! category  YouTube  Streaming              # overrides the application's default category
//! ```
//!
//! Application names are nDPI's (see [`crate::ids::TABLE`]); a later rule for the same name or
//! block replaces an earlier one, so a user file can correct the built-in one.

use crate::ids::{Category, Proto};
use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

const BUILTIN: &str = include_str!("../data/services.txt");

#[derive(Clone, Debug, Default)]
pub struct Services {
    /// Lower-case name suffix → application.
    names: HashMap<String, Proto>,
    /// IPv4 blocks (as ::ffff:a.b.c.d) and IPv6 blocks, apart so each lookup only walks the
    /// prefix lengths of its family.
    v4: Blocks,
    v6: Blocks,
    categories: HashMap<Proto, Category>,
}

/// A line of a services file that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicesError {
    pub source: String,
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ServicesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} line {}: {}", self.source, self.line, self.message)
    }
}

impl std::error::Error for ServicesError {}

impl Services {
    /// The built-in rules (`data/services.txt`).
    pub fn builtin() -> Services {
        let mut s = Services::default();
        s.load("built-in services", BUILTIN)
            .expect("the built-in services file parses");
        s
    }

    /// Adds the rules of `text` (named `source` in errors) to these. On an error, the rules
    /// before the bad line are kept.
    pub fn load(&mut self, source: &str, text: &str) -> Result<(), ServicesError> {
        let loaded = self.load_rules(source, text);
        self.v4.flatten();
        self.v6.flatten();
        loaded
    }

    fn load_rules(&mut self, source: &str, text: &str) -> Result<(), ServicesError> {
        for (i, raw) in text.lines().enumerate() {
            let err = |message: String| ServicesError {
                source: source.to_string(),
                line: i + 1,
                message,
            };
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() != 3 {
                return Err(err(format!(
                    "expected 3 columns (kind pattern application), got {}: '{line}'",
                    cols.len()
                )));
            }
            let app = |name: &str| {
                Proto::from_name(name).ok_or_else(|| {
                    err(format!(
                        "unknown application '{name}' (use one of nDPI's names, e.g. Google, \
                         YouTube, NetFlix, WhatsApp, Facebook)"
                    ))
                })
            };
            match cols[0] {
                "host" => {
                    let name = cols[1].trim_start_matches("*.").trim_end_matches('.');
                    if name.is_empty() || name.contains('/') {
                        return Err(err(format!("'{}' is not a host name", cols[1])));
                    }
                    self.names.insert(name.to_ascii_lowercase(), app(cols[2])?);
                }
                "ip" => {
                    let (addr, len) = parse_cidr(cols[1]).ok_or_else(|| {
                        err(format!(
                            "'{}' is not an address block (examples: 157.240.0.0/16, \
                             2a03:2880::/32)",
                            cols[1]
                        ))
                    })?;
                    let p = app(cols[2])?;
                    let fam = if is_v4_mapped(addr) && len >= 96 {
                        &mut self.v4
                    } else {
                        &mut self.v6
                    };
                    fam.insert(addr, len, p);
                }
                "category" => {
                    let p = app(cols[1])?;
                    let c = Category::from_name(cols[2]).ok_or_else(|| {
                        err(format!("unknown category '{}' (e.g. Web, Streaming, VoIP, Chat, SocialNetwork, Cloud)", cols[2]))
                    })?;
                    self.categories.insert(p, c);
                }
                other => {
                    return Err(err(format!(
                        "unknown rule kind '{other}' (use host, ip or category)"
                    )))
                }
            }
        }
        Ok(())
    }

    /// The application of a server name: the rule for the longest suffix that matches at a
    /// label boundary (`www.youtube.com` matches `youtube.com`, `notyoutube.com` does not).
    pub fn by_name(&self, name: &str) -> Option<Proto> {
        if self.names.is_empty() || name.len() > 255 {
            return None;
        }
        let lower = name.trim_end_matches('.').to_ascii_lowercase();
        let mut rest = lower.as_str();
        loop {
            if let Some(p) = self.names.get(rest) {
                return Some(*p);
            }
            match rest.find('.') {
                Some(i) => rest = &rest[i + 1..],
                None => return None,
            }
        }
    }

    /// The application of an address (16 bytes; IPv4 in the first 4 when `ip_version == 4`).
    pub fn by_addr(&self, addr: &[u8; 16], ip_version: u8) -> Option<Proto> {
        if ip_version == 4 {
            self.v4
                .find(v4_mapped([addr[0], addr[1], addr[2], addr[3]]), addr[0])
        } else {
            self.v6.find(u128::from_be_bytes(*addr), addr[0])
        }
    }

    pub fn category_of(&self, app: Proto) -> Category {
        self.categories
            .get(&app)
            .copied()
            .unwrap_or_else(|| app.category())
    }

    pub fn len(&self) -> usize {
        self.names.len() + self.v4.len() + self.v6.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The blocks of one address family. Looked up once per flow, when its label is settled: a
/// bitmap of first address bytes rejects most addresses at once; otherwise one binary search
/// in the blocks flattened into disjoint ranges (the longest block wins where they nest).
#[derive(Clone, Debug, Default)]
struct Blocks {
    /// The rules: (prefix length, sorted (masked address, application)).
    by_len: Vec<(u8, Vec<(u128, Proto)>)>,
    /// Bit b set when some block covers addresses whose first byte is b.
    first_bytes: [u64; 4],
    /// `by_len` as sorted, disjoint (first, last, application) ranges ([`Blocks::flatten`]).
    ranges: Vec<(u128, u128, Proto)>,
}

impl Blocks {
    fn insert(&mut self, addr: u128, len: u8, p: Proto) {
        let masked = mask(addr, len);
        let i = match self.by_len.iter().position(|(l, _)| *l == len) {
            Some(i) => i,
            None => {
                self.by_len.push((len, Vec::new()));
                self.by_len.sort_by_key(|b| std::cmp::Reverse(b.0));
                self.by_len.iter().position(|(l, _)| *l == len).unwrap_or(0)
            }
        };
        let v = &mut self.by_len[i].1;
        match v.binary_search_by_key(&masked, |e| e.0) {
            Ok(j) => v[j].1 = p,
            Err(j) => v.insert(j, (masked, p)),
        }
        // First bytes covered: the block's first byte (in the family's own numbering) and,
        // for a block shorter than 8 bits, every byte under it.
        let (first, bits) = if is_v4_mapped(addr) && len >= 96 {
            ((masked >> 24) as u8, len - 96)
        } else {
            ((masked >> 120) as u8, len)
        };
        let span = if bits >= 8 { 1 } else { 1u16 << (8 - bits) };
        for b in first as u16..(first as u16 + span).min(256) {
            self.first_bytes[(b / 64) as usize] |= 1 << (b % 64);
        }
    }

    /// Rebuilds `ranges` from the rules: a sweep over the blocks in address order (a block
    /// before the ones nested in it), with the blocks still open on a stack; each stretch of
    /// addresses goes to the innermost open block.
    fn flatten(&mut self) {
        let mut blocks: Vec<(u128, u128, u8, Proto)> = self
            .by_len
            .iter()
            .flat_map(|&(len, ref v)| {
                v.iter()
                    .map(move |&(a, p)| (a, a | !mask(u128::MAX, len), len, p))
            })
            .collect();
        blocks.sort_unstable_by_key(|b| (b.0, b.2));
        let mut ranges: Vec<(u128, u128, Proto)> = Vec::with_capacity(blocks.len());
        let mut emit = |first: u128, last: u128, p: Proto| match ranges.last_mut() {
            Some(r) if r.2 == p && r.1.checked_add(1) == Some(first) => r.1 = last,
            _ => ranges.push((first, last, p)),
        };
        let mut open: Vec<(u128, Proto)> = Vec::new();
        // The first address not yet given to a range (None: past the end of the space).
        let mut next = Some(0u128);
        for (first, last, _, p) in blocks {
            while let Some(&(end, q)) = open.last() {
                if end >= first {
                    break;
                }
                if let Some(n) = next.filter(|&n| n <= end) {
                    emit(n, end, q);
                }
                next = next.map(|n| n.max(end + 1));
                open.pop();
            }
            if let (Some(&(_, q)), Some(n)) = (open.last(), next) {
                if n < first {
                    emit(n, first - 1, q);
                }
            }
            next = Some(first);
            open.push((last, p));
        }
        while let Some((end, q)) = open.pop() {
            if let Some(n) = next.filter(|&n| n <= end) {
                emit(n, end, q);
                next = end.checked_add(1);
            }
        }
        self.ranges = ranges;
    }

    #[inline]
    fn find(&self, a: u128, first_byte: u8) -> Option<Proto> {
        if self.first_bytes[(first_byte / 64) as usize] & (1 << (first_byte % 64)) == 0 {
            return None;
        }
        let i = self.ranges.partition_point(|r| r.0 <= a);
        let (_, last, p) = *self.ranges.get(i.checked_sub(1)?)?;
        (a <= last).then_some(p)
    }

    fn len(&self) -> usize {
        self.by_len.iter().map(|(_, v)| v.len()).sum()
    }
}

fn is_v4_mapped(a: u128) -> bool {
    a >> 32 == 0xffff
}

fn v4_mapped(o: [u8; 4]) -> u128 {
    (0xffff_u128 << 32) | u32::from_be_bytes(o) as u128
}

/// Address as u128 (IPv4 mapped) and prefix length in that 128-bit space.
fn parse_cidr(s: &str) -> Option<(u128, u8)> {
    let (a, l) = s.split_once('/').unwrap_or((s, ""));
    let ip: IpAddr = a.parse().ok()?;
    match ip {
        IpAddr::V4(v4) => {
            let len: u8 = if l.is_empty() { 32 } else { l.parse().ok()? };
            (len <= 32).then(|| (v4_mapped(v4.octets()), 96 + len))
        }
        IpAddr::V6(v6) => {
            let len: u8 = if l.is_empty() { 128 } else { l.parse().ok()? };
            (len <= 128).then(|| (u128::from_be_bytes(v6.octets()), len))
        }
    }
}

fn mask(a: u128, len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        a & (u128::MAX << (128 - len as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_at_label_boundaries() {
        let mut s = Services::default();
        s.load(
            "t",
            "host youtube.com YouTube\nhost googlevideo.com YouTube\nhost google.com Google\n",
        )
        .unwrap();
        assert_eq!(s.by_name("www.YouTube.com."), Some(Proto::YOUTUBE));
        assert_eq!(s.by_name("youtube.com"), Some(Proto::YOUTUBE));
        assert_eq!(s.by_name("notyoutube.com"), None);
        assert_eq!(
            s.by_name("r3.sn-4g5e6nsz.googlevideo.com"),
            Some(Proto::YOUTUBE)
        );
        assert_eq!(s.by_name("com"), None);
    }

    #[test]
    fn longest_prefix_wins() {
        let mut s = Services::default();
        s.load(
            "t",
            "ip 10.0.0.0/8 Google\nip 10.1.0.0/16 NetFlix\nip 2a03:2880::/32 Facebook\n",
        )
        .unwrap();
        let v4 = |a: [u8; 4]| {
            let mut x = [0u8; 16];
            x[..4].copy_from_slice(&a);
            x
        };
        assert_eq!(s.by_addr(&v4([10, 1, 2, 3]), 4), Some(Proto::NETFLIX));
        assert_eq!(s.by_addr(&v4([10, 2, 2, 3]), 4), Some(Proto::GOOGLE));
        assert_eq!(s.by_addr(&v4([11, 2, 2, 3]), 4), None);
        let v6: std::net::Ipv6Addr = "2a03:2880:f003::1".parse().unwrap();
        assert_eq!(s.by_addr(&v6.octets(), 6), Some(Proto::FACEBOOK));
        // A block shorter than one byte covers every first byte under it.
        s.load("t", "ip 128.0.0.0/2 Dropbox\n").unwrap();
        assert_eq!(s.by_addr(&v4([191, 1, 1, 1]), 4), Some(Proto::DROPBOX));
        assert_eq!(s.by_addr(&v4([192, 1, 1, 1]), 4), None);
    }

    /// The flattened ranges give what the rules say: the longest block that holds the
    /// address, checked one prefix length at a time (the lookup before the ranges).
    #[test]
    fn ranges_agree_with_the_longest_matching_block() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let apps = [
            Proto::GOOGLE,
            Proto::NETFLIX,
            Proto::FACEBOOK,
            Proto::DROPBOX,
        ];
        for round in 0..20 {
            let mut b = Blocks::default();
            // Nested and touching blocks in a small corner of the space, and the whole space.
            for _ in 0..(5 + round * 10) {
                let len = 96 + (rand() % 33) as u8;
                let addr = (0xffff_u128 << 32) | (rand() as u32 & 0xff0f_0f00) as u128;
                b.insert(addr, len, apps[(rand() % 4) as usize]);
            }
            if round % 5 == 0 {
                b.insert(0, 0, Proto::YOUTUBE);
            }
            b.flatten();
            let by_len = |a: u128| {
                let mut lens: Vec<_> = b.by_len.iter().collect();
                lens.sort_by_key(|l| std::cmp::Reverse(l.0));
                lens.into_iter().find_map(|(len, v)| {
                    let m = mask(a, *len);
                    v.binary_search_by_key(&m, |e| e.0).ok().map(|j| v[j].1)
                })
            };
            for _ in 0..2000 {
                let a = (0xffff_u128 << 32) | (rand() as u32 & 0xff1f_1f3f) as u128;
                assert_eq!(b.find(a, (a >> 24) as u8), by_len(a), "{a:x}");
            }
            assert!(
                b.ranges.windows(2).all(|w| w[0].1 < w[1].0),
                "disjoint, in order"
            );
        }
    }

    #[test]
    fn bad_lines_name_the_line_and_the_fix() {
        let mut s = Services::default();
        let e = s
            .load("my.txt", "# ok\nhost a.com Google\nhost b.com NoSuchApp\n")
            .unwrap_err();
        assert_eq!(e.line, 3);
        assert!(
            e.to_string()
                .contains("my.txt line 3: unknown application 'NoSuchApp'"),
            "{e}"
        );
        let e = s.load("my.txt", "ip 300.1.2.3/8 Google").unwrap_err();
        assert!(e.message.contains("not an address block"), "{e}");
        let e = s.load("my.txt", "host a.com").unwrap_err();
        assert!(e.message.contains("3 columns"), "{e}");
    }

    #[test]
    fn builtin_file_loads() {
        let s = Services::builtin();
        assert!(s.len() > 50);
        assert_eq!(s.by_name("www.netflix.com"), Some(Proto::NETFLIX));
    }
}
