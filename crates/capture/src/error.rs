//! Errors of packet sources. Each message says what is wrong and, where there is one, how to fix
//! it; the binary prints it as a single `sonde: error:` line.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug)]
pub enum CaptureError {
    /// The file could not be opened or read.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file has no bytes at all (or fewer than a capture header).
    Empty {
        path: PathBuf,
        len: u64,
    },
    /// The file does not start with a pcap or pcapng magic number.
    NotACapture {
        path: PathBuf,
        magic: [u8; 4],
    },
    /// The file ends in the middle of a record. Packets before it were read.
    Truncated {
        path: PathBuf,
        packet: u64,
        offset: u64,
        needed: u64,
        available: u64,
    },
    /// A record header holds impossible values.
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    /// The link type of the capture is not one sonde decodes.
    UnsupportedLinkType {
        path: PathBuf,
        linktype: u32,
    },
    NoSuchInterface {
        name: String,
        available: Vec<String>,
    },
    Permission {
        name: String,
        detail: String,
    },
    BadFilter {
        filter: String,
        detail: String,
    },
    Live {
        name: String,
        detail: String,
    },
    BadSpec {
        spec: String,
        detail: String,
    },
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::Io { path, source } => match source.kind() {
                std::io::ErrorKind::NotFound => write!(f, "cannot open '{}': no such file", path.display()),
                std::io::ErrorKind::PermissionDenied => {
                    write!(f, "cannot open '{}': permission denied (check the file's mode and owner)", path.display())
                }
                _ => write!(f, "cannot read '{}': {}", path.display(), source),
            },
            CaptureError::Empty { path, len } => write!(
                f,
                "'{}' is empty ({} bytes): it holds no capture header and no packets",
                path.display(),
                len
            ),
            CaptureError::NotACapture { path, magic } => write!(
                f,
                "'{}' is not a pcap or pcapng file (it starts with bytes {:02x} {:02x} {:02x} {:02x}); \
                 convert it with 'editcap -F pcap IN OUT' if it is another capture format",
                path.display(),
                magic[0],
                magic[1],
                magic[2],
                magic[3]
            ),
            CaptureError::Truncated { path, packet, offset, needed, available } => write!(
                f,
                "'{}' is truncated: packet {} at byte {} needs {} bytes but the file has only {} left; \
                 the {} packets before it were processed",
                path.display(),
                packet,
                offset,
                needed,
                available,
                packet.saturating_sub(1)
            ),
            CaptureError::Corrupt { path, offset, what } => {
                write!(f, "'{}' is corrupt at byte {}: {}", path.display(), offset, what)
            }
            CaptureError::UnsupportedLinkType { path, linktype } => write!(
                f,
                "'{}' has link type {} which sonde does not decode (supported: Ethernet, raw IP, \
                 Linux cooked SLL/SLL2, BSD loopback, PPP, Cisco HDLC)",
                path.display(),
                linktype
            ),
            CaptureError::NoSuchInterface { name, available } => write!(
                f,
                "no such interface '{}' (available: {}); list them with 'ip link'",
                name,
                if available.is_empty() { "none visible".to_string() } else { available.join(", ") }
            ),
            CaptureError::Permission { name, detail } => write!(
                f,
                "no permission to capture on '{}' ({}); run as root or grant the capability: \
                 sudo setcap cap_net_raw,cap_net_admin=eip $(command -v sonde)",
                name, detail
            ),
            CaptureError::BadFilter { filter, detail } => write!(
                f,
                "bad capture filter '{}': {}; the syntax is tcpdump's (man pcap-filter), e.g. 'tcp port 443'",
                filter, detail
            ),
            CaptureError::Live { name, detail } => write!(f, "capture on '{}' failed: {}", name, detail),
            CaptureError::BadSpec { spec, detail } => write!(
                f,
                "bad --synthetic spec '{}': {}; expected hosts=N,size=BYTES[,packets=P][,random-src][,seed=S]",
                spec, detail
            ),
        }
    }
}

impl std::error::Error for CaptureError {}
