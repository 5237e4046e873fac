//! Fuzzes `Decoder::decode` over a sequence of frames of one link type, with one decoder (so
//! the fragment table's state carries over), and checks it against `decode_general` (the fast
//! Ethernet/IPv4 path must fill `Decoded` exactly as the general path does).
//!
//! Input layout (integers big-endian):
//!
//! ```text
//! [0]     bits 0..2 and 4 = link type (LINKS[n % 10]), bit 3 = small fragment table (16 slots)
//! then up to 16 frames, each:
//! [0..2]  captured length (cut to what is left of the input)
//! [2]     wire_len - captured length, in units of 16 bytes (a frame cut by the snap length)
//! [3]     time since the previous frame, in units of 250 ms (fragment ageing is 30 s)
//! [..len] frame bytes
//! ```
//!
//! `seeds.py` writes the seed corpus in this layout from real captures.
#![no_main]

use sonde_wire::{Decoded, Decoder, LinkType, Outcome};

/// Every link type sonde_wire decodes (`LinkType::is_supported`).
const LINKS: [LinkType; 10] = [
    LinkType::Null,
    LinkType::Ethernet,
    LinkType::Raw,
    LinkType::RawIpv4,
    LinkType::RawIpv6,
    LinkType::Loop,
    LinkType::LinuxSll,
    LinkType::LinuxSll2,
    LinkType::Ppp,
    LinkType::CHdlc,
];

const MAX_FRAMES: usize = 16;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let link = LINKS[((flags & 7) | ((flags >> 1) & 8)) as usize % LINKS.len()];
    let cap = if flags & 8 != 0 {
        16
    } else {
        sonde_wire::FragmentTable::DEFAULT_CAPACITY
    };
    // `fast` is used the way the capture loop uses it (one `Decoded` reused for every frame);
    // `general` takes the reference path with a fresh `Decoded` each time.
    let mut fast = Decoder::new(cap);
    let mut general = Decoder::new(cap);
    let mut out = Decoded::default();
    let mut ts_ns = 1_700_000_000_000_000_000u64;
    for _ in 0..MAX_FRAMES {
        if rest.len() < 4 {
            break;
        }
        let len = (u16::from_be_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 4);
        let wire_len = (len + rest[2] as usize * 16) as u32;
        ts_ns += rest[3] as u64 * 250_000_000;
        let frame = &rest[4..4 + len];
        rest = &rest[4 + len..];

        let got = fast.decode(link, ts_ns, frame, wire_len, &mut out);
        let mut want_out = Decoded::default();
        let want = general.decode_general(link, ts_ns, frame, wire_len, &mut want_out);
        assert_eq!(got, want, "decode and decode_general disagree ({link:?})");
        if got == Ok(Outcome::Ip) {
            if !want_out.has_mac {
                // MACs are only meaningful with has_mac; the reused `out` may hold old ones.
                out.src_mac = want_out.src_mac;
                out.dst_mac = want_out.dst_mac;
            }
            assert_eq!(
                out, want_out,
                "decode and decode_general fill Decoded differently"
            );
        }
    }
    std::hint::black_box(&out);
});
