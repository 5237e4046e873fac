//! SSH (RFC 4253): version banners and the HASSH fingerprints of both KEXINIT messages.
//!
//! Why: the banners name the client and server software, and HASSH (Salesforce's MD5 of the
//! algorithm lists a side offers in its KEXINIT) fingerprints SSH client and server
//! implementations the way JA3 does for TLS, without decrypting anything.
//!
//! A flow is SSH when either side's first payload starts with `SSH-2.0-`, `SSH-1.99-` or
//! `SSH-1.5-`. The detector then keeps the flow to read the other banner and each side's
//! KEXINIT (binary packet: length, padding length, message 20, 16-byte cookie, name-lists),
//! which may follow the banner in the same segment or come in the side's next segment. It does
//! not reassemble: a KEXINIT whose first four name-lists are cut by the segment end gives no
//! HASSH for that side. Done when both HASSH are known, or when neither can come any more.

use crate::ids::Proto;
use crate::types::{wire_string, Flow, Pkt, Verdict, L4};
use md5::{Digest, Md5};

/// SSH_MSG_KEXINIT.
const KEXINIT: u8 = 20;
/// Longest binary packet RFC 4253 §6.1 asks implementations to handle, with slack.
const MAX_PACKET: usize = 35_000;
/// Payload packets of the flow after which a missing KEXINIT is given up.
const GIVE_UP_INDEX: u8 = 8;

fn banner_prefix(b: &[u8]) -> bool {
    b.starts_with(b"SSH-2.0-") || b.starts_with(b"SSH-1.99-") || b.starts_with(b"SSH-1.5-")
}

/// Splits `b` (starting with a banner) into the banner text (without CR LF) and the bytes after
/// its line. A banner cut by the segment end is taken as it is.
fn banner(b: &[u8]) -> (&[u8], &[u8]) {
    match b.iter().take(255).position(|&c| c == b'\n') {
        Some(i) => {
            let l = &b[..i];
            (
                l.strip_suffix(b"\r").unwrap_or(l),
                b.get(i + 1..).unwrap_or(&[]),
            )
        }
        None => (&b[..b.len().min(255)], &[]),
    }
}

fn be32(b: &[u8], at: usize) -> Option<usize> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize)
}

/// What the start of a segment holds after the banners.
enum Binary<'a> {
    /// A KEXINIT's name-lists 0..=7 (kex, host key, enc c2s/s2c, mac c2s/s2c, comp c2s/s2c).
    KexInit([&'a [u8]; 8]),
    /// A KEXINIT whose lists are cut by the segment end.
    CutKexInit,
    /// Another message (the KEXINIT was missed), or not a binary packet at all.
    Other,
}

fn binary(b: &[u8]) -> Binary<'_> {
    let (Some(len), Some(&pad), Some(&code)) = (be32(b, 0), b.get(4), b.get(5)) else {
        return Binary::Other;
    };
    if !(12..=MAX_PACKET).contains(&len) || pad < 4 || usize::from(pad) >= len {
        return Binary::Other;
    }
    if code != KEXINIT {
        return Binary::Other;
    }
    // The name-lists start after the message code and the 16-byte cookie; they cannot extend
    // past the packet (4 + len), nor past what we hold.
    let end = b.len().min(4 + len);
    let mut pos = 6 + 16;
    let mut lists: [&[u8]; 8] = [&[]; 8];
    for slot in lists.iter_mut() {
        let Some(n) = be32(b, pos) else {
            return Binary::CutKexInit;
        };
        let start = pos + 4;
        let stop = match start.checked_add(n) {
            Some(s) if s <= end => s,
            _ if end < 4 + len => return Binary::CutKexInit,
            _ => return Binary::Other, // a list longer than its packet
        };
        *slot = &b[start..stop];
        pos = stop;
    }
    Binary::KexInit(lists)
}

/// HASSH / HASSHServer: MD5 hex of `kex;enc;mac;comp` for the direction of the sender.
fn hassh(lists: &[&[u8]; 8], server: bool) -> String {
    let o = usize::from(server);
    let mut h = Md5::new();
    h.update(lists[0]);
    h.update(b";");
    h.update(lists[2 + o]);
    h.update(b";");
    h.update(lists[4 + o]);
    h.update(b";");
    h.update(lists[6 + o]);
    let digest = h.finalize();
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(32);
    for byte in digest {
        s.push(char::from(HEX[usize::from(byte >> 4)]));
        s.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    s
}

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    if p.l4 != L4::Tcp {
        return Verdict::No;
    }
    let b = p.payload;
    let ssh = match f.meta.ssh.as_mut() {
        Some(s) => s,
        None => {
            // First payload of the flow: it must be a banner, from either side.
            if b.first() != Some(&b'S') || !banner_prefix(b) {
                return Verdict::No;
            }
            f.meta.ssh.insert(Box::default())
        }
    };
    let (own_banner, own_hassh, other_hassh) = if p.from_client {
        (
            &mut ssh.client_banner,
            &mut ssh.hassh_client,
            &ssh.hassh_server,
        )
    } else {
        (
            &mut ssh.server_banner,
            &mut ssh.hassh_server,
            &ssh.hassh_client,
        )
    };
    let mut rest = b;
    if own_banner.is_none() {
        if !banner_prefix(b) {
            // This side sent something else first (e.g. lines before the server's banner):
            // leave it; the other side's data may still complete the picture.
            return Proto::SSH.is(p.index >= GIVE_UP_INDEX);
        }
        let (text, after) = banner(b);
        *own_banner = Some(wire_string(text));
        rest = after;
    }
    let mut side_finished = own_hassh.is_some();
    if !side_finished && !rest.is_empty() {
        match binary(rest) {
            Binary::KexInit(lists) => {
                *own_hassh = Some(hassh(&lists, !p.from_client));
                side_finished = true;
            }
            // Past its KEXINIT (or it was cut): this side gives no HASSH any more.
            Binary::CutKexInit | Binary::Other => side_finished = true,
        }
    }
    let done = (side_finished && other_hassh.is_some())
        || (ssh.hassh_client.is_some() && ssh.hassh_server.is_some())
        || p.index >= GIVE_UP_INDEX;
    Proto::SSH.is(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    const SSH: Ends = tcp(58395, 22);

    // ssh.pcap frames 4 (server banner), 6 (client banner), 8 (client KEXINIT), 10 (server
    // KEXINIT).
    const SRV_BANNER: &str = "5353482d322e302d4f70656e5353485f352e330d0a";
    const CLI_BANNER: &str = "5353482d322e302d4f70656e5353485f352e360d0a";
    const CLI_KEX: &str = "00000384041418ba31471acef22d8889d6d144500df40000007e6469666669652d68656c6c6d616e2d67726f75702d65786368616e67652d7368613235362c6469666669652d68656c6c6d616e2d67726f75702d65786368616e67652d736861312c6469666669652d68656c6c6d616e2d67726f757031342d736861312c6469666669652d68656c6c6d616e2d67726f7570312d73686131000000837373682d7273612d636572742d763031406f70656e7373682e636f6d2c7373682d6473732d636572742d763031406f70656e7373682e636f6d2c7373682d7273612d636572742d763030406f70656e7373682e636f6d2c7373682d6473732d636572742d763030406f70656e7373682e636f6d2c7373682d7273612c7373682d6473730000009d6165733132382d6374722c6165733139322d6374722c6165733235362d6374722c617263666f75723235362c617263666f75723132382c6165733132382d6362632c336465732d6362632c626c6f77666973682d6362632c636173743132382d6362632c6165733139322d6362632c6165733235362d6362632c617263666f75722c72696a6e6461656c2d636263406c797361746f722e6c69752e73650000009d6165733132382d6374722c6165733139322d6374722c6165733235362d6374722c617263666f75723235362c617263666f75723132382c6165733132382d6362632c336465732d6362632c626c6f77666973682d6362632c636173743132382d6362632c6165733139322d6362632c6165733235362d6362632c617263666f75722c72696a6e6461656c2d636263406c797361746f722e6c69752e736500000069686d61632d6d64352c686d61632d736861312c756d61632d3634406f70656e7373682e636f6d2c686d61632d726970656d643136302c686d61632d726970656d64313630406f70656e7373682e636f6d2c686d61632d736861312d39362c686d61632d6d64352d393600000069686d61632d6d64352c686d61632d736861312c756d61632d3634406f70656e7373682e636f6d2c686d61632d726970656d643136302c686d61632d726970656d64313630406f70656e7373682e636f6d2c686d61632d736861312d39362c686d61632d6d64352d39360000001a6e6f6e652c7a6c6962406f70656e7373682e636f6d2c7a6c69620000001a6e6f6e652c7a6c6962406f70656e7373682e636f6d2c7a6c69620000000000000000000000000000000000";
    const SRV_KEX: &str = "0000030c0a1400f2294e8c29fd1dc45641ba5dafaad70000007e6469666669652d68656c6c6d616e2d67726f75702d65786368616e67652d7368613235362c6469666669652d68656c6c6d616e2d67726f75702d65786368616e67652d736861312c6469666669652d68656c6c6d616e2d67726f757031342d736861312c6469666669652d68656c6c6d616e2d67726f7570312d736861310000000f7373682d7273612c7373682d6473730000009d6165733132382d6374722c6165733139322d6374722c6165733235362d6374722c617263666f75723235362c617263666f75723132382c6165733132382d6362632c336465732d6362632c626c6f77666973682d6362632c636173743132382d6362632c6165733139322d6362632c6165733235362d6362632c617263666f75722c72696a6e6461656c2d636263406c797361746f722e6c69752e73650000009d6165733132382d6374722c6165733139322d6374722c6165733235362d6374722c617263666f75723235362c617263666f75723132382c6165733132382d6362632c336465732d6362632c626c6f77666973682d6362632c636173743132382d6362632c6165733139322d6362632c6165733235362d6362632c617263666f75722c72696a6e6461656c2d636263406c797361746f722e6c69752e736500000069686d61632d6d64352c686d61632d736861312c756d61632d3634406f70656e7373682e636f6d2c686d61632d726970656d643136302c686d61632d726970656d64313630406f70656e7373682e636f6d2c686d61632d736861312d39362c686d61632d6d64352d393600000069686d61632d6d64352c686d61632d736861312c756d61632d3634406f70656e7373682e636f6d2c686d61632d726970656d643136302c686d61632d726970656d64313630406f70656e7373682e636f6d2c686d61632d736861312d39362c686d61632d6d64352d3936000000156e6f6e652c7a6c6962406f70656e7373682e636f6d000000156e6f6e652c7a6c6962406f70656e7373682e636f6d0000000000000000000000000000000000000000000000";

    #[test]
    fn banners_and_hassh() {
        let mut f = Flow::default();
        let seq = [
            (hex(SRV_BANNER), false, Proto::SSH.is(false)),
            (hex(CLI_BANNER), true, Proto::SSH.is(false)),
            (hex(CLI_KEX), true, Proto::SSH.is(false)),
            (hex(SRV_KEX), false, Proto::SSH.is(true)),
        ];
        for (i, (b, from_client, want)) in seq.iter().enumerate() {
            assert_eq!(
                detect(&SSH.pkt(b, *from_client, i as u8), &mut f),
                *want,
                "{i}"
            );
        }
        // tshark -e ssh.protocol -e ssh.kex.hassh -e ssh.kex.hasshserver; nDPI's HASSH-C/-S.
        let s = f.meta.ssh.as_ref().unwrap();
        assert_eq!(s.server_banner.as_deref(), Some("SSH-2.0-OpenSSH_5.3"));
        assert_eq!(s.client_banner.as_deref(), Some("SSH-2.0-OpenSSH_5.6"));
        assert_eq!(
            s.hassh_client.as_deref(),
            Some("21b457a327ce7a2d4fce5ef2c42400bd")
        );
        assert_eq!(
            s.hassh_server.as_deref(),
            Some("b1c6c0d56317555b85c7005a3de29325")
        );
    }

    #[test]
    fn kexinit_in_banner_segment() {
        let mut f = Flow::default();
        let mut cli = hex(CLI_BANNER);
        cli.extend(hex(CLI_KEX));
        let mut srv = hex(SRV_BANNER);
        srv.extend(hex(SRV_KEX));
        assert_eq!(
            detect(&SSH.pkt(&cli, true, 0), &mut f),
            Proto::SSH.is(false)
        );
        assert_eq!(
            detect(&SSH.pkt(&srv, false, 1), &mut f),
            Proto::SSH.is(true)
        );
        let s = f.meta.ssh.as_ref().unwrap();
        assert_eq!(
            s.hassh_client.as_deref(),
            Some("21b457a327ce7a2d4fce5ef2c42400bd")
        );
        assert_eq!(
            s.hassh_server.as_deref(),
            Some("b1c6c0d56317555b85c7005a3de29325")
        );
    }

    #[test]
    fn cut_kexinit_gives_up_that_side() {
        let mut f = Flow::default();
        let kex = hex(CLI_KEX);
        assert_eq!(
            detect(&SSH.pkt(&hex(SRV_BANNER), false, 0), &mut f),
            Proto::SSH.is(false)
        );
        assert_eq!(
            detect(&SSH.pkt(&hex(CLI_BANNER), true, 1), &mut f),
            Proto::SSH.is(false)
        );
        assert_eq!(
            detect(&SSH.pkt(&kex[..300], true, 2), &mut f),
            Proto::SSH.is(false)
        );
        assert_eq!(
            detect(&SSH.pkt(&hex(SRV_KEX), false, 3), &mut f),
            Proto::SSH.is(false)
        );
        // The client's next message (not a KEXINIT) ends the look.
        let next = hex("0000000c0a1e000000000000000000000000");
        assert_eq!(
            detect(&SSH.pkt(&next, true, 4), &mut f),
            Proto::SSH.is(true)
        );
        let s = f.meta.ssh.as_ref().unwrap();
        assert!(s.hassh_client.is_none());
        assert!(s.hassh_server.is_some());
    }

    #[test]
    fn not_ssh() {
        for b in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"SSH-3.0-x\r\n",
            b"220 mail ESMTP\r\n",
            &hex(CLI_KEX)[..],
        ] {
            let mut f = Flow::default();
            assert_eq!(detect(&SSH.pkt(b, true, 0), &mut f), Verdict::No);
        }
    }

    #[test]
    fn never_panics() {
        // A KEXINIT header with random lists (a quarter of the bytes 0), after the banner.
        let mut rng = Rng::new(0xdead_beef);
        let random: Vec<Vec<u8>> = (0..3000)
            .map(|round| {
                let mut b: Vec<u8> = (0..400)
                    .map(|_| match rng.next() {
                        x if x & 3 == 0 => 0,
                        x => x as u8,
                    })
                    .collect();
                b[..6].copy_from_slice(&[0, 0, 1, 0x80, 4, KEXINIT]);
                b.truncate(round % 400);
                b
            })
            .collect();
        let mut after_banner = Flow::default();
        let _ = detect(&SSH.pkt(&hex(CLI_BANNER), true, 0), &mut after_banner);
        let mut joined = hex(CLI_BANNER);
        joined.extend(hex(CLI_KEX));
        Fuzz::new(&[SSH])
            .seeds([SRV_BANNER, CLI_BANNER, CLI_KEX, SRV_KEX].map(hex))
            .seeds([joined])
            .flow(vec![
                (false, hex(SRV_BANNER)),
                (true, hex(CLI_BANNER)),
                (true, hex(CLI_KEX)),
                (false, hex(SRV_KEX)),
            ])
            .payloads(random)
            .start(after_banner)
            .run(detect);
    }
}
