//! DHCP over UDP ports 67/68 (RFC 2131, RFC 2132).
//!
//! Why: DHCP names the device asking for an address (option 12, host name) and its software
//! (option 60, vendor class, e.g. `MSFT 5.0`, `dhcpcd-5.5.6`), which helps tell the hosts of a
//! network apart. The detector checks the BOOTP header (op 1/2, Ethernet hardware type and
//! length) and the magic cookie at offset 236, then walks the options. One packet is enough.

use crate::ids::Proto;
use crate::meta::Dhcp;
use crate::types::{wire_string, Flow, Pkt, Verdict, L4};

/// Offset of the magic cookie (after the fixed BOOTP fields).
const COOKIE_AT: usize = 236;
const COOKIE: [u8; 4] = [0x63, 0x82, 0x53, 0x63];
/// Options walked at most.
const MAX_OPTIONS: usize = 128;

pub fn detect(p: &Pkt<'_>, f: &mut Flow) -> Verdict {
    let b = p.payload;
    if p.l4 != L4::Udp || !(p.has_port(67) || p.has_port(68)) {
        return Verdict::No;
    }
    // op BOOTREQUEST/BOOTREPLY, htype Ethernet, hlen 6, hops small.
    match b.get(..4) {
        Some([1 | 2, 1, 6, hops]) if *hops <= 16 => {}
        _ => return Verdict::No,
    }
    if b.get(COOKIE_AT..COOKIE_AT + 4) != Some(&COOKIE[..]) {
        return Verdict::No;
    }
    let mut d = Dhcp::default();
    let mut pos = COOKIE_AT + 4;
    for _ in 0..MAX_OPTIONS {
        let Some(&code) = b.get(pos) else { break };
        match code {
            0 => {
                pos += 1;
                continue;
            }
            255 => break,
            _ => {}
        }
        let Some(&len) = b.get(pos + 1) else { break };
        let Some(val) = b.get(pos + 2..pos + 2 + usize::from(len)) else {
            break; // cut by the capture length
        };
        match code {
            53 if len == 1 => d.msg_type = val[0],
            12 if !val.is_empty() => d.hostname = Some(wire_string(val)),
            60 if !val.is_empty() => d.vendor_class = Some(wire_string(val)),
            _ => {}
        }
        pos += 2 + usize::from(len);
    }
    f.meta.dhcp = Some(Box::new(d));
    Proto::DHCP.is(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::testkit::*;

    /// 236 zero bytes of BOOTP fixed fields after the first 28 given ones.
    fn bootp(head: &str, options: &str) -> Vec<u8> {
        let mut v = hex(head);
        v.resize(COOKIE_AT, 0);
        v.extend(hex(options));
        v
    }

    // 1kxun.pcap frame 11: DHCPREQUEST, host name "Shen" (tshark dhcp.option.hostname).
    const SHEN_HEAD: &str = "01010600060fbf5b0000000000000000000000000000000000000000703eacf0f007";
    const SHEN_OPTS: &str = "638253633501033707017903060f77fc390205dc3d0701703eacf0f0073204c0a803ed33040076a7000c045368656eff00000000000000000000000000000000";
    // 1kxun.pcap frame 706: DHCPDISCOVER, vendor class "dhcpcd-5.5.6".
    const ANDROID_HEAD: &str =
        "01010600d3e2067a0000000000000000000000000000000000000000bcee7b0cb3de";
    const ANDROID_OPTS: &str = "63825363350101390205dc3c0c6468637063642d352e352e360c18616e64726f69642d663763613066353731323730633532643709012103060f1c333a3bff00";

    #[test]
    fn request_with_hostname() {
        let mut f = Flow::default();
        let b = bootp(SHEN_HEAD, SHEN_OPTS);
        assert_eq!(
            detect(&udp(68, 67).pkt(&b, true, 0), &mut f),
            Proto::DHCP.is(true)
        );
        let d = f.meta.dhcp.as_ref().unwrap();
        assert_eq!(d.msg_type, 3);
        assert_eq!(d.hostname.as_deref(), Some("Shen"));
        assert_eq!(d.vendor_class, None);
    }

    #[test]
    fn discover_with_vendor_class() {
        let mut f = Flow::default();
        let b = bootp(ANDROID_HEAD, ANDROID_OPTS);
        assert_eq!(
            detect(&udp(68, 67).pkt(&b, true, 0), &mut f),
            Proto::DHCP.is(true)
        );
        let d = f.meta.dhcp.as_ref().unwrap();
        assert_eq!(d.msg_type, 1);
        assert_eq!(d.hostname.as_deref(), Some("android-f7ca0f571270c52d"));
        assert_eq!(d.vendor_class.as_deref(), Some("dhcpcd-5.5.6"));
    }

    #[test]
    fn not_dhcp() {
        let b = bootp(SHEN_HEAD, SHEN_OPTS);
        let mut f = Flow::default();
        // Right bytes, wrong ports.
        assert_eq!(
            detect(&udp(5000, 6000).pkt(&b, true, 0), &mut f),
            Verdict::No
        );
        // No magic cookie (plain BOOTP or something else).
        let mut nocookie = b.clone();
        nocookie[COOKIE_AT] = 0;
        assert_eq!(
            detect(&udp(68, 67).pkt(&nocookie, true, 0), &mut f),
            Verdict::No
        );
        // A DNS query (dns.pcap frame 4) on port 67.
        let dns = hex("784301000001000000000000026537087768617473617070036e65740000010001");
        assert_eq!(detect(&udp(68, 67).pkt(&dns, true, 0), &mut f), Verdict::No);
    }

    #[test]
    fn never_panics() {
        // A BOOTP header and cookie with random options.
        let mut rng = Rng::new(0x0bad_f00d);
        let random: Vec<Vec<u8>> = (0..2000)
            .map(|round| {
                let mut b = bootp(SHEN_HEAD, "63825363");
                b.extend(rng.bytes(360));
                b.truncate(COOKIE_AT + round % 364);
                b
            })
            .collect();
        Fuzz::new(&[udp(68, 67)])
            .seeds([
                bootp(SHEN_HEAD, SHEN_OPTS),
                bootp(ANDROID_HEAD, ANDROID_OPTS),
            ])
            .payloads(random)
            .run(detect);
    }
}
