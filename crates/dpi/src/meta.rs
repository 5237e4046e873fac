//! What detectors learn about a flow besides its label. Every string here came off the wire:
//! it is capped at [`crate::MAX_STR`] bytes and has no control characters ([`crate::wire_string`]),
//! but it is still attacker data and must be escaped wherever it is shown.

/// Metadata of one flow; only the parts its protocol fills are `Some` (boxed, so a flow with
/// little metadata stays small).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// The name the client asked for: TLS/QUIC SNI, HTTP Host, DNS query, DHCP host name.
    pub server_name: Option<String>,
    pub http: Option<Box<Http>>,
    pub tls: Option<Box<Tls>>,
    /// QUIC version of the Initial packet (the TLS fields are in `tls`).
    pub quic_version: Option<u32>,
    pub dns: Option<Box<Dns>>,
    pub dhcp: Option<Box<Dhcp>>,
    pub ssh: Option<Box<Ssh>>,
    /// First line a text protocol's server (or client) sent: SMTP/IMAP/POP3/FTP greeting, SIP
    /// request line, …
    pub banner: Option<String>,
    /// Fields of a collected flow that sonde does not interpret, kept to be shown: unknown
    /// keys of a JSON producer, and NetFlow/IPFIX elements as `IE<enterprise>.<id>` (hex).
    pub extra: Vec<(String, String)>,
    /// The client's and the server's AS numbers as a collected record gave them (NetFlow
    /// v5's src_as/dst_as, bgpSource/DestinationAsNumber IE 16/17, a producer's SRC_AS);
    /// 0 when it did not.
    pub src_as: u32,
    pub dst_as: u32,
}

impl Meta {
    /// Whether nothing was learnt (the same as `== Meta::default()`, without building one to
    /// compare with: the engine asks once per flow).
    pub fn is_empty(&self) -> bool {
        // Every field named: a new one does not compile until it is checked here.
        let Meta {
            server_name,
            http,
            tls,
            quic_version,
            dns,
            dhcp,
            ssh,
            banner,
            extra,
            src_as,
            dst_as,
        } = self;
        server_name.is_none()
            && http.is_none()
            && tls.is_none()
            && quic_version.is_none()
            && dns.is_none()
            && dhcp.is_none()
            && ssh.is_none()
            && banner.is_none()
            && extra.is_empty()
            && *src_as == 0
            && *dst_as == 0
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Http {
    pub method: Option<String>,
    pub url: Option<String>,
    pub host: Option<String>,
    pub user_agent: Option<String>,
    pub content_type: Option<String>,
    /// Response status code, 0 until a response is seen.
    pub status: u16,
    /// Microseconds from the request's first packet to the response's status line (the
    /// server's think time plus one network round trip), 0 until both are seen.
    pub response_time_us: u32,
    /// The HTTP version when it is not HTTP/1.x: `h2c` for HTTP/2 over cleartext TCP.
    pub version: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tls {
    /// Highest version offered by the client (supported_versions, else the hello's version),
    /// e.g. 0x0304 for TLS 1.3.
    pub client_version: u16,
    /// Version the server chose (0 until a ServerHello is seen).
    pub server_version: u16,
    pub sni: Option<String>,
    /// ALPN protocols offered by the client, comma-separated (e.g. `h2,http/1.1`).
    pub alpn: Option<String>,
    /// JA3 client fingerprint: MD5 hex of the JA3 string.
    pub ja3: Option<String>,
    /// JA4 client fingerprint (FoxIO's format, e.g. `t13d1516h2_8daaf6152771_e5627efa2ab1`).
    pub ja4: Option<String>,
    /// JA3S server fingerprint: MD5 hex.
    pub ja3s: Option<String>,
    /// Subject CN and subjectAltName DNS names of the server certificate, when visible
    /// (TLS 1.2 and older), comma-separated.
    pub cert_names: Option<String>,
    pub cipher: u16,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dns {
    pub query: Option<String>,
    /// Query type (1 = A, 28 = AAAA, …).
    pub qtype: u16,
    /// Response code (0 = NOERROR, 3 = NXDOMAIN), `None` until a response is seen.
    pub rcode: Option<u8>,
    /// Addresses and names in the answer section (A, AAAA, CNAME, PTR), at most 8.
    pub answers: Vec<String>,
    pub is_mdns: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dhcp {
    pub hostname: Option<String>,
    pub vendor_class: Option<String>,
    /// DHCP message type (1 = DISCOVER … 8 = INFORM).
    pub msg_type: u8,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ssh {
    pub client_banner: Option<String>,
    pub server_banner: Option<String>,
    /// HASSH: MD5 hex of the client's KEXINIT algorithm lists.
    pub hassh_client: Option<String>,
    pub hassh_server: Option<String>,
}

/// A metadata value as the outputs see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Text(&'a str),
    Number(u64),
    /// Several strings (DNS answers); text formats write them joined by commas.
    List(&'a [String]),
}

/// What a metadata field holds; it also decides how the history stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Text from the wire (attacker data: escaped by every writer).
    WireText,
    /// Several wire strings.
    WireList,
    /// A number with a fixed meaning (status, version, type).
    Code,
    /// A duration (see the unit).
    Duration,
    /// 1 when true; absent when false.
    Flag,
}

/// One metadata field: the single place that names it. The JSON/CSV writers, the JSON ingest,
/// the history codec, the REST answers and `sonde schema` all walk [`FIELDS`], so a new field
/// is a struct member, its row here, and the detector that fills it.
pub struct Field {
    /// The nProbe/ntopng JSON key (and CSV column, and the REST answer's `meta` key).
    pub key: &'static str,
    /// The history codec's tag: unique and never reused (records on disk keep it).
    pub tag: u8,
    /// The protocol whose metadata it is (`l7` for what any protocol may fill).
    pub group: &'static str,
    pub kind: Kind,
    pub unit: &'static str,
    pub what: &'static str,
    /// The value, when the flow has one.
    pub get: fn(&Meta) -> Option<Value<'_>>,
    /// Sets the value; false (and nothing changed) when `Value` cannot be this field's (a
    /// word where a number is due, a number out of range). Text is stored as given: a caller
    /// with bytes from outside passes them through [`crate::wire_string`] first.
    pub set: fn(&mut Meta, Value<'_>) -> bool,
}

/// The history codec's tag for a collected flow's uninterpreted fields ([`Meta::extra`]); no
/// field may use it.
pub const EXTRA_TAG: u8 = 60;

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::WireText => "wire text",
            Kind::WireList => "wire text list",
            Kind::Code => "code",
            Kind::Duration => "duration",
            Kind::Flag => "flag",
        }
    }

    /// True for the kinds whose values are numbers.
    pub fn is_number(self) -> bool {
        matches!(self, Kind::Code | Kind::Duration | Kind::Flag)
    }
}

// Helpers that keep each row of FIELDS on one line.

/// The section a field lives in, created when a value is set.
fn sec<T: Default>(s: &mut Option<Box<T>>) -> &mut T {
    s.get_or_insert_with(Box::default)
}

fn text(v: &Option<String>) -> Option<Value<'_>> {
    v.as_deref().map(Value::Text)
}

/// A number, absent when zero (the structs use 0 for "not seen").
fn nonzero(n: impl Into<u64>) -> Option<Value<'static>> {
    Some(n.into()).filter(|&n| n != 0).map(Value::Number)
}

fn as_text(v: Value<'_>) -> Option<String> {
    match v {
        Value::Text(s) => Some(s.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::List(l) => Some(l.join(",")),
    }
}

fn as_list(v: Value<'_>) -> Option<Vec<String>> {
    match v {
        Value::List(l) => Some(l.to_vec()),
        Value::Text(s) => Some(s.split(',').map(str::to_string).collect()),
        Value::Number(_) => None,
    }
}

fn as_number<T: TryFrom<u64>>(v: Value<'_>) -> Option<T> {
    let n = match v {
        Value::Number(n) => n,
        Value::Text(s) => s.trim().parse().ok()?,
        Value::List(_) => return None,
    };
    T::try_from(n).ok()
}

/// Stores `v` through `put` when it converts; says whether it did.
fn store<T>(v: Option<T>, put: impl FnOnce(T)) -> bool {
    v.map(put).is_some()
}

use Kind::*;

#[allow(clippy::too_many_arguments)] // one row of the table, in its column order
const fn f(
    key: &'static str,
    tag: u8,
    group: &'static str,
    kind: Kind,
    unit: &'static str,
    what: &'static str,
    get: fn(&Meta) -> Option<Value<'_>>,
    set: fn(&mut Meta, Value<'_>) -> bool,
) -> Field {
    Field {
        key,
        tag,
        group,
        kind,
        unit,
        what,
        get,
        set,
    }
}

/// Every metadata field, in the JSON key and CSV column order (after the flow's own fields).
/// Tags: 1-3 any protocol, 11-19 HTTP, 21-29 TLS, 31-39 DNS, 41-49 DHCP, 51-59 SSH, 60 extra,
/// 61-69 what an exporter knows of the flow;
/// 10, 20, 30, 40 and 50 were sections in layout version 1 and stay unused.
#[rustfmt::skip]
pub const FIELDS: &[Field] = &[
    f("SERVER_NAME", 1, "l7", WireText, "", "server name learnt by any protocol", |m| text(&m.server_name), |m, v| store(as_text(v), |s| m.server_name = Some(s))),
    f("HTTP_METHOD", 11, "http", WireText, "", "HTTP request method", |m| text(&m.http.as_ref()?.method), |m, v| store(as_text(v), |s| sec(&mut m.http).method = Some(s))),
    f("HTTP_URL", 12, "http", WireText, "", "HTTP request URL", |m| text(&m.http.as_ref()?.url), |m, v| store(as_text(v), |s| sec(&mut m.http).url = Some(s))),
    f("HTTP_HOST", 13, "http", WireText, "", "HTTP Host header", |m| text(&m.http.as_ref()?.host), |m, v| store(as_text(v), |s| sec(&mut m.http).host = Some(s))),
    f("HTTP_USER_AGENT", 14, "http", WireText, "", "HTTP User-Agent header", |m| text(&m.http.as_ref()?.user_agent), |m, v| store(as_text(v), |s| sec(&mut m.http).user_agent = Some(s))),
    f("HTTP_MIME", 15, "http", WireText, "", "HTTP response Content-Type", |m| text(&m.http.as_ref()?.content_type), |m, v| store(as_text(v), |s| sec(&mut m.http).content_type = Some(s))),
    f("HTTP_RET_CODE", 16, "http", Code, "", "HTTP response status", |m| nonzero(m.http.as_ref()?.status), |m, v| store(as_number(v), |n| sec(&mut m.http).status = n)),
    f("HTTP_RESPONSE_TIME_US", 17, "http", Duration, "µs", "HTTP request to response status line", |m| nonzero(m.http.as_ref()?.response_time_us), |m, v| store(as_number(v), |n| sec(&mut m.http).response_time_us = n)),
    f("HTTP_VERSION", 18, "http", WireText, "", "HTTP version when not HTTP/1.x (h2c: HTTP/2 over cleartext TCP)", |m| text(&m.http.as_ref()?.version), |m, v| store(as_text(v), |s| sec(&mut m.http).version = Some(s))),
    f("TLS_SERVER_NAME", 21, "tls", WireText, "", "TLS SNI", |m| text(&m.tls.as_ref()?.sni), |m, v| store(as_text(v), |s| sec(&mut m.tls).sni = Some(s))),
    f("TLS_VERSION", 27, "tls", Code, "", "TLS version the client offered", |m| nonzero(m.tls.as_ref()?.client_version), |m, v| store(as_number(v), |n| sec(&mut m.tls).client_version = n)),
    f("TLS_SERVER_VERSION", 28, "tls", Code, "", "TLS version the server chose", |m| nonzero(m.tls.as_ref()?.server_version), |m, v| store(as_number(v), |n| sec(&mut m.tls).server_version = n)),
    f("TLS_CIPHER", 29, "tls", Code, "", "TLS cipher suite the server chose", |m| nonzero(m.tls.as_ref()?.cipher), |m, v| store(as_number(v), |n| sec(&mut m.tls).cipher = n)),
    f("TLS_ALPN", 22, "tls", WireText, "", "TLS ALPN protocols offered", |m| text(&m.tls.as_ref()?.alpn), |m, v| store(as_text(v), |s| sec(&mut m.tls).alpn = Some(s))),
    f("JA3C_HASH", 23, "tls", WireText, "", "client JA3 fingerprint", |m| text(&m.tls.as_ref()?.ja3), |m, v| store(as_text(v), |s| sec(&mut m.tls).ja3 = Some(s))),
    f("JA4C_HASH", 24, "tls", WireText, "", "client JA4 fingerprint", |m| text(&m.tls.as_ref()?.ja4), |m, v| store(as_text(v), |s| sec(&mut m.tls).ja4 = Some(s))),
    f("JA3S_HASH", 25, "tls", WireText, "", "server JA3S fingerprint", |m| text(&m.tls.as_ref()?.ja3s), |m, v| store(as_text(v), |s| sec(&mut m.tls).ja3s = Some(s))),
    f("TLS_CERT_NAMES", 26, "tls", WireText, "", "names in the server certificate", |m| text(&m.tls.as_ref()?.cert_names), |m, v| store(as_text(v), |s| sec(&mut m.tls).cert_names = Some(s))),
    f("QUIC_VERSION", 3, "quic", Code, "", "QUIC version", |m| m.quic_version.map(|n| Value::Number(n.into())), |m, v| store(as_number(v), |n| m.quic_version = Some(n))),
    f("DNS_QUERY", 31, "dns", WireText, "", "DNS query name", |m| text(&m.dns.as_ref()?.query), |m, v| store(as_text(v), |s| sec(&mut m.dns).query = Some(s))),
    f("DNS_QUERY_TYPE", 33, "dns", Code, "", "DNS query type", |m| nonzero(m.dns.as_ref()?.qtype), |m, v| store(as_number(v), |n| sec(&mut m.dns).qtype = n)),
    f("DNS_RET_CODE", 34, "dns", Code, "", "DNS response code", |m| m.dns.as_ref()?.rcode.map(|n| Value::Number(n.into())), |m, v| store(as_number(v), |n| sec(&mut m.dns).rcode = Some(n))),
    f("DNS_ANSWERS", 32, "dns", WireList, "", "DNS answer addresses and names", |m| Some(&m.dns.as_ref()?.answers).filter(|a| !a.is_empty()).map(|a| Value::List(a)), |m, v| store(as_list(v), |l| sec(&mut m.dns).answers = l)),
    f("DNS_MDNS", 35, "dns", Flag, "", "1 for multicast DNS", |m| m.dns.as_ref()?.is_mdns.then_some(Value::Number(1)), |m, v| store(as_number::<u8>(v).filter(|&n| n <= 1), |n| sec(&mut m.dns).is_mdns = n == 1)),
    f("DHCP_CLIENT_NAME", 41, "dhcp", WireText, "", "DHCP client host name", |m| text(&m.dhcp.as_ref()?.hostname), |m, v| store(as_text(v), |s| sec(&mut m.dhcp).hostname = Some(s))),
    f("DHCP_VENDOR_CLASS", 42, "dhcp", WireText, "", "DHCP vendor class", |m| text(&m.dhcp.as_ref()?.vendor_class), |m, v| store(as_text(v), |s| sec(&mut m.dhcp).vendor_class = Some(s))),
    f("DHCP_MESSAGE_TYPE", 43, "dhcp", Code, "", "DHCP message type (1 DISCOVER … 8 INFORM)", |m| nonzero(m.dhcp.as_ref()?.msg_type), |m, v| store(as_number(v), |n| sec(&mut m.dhcp).msg_type = n)),
    f("SSH_CLIENT_BANNER", 51, "ssh", WireText, "", "SSH client banner", |m| text(&m.ssh.as_ref()?.client_banner), |m, v| store(as_text(v), |s| sec(&mut m.ssh).client_banner = Some(s))),
    f("SSH_SERVER_BANNER", 52, "ssh", WireText, "", "SSH server banner", |m| text(&m.ssh.as_ref()?.server_banner), |m, v| store(as_text(v), |s| sec(&mut m.ssh).server_banner = Some(s))),
    f("SSH_HASSH_CLIENT", 53, "ssh", WireText, "", "client HASSH fingerprint", |m| text(&m.ssh.as_ref()?.hassh_client), |m, v| store(as_text(v), |s| sec(&mut m.ssh).hassh_client = Some(s))),
    f("SSH_HASSH_SERVER", 54, "ssh", WireText, "", "server HASSH fingerprint", |m| text(&m.ssh.as_ref()?.hassh_server), |m, v| store(as_text(v), |s| sec(&mut m.ssh).hassh_server = Some(s))),
    f("L7_BANNER", 2, "l7", WireText, "", "first banner line of a text protocol", |m| text(&m.banner), |m, v| store(as_text(v), |s| m.banner = Some(s))),
    f("SRC_AS", 61, "as", Code, "", "client's AS number: a collected record's (BGP source AS), else by --geoip-dir when set (0: not known)", |m| nonzero(m.src_as), |m, v| store(as_number(v), |n| m.src_as = n)),
    f("DST_AS", 62, "as", Code, "", "server's AS number: a collected record's (BGP destination AS), else by --geoip-dir when set (0: not known)", |m| nonzero(m.dst_as), |m, v| store(as_number(v), |n| m.dst_as = n)),
];

/// Every metadata field a flow has, then its uninterpreted extra pairs, as (key, text):
/// numbers in decimal, lists comma-joined. For the outputs whose metadata is text (protobuf's
/// map, ClickHouse's arrays).
pub fn text_pairs(m: &Meta) -> impl Iterator<Item = (&str, String)> {
    let fields = FIELDS.iter().filter_map(move |f| {
        let text = match (f.get)(m)? {
            Value::Text(t) => t.to_string(),
            Value::Number(n) => n.to_string(),
            Value::List(l) => l.join(","),
        };
        Some((f.key, text))
    });
    fields.chain(m.extra.iter().map(|(k, v)| (k.as_str(), v.clone())))
}

/// The inverse of [`text_pairs`]: sets `key` from its text form (a number in decimal, a list
/// comma-joined); a key sonde does not know, or a number that does not parse, is kept in
/// `extra` as it came.
pub fn set_text(m: &mut Meta, key: &str, text: &str) {
    let taken = field(key).is_some_and(|f| match f.kind {
        Kind::WireText => (f.set)(m, Value::Text(text)),
        Kind::WireList => {
            let items: Vec<String> = text.split(',').map(str::to_string).collect();
            (f.set)(m, Value::List(&items))
        }
        _ => text
            .parse::<u64>()
            .is_ok_and(|n| (f.set)(m, Value::Number(n))),
    });
    if !taken {
        m.extra.push((key.to_string(), text.to_string()));
    }
}

/// The field of a JSON key.
pub fn field(key: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.key == key)
}

/// The field of a history codec tag.
pub fn field_by_tag(tag: u8) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.tag == tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meta_is_empty_exactly_when_it_equals_the_default() {
        let filled: Vec<fn(&mut Meta)> = vec![
            |m| m.server_name = Some("a".into()),
            |m| m.http = Some(Box::default()),
            |m| m.tls = Some(Box::default()),
            |m| m.quic_version = Some(1),
            |m| m.dns = Some(Box::default()),
            |m| m.dhcp = Some(Box::default()),
            |m| m.ssh = Some(Box::default()),
            |m| m.banner = Some(String::new()),
            |m| m.extra.push(("k".into(), "v".into())),
            |m| m.src_as = 1,
            |m| m.dst_as = 1,
        ];
        assert!(Meta::default().is_empty());
        for fill in filled {
            let mut m = Meta::default();
            fill(&mut m);
            assert_ne!(m, Meta::default());
            assert!(!m.is_empty(), "{m:?}");
        }
    }

    #[test]
    fn text_pairs_read_back_with_set_text() {
        let mut m = Meta::default();
        for f in FIELDS {
            let set = match f.kind {
                Kind::WireText => (f.set)(&mut m, Value::Text("a b")),
                Kind::WireList => (f.set)(&mut m, Value::List(&["x".into(), "y".into()])),
                Kind::Flag => (f.set)(&mut m, Value::Number(1)),
                _ => (f.set)(&mut m, Value::Number(7)),
            };
            assert!(set, "{}", f.key);
        }
        m.extra.push(("IE0.1234".into(), "ab".into()));
        let mut back = Meta::default();
        for (k, v) in text_pairs(&m) {
            set_text(&mut back, k, &v);
        }
        assert_eq!(back, m);
    }

    #[test]
    fn keys_and_tags_are_unique_and_extra_is_reserved() {
        for (i, a) in FIELDS.iter().enumerate() {
            assert_ne!(a.tag, EXTRA_TAG, "{}", a.key);
            assert_ne!(a.tag, 0, "{}", a.key);
            for b in &FIELDS[i + 1..] {
                assert_ne!(a.key, b.key);
                assert_ne!(a.tag, b.tag, "{} and {}", a.key, b.key);
            }
        }
    }

    /// Every field reads back what it was given, through the value form of its kind, and a
    /// value of the wrong form is refused without changing anything.
    #[test]
    fn every_field_round_trips_through_its_setter() {
        let answers = vec!["1.2.3.4".to_string(), "example.org".to_string()];
        for fld in FIELDS {
            let v = match fld.kind {
                WireText => Value::Text("a name"),
                WireList => Value::List(&answers),
                Flag => Value::Number(1),
                Code | Duration => Value::Number(7),
            };
            let mut m = Meta::default();
            assert_eq!((fld.get)(&m), None, "{}", fld.key);
            assert!((fld.set)(&mut m, v), "{}", fld.key);
            assert_eq!((fld.get)(&m), Some(v), "{}", fld.key);
            // Only this field is set.
            for other in FIELDS.iter().filter(|o| o.key != fld.key) {
                assert_eq!((other.get)(&m), None, "{} set {}", fld.key, other.key);
            }
            if fld.kind.is_number() {
                let mut m = Meta::default();
                assert!(
                    !(fld.set)(&mut m, Value::Text("not a number")),
                    "{}",
                    fld.key
                );
                assert!(!(fld.set)(&mut m, Value::Number(u64::MAX)), "{}", fld.key);
                assert_eq!(m, Meta::default(), "{}", fld.key);
                // Numbers written as text (a JSON producer quoting them) are read.
                assert!((fld.set)(&mut m, Value::Text("1")), "{}", fld.key);
                assert_eq!((fld.get)(&m), Some(Value::Number(1)), "{}", fld.key);
            }
        }
    }
}
