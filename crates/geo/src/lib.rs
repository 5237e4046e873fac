//! Where an address is: its country (ISO 3166 code) and its autonomous system, read from the
//! databases a user points `--geoip-dir` at.
//!
//! Two kinds of source are understood, found by name in the directory and its subdirectories
//! (one level, so an npm `node_modules/@ip-location-db` folder works as it is):
//! - MaxMind-format `.mmdb` files (GeoLite2/GeoIP2 Country, City and ASN; DB-IP and
//!   ip-location-db country files). Whether a file gives countries or AS numbers is read from
//!   its `database_type`; both `country.iso_code` (MaxMind) and `country_code` (ip-location-db)
//!   records are read.
//! - Ranges as CSV (ip-location-db's): AS numbers as `start,end,as_number,as_organisation`
//!   (`asn-ipv4.csv`, `asn-ipv6.csv`), countries as `start,end,country_code`
//!   (`geo-whois-asn-country-ipv4.csv`, …); the `-num` files with decimal addresses work too.
//!   A country `.mmdb` is preferred over country ranges.
//!
//! Lookups touch no lock and allocate nothing: an interval search for AS ranges, a tree walk
//! for `.mmdb` files. The databases are loaded once at start.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// An ISO 3166-1 alpha-2 country code (`US`, `DE`), or one of the databases' own two-letter
/// codes (`EU`, `AP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Country([u8; 2]);

impl Country {
    /// Two ASCII letters, case folded to upper case; anything else is not a country code.
    pub fn parse(s: &str) -> Option<Country> {
        let b = s.as_bytes();
        (b.len() == 2 && b.iter().all(u8::is_ascii_alphabetic))
            .then(|| Country([b[0].to_ascii_uppercase(), b[1].to_ascii_uppercase()]))
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII letters get in (see `parse`).
        std::str::from_utf8(&self.0).unwrap_or("??")
    }
}

impl fmt::Display for Country {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the databases say about one address. `asn` 0 means no AS is known (0 is reserved).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Geo {
    pub country: Option<Country>,
    pub asn: u32,
}

/// A database file that could not be used, with what to do about it.
#[derive(Debug)]
pub struct GeoError(String);

impl fmt::Display for GeoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GeoError {}

fn err(msg: String) -> GeoError {
    GeoError(msg)
}

/// An address as a number, with its neighbours (for cutting ranges).
trait Addr: Copy + Ord + fmt::Debug {
    fn next(self) -> Option<Self>;
    fn prev(self) -> Option<Self>;
}

impl Addr for u32 {
    fn next(self) -> Option<u32> {
        self.checked_add(1)
    }
    fn prev(self) -> Option<u32> {
        self.checked_sub(1)
    }
}

impl Addr for u128 {
    fn next(self) -> Option<u128> {
        self.checked_add(1)
    }
    fn prev(self) -> Option<u128> {
        self.checked_sub(1)
    }
}

/// Disjoint inclusive ranges of one address family, sorted by start. Where the files' ranges
/// overlap (the free databases have a few), the one that starts last holds the address (the
/// more specific one when one lies inside another), and the load cuts the others around it,
/// so a lookup is one binary search.
struct Ranges<T: Addr> {
    starts: Vec<T>,
    ends: Vec<T>,
    vals: Vec<u32>,
    /// Ranges of the file that overlap an earlier one.
    overlaps: usize,
    /// Ranges as read, before [`Ranges::finish`].
    raw: Vec<(T, T, u32)>,
}

impl<T: Addr> Ranges<T> {
    fn new() -> Self {
        Ranges {
            starts: Vec::new(),
            ends: Vec::new(),
            vals: Vec::new(),
            overlaps: 0,
            raw: Vec::new(),
        }
    }

    fn push(&mut self, start: T, end: T, val: u32) {
        self.raw.push((start, end, val));
    }

    fn lookup(&self, a: T) -> u32 {
        // The last range starting at or before `a`; it holds `a` if it ends at or after it.
        let i = self.starts.partition_point(|s| *s <= a);
        if i > 0 && self.ends[i - 1] >= a {
            self.vals[i - 1]
        } else {
            0
        }
    }

    fn emit(&mut self, start: T, end: T, val: u32) {
        self.starts.push(start);
        self.ends.push(end);
        self.vals.push(val);
    }

    /// Turns the ranges read into disjoint ones: a sweep over them by start (a shorter range
    /// starting at the same address after the longer), keeping the ranges still open on a
    /// stack whose top holds the addresses until the next range starts.
    fn finish(&mut self) {
        let mut raw = std::mem::take(&mut self.raw);
        raw.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut stack: Vec<(T, T, u32)> = Vec::new();
        // The first address not yet given to a range (None: past the family's last one).
        let mut cursor: Option<T> = raw.first().map(|r| r.0);
        for (start, end, val) in raw {
            if stack.iter().any(|r| r.1 >= start) {
                self.overlaps += 1;
            }
            self.drain(&mut stack, &mut cursor, Some(start));
            stack.push((start, end, val));
            cursor = Some(cursor.map_or(start, |c| c.max(start)));
        }
        self.drain(&mut stack, &mut cursor, None);
    }

    /// Gives the addresses from `cursor` up to just before `until` (to the end with None) to
    /// the ranges on the stack, the top first, popping the ranges that end.
    fn drain(&mut self, stack: &mut Vec<(T, T, u32)>, cursor: &mut Option<T>, until: Option<T>) {
        while let Some(&(_, end, val)) = stack.last() {
            let Some(c) = *cursor else {
                stack.clear();
                return;
            };
            if until.is_some_and(|u| u <= end) {
                // The next range starts inside the top one: the top holds up to it.
                if let Some(last) = until.and_then(T::prev).filter(|l| *l >= c) {
                    self.emit(c, last, val);
                }
                return;
            }
            if end >= c {
                self.emit(c, end, val);
                *cursor = end.next();
            }
            stack.pop();
        }
    }

    fn len(&self) -> usize {
        self.starts.len()
    }
}

/// Values (AS numbers, or countries packed in a `u32`) of address ranges from CSV files.
struct RangeTable {
    v4: Ranges<u32>,
    v6: Ranges<u128>,
    /// `v4_index[p]`: the first IPv4 range starting at or after `p << 16` (65,537 entries): a
    /// lookup searches only the ranges of its /16, not all 400k (each step of a search over
    /// the whole table is a cache miss).
    v4_index: Vec<u32>,
    files: Vec<PathBuf>,
}

impl RangeTable {
    fn index_v4(&mut self) {
        let starts = &self.v4.starts;
        self.v4_index = (0..=1u64 << 16)
            .map(|p| starts.partition_point(|s| u64::from(*s) < p << 16) as u32)
            .collect();
    }

    fn lookup_v4(&self, a: u32) -> u32 {
        let p = (a >> 16) as usize;
        let (lo, hi) = (self.v4_index[p] as usize, self.v4_index[p + 1] as usize);
        // Ranges before `lo` start before this /16, those from `hi` after it: the last range
        // starting at or before `a` is in lo..hi, or is the one just before lo.
        let i = lo + self.v4.starts[lo..hi].partition_point(|s| *s <= a);
        if i > 0 && self.v4.ends[i - 1] >= a {
            self.v4.vals[i - 1]
        } else {
            0
        }
    }

    fn lookup(&self, ip: IpAddr) -> u32 {
        match ip {
            IpAddr::V4(a) => self.lookup_v4(u32::from(a)),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => self.lookup_v4(u32::from(v4)),
                None => self.v6.lookup(u128::from(a)),
            },
        }
    }

    fn describe(&self) -> String {
        let overlaps = self.v4.overlaps + self.v6.overlaps;
        format!(
            "{} ({} IPv4 and {} IPv6 ranges{})",
            self.files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            self.v4.len(),
            self.v6.len(),
            if overlaps > 0 {
                format!("; {overlaps} overlap an earlier one, and the later start wins")
            } else {
                String::new()
            }
        )
    }
}

/// A country as a number (never 0), for tables keyed by numbers.
pub fn pack_country(c: Country) -> u32 {
    u32::from(c.0[0]) << 8 | u32::from(c.0[1])
}

/// The inverse of [`pack_country`]; 0 (or anything not two letters) is no country.
pub fn unpack_country(v: u32) -> Option<Country> {
    let c = Country([(v >> 8) as u8, v as u8]);
    (v >> 16 == 0 && c.0.iter().all(u8::is_ascii_alphabetic)).then_some(c)
}

/// The loaded databases. Cheap to share (`Arc`), safe to use from any thread.
pub struct GeoDb {
    /// Country databases, asked in order until one knows the address (a directory with only
    /// split IPv4 and IPv6 files has two).
    countries: Vec<(PathBuf, maxminddb::Reader<Vec<u8>>)>,
    /// Country ranges from CSV, when there is no country `.mmdb`.
    country_ranges: Option<RangeTable>,
    as_mmdb: Vec<(PathBuf, maxminddb::Reader<Vec<u8>>)>,
    as_ranges: Option<RangeTable>,
    /// AS names from the CSV files (an `.mmdb` AS database keeps them per network).
    as_names: HashMap<u32, String>,
    /// A country database is a City one (read once at start: asked per exported record).
    cities: bool,
    dir: PathBuf,
}

impl fmt::Debug for GeoDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GeoDb({})", self.describe())
    }
}

const HELP: &str = "expected MaxMind-format .mmdb files (GeoLite2-Country, GeoLite2-City, \
                    GeoLite2-ASN, DB-IP or ip-location-db country files) or AS ranges as CSV \
                    (asn-ipv4.csv, asn-ipv6.csv from ip-location-db); `make geoip` fetches free \
                    ones into geoip/";

impl GeoDb {
    /// Loads every database found in `dir` and its subdirectories (one level).
    pub fn open_dir(dir: &Path) -> Result<GeoDb, GeoError> {
        let mut files = list_files(dir)?;
        files.sort();
        let mut db = GeoDb {
            countries: Vec::new(),
            country_ranges: None,
            as_mmdb: Vec::new(),
            as_ranges: None,
            as_names: HashMap::new(),
            cities: false,
            dir: dir.to_path_buf(),
        };
        let name = |p: &Path| {
            p.file_name()
                .map(|n| n.to_string_lossy().to_ascii_lowercase())
                .unwrap_or_default()
        };
        let split = |n: &str| n.ends_with("-ipv4.mmdb") || n.ends_with("-ipv6.mmdb");
        // A combined file (`dbip-country.mmdb`) is preferred over its split halves.
        let mmdb: Vec<&PathBuf> = files
            .iter()
            .filter(|p| name(p).ends_with(".mmdb"))
            .collect();
        let combined: Vec<&PathBuf> = mmdb.iter().copied().filter(|p| !split(&name(p))).collect();
        let mut split_country = Vec::new();
        let mut split_as = Vec::new();
        for p in &mmdb {
            let n = name(p);
            if split(&n) {
                // `x-ipv4.mmdb` next to `x.mmdb`: only the combined one is read.
                let whole = format!("{}.mmdb", &n[..n.len() - "-ipv4.mmdb".len()]);
                if combined.iter().any(|c| name(c) == whole) {
                    continue;
                }
            }
            let reader = maxminddb::Reader::open_readfile(p).map_err(|e| {
                err(format!(
                    "{}: not a readable MaxMind database ({e}); replace or remove it",
                    p.display()
                ))
            })?;
            let kind = reader.metadata().database_type.to_ascii_lowercase();
            let is_as = kind.contains("asn");
            let is_country = !is_as && (kind.contains("country") || kind.contains("city"));
            if !is_as && !is_country {
                continue; // an Anonymous-IP or ISP database, say: not what sonde reads.
            }
            let target = match (is_as, combined.contains(p)) {
                (true, true) => &mut db.as_mmdb,
                (false, true) => &mut db.countries,
                (true, false) => &mut split_as,
                (false, false) => &mut split_country,
            };
            target.push(((*p).clone(), reader));
        }
        if db.countries.is_empty() {
            db.countries = split_country;
        } else {
            db.countries.truncate(1);
        }
        if db.as_mmdb.is_empty() {
            db.as_mmdb = split_as;
        } else {
            db.as_mmdb.truncate(1);
        }
        // Range files: per kind and family, the file with text addresses if there is one,
        // else the `-num` one. AS files have `asn` in their name, the others give countries.
        let csv = |as_file: bool, family: &str| -> Option<PathBuf> {
            let mut c: Vec<&PathBuf> = files
                .iter()
                .filter(|p| {
                    let n = name(p);
                    n.ends_with(".csv")
                        && (n.starts_with("asn") == as_file)
                        && (n.contains(&format!("{family}.")) || n.contains(&format!("{family}-")))
                })
                .collect();
            c.sort_by_key(|p| name(p).contains("-num"));
            c.first().map(|p| (*p).clone())
        };
        if db.as_mmdb.is_empty() {
            let (v4, v6) = (csv(true, "ipv4"), csv(true, "ipv6"));
            if v4.is_some() || v6.is_some() {
                let names = &mut db.as_names;
                db.as_ranges = Some(load_ranges(v4.as_deref(), v6.as_deref(), |cells| {
                    let asn: u32 = cells[2]
                        .trim_start_matches("AS")
                        .parse()
                        .map_err(|_| format!("`{}` is not an AS number", cells[2]))?;
                    if let Some(name) = cells.get(3).filter(|n| !n.is_empty()) {
                        names.entry(asn).or_insert_with(|| name.to_string());
                    }
                    Ok(asn)
                })?);
            }
        }
        if db.countries.is_empty() {
            let (v4, v6) = (csv(false, "ipv4"), csv(false, "ipv6"));
            if v4.is_some() || v6.is_some() {
                db.country_ranges = Some(load_ranges(v4.as_deref(), v6.as_deref(), |cells| {
                    Country::parse(&cells[2])
                        .map(pack_country)
                        .ok_or_else(|| format!("`{}` is not a two-letter country code", cells[2]))
                })?);
            }
        }
        db.cities = db.countries.iter().any(|(_, r)| {
            r.metadata()
                .database_type
                .to_ascii_lowercase()
                .contains("city")
        });
        if !db.has_countries() && !db.has_asns() {
            return Err(err(format!(
                "no GeoIP database in {}: {HELP}",
                dir.display()
            )));
        }
        Ok(db)
    }

    /// One line for the log: which files give countries and which give AS numbers.
    pub fn describe(&self) -> String {
        let names = |v: &[(PathBuf, maxminddb::Reader<Vec<u8>>)]| {
            v.iter()
                .map(|(p, r)| format!("{} ({})", p.display(), r.metadata().database_type))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let country = if let Some(r) = &self.country_ranges {
            r.describe()
        } else if self.countries.is_empty() {
            "none".to_string()
        } else {
            names(&self.countries)
        };
        let asn = if let Some(r) = &self.as_ranges {
            r.describe()
        } else if self.as_mmdb.is_empty() {
            "none".to_string()
        } else {
            names(&self.as_mmdb)
        };
        format!(
            "geoip from {}: countries from {country}; AS numbers from {asn}",
            self.dir.display()
        )
    }

    pub fn has_countries(&self) -> bool {
        !self.countries.is_empty() || self.country_ranges.is_some()
    }

    /// Whether a country database is a City one (GeoLite2-City, DB-IP City Lite): then
    /// [`GeoDb::city`] can name places.
    pub fn has_cities(&self) -> bool {
        self.cities
    }

    /// The city of `ip` (its English name), from a City database; `None` for special-purpose
    /// addresses, as for countries. MaxMind's `city.names.en` and ip-location-db's flat `city`
    /// are read.
    pub fn city(&self, ip: IpAddr) -> Option<&str> {
        if is_special(ip) {
            return None;
        }
        for (_, r) in &self.countries {
            let Ok(found) = r.lookup(ip) else { continue };
            for path in [
                &maxminddb::path!["city", "names", "en"][..],
                &maxminddb::path!["city"][..],
            ] {
                if let Ok(Some(name)) = found.decode_path::<&str>(path) {
                    if !name.is_empty() {
                        return Some(name);
                    }
                }
            }
        }
        None
    }

    pub fn has_asns(&self) -> bool {
        !self.as_mmdb.is_empty() || self.as_ranges.is_some()
    }

    /// Country and AS of `ip`. Addresses no database knows get neither, and so do private,
    /// loopback, link-local, multicast and other special-purpose addresses whatever the
    /// databases say (a free database placing 192.168.0.0/16 in one country is a known bug
    /// of theirs).
    pub fn lookup(&self, ip: IpAddr) -> Geo {
        Geo {
            country: self.country(ip),
            asn: self.asn(ip),
        }
    }

    pub fn country(&self, ip: IpAddr) -> Option<Country> {
        if is_special(ip) {
            return None;
        }
        if let Some(r) = &self.country_ranges {
            return unpack_country(r.lookup(ip));
        }
        for (_, r) in &self.countries {
            let Ok(found) = r.lookup(ip) else { continue };
            for path in [
                &maxminddb::path!["country_code"][..],
                &maxminddb::path!["country", "iso_code"][..],
                // A City/Country record with no country (an anycast range, say) still has the
                // registered one.
                &maxminddb::path!["registered_country", "iso_code"][..],
            ] {
                if let Ok(Some(code)) = found.decode_path::<&str>(path) {
                    if let Some(c) = Country::parse(code) {
                        return Some(c);
                    }
                }
            }
        }
        None
    }

    pub fn asn(&self, ip: IpAddr) -> u32 {
        if is_special(ip) {
            return 0;
        }
        for (_, r) in &self.as_mmdb {
            if let Ok(found) = r.lookup(ip) {
                if let Ok(Some(n)) =
                    found.decode_path::<u32>(&maxminddb::path!["autonomous_system_number"])
                {
                    return n;
                }
            }
        }
        self.as_ranges.as_ref().map_or(0, |r| r.lookup(ip))
    }

    /// The name of AS `asn` ("Cloudflare, Inc."), when the databases have one. `ip` is an
    /// address in it: `.mmdb` AS databases keep names per network, not per AS.
    pub fn as_name(&self, asn: u32, ip: IpAddr) -> Option<&str> {
        if asn == 0 {
            return None;
        }
        if self.as_ranges.is_some() {
            return self.as_names.get(&asn).map(String::as_str);
        }
        for (_, r) in &self.as_mmdb {
            if let Ok(found) = r.lookup(ip) {
                if let Ok(Some(n)) =
                    found.decode_path::<&str>(&maxminddb::path!["autonomous_system_organization"])
                {
                    return Some(n);
                }
            }
        }
        None
    }
}

/// `15169` or `AS15169` (any case).
pub fn parse_asn(s: &str) -> Option<u32> {
    let digits = s
        .strip_prefix("AS")
        .or_else(|| s.strip_prefix("as"))
        .unwrap_or(s);
    digits.parse().ok()
}

impl GeoDb {
    /// A test of an address (as flow and host keys hold it: version, bytes with IPv4 in the
    /// first 4) for being in `country` and in `asn` (each when given), for history filters.
    pub fn place_test(
        self: &std::sync::Arc<Self>,
        country: Option<Country>,
        asn: Option<u32>,
    ) -> impl Fn(&[u8; 16], u8) -> bool + Send + Sync + 'static {
        let db = self.clone();
        move |addr, version| {
            let ip = if version == 4 {
                IpAddr::V4(Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]))
            } else {
                IpAddr::V6(Ipv6Addr::from(*addr))
            };
            country.is_none_or(|c| db.country(ip) == Some(c)) && asn.is_none_or(|a| db.asn(ip) == a)
        }
    }
}

/// An address no registry places anywhere: private (RFC 1918, RFC 4193), shared (RFC 6598),
/// loopback, link-local, multicast, documentation, unspecified, broadcast and reserved ones.
/// An IPv4-mapped IPv6 address is its IPv4 address.
pub fn is_special(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            a.is_private()
                || a.is_loopback()
                || a.is_link_local()
                || a.is_multicast()
                || a.is_broadcast()
                || a.is_documentation()
                || o[0] == 0
                || o[0] >= 240
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
        }
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => is_special(IpAddr::V4(v4)),
            None => {
                let s = a.segments();
                a.is_loopback()
                    || a.is_unspecified()
                    || a.is_multicast()
                    || a.is_unique_local()
                    || a.is_unicast_link_local()
                    || (s[0] == 0x2001 && s[1] == 0x0db8)
            }
        },
    }
}

/// Regular files in `dir` and in its subdirectories, one level down.
fn list_files(dir: &Path) -> Result<Vec<PathBuf>, GeoError> {
    let read = |d: &Path| {
        std::fs::read_dir(d).map_err(|e| {
            err(format!(
                "--geoip-dir {}: {e}; give a directory holding GeoIP databases ({HELP})",
                d.display()
            ))
        })
    };
    let mut out = Vec::new();
    for entry in read(dir)?.flatten() {
        let p = entry.path();
        if p.is_dir() {
            // Unreadable subdirectories are skipped: only the top one must be readable.
            if let Ok(sub) = std::fs::read_dir(&p) {
                for e in sub.flatten() {
                    let q = e.path();
                    if q.is_file() {
                        out.push(q);
                    } else if q.is_dir() && q.file_name().is_some_and(|n| n == "package") {
                        // An unpacked npm tarball (`…/package/asn-ipv4.csv`).
                        if let Ok(pkg) = std::fs::read_dir(&q) {
                            out.extend(pkg.flatten().map(|e| e.path()).filter(|p| p.is_file()));
                        }
                    }
                }
            }
        } else if p.is_file() {
            out.push(p);
        }
    }
    Ok(out)
}

/// Loads range files, `value` turning a line's cells (three or more) into the range's value.
fn load_ranges(
    v4: Option<&Path>,
    v6: Option<&Path>,
    mut value: impl FnMut(&[Cow<'_, str>]) -> Result<u32, String>,
) -> Result<RangeTable, GeoError> {
    let mut t = RangeTable {
        v4: Ranges::new(),
        v6: Ranges::new(),
        v4_index: Vec::new(),
        files: Vec::new(),
    };
    if let Some(p) = v4 {
        read_csv(p, &mut value, |start, end, v| {
            let (IpOrNum::V4(s), IpOrNum::V4(e)) = (start, end) else {
                return false;
            };
            t.v4.push(s, e, v);
            true
        })?;
        t.v4.finish();
        t.files.push(p.to_path_buf());
    }
    if let Some(p) = v6 {
        read_csv(p, &mut value, |start, end, v| {
            let (IpOrNum::V6(s), IpOrNum::V6(e)) = (start, end) else {
                return false;
            };
            t.v6.push(s, e, v);
            true
        })?;
        t.v6.finish();
        t.files.push(p.to_path_buf());
    }
    t.index_v4();
    Ok(t)
}

enum IpOrNum {
    V4(u32),
    V6(u128),
}

/// Reads `start,end,value…` lines; `push` takes the parsed range and its value and says
/// whether it is of the file's family. The first bad line stops the load with its number and
/// what was wrong.
fn read_csv(
    path: &Path,
    value: &mut impl FnMut(&[Cow<'_, str>]) -> Result<u32, String>,
    mut push: impl FnMut(IpOrNum, IpOrNum, u32) -> bool,
) -> Result<(), GeoError> {
    use std::io::BufRead;
    let io_err = |e: std::io::Error| err(format!("{}: {e}", path.display()));
    // Line by line: the AS files are tens of megabytes, and only the ranges are kept.
    let text = std::io::BufReader::new(std::fs::File::open(path).map_err(io_err)?);
    let v6_file = path.to_string_lossy().to_ascii_lowercase().contains("ipv6");
    let parse_addr = |s: &str| -> Option<IpOrNum> {
        if let Ok(a) = s.parse::<Ipv4Addr>() {
            Some(IpOrNum::V4(u32::from(a)))
        } else if let Ok(a) = s.parse::<Ipv6Addr>() {
            Some(IpOrNum::V6(u128::from(a)))
        } else if v6_file {
            s.parse::<u128>().ok().map(IpOrNum::V6)
        } else {
            s.parse::<u32>().ok().map(IpOrNum::V4)
        }
    };
    for (i, line) in text.lines().enumerate() {
        let line = line.map_err(io_err)?;
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            continue;
        }
        let bad = |what: &str| {
            err(format!(
                "{} line {}: {what}; expected `start,end,as_number,as_organisation` (AS \
                 files) or `start,end,country_code`, start and end of one address family",
                path.display(),
                i + 1
            ))
        };
        let cells = split_csv(line);
        if cells.len() < 3 {
            return Err(bad("fewer than 3 fields"));
        }
        let (Some(start), Some(end)) = (parse_addr(&cells[0]), parse_addr(&cells[1])) else {
            if i == 0 {
                continue; // a header line
            }
            return Err(bad(&format!(
                "`{}` or `{}` is not an address",
                cells[0], cells[1]
            )));
        };
        let v = value(&cells).map_err(|e| bad(&e))?;
        let (s_ok, e_ok) = match (&start, &end) {
            (IpOrNum::V4(s), IpOrNum::V4(e)) => (true, s <= e),
            (IpOrNum::V6(s), IpOrNum::V6(e)) => (true, s <= e),
            _ => (false, false),
        };
        if !s_ok {
            return Err(bad("start and end are of different address families"));
        }
        if !e_ok {
            return Err(bad("the range ends before it starts"));
        }
        if !push(start, end, v) {
            return Err(bad(if v6_file {
                "an IPv4 range in an IPv6 file"
            } else {
                "an IPv6 range in an IPv4 file"
            }));
        }
    }
    Ok(())
}

/// One CSV line's cells: `"…"` quotes a cell holding commas, `""` inside it is one quote.
fn split_csv(line: &str) -> Vec<Cow<'_, str>> {
    if !line.contains('"') {
        return line.split(',').map(Cow::Borrowed).collect();
    }
    let mut cells = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => cells.push(Cow::Owned(std::mem::take(&mut cur))),
            _ => cur.push(c),
        }
    }
    cells.push(Cow::Owned(cur));
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "sonde-geo-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for (name, text) in files {
            let p = d.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        d
    }

    #[test]
    fn csv_ranges_give_the_as_of_every_address_inside_them_and_none_outside() {
        let d = dir_with(&[
            (
                "asn/asn-ipv4.csv",
                "1.0.0.0,1.0.0.255,13335,\"Cloudflare, Inc.\"\n\
                 8.8.8.0,8.8.8.255,15169,Google LLC\n",
            ),
            (
                "asn/asn-ipv6.csv",
                "2001:200::,2001:200::ffff,64500,\"Doc \"\"Net\"\"\"\n",
            ),
        ]);
        let db = GeoDb::open_dir(&d).unwrap();
        let asn = |s: &str| db.asn(s.parse().unwrap());
        assert_eq!(asn("1.0.0.0"), 13335);
        assert_eq!(asn("1.0.0.255"), 13335);
        assert_eq!(asn("1.0.1.0"), 0);
        assert_eq!(asn("0.255.255.255"), 0);
        assert_eq!(asn("8.8.8.8"), 15169);
        assert_eq!(
            asn("::ffff:8.8.8.8"),
            15169,
            "an IPv4-mapped address is its IPv4 one"
        );
        assert_eq!(asn("2001:200::ffff"), 64500);
        assert_eq!(asn("2001:200::1:0"), 0);
        assert_eq!(
            db.as_name(13335, "1.0.0.1".parse().unwrap()),
            Some("Cloudflare, Inc.")
        );
        assert_eq!(
            db.as_name(64500, "2001:200::1".parse().unwrap()),
            Some("Doc \"Net\"")
        );
        assert!(!db.has_countries());
        assert!(
            db.describe().contains("2 IPv4 and 1 IPv6 ranges"),
            "{}",
            db.describe()
        );
    }

    #[test]
    fn where_ranges_overlap_the_one_starting_last_holds_the_address() {
        let d = dir_with(&[(
            "asn-ipv4.csv",
            // 1 holds 1.0.0.0/16 but for 2 inside it, and 3 overlaps 1's end; 4 starts where
            // 1 does but is shorter.
            "1.0.0.0,1.0.255.255,1,A\n1.0.1.0,1.0.1.255,2,B\n1.0.255.0,1.1.0.255,3,C\n\
             1.0.0.0,1.0.0.9,4,D\n",
        )]);
        let db = GeoDb::open_dir(&d).unwrap();
        let asn = |s: &str| db.asn(s.parse().unwrap());
        assert_eq!(asn("1.0.0.5"), 4);
        assert_eq!(asn("1.0.0.10"), 1);
        assert_eq!(asn("1.0.1.7"), 2);
        assert_eq!(
            asn("1.0.2.0"),
            1,
            "after the nested range, the outer one again"
        );
        assert_eq!(asn("1.0.255.1"), 3);
        assert_eq!(asn("1.1.0.255"), 3);
        assert_eq!(asn("1.1.1.0"), 0);
        assert!(
            db.describe().contains("3 overlap an earlier one"),
            "{}",
            db.describe()
        );
        // Every address against the rule itself, over a small space of random ranges.
        let mut x = 12345u32;
        let mut rnd = |m: u32| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x % m
        };
        for round in 0..200 {
            let mut ranges = Ranges::<u32>::new();
            let mut list = Vec::new();
            for v in 1..=rnd(6) + 1 {
                let s = rnd(64);
                let e = s + rnd(64 - s);
                ranges.push(s, e, v);
                list.push((s, e, v));
            }
            ranges.finish();
            list.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            for a in 0..70 {
                let want = list
                    .iter()
                    .rev()
                    .find(|r| r.0 <= a && a <= r.1)
                    .map_or(0, |r| r.2);
                assert_eq!(
                    ranges.lookup(a),
                    want,
                    "round {round}, address {a}: {list:?}"
                );
            }
            for w in ranges.starts.windows(2).zip(ranges.ends.iter()) {
                assert!(w.1 < &w.0[1], "not disjoint: {list:?}");
            }
        }
        // The /16 index finds what a search of the whole table finds, over the whole space.
        let mut t = RangeTable {
            v4: Ranges::new(),
            v6: Ranges::new(),
            v4_index: Vec::new(),
            files: Vec::new(),
        };
        for v in 1..3000u32 {
            let s = rnd(u32::MAX);
            let e = s.saturating_add(rnd(1 << (v % 28)));
            t.v4.push(s, e, v);
        }
        t.v4.push(0, 0, 9000);
        t.v4.push(u32::MAX - 3, u32::MAX, 9001);
        t.v4.finish();
        t.index_v4();
        for k in 0..200_000u32 {
            let a = if k < 100 {
                u32::MAX - k
            } else {
                rnd(u32::MAX).wrapping_add(k & 1)
            };
            assert_eq!(t.lookup_v4(a), t.v4.lookup(a), "{a}");
            let s = t.v4.starts[k as usize % t.v4.len()];
            assert_eq!(t.lookup_v4(s), t.v4.lookup(s), "start {s}");
        }
        assert_eq!((t.lookup_v4(0), t.lookup_v4(u32::MAX)), (9000, 9001));
        let mut edge = Ranges::<u32>::new();
        edge.push(0, u32::MAX, 1);
        edge.push(u32::MAX, u32::MAX, 2);
        edge.push(0, 0, 3);
        edge.finish();
        assert_eq!(
            [
                edge.lookup(0),
                edge.lookup(1),
                edge.lookup(u32::MAX - 1),
                edge.lookup(u32::MAX)
            ],
            [3, 1, 1, 2]
        );
    }

    /// `testdata/city.mmdb`, written by `scripts/make-city-mmdb.pl` (MaxMind's writer):
    /// 1.0.0.0/24 DE "Köln", 1.0.1.0/24 FR with no city.
    #[test]
    fn a_city_database_gives_countries_and_cities() {
        let d = dir_with(&[]);
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/city.mmdb"),
            d.join("GeoLite2-City.mmdb"),
        )
        .unwrap();
        let db = GeoDb::open_dir(&d).unwrap();
        assert!(db.has_countries() && db.has_cities() && !db.has_asns());
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(db.city(ip("1.0.0.9")), Some("Köln"));
        assert_eq!(db.country(ip("1.0.0.9")), Country::parse("DE"));
        assert_eq!(db.city(ip("1.0.1.9")), None);
        assert_eq!(db.country(ip("1.0.1.9")), Country::parse("FR"));
        assert_eq!(db.city(ip("1.0.2.9")), None);
        assert_eq!(
            db.city(ip("10.0.0.1")),
            None,
            "private addresses are placed nowhere"
        );
    }

    #[test]
    fn country_ranges_give_countries() {
        let d = dir_with(&[
            ("c/geo-whois-asn-country-ipv4.csv", "1.0.0.0,1.0.0.255,au\n"),
            (
                "c/geo-whois-asn-country-ipv6.csv",
                "2001:200::,2001:200:ffff::,JP\n",
            ),
        ]);
        let db = GeoDb::open_dir(&d).unwrap();
        let c = |s: &str| db.country(s.parse().unwrap()).map(|c| c.to_string());
        assert_eq!(c("1.0.0.9").as_deref(), Some("AU"));
        assert_eq!(c("2001:200::1").as_deref(), Some("JP"));
        assert_eq!(c("10.0.0.1"), None);
        assert!(!db.has_asns());
        let d = dir_with(&[("country-ipv4.csv", "1.0.0.0,1.0.0.255,Australia\n")]);
        let e = GeoDb::open_dir(&d).unwrap_err().to_string();
        assert!(
            e.contains("`Australia` is not a two-letter country code"),
            "{e}"
        );
    }

    #[test]
    fn numeric_ranges_read_as_the_text_ones_do() {
        let d = dir_with(&[("asn-ipv4-num.csv", "16777216,16777471,13335,Cloudflare\n")]);
        let db = GeoDb::open_dir(&d).unwrap();
        assert_eq!(db.asn("1.0.0.7".parse().unwrap()), 13335);
        assert_eq!(db.asn("1.0.1.0".parse().unwrap()), 0);
    }

    #[test]
    fn a_bad_line_is_named_with_its_number() {
        for (text, want) in [
            (
                "1.0.0.0,1.0.0.255,1,A\n1.0.1.0,nope,2,B\n",
                "line 2: `1.0.1.0` or `nope`",
            ),
            ("1.0.0.0,1.0.0.255,x,A\n", "line 1: `x` is not an AS number"),
            (
                "1.0.0.9,1.0.0.1,1,A\n",
                "line 1: the range ends before it starts",
            ),
            ("1.0.0.0,::1,1,A\n", "different address families"),
            ("::1,::2,1,A\n", "an IPv6 range in an IPv4 file"),
        ] {
            let d = dir_with(&[("asn-ipv4.csv", text)]);
            let e = GeoDb::open_dir(&d).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.contains("asn-ipv4.csv"), "{e}");
        }
    }

    #[test]
    fn a_directory_without_databases_says_what_it_expected() {
        let d = dir_with(&[("readme.txt", "hello")]);
        let e = GeoDb::open_dir(&d).unwrap_err().to_string();
        assert!(
            e.contains("no GeoIP database in") && e.contains(".mmdb"),
            "{e}"
        );
        let e = GeoDb::open_dir(&d.join("missing")).unwrap_err().to_string();
        assert!(e.contains("--geoip-dir") && e.contains("missing"), "{e}");
        let d = dir_with(&[("GeoLite2-Country.mmdb", "not a database")]);
        let e = GeoDb::open_dir(&d).unwrap_err().to_string();
        assert!(e.contains("not a readable MaxMind database"), "{e}");
    }

    #[test]
    fn special_addresses_are_nowhere_whatever_the_database_says() {
        let d = dir_with(&[
            ("asn-ipv4.csv", "0.0.0.0,255.255.255.255,7,Everything\n"),
            (
                "asn-ipv6.csv",
                "::,ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff,7,Everything\n",
            ),
            ("country-ipv4.csv", "0.0.0.0,255.255.255.255,AU\n"),
        ]);
        let db = GeoDb::open_dir(&d).unwrap();
        for a in [
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.13",
            "127.0.0.1",
            "169.254.1.1",
            "100.64.0.1",
            "224.0.0.251",
            "255.255.255.255",
            "0.0.0.0",
            "240.0.0.1",
            "192.0.2.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "ff02::fb",
            "2001:db8::1",
            "::ffff:10.0.0.1",
        ] {
            assert_eq!(db.lookup(a.parse().unwrap()), Geo::default(), "{a}");
        }
        for a in ["8.8.8.8", "100.128.0.1", "2a00:1450::1", "::ffff:8.8.8.8"] {
            assert_eq!(db.asn(a.parse().unwrap()), 7, "{a}");
        }
        assert_eq!(db.country("8.8.8.8".parse().unwrap()), Country::parse("AU"));
    }

    #[test]
    fn country_codes_are_two_letters() {
        assert_eq!(Country::parse("us").unwrap().as_str(), "US");
        assert!(Country::parse("USA").is_none());
        assert!(Country::parse("1A").is_none());
        assert!(Country::parse("").is_none());
    }
}
