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
