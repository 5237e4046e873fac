//! SMTP, POP3 and IMAP: line-based mail protocols, recognised from the server's greeting
//! (`220 … ESMTP …`, `+OK …`, `* OK …`) or from the client's first command (`EHLO`, a tagged
//! IMAP command, a POP3 command answered by `+OK`).
//!
//! FTP also greets with `220`: a greeting that names FTP is left to the FTP detector, one that
//! names SMTP or mail is SMTP's, and any other `220` makes both SMTP and FTP wait for the
//! client's first command (`EHLO`/`HELO` → SMTP, `USER`/`AUTH`/`FEAT`/… → FTP).
//!
//! After recognising a flow these detectors keep it until the client's first command that
//! can no longer be followed by STARTTLS (`MAIL`, `USER`, `LOGIN`, …): a STARTTLS (`STLS` in
//! POP3) that the server accepts relabels the flow SMTPS, POPS or IMAPS, as nDPI does.
//!
//! `Scratch::text` ([`TextState`], shared by the text protocols: smtp, pop3, imap, ftp) holds
//! their state. Before a flow is recognised, `ambiguous_220`, `smtp_no`/`ftp_no` and
//! `client_user`/`client_pop3` coordinate SMTP and FTP on a bare `220` and POP3 and FTP on a
//! client-first `USER`; once a detector owns the flow no other text detector runs, and it uses
//! `starttls_asked` and `tls_follows`.

use crate::ids::Proto;
#[cfg(doc)]
use crate::types::TextState;
use crate::types::{wire_string, Flow, Pkt, Verdict};

/// Bytes of a payload searched for keywords and line ends (greetings are short).
const SCAN: usize = 512;

// ---------------------------------------------------------------------------------------------
// Small text helpers, shared with `ftp.rs`.

/// The first line of `d` (without CR/LF), at most [`SCAN`] bytes.
pub(crate) fn first_line(d: &[u8]) -> &[u8] {
    let d = d.get(..d.len().min(SCAN)).unwrap_or_default();
    let end = d
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(d.len());
    d.get(..end).unwrap_or_default()
}

/// ASCII case-insensitive prefix test.
pub(crate) fn starts_with_ci(d: &[u8], pat: &[u8]) -> bool {
    d.get(..pat.len())
        .is_some_and(|h| h.eq_ignore_ascii_case(pat))
}

/// ASCII case-insensitive substring test over at most [`SCAN`] bytes of `hay`.
pub(crate) fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    if needle.is_empty() {
        return true;
    }
    let hay = hay.get(..hay.len().min(SCAN)).unwrap_or_default();
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// A POP3 status line: `+OK` or `-ERR` as a word, a line of text (no control bytes) and its
/// end (CR LF or LF) in the packet.
fn pop3_status(d: &[u8], status: &[u8]) -> bool {
    let line = first_line(d);
    is_cmd(d, status)
        && line.iter().all(|&b| b == b'\t' || !b.is_ascii_control())
        && matches!(d.get(line.len()..line.len() + 2), Some(b"\r\n"))
            | matches!(d.get(line.len()), Some(b'\n'))
}

/// True when `d` starts with the command `cmd` followed by a space, CR, LF or the end of the
/// payload (so `USER` matches `USER bob\r\n` and `USER\r\n` but not `USERS`).
pub(crate) fn is_cmd(d: &[u8], cmd: &[u8]) -> bool {
    starts_with_ci(d, cmd) && matches!(d.get(cmd.len()), None | Some(b' ' | b'\r' | b'\n'))
}

/// A reply line `NNN ` or `NNN-` (three digits, then space, dash or line end); returns the code.
pub(crate) fn reply_code(d: &[u8]) -> Option<u16> {
    let c = d.get(..3)?;
    if !c.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if !matches!(d.get(3), None | Some(b' ' | b'-' | b'\r' | b'\n')) {
        return None;
    }
    Some(c.iter().fold(0u16, |a, &b| a * 10 + u16::from(b - b'0')))
}

/// Words in a `220` greeting that make it SMTP.
const SMTP_WORDS: &[&[u8]] = &[
    b"SMTP",
    b"MAIL",
    b"Postfix",
    b"Exim",
    b"Sendmail",
    b"qmail",
    b"MTA",
];

/// Classification of a `220` greeting line.
#[derive(PartialEq, Eq, Debug)]
pub(crate) enum Greeting220 {
    Ftp,
    Smtp,
    Ambiguous,
}

pub(crate) fn classify_220(line: &[u8]) -> Greeting220 {
    if contains_ci(line, b"FTP") {
        Greeting220::Ftp
    } else if SMTP_WORDS.iter().any(|w| contains_ci(line, w)) {
        Greeting220::Smtp
    } else {
        Greeting220::Ambiguous
    }
}

fn set_banner(f: &mut Flow, line: &[u8]) {
    if f.meta.banner.is_none() && !line.is_empty() {
        f.meta.banner = Some(wire_string(line));
    }
}

/// Which detector rules a flow out in [`reject_after_220`].
pub(crate) enum Rejecter {
    Smtp,
    Ftp,
}

/// Called by SMTP or FTP when it rules out a flow after an ambiguous `220`: the banner it
/// kept is dropped once both have said no.
pub(crate) fn reject_after_220(f: &mut Flow, by: Rejecter) -> Verdict {
    let t = &mut f.scratch.text;
    match by {
        Rejecter::Smtp => t.smtp_no = true,
        Rejecter::Ftp => t.ftp_no = true,
    }
    if t.ambiguous_220 && t.smtp_no && t.ftp_no {
        f.meta.banner = None;
    }
    Verdict::No
}

/// TLS record header (handshake or alert, SSL 3.0 to TLS 1.3 record versions).
fn looks_tls(d: &[u8]) -> bool {
    matches!(d, [0x15 | 0x16, 3, 0..=4, ..])
}

/// For an owning detector: the client asked for TLS and the server accepted (`accepted` tells
/// whether this server line is a positive answer). Returns the final verdict when the flow
/// switched to TLS.
fn starttls_step(p: &Pkt<'_>, f: &mut Flow, accepted: bool, tls_proto: Proto) -> Option<Verdict> {
    if f.scratch.text.tls_follows {
        return Some(super::tls::inner(p, f, tls_proto));
    }
    let asked = f.scratch.text.starttls_asked;
    if p.from_client && asked && looks_tls(p.payload) {
        // The server's answer was not captured but the client started the handshake.
        f.l7.proto = tls_proto;
        f.scratch.text.tls_follows = true;
        return Some(super::tls::inner(p, f, tls_proto));
    }
    if !p.from_client && asked {
        f.scratch.text.starttls_asked = false;
        if accepted {
            f.l7.proto = tls_proto;
            f.scratch.text.tls_follows = true;
            return Some(tls_proto.is(false));
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// SMTP

pub fn detect_smtp(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let d = p.payload;
    let first = match d.first() {
        Some(&b) => b,
        None => return Verdict::Unsure,
    };
    if matches!(f.l7.proto, Proto::SMTP | Proto::SMTPS) {
        return smtp_owner(p, f);
    }
    if p.from_client {
        if is_cmd(d, b"EHLO") || is_cmd(d, b"HELO") {
            set_banner(f, first_line(d));
            return Proto::SMTP.is(false);
        }
        return if f.scratch.text.ambiguous_220 {
            reject_after_220(f, Rejecter::Smtp)
        } else {
            Verdict::No
        };
    }
    // Server side.
    if f.scratch.text.ambiguous_220 {
        // More greeting lines (`220-` continuation) before the client's command.
        return if p.index < 4 && (first.is_ascii_digit() || first == b' ') {
            Verdict::Unsure
        } else {
            reject_after_220(f, Rejecter::Smtp)
        };
    }
    if p.index > 0 || reply_code(d) != Some(220) {
        return Verdict::No;
    }
    let line = first_line(d);
    match classify_220(d) {
        Greeting220::Ftp => Verdict::No,
        Greeting220::Smtp => {
            set_banner(f, line);
            Proto::SMTP.is(false)
        }
        Greeting220::Ambiguous => {
            set_banner(f, line);
            f.scratch.text.ambiguous_220 = true;
            Verdict::Unsure
        }
    }
}

/// SMTP flow owned: watch for STARTTLS until the client sends a mail command.
fn smtp_owner(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let d = p.payload;
    let accepted = reply_code(d) == Some(220);
    if let Some(v) = starttls_step(p, f, accepted, Proto::SMTPS) {
        return v;
    }
    if p.from_client {
        if is_cmd(d, b"STARTTLS") {
            f.scratch.text.starttls_asked = true;
        } else if !(is_cmd(d, b"EHLO") || is_cmd(d, b"HELO")) {
            // MAIL, AUTH, RCPT, QUIT, …: no STARTTLS can follow any more.
            return Proto::SMTP.is(true);
        }
    }
    Proto::SMTP.is(false)
}

// ---------------------------------------------------------------------------------------------
// POP3

/// POP3 commands a client may open with (before or instead of the greeting being captured).
const POP3_FIRST: &[&[u8]] = &[b"CAPA", b"STLS", b"AUTH", b"APOP"];

pub fn detect_pop3(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let d = p.payload;
    let first = match d.first() {
        Some(&b) => b,
        None => return Verdict::Unsure,
    };
    if matches!(f.l7.proto, Proto::POP3 | Proto::POPS) {
        return pop3_owner(p, f);
    }
    let st = f.scratch.text;
    if !p.from_client {
        if first != b'+' && first != b'-' {
            return Verdict::No;
        }
        let greeting = p.index == 0 && pop3_status(d, b"+OK");
        let answer = (st.client_user || st.client_pop3)
            && (pop3_status(d, b"+OK") || pop3_status(d, b"-ERR"));
        if greeting || answer {
            if greeting {
                set_banner(f, first_line(d));
            }
            return Proto::POP3.is(false);
        }
        return Verdict::No;
    }
    // Client first (the greeting was not captured): wait for the server's `+OK`/`-ERR`.
    if p.index == 0 {
        if is_cmd(d, b"USER") {
            f.scratch.text.client_user = true;
            return Verdict::Unsure;
        }
        if POP3_FIRST.iter().any(|c| is_cmd(d, c)) {
            f.scratch.text.client_pop3 = true;
            return Verdict::Unsure;
        }
    }
    Verdict::No
}

fn pop3_owner(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let d = p.payload;
    let accepted = starts_with_ci(d, b"+OK");
    if let Some(v) = starttls_step(p, f, accepted, Proto::POPS) {
        return v;
    }
    if p.from_client {
        if is_cmd(d, b"STLS") {
            f.scratch.text.starttls_asked = true;
        } else if !is_cmd(d, b"CAPA") {
            // USER, PASS, AUTH, LIST, QUIT, …: STLS comes before these.
            return Proto::POP3.is(true);
        }
    }
    Proto::POP3.is(false)
}

// ---------------------------------------------------------------------------------------------
// IMAP

/// IMAP commands a client may send before authenticating (RFC 9051 §6.1, 6.2).
const IMAP_CMDS: &[&[u8]] = &[
    b"CAPABILITY",
    b"LOGIN",
    b"AUTHENTICATE",
    b"STARTTLS",
    b"ID",
    b"NOOP",
    b"LOGOUT",
];

/// `tag SP command`: the tag is 1..=32 IMAP atom characters; returns what follows the space.
fn imap_after_tag(d: &[u8]) -> Option<&[u8]> {
    let sp = d.iter().take(33).position(|&b| b == b' ')?;
    if sp == 0 {
        return None;
    }
    let tag = d.get(..sp)?;
    let atom = |b: &u8| b.is_ascii_graphic() && !b"(){%*\"\\]+".contains(b);
    if !tag.iter().all(atom) {
        return None;
    }
    d.get(sp + 1..)
}

fn imap_client_cmd(d: &[u8]) -> Option<&'static [u8]> {
    let rest = imap_after_tag(d)?;
    IMAP_CMDS.iter().copied().find(|c| is_cmd(rest, c))
}

pub fn detect_imap(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let d = p.payload;
    let first = match d.first() {
        Some(&b) => b,
        None => return Verdict::Unsure,
    };
    if matches!(f.l7.proto, Proto::IMAP | Proto::IMAPS) {
        return imap_owner(p, f);
    }
    if p.index > 0 {
        return Verdict::No;
    }
    if !p.from_client {
        if first == b'*' && (starts_with_ci(d, b"* OK") || starts_with_ci(d, b"* PREAUTH")) {
            set_banner(f, first_line(d));
            return Proto::IMAP.is(false);
        }
        return Verdict::No;
    }
    match imap_client_cmd(d) {
        Some(cmd) => imap_client_step(f, cmd),
        None => Verdict::No,
    }
}

fn imap_client_step(f: &mut Flow, cmd: &[u8]) -> Verdict {
    if cmd == b"STARTTLS" {
        f.scratch.text.starttls_asked = true;
        Proto::IMAP.is(false)
    } else if matches!(cmd, b"CAPABILITY" | b"ID" | b"NOOP") {
        Proto::IMAP.is(false)
    } else {
        // LOGIN, AUTHENTICATE, LOGOUT, SELECT, …: STARTTLS comes before these.
        Proto::IMAP.is(true)
    }
}

fn imap_owner(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let d = p.payload;
    // Tagged `OK` answer (the STARTTLS reply), not the untagged `* OK`.
    let accepted =
        d.first() != Some(&b'*') && imap_after_tag(d).is_some_and(|rest| is_cmd(rest, b"OK"));
    if let Some(v) = starttls_step(p, f, accepted, Proto::IMAPS) {
        return v;
    }
    if p.from_client {
        return match imap_client_cmd(d) {
            Some(cmd) => imap_client_step(f, cmd),
            // SELECT, LIST, …, or not a command at all: nothing more to learn.
            None => Proto::IMAP.is(true),
        };
    }
    Proto::IMAP.is(false)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::proto::testkit::*;
    use crate::types::TextState;

    /// Runs smtp, pop3, imap and ftp in the engine's order over a conversation the way the
    /// engine does (candidates until one says `Is`, then only the owner).
    pub(crate) fn run(conv: &[(bool, Vec<u8>)], port: u16) -> Flow {
        let dets: [fn(&Pkt<'_>, &mut Flow) -> Verdict; 4] = [
            detect_smtp,
            detect_pop3,
            detect_imap,
            crate::proto::ftp::detect,
        ];
        let mut f = Flow::default();
        let mut excluded = [false; 4];
        let mut owner: Option<usize> = None;
        for (i, (c, d)) in conv.iter().enumerate() {
            let p = tcp(40000, port).pkt(d, *c, i as u8);
            if let Some(o) = owner {
                match dets[o](&p, &mut f) {
                    Verdict::Is { done: false, .. } | Verdict::Unsure => continue,
                    _ => break,
                }
            }
            for (k, det) in dets.iter().enumerate() {
                if excluded[k] {
                    continue;
                }
                match det(&p, &mut f) {
                    Verdict::No => excluded[k] = true,
                    Verdict::Unsure => {}
                    Verdict::Is { proto, done } => {
                        f.l7.proto = proto;
                        if !done {
                            owner = Some(k);
                        }
                        break;
                    }
                }
            }
            if owner.is_none() && f.l7.proto.is_known() {
                break;
            }
        }
        f
    }

    // smtp.pcap frames 4, 6, 8, 9, 11.
    const SMTP_4: &str = "32323020706967656f6e2e65797269652e61662e6d696c2045534d54502053656e646d61696c20382e382e372f382e382e373b205361742c20372041756720313939392030383a32303a3131202d303430300d0a";
    const SMTP_6: &str = "45484c4f2064656c74612e70656163682e6d696c0d0a";
    const SMTP_8: &str = "35303020436f6d6d616e6420756e7265636f676e697a65640d0a";
    const SMTP_9: &str = "48454c4f2064656c74612e70656163682e6d696c0d0a";
    const SMTP_11: &str =
        "4d41494c2046726f6d3a3c636f726579734064656c74612e70656163682e6d696c3e0d0a";
    // smtp-starttls.pcap frames 40, 41, 44, 45.
    const STLS_40: &str = "323230206a772d766d30382d696e742d646e732e77656265726e65747a2e6e65742045534d545020506f737466697820285562756e7475290d0a";
    const STLS_41: &str = "45484c4f205b495076363a323030333a64653a323031363a3132353a666333363a383331373a346538363a636237325d0d0a";
    const STLS_44: &str = "5354415254544c530d0a";
    const STLS_45: &str = "32323020322e302e3020526561647920746f20737461727420544c530d0a";
    // pop3.pcap frames 4, 6 (stream 0) and 35, 36, 37 (stream 1).
    const POP3_4: &str = "2b4f4b20504f50207365727665722072656164792048206d69676d7875733030350d0a";
    const POP3_6: &str = "757365722063696363696f7065726e61636368696f406d61696c2e636f6d0d0a";
    const POP3_35: &str = "2b4f4b20504f50207365727665722072656164792048206d696d61703420304d486f55722d315644785244335569352d3030336571320d0a";
    const POP3_36: &str = "434150410d0a";
    const POP3_37: &str = "515549540d0a";
    // imap.pcap frames 4, 6, 11.
    const IMAP_4: &str =
        "2a204f4b20494d41503452657631205365727665722056657273696f6e20342e392e30342e3031320d0a";
    const IMAP_6: &str = "433030303030204341504142494c4954590d0a";
    const IMAP_11: &str = "433030303031204c4f47494e2073616d69722070667265730d0a";
    // ftp.pcap frame 4 and 6.
    pub(crate) const FTP_4: &str = "323230202876734654506420332e302e33290d0a";
    pub(crate) const FTP_6: &str = "5553455220616e6f6e796d6f75730d0a";

    fn conv(c: &[(bool, &str)]) -> Vec<(bool, Vec<u8>)> {
        c.iter().map(|(d, h)| (*d, hex(h))).collect()
    }

    #[test]
    fn smtp_pcap() {
        let g = hex(SMTP_4);
        let mut f = Flow::default();
        assert_eq!(
            detect_smtp(&tcp(40000, 25).pkt(&g, false, 0), &mut f),
            Proto::SMTP.is(false)
        );
        assert_eq!(
            f.meta.banner.as_deref(),
            Some("220 pigeon.eyrie.af.mil ESMTP Sendmail 8.8.7/8.8.7; Sat, 7 Aug 1999 08:20:11 -0400")
        );
        // The owner keeps the flow through EHLO, the 500, HELO, and stops at MAIL.
        f.l7.proto = Proto::SMTP;
        for (i, (c, h)) in [(true, SMTP_6), (false, SMTP_8), (true, SMTP_9)]
            .iter()
            .enumerate()
        {
            let v = detect_smtp(&tcp(40000, 25).pkt(&hex(h), *c, i as u8 + 1), &mut f);
            assert_eq!(v, Proto::SMTP.is(false));
        }
        let v = detect_smtp(&tcp(40000, 25).pkt(&hex(SMTP_11), true, 4), &mut f);
        assert_eq!(v, Proto::SMTP.is(true));
        let f = run(
            &conv(&[
                (false, SMTP_4),
                (true, SMTP_6),
                (false, SMTP_8),
                (true, SMTP_9),
                (true, SMTP_11),
            ]),
            25,
        );
        assert_eq!(f.l7.proto, Proto::SMTP);
        // Client-first capture: EHLO alone.
        let mut f = Flow::default();
        let v = detect_smtp(&tcp(40000, 25).pkt(&hex(SMTP_6), true, 0), &mut f);
        assert_eq!(v, Proto::SMTP.is(false));
        assert_eq!(f.meta.banner.as_deref(), Some("EHLO delta.peach.mil"));
    }

    #[test]
    fn smtp_starttls_pcap() {
        // nDPI labels this flow SMTPS.
        let f = run(
            &conv(&[
                (false, STLS_40),
                (true, STLS_41),
                (true, STLS_44),
                (false, STLS_45),
            ]),
            25,
        );
        assert_eq!(f.l7.proto, Proto::SMTPS);
        assert_eq!(
            f.meta.banner.as_deref(),
            Some("220 jw-vm08-int-dns.webernetz.net ESMTP Postfix (Ubuntu)")
        );
        // A refused STARTTLS stays SMTP.
        let f = run(
            &[
                (false, hex(STLS_40)),
                (true, hex(STLS_44)),
                (false, b"454 TLS not available\r\n".to_vec()),
            ],
            25,
        );
        assert_eq!(f.l7.proto, Proto::SMTP);
    }

    #[test]
    fn pop3_pcap() {
        let f = run(&conv(&[(false, POP3_4), (true, POP3_6)]), 110);
        assert_eq!(f.l7.proto, Proto::POP3);
        assert_eq!(
            f.meta.banner.as_deref(),
            Some("+OK POP server ready H migmxus005")
        );
        let mut f = Flow::default();
        assert_eq!(
            detect_pop3(&tcp(40000, 110).pkt(&hex(POP3_35), false, 0), &mut f),
            Proto::POP3.is(false)
        );
        f.l7.proto = Proto::POP3;
        assert_eq!(
            detect_pop3(&tcp(40000, 110).pkt(&hex(POP3_36), true, 1), &mut f),
            Proto::POP3.is(false)
        );
        assert_eq!(
            detect_pop3(&tcp(40000, 110).pkt(&hex(POP3_37), true, 2), &mut f),
            Proto::POP3.is(true)
        );
        // Client first (greeting not captured): USER, then the server's +OK decides.
        let f = run(
            &[
                (true, hex(POP3_6)),
                (false, b"+OK password required\r\n".to_vec()),
            ],
            110,
        );
        assert_eq!(f.l7.proto, Proto::POP3);
        assert_eq!(f.meta.banner, None);
        // STLS accepted: POPS.
        let f = run(
            &[
                (false, hex(POP3_35)),
                (true, b"STLS\r\n".to_vec()),
                (false, b"+OK Begin TLS\r\n".to_vec()),
            ],
            110,
        );
        assert_eq!(f.l7.proto, Proto::POPS);
    }

    #[test]
    fn imap_pcap() {
        let g = hex(IMAP_4);
        let mut f = Flow::default();
        assert_eq!(
            detect_smtp(&tcp(40000, 143).pkt(&g, false, 0), &mut f),
            Verdict::No
        );
        assert_eq!(
            detect_pop3(&tcp(40000, 143).pkt(&g, false, 0), &mut f),
            Verdict::No
        );
        assert_eq!(
            detect_imap(&tcp(40000, 143).pkt(&g, false, 0), &mut f),
            Proto::IMAP.is(false)
        );
        assert_eq!(
            f.meta.banner.as_deref(),
            Some("* OK IMAP4Rev1 Server Version 4.9.04.012")
        );
        f.l7.proto = Proto::IMAP;
        let cap = hex(IMAP_6);
        assert_eq!(
            detect_imap(&tcp(40000, 143).pkt(&cap, true, 1), &mut f),
            Proto::IMAP.is(false)
        );
        assert_eq!(
            detect_imap(&tcp(40000, 143).pkt(&hex(IMAP_11), true, 4), &mut f),
            Proto::IMAP.is(true)
        );
        // Client first: a tagged CAPABILITY; no banner (client lines may carry passwords).
        let mut f = Flow::default();
        assert_eq!(
            detect_imap(&tcp(40000, 143).pkt(&cap, true, 0), &mut f),
            Proto::IMAP.is(false)
        );
        assert_eq!(f.meta.banner, None);
        assert_eq!(
            run(
                &conv(&[(false, IMAP_4), (true, IMAP_6), (true, IMAP_11)]),
                143
            )
            .l7
            .proto,
            Proto::IMAP
        );
    }

    #[test]
    fn imap_starttls() {
        let c = [
            (false, hex(IMAP_4)),
            (true, b"a1 STARTTLS\r\n".to_vec()),
            (false, b"a1 OK Begin TLS negotiation now.\r\n".to_vec()),
        ];
        assert_eq!(run(&c, 143).l7.proto, Proto::IMAPS);
    }

    #[test]
    fn ambiguous_220() {
        // A 220 naming neither FTP nor SMTP: the client's command decides.
        let g = b"220 host.example.org ready\r\n".to_vec();
        let f = run(&[(false, g.clone()), (true, hex(SMTP_6))], 25);
        assert_eq!(f.l7.proto, Proto::SMTP);
        assert_eq!(f.meta.banner.as_deref(), Some("220 host.example.org ready"));
        let f = run(&[(false, g.clone()), (true, hex(FTP_6))], 21);
        assert_eq!(f.l7.proto, Proto::FTP_CONTROL);
        assert_eq!(f.meta.banner.as_deref(), Some("220 host.example.org ready"));
        let f = run(
            &[(false, g), (true, b"\x16\x03\x01\x00\x05hello".to_vec())],
            25,
        );
        assert!(!f.l7.proto.is_known());
        assert_eq!(f.meta.banner, None);
    }

    #[test]
    fn negatives() {
        // ftp.pcap frame 4: an FTP greeting is not mail.
        let ftp = hex(FTP_4);
        let mut f = Flow::default();
        assert_eq!(
            detect_smtp(&tcp(40000, 21).pkt(&ftp, false, 0), &mut f),
            Verdict::No
        );
        assert_eq!(
            detect_pop3(&tcp(40000, 21).pkt(&ftp, false, 0), &mut f),
            Verdict::No
        );
        assert_eq!(
            detect_imap(&tcp(40000, 21).pkt(&ftp, false, 0), &mut f),
            Verdict::No
        );
        // An HTTP request and a TLS ClientHello (rdp.pcap frame 7 prefix).
        for d in [
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            hex("16030100a8010000a403035cef9e29f7"),
        ] {
            let mut f = Flow::default();
            assert_eq!(
                detect_smtp(&tcp(40000, 25).pkt(&d, true, 0), &mut f),
                Verdict::No
            );
            assert_eq!(
                detect_pop3(&tcp(40000, 110).pkt(&d, true, 0), &mut f),
                Verdict::No
            );
            assert_eq!(
                detect_imap(&tcp(40000, 143).pkt(&d, true, 0), &mut f),
                Verdict::No
            );
        }
        // A Redis-like command answered by "+OK" is not POP3.
        let f = run(
            &[
                (true, b"SET a b\r\n".to_vec()),
                (false, b"+OK\r\n".to_vec()),
            ],
            6379,
        );
        assert!(!f.l7.proto.is_known());
        // POP3's greeting is not IMAP, IMAP's is not POP3.
        let mut f = Flow::default();
        assert_eq!(
            detect_imap(&tcp(40000, 110).pkt(&hex(POP3_4), false, 0), &mut f),
            Verdict::No
        );
        assert_eq!(
            detect_pop3(&tcp(40000, 143).pkt(&hex(IMAP_4), false, 0), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x1234_5678);
        let random: Vec<Vec<u8>> = (0..200).map(|n| rng.bytes(n % 64)).collect();
        let start = |proto: Proto, text: TextState| {
            let mut f = Flow::default();
            f.l7.proto = proto;
            f.scratch.text = text;
            f
        };
        let states = [
            TextState::default(),
            TextState {
                ambiguous_220: true,
                ..TextState::default()
            },
            TextState {
                starttls_asked: true,
                client_user: true,
                ..TextState::default()
            },
        ];
        let dets: [Detect; 3] = [detect_smtp, detect_pop3, detect_imap];
        for det in dets {
            let mut fuzz = Fuzz::new(&[tcp(40000, 25)])
                .seeds(
                    [
                        SMTP_4, SMTP_6, STLS_45, POP3_4, POP3_6, IMAP_4, IMAP_6, FTP_4,
                    ]
                    .map(hex),
                )
                .seeds([b"220-".to_vec(), b"a STARTTLS".to_vec()])
                .payloads(random.clone());
            for proto in [Proto::UNKNOWN, Proto::SMTP, Proto::POP3, Proto::IMAP] {
                for st in states {
                    if proto != Proto::UNKNOWN || st != TextState::default() {
                        fuzz = fuzz.start(start(proto, st));
                    }
                }
            }
            fuzz.run(det);
        }
    }
}
