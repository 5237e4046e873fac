//! FTP control connections: the server's `220` greeting when it names FTP (`220 (vsFTPd
//! 3.0.3)`, `220 ProFTPD …`), or a `220` naming neither FTP nor SMTP followed by an FTP
//! command from the client (`USER`, `AUTH`, `FEAT`, …), or a client-first `USER` answered by
//! an FTP reply code (`331`, `230`, …). The greeting's first line goes to `meta.banner`.
//!
//! Data connections (FTP_DATA) carry no signature of their own and are not recognised here.
//!
//! Shares `Scratch::text` ([`crate::types::TextState`]) with the mail detectors.

use super::mail::{
    classify_220, first_line, is_cmd, reject_after_220, reply_code, Greeting220, Rejecter,
};
use crate::ids::Proto;
use crate::types::{wire_string, Flow, Pkt, Verdict};

/// Client commands that, after an ambiguous `220`, make the flow FTP (SMTP clients must open
/// with EHLO/HELO).
const FTP_CMDS: &[&[u8]] = &[
    b"USER", b"AUTH", b"FEAT", b"SYST", b"OPTS", b"HOST", b"CLNT", b"PASS", b"PBSZ", b"ACCT",
];

/// Server replies to a client-first `USER` (RFC 959: 230, 331, 332, 421, 500, 501, 530).
const USER_REPLIES: &[u16] = &[230, 331, 332, 421, 500, 501, 530];

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let d = p.payload;
    let first = match d.first() {
        Some(&b) => b,
        None => return Verdict::Unsure,
    };
    let st = f.scratch.text;
    if p.from_client {
        if st.ambiguous_220 {
            return if FTP_CMDS.iter().any(|c| is_cmd(d, c)) {
                Proto::FTP_CONTROL.is(true)
            } else {
                reject_after_220(f, Rejecter::Ftp)
            };
        }
        if p.index == 0 && is_cmd(d, b"USER") {
            f.scratch.text.client_user = true;
            return Verdict::Unsure;
        }
        return Verdict::No;
    }
    // Server side.
    if p.index == 0 {
        if !first.is_ascii_digit() || reply_code(d) != Some(220) {
            return Verdict::No;
        }
        let line = first_line(d);
        // The whole (capped) greeting: multi-line `220-` greetings name the server later.
        return match classify_220(d) {
            Greeting220::Ftp => {
                if f.meta.banner.is_none() && !line.is_empty() {
                    f.meta.banner = Some(wire_string(line));
                }
                Proto::FTP_CONTROL.is(true)
            }
            Greeting220::Smtp => Verdict::No,
            Greeting220::Ambiguous => {
                // SMTP, tried before, normally kept the banner already.
                if f.meta.banner.is_none() && !line.is_empty() {
                    f.meta.banner = Some(wire_string(line));
                }
                f.scratch.text.ambiguous_220 = true;
                Verdict::Unsure
            }
        };
    }
    if st.ambiguous_220 {
        // More greeting lines before the client's command.
        return if p.index < 4 && (first.is_ascii_digit() || first == b' ') {
            Verdict::Unsure
        } else {
            reject_after_220(f, Rejecter::Ftp)
        };
    }
    if st.client_user {
        if let Some(code) = reply_code(d) {
            if USER_REPLIES.contains(&code) {
                return Proto::FTP_CONTROL.is(true);
            }
        }
    }
    Verdict::No
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    const FTP: Ends = tcp(50694, 21);
    use crate::proto::mail::tests::{run, FTP_4, FTP_6};
    use crate::types::TextState;

    // ftp.pcap frame 8 (331 reply) and 18 (FEAT).
    const FTP_8: &str = "33333120506c656173652073706563696679207468652070617373776f72642e0d0a";
    const FTP_18: &str = "464541540d0a";

    #[test]
    fn ftp_pcap() {
        let mut f = Flow::default();
        let v = detect(&FTP.pkt(&hex(FTP_4), false, 0), &mut f);
        assert_eq!(v, Proto::FTP_CONTROL.is(true));
        assert_eq!(f.meta.banner.as_deref(), Some("220 (vsFTPd 3.0.3)"));
        // Through all four text detectors: nDPI says FTP_CONTROL.
        let f = run(&[(false, hex(FTP_4)), (true, hex(FTP_6))], 21);
        assert_eq!(f.l7.proto, Proto::FTP_CONTROL);
        assert_eq!(f.meta.banner.as_deref(), Some("220 (vsFTPd 3.0.3)"));
        // Client-first capture: USER answered by 331.
        let f = run(&[(true, hex(FTP_6)), (false, hex(FTP_8))], 21);
        assert_eq!(f.l7.proto, Proto::FTP_CONTROL);
        assert_eq!(f.meta.banner, None);
        // Ambiguous greeting, then FEAT.
        let g = b"220 Welcome\r\n".to_vec();
        let f = run(&[(false, g), (true, hex(FTP_18))], 21);
        assert_eq!(f.l7.proto, Proto::FTP_CONTROL);
        assert_eq!(f.meta.banner.as_deref(), Some("220 Welcome"));
        // Multi-line greeting naming the server on a later line.
        let g = b"220-Welcome to our server\r\n220 ProFTPD 1.3.5 Server ready.\r\n".to_vec();
        let mut f = Flow::default();
        assert_eq!(
            detect(&FTP.pkt(&g, false, 0), &mut f),
            Proto::FTP_CONTROL.is(true)
        );
        assert_eq!(f.meta.banner.as_deref(), Some("220-Welcome to our server"));
    }

    #[test]
    fn negatives() {
        // smtp.pcap frame 4: an ESMTP greeting.
        let smtp =
            hex("32323020706967656f6e2e65797269652e61662e6d696c2045534d54502053656e646d61696c0d0a");
        let mut f = Flow::default();
        assert_eq!(detect(&FTP.pkt(&smtp, false, 0), &mut f), Verdict::No);
        // pop3.pcap frame 4: +OK greeting.
        let pop = hex("2b4f4b20504f50207365727665722072656164792048206d69676d7875733030350d0a");
        let mut f = Flow::default();
        assert_eq!(detect(&FTP.pkt(&pop, false, 0), &mut f), Verdict::No);
        // HTTP request.
        let mut f = Flow::default();
        assert_eq!(
            detect(&FTP.pkt(b"GET / HTTP/1.1\r\n", true, 0), &mut f),
            Verdict::No
        );
        // A client-first USER answered by POP3's +OK is not FTP.
        let mut f = Flow::default();
        assert_eq!(
            detect(&FTP.pkt(&hex(FTP_6), true, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(detect(&FTP.pkt(b"+OK\r\n", false, 1), &mut f), Verdict::No);
        // A 220 greeting then EHLO is SMTP's.
        let mut f = Flow::default();
        assert_eq!(
            detect(&FTP.pkt(b"220 hi\r\n", false, 0), &mut f),
            Verdict::Unsure
        );
        assert_eq!(
            detect(&FTP.pkt(b"EHLO x\r\n", true, 1), &mut f),
            Verdict::No
        );
    }

    #[test]
    fn never_panics() {
        let mut rng = Rng::new(0x9e37_79b9);
        let random: Vec<Vec<u8>> = (0..200).map(|n| rng.bytes(n % 48)).collect();
        let text = |text: TextState| Flow {
            scratch: crate::types::Scratch {
                text,
                ..Default::default()
            },
            ..Default::default()
        };
        Fuzz::new(&[FTP])
            .seeds([FTP_4, FTP_6, FTP_8, FTP_18].map(hex))
            .seeds([b"220".to_vec()])
            .payloads(random)
            .start(text(TextState {
                ambiguous_220: true,
                ..TextState::default()
            }))
            .start(text(TextState {
                client_user: true,
                ..TextState::default()
            }))
            .start(text(TextState {
                ambiguous_220: true,
                smtp_no: true,
                ..TextState::default()
            }))
            .run(detect);
    }
}
