//! What a detector sees: the packet ([`Pkt`]), its answer ([`Verdict`]), and the part of the
//! flow it may read and write ([`Flow`]: the label so far, the metadata, and the per-protocol
//! state in [`Scratch`]).
//!
//! Detectors (`proto/*.rs`) depend on this module, [`crate::meta`] and [`crate::ids`] only; the
//! engine (`engine.rs`) wraps a [`Flow`] in its own per-flow state ([`crate::FlowDpi`]) and
//! calls the detectors, so nothing here depends on the engine.

use crate::ids::{Category, Proto};
use crate::meta::Meta;

/// Longest string kept from the wire (names, URLs, banners); longer ones are cut.
pub const MAX_STR: usize = 256;

/// Cuts `s` to [`MAX_STR`] bytes (on a char boundary) and replaces control characters and the
/// invisible formatting ones, so what came off the wire is safe to keep and to print as text:
/// a bidirectional override (U+202E) would show `RLO-gnp.exe` as `exe.png-OLR`.
pub fn wire_string(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(MAX_STR)];
    let s = String::from_utf8_lossy(cut);
    s.chars()
        .map(|c| {
            if c.is_control() || is_invisible_format(c) {
                '\u{FFFD}'
            } else {
                c
            }
        })
        .collect()
}

/// Bidirectional controls, zero-width characters and the BOM: invisible, and able to make a
/// string read as another.
pub fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{200B}'..='\u{200F}'   // zero-width space/joiners, LRM, RLM
        | '\u{202A}'..='\u{202E}' // embeddings and overrides
        | '\u{2060}'..='\u{2064}' // word joiner, invisible operators
        | '\u{2066}'..='\u{2069}' // isolates
        | '\u{061C}'              // Arabic letter mark
        | '\u{FEFF}') // BOM, zero-width no-break space
}

/// Transport protocol of a packet handed to the detectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    Tcp,
    Udp,
}

/// One payload-carrying packet of a flow, as a detector sees it.
#[derive(Clone, Copy, Debug)]
pub struct Pkt<'a> {
    /// Transport payload (after the TCP/UDP header), possibly cut to the capture length.
    pub payload: &'a [u8],
    pub l4: L4,
    /// True when the packet goes from the client (who opened the flow) to the server.
    pub from_client: bool,
    pub client_port: u16,
    pub server_port: u16,
    /// Payload packets of this flow before this one (0 for the first).
    pub index: u8,
    /// When the packet was captured, in nanoseconds since the Unix epoch (the capture's
    /// clock: a replayed file keeps its own time).
    pub ts_ns: u64,
}

impl Pkt<'_> {
    /// True when either side uses `port`.
    pub fn has_port(&self, port: u16) -> bool {
        self.client_port == port || self.server_port == port
    }
}

/// A detector's answer for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not this protocol: the detector is not called again for this flow.
    No,
    /// Cannot tell yet: call again with the flow's next payload packet.
    Unsure,
    /// It is `proto`. With `done == false` the detector wants later packets (only it is called
    /// from now on) to complete the metadata, e.g. a server's response.
    Is { proto: Proto, done: bool },
}

impl Verdict {
    /// `Unsure` while the flow has shown fewer than `max` payload packets, then `No`: for a
    /// detector that needs a later packet to decide but should not hold the flow for ever.
    pub fn unsure_within(p: &Pkt<'_>, max: u8) -> Verdict {
        if p.index < max {
            Verdict::Unsure
        } else {
            Verdict::No
        }
    }
}

impl Proto {
    /// Convenience for detectors: `Verdict::Is { proto: self, done }`.
    pub fn is(self, done: bool) -> Verdict {
        Verdict::Is { proto: self, done }
    }
}

/// How a label was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Confidence {
    #[default]
    Unknown = 0,
    /// Guessed from the transport ports (no detector recognised the payload).
    Port,
    /// Found in the payload by a detector.
    Dpi,
}

impl Confidence {
    pub fn name(self) -> &'static str {
        match self {
            Confidence::Unknown => "unknown",
            Confidence::Port => "port",
            Confidence::Dpi => "dpi",
        }
    }

    /// The confidence whose number (`confidence as u8`) is `n`, for stored records.
    pub fn from_number(n: u8) -> Option<Confidence> {
        [Confidence::Unknown, Confidence::Port, Confidence::Dpi]
            .into_iter()
            .find(|c| *c as u8 == n)
    }
}

/// The label of a flow: small and `Copy`, kept inline in the flow entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct L7 {
    /// The protocol (TLS, DNS, HTTP, …), or [`Proto::UNKNOWN`].
    pub proto: Proto,
    /// The service on top (Google, Netflix, WhatsApp, …), or [`Proto::UNKNOWN`].
    pub app: Proto,
    pub category: Category,
    pub confidence: Confidence,
}

impl L7 {
    /// nDPI's `proto.app` number form, e.g. `91.126`.
    pub fn number(&self) -> String {
        let mut s = String::new();
        self.push_number(&mut s);
        s
    }

    /// [`L7::number`] appended to `out` (the flow writers: no allocation per record).
    pub fn push_number(&self, out: &mut String) {
        let mut digits = itoa::Buffer::new();
        out.push_str(digits.format(self.proto.0));
        out.push('.');
        out.push_str(digits.format(self.app.0));
    }

    /// nDPI's name form: `TLS.Google`, `DNS`, `WhatsApp` (an application without a known
    /// carrier protocol), or `Unknown`.
    pub fn name(&self) -> String {
        let mut s = String::new();
        self.push_name(&mut s);
        s
    }

    /// [`L7::name`] appended to `out`.
    pub fn push_name(&self, out: &mut String) {
        match (self.proto.is_known(), self.app.is_known()) {
            (true, true) if self.proto != self.app => {
                out.push_str(self.proto.name());
                out.push('.');
                out.push_str(self.app.name());
            }
            (true, _) => out.push_str(self.proto.name()),
            (false, true) => out.push_str(self.app.name()),
            (false, false) => out.push_str("Unknown"),
        }
    }
}

/// The part of a flow's DPI state a detector reads and writes. The engine sets `l7.proto` when
/// a detector answers `Is` (so the owner sees its own label on later packets); detectors may
/// refine `l7.app` and fill `meta`.
#[derive(Clone, Debug, Default)]
pub struct Flow {
    pub l7: L7,
    pub meta: Meta,
    /// Per-protocol state between packets (see [`Scratch`]).
    pub scratch: Scratch,
}

/// What detectors keep between packets of one flow. Each field has one user, named in its
/// comment, so detectors never trample each other's state.
#[derive(Clone, Debug, Default)]
pub struct Scratch {
    /// tls.rs (TLS over TCP, also inside STARTTLS and CONNECT tunnels): handshake bytes per
    /// direction (0 = client), until a whole message is in.
    pub tls: [Vec<u8>; 2],
    /// quic.rs: CRYPTO frame bytes of the client's Initial packets, in offset order.
    pub quic_crypto: Vec<u8>,
    /// The text protocols: mail.rs (SMTP, POP3, IMAP) and ftp.rs, which share one greeting.
    pub text: TextState,
    /// rtp.rs: the first packet of a pair.
    pub rtp: Option<RtpFirst>,
    /// mqtt.rs: what a flow joined after its CONNECT showed so far (`mqtt.rs` `PING_*`,
    /// `PUBLISHED`).
    pub mqtt: u8,
    /// dtls.rs: the last application-data record per direction (0 = client): epoch and
    /// sequence number.
    pub dtls: [Option<(u16, u64)>; 2],
    /// bittorrent.rs: the flow's first uTP packet, which the next one must follow up.
    pub utp: Option<UtpFirst>,
    /// http.rs: a CONNECT was answered 2xx; the tunnel's TLS handshake is read by the TLS
    /// detector (its SNI and fingerprints), the label stays HTTP_Connect.
    pub http_tunnel_open: bool,
    /// http.rs: when the request's first packet was seen (0: not seen), to time the response.
    pub http_request_ns: u64,
    /// tftp.rs: the last TFTP packet of a transfer flow (the server's new port, no port 69),
    /// which the other side's next packet must answer.
    pub tftp: Option<TftpLast>,
    /// wireguard.rs: the last transport-data packet per direction (0 = client): receiver
    /// index and counter.
    pub wireguard: [Option<(u32, u64)>; 2],
    /// ipsec.rs: the last ESP-in-UDP packet per direction (0 = client): SPI and sequence.
    pub esp: [Option<(u32, u32)>; 2],
    /// openvpn.rs: the client's hard reset, or the P_DATA_V2 packets seen so far.
    pub openvpn: OpenVpnState,
    /// irc.rs: what earlier packets showed, and the line each direction's last segment ended in.
    pub irc: IrcState,
    /// http2.rs: the client preface so far and where the next frame header starts.
    pub h2: H2State,
}

/// tftp.rs: one TFTP packet of a transfer flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TftpLast {
    pub from_client: bool,
    /// 3 DATA, 4 ACK, 6 OACK.
    pub opcode: u8,
    /// Block number (0 for OACK).
    pub block: u16,
}

/// openvpn.rs: a hard reset, which the other side's reset or the sender's next control
/// packet must follow up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenVpnReset {
    pub session_id: [u8; 8],
    /// 0 plain, the HMAC size with tls-auth, 255 with tls-crypt.
    pub layout: u8,
    pub from_client: bool,
    /// A server's reset (opcode 2 or 8) rather than a client's.
    pub server: bool,
}

/// openvpn.rs: what the first packets of a flow showed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenVpnState {
    /// The first hard reset seen.
    pub reset: Option<OpenVpnReset>,
    /// P_DATA_V2: first byte and peer id of the first one, how many matched, and the
    /// directions seen (bit 0 client, bit 1 server).
    pub data: Option<(u8, [u8; 3])>,
    pub data_count: u8,
    pub data_dirs: u8,
    /// Bytes 4..8 of the last P_DATA_V2 packet (packet id or HMAC): a resent packet is not
    /// ciphertext.
    pub data_last: [u8; 4],
}

/// http2.rs: state between packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct H2State {
    /// Bytes of the 24-byte client connection preface matched so far (cut over segments).
    pub preface: u8,
    /// Per direction (0 = client): bytes of the last frame still to come, after which the next
    /// frame header starts.
    pub beyond: [u32; 2],
}

/// irc.rs: state between packets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IrcState {
    /// Flags (irc.rs `NICK_SEEN`, `BANNER_FINAL`).
    pub bits: u8,
    /// Per direction (0 = client): the start of a line cut by the end of the last segment, at
    /// most one line (8 KiB with IRCv3 tags).
    pub cut: [Vec<u8>; 2],
}

/// State of the text protocols (mail.rs, ftp.rs) between packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TextState {
    /// The server greeted with a `220` naming neither FTP nor SMTP (its line is in
    /// `meta.banner`): the client's command decides.
    pub ambiguous_220: bool,
    /// After an ambiguous `220`, SMTP ruled the flow out (with `ftp_no` too, the banner goes).
    pub smtp_no: bool,
    /// After an ambiguous `220`, FTP ruled the flow out.
    pub ftp_no: bool,
    /// The client spoke first with `USER` (POP3 or FTP): the server's answer decides.
    pub client_user: bool,
    /// The client spoke first with a POP3 command (`CAPA`, `STLS`, `AUTH`, `APOP`).
    pub client_pop3: bool,
    /// Owner only: the client asked for STARTTLS (`STLS` in POP3) and the server's answer is
    /// awaited.
    pub starttls_asked: bool,
    /// Owner only: STARTTLS was accepted; the TLS handshake that follows goes to the TLS
    /// detector for its metadata (SNI, JA3, certificate), under the SMTPS/POPS/IMAPS label.
    pub tls_follows: bool,
}

/// bittorrent.rs: the header fields of a flow's first uTP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UtpFirst {
    pub from_client: bool,
    pub connection_id: u16,
    /// The sender's clock in microseconds.
    pub timestamp_us: u32,
    pub seq: u16,
}

/// rtp.rs: the first RTP or RTCP packet of a pair (the second must match it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtpFirst {
    pub from_client: bool,
    pub rtcp: bool,
    /// The low 13 bits of its SSRC (RTCP: the sender's).
    pub ssrc_low: u16,
    /// Its RTP sequence number (0 for RTCP).
    pub seq: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_lose_controls_and_invisible_formatting() {
        let rlo = "RLO-\u{202E}gnp.exe".as_bytes();
        assert_eq!(wire_string(rlo), "RLO-\u{FFFD}gnp.exe");
        assert_eq!(
            wire_string("a\u{200B}b\u{2066}c\u{FEFF}".as_bytes()),
            "a\u{FFFD}b\u{FFFD}c\u{FFFD}"
        );
        assert_eq!(wire_string(b"ok.example\x07"), "ok.example\u{FFFD}");
        assert_eq!(wire_string("bücher.de".as_bytes()), "bücher.de");
    }
}
