use super::*;

fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb,
    ];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn ipv4(proto: u8, src: [u8; 4], dst: [u8; 4], frag: u16, id: u16, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut h = vec![0x45, 0x00];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(payload);
    h
}

fn tcp(sport: u16, dport: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&seq.to_be_bytes());
    h.extend_from_slice(&0u32.to_be_bytes());
    h.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    h.extend_from_slice(payload);
    h
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(payload);
    h
}

fn decode(link: LinkType, f: &[u8]) -> (Result<Outcome, Malformed>, Decoded) {
    let mut d = Decoder::default();
    let mut out = Decoded::default();
    let r = d.decode(link, 0, f, f.len() as u32, &mut out);
    (r, out)
}

#[test]
fn ethernet_ipv4_tcp() {
    let f = eth(
        0x0800,
        &ipv4(
            6,
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            0,
            1,
            &tcp(1234, 80, 7, 0x02, b"hello"),
        ),
    );
    let (r, d) = decode(LinkType::Ethernet, &f);
    assert_eq!(r, Ok(Outcome::Ip));
    assert_eq!(&d.src[..4], &[10, 0, 0, 1]);
    assert_eq!(&d.dst[..4], &[10, 0, 0, 2]);
    assert_eq!((d.sport, d.dport, d.proto, d.ip_version), (1234, 80, 6, 4));
    assert_eq!(d.ip_len, 20 + 20 + 5);
    assert_eq!(d.payload_len, 5);
    assert_eq!(d.tcp_flags, 0x02);
    assert_eq!(d.tcp_seq, 7);
    assert_eq!(d.src_mac, [0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb]);
}

#[test]
fn ethernet_padding_is_not_counted() {
    let mut f = eth(
        0x0800,
        &ipv4(17, [1, 1, 1, 1], [2, 2, 2, 2], 0, 1, &udp(53, 53, b"x")),
    );
    f.resize(60, 0);
    let (r, d) = decode(LinkType::Ethernet, &f);
    assert_eq!(r, Ok(Outcome::Ip));
    assert_eq!(d.ip_len, 29);
}

#[test]
fn qinq_keeps_outer_vlan() {
    let inner = ipv4(17, [1, 1, 1, 1], [2, 2, 2, 2], 0, 1, &udp(1, 2, b""));
    let mut tags = vec![0x00, 0x64, 0x81, 0x00, 0x00, 0xc8, 0x08, 0x00];
    tags.extend_from_slice(&inner);
    let f = eth(0x88a8, &tags);
    let (r, d) = decode(LinkType::Ethernet, &f);
    assert_eq!(r, Ok(Outcome::Ip));
    assert_eq!(d.vlan, 100);
    assert_eq!(d.sport, 1);
}

#[test]
fn mpls_then_ipv4() {
    let inner = ipv4(17, [1, 1, 1, 1], [2, 2, 2, 2], 0, 1, &udp(1, 2, b""));
    let mut p = vec![0x00, 0x01, 0x00, 0x40, 0x00, 0x02, 0x01, 0x40];
    p.extend_from_slice(&inner);
    let (r, d) = decode(LinkType::Ethernet, &eth(0x8847, &p));
    assert_eq!(r, Ok(Outcome::Ip));
    assert_eq!(d.dport, 2);
}

#[test]
fn pppoe_session() {
    let inner = ipv4(
        6,
        [1, 1, 1, 1],
        [2, 2, 2, 2],
        0,
        1,
        &tcp(5, 6, 0, 0x10, b""),
    );
    let mut p = vec![0x11, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x21];
    p.extend_from_slice(&inner);
    let (r, d) = decode(LinkType::Ethernet, &eth(0x8864, &p));
    assert_eq!(r, Ok(Outcome::Ip));
    assert_eq!((d.sport, d.dport), (5, 6));
}

#[test]
fn arp_is_not_ip() {
    let (r, _) = decode(LinkType::Ethernet, &eth(0x0806, &[0u8; 28]));
    assert_eq!(r, Ok(Outcome::NonIp));
}

#[test]
fn malformed_lengths() {
    let good = ipv4(
        6,
        [1, 1, 1, 1],
        [2, 2, 2, 2],
        0,
        1,
        &tcp(5, 6, 0, 0x10, b""),
    );
    // Truncated IP header.
    assert_eq!(
        decode(LinkType::Ethernet, &eth(0x0800, &good[..10])).0,
        Err(Malformed::TruncatedIpv4)
    );
    // IHL below 5.
    let mut bad = good.clone();
    bad[0] = 0x44;
    assert_eq!(
        decode(LinkType::Ethernet, &eth(0x0800, &bad)).0,
        Err(Malformed::BadIpv4Header)
    );
    // Total length larger than the frame.
    let mut bad = good.clone();
    bad[2..4].copy_from_slice(&2000u16.to_be_bytes());
    assert_eq!(
        decode(LinkType::Ethernet, &eth(0x0800, &bad)).0,
        Err(Malformed::BadIpv4Length)
    );
    // TCP data offset beyond the segment.
    let mut bad = good.clone();
    bad[20 + 12] = 0xf0;
    assert_eq!(
        decode(LinkType::Ethernet, &eth(0x0800, &bad)).0,
        Err(Malformed::BadTcpHeader)
    );
    // TCP header cut by the capture.
    assert_eq!(
        decode(LinkType::Ethernet, &eth(0x0800, &good[..28])).0,
        Err(Malformed::BadIpv4Length)
    );
    // Link header cut.
    assert_eq!(
        decode(LinkType::Ethernet, &[0u8; 10]).0,
        Err(Malformed::TruncatedLinkHeader)
    );
    assert_eq!(
        decode(LinkType::Unknown(147), &good).0,
        Err(Malformed::UnsupportedLinktype)
    );
}

#[test]
fn snaplen_truncation_keeps_wire_length() {
    let f = eth(
        0x0800,
        &ipv4(
            6,
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            0,
            1,
            &tcp(5, 6, 0, 0x10, &[0u8; 1000]),
        ),
    );
    let mut d = Decoder::default();
    let mut out = Decoded::default();
    let r = d.decode(LinkType::Ethernet, 0, &f[..96], f.len() as u32, &mut out);
    assert_eq!(r, Ok(Outcome::Ip));
    assert_eq!(out.ip_len, 1040);
    assert_eq!(out.payload_len, 1000);
}

#[test]
fn ipv4_fragments_attributed_to_flow() {
    let mut d = Decoder::default();
    let mut out = Decoded::default();
    let first = eth(
        0x0800,
        &ipv4(
            17,
            [1, 1, 1, 1],
            [2, 2, 2, 2],
            0x2000,
            77,
            &udp(1000, 53, &[0u8; 32]),
        ),
    );
    let later = eth(
        0x0800,
        &ipv4(17, [1, 1, 1, 1], [2, 2, 2, 2], 5, 77, &[0u8; 24]),
    );
    let orphan = eth(
        0x0800,
        &ipv4(17, [1, 1, 1, 1], [2, 2, 2, 2], 5, 78, &[0u8; 24]),
    );
    assert_eq!(
        d.decode(LinkType::Ethernet, 0, &first, first.len() as u32, &mut out),
        Ok(Outcome::Ip)
    );
    assert_eq!((out.sport, out.dport, out.is_fragment), (1000, 53, true));
    assert_eq!(
        d.decode(LinkType::Ethernet, 1, &later, later.len() as u32, &mut out),
        Ok(Outcome::Ip)
    );
    assert_eq!((out.sport, out.dport, out.ip_len), (1000, 53, 44));
    assert_eq!(
        d.decode(
            LinkType::Ethernet,
            2,
            &orphan,
            orphan.len() as u32,
            &mut out
        ),
        Ok(Outcome::Ip)
    );
    assert_eq!((out.sport, out.dport), (0, 0));
    assert_eq!(d.counters.fragments, 3);
    assert_eq!(d.counters.fragments_unmatched, 1);
}

/// A first fragment that ends inside the TCP header (16 of 24 bytes, as in nDPI's
/// ip_fragmented_garbage.pcap) still gives its ports to the later fragments; one whose data
/// offset is below 20 bytes is malformed, and its later fragments keep ports 0.
#[test]
fn tiny_first_tcp_fragment_keeps_ports() {
    let mut d = Decoder::default();
    let mut out = Decoded::default();
    let mut hdr = tcp(18730, 20304, 1, 0x18, &[]);
    hdr[12] = 0x60; // 24-byte header, of which the fragment carries 16
    hdr.truncate(16);
    let first = eth(
        0x0800,
        &ipv4(6, [10, 0, 0, 2], [10, 128, 0, 2], 0x2000, 9, &hdr),
    );
    let later = eth(
        0x0800,
        &ipv4(6, [10, 0, 0, 2], [10, 128, 0, 2], 2, 9, &[0u8; 16]),
    );
    assert_eq!(
        d.decode(LinkType::Ethernet, 0, &first, first.len() as u32, &mut out),
        Ok(Outcome::Ip)
    );
    assert_eq!((out.sport, out.dport, out.payload_len), (18730, 20304, 0));
    assert_eq!(
        d.decode(LinkType::Ethernet, 1, &later, later.len() as u32, &mut out),
        Ok(Outcome::Ip)
    );
    assert_eq!((out.sport, out.dport), (18730, 20304));

    // The same IP id again (as in that capture), now with an 8-byte header: bogus. Its later
    // fragments must not inherit the previous datagram's ports.
    hdr[12] = 0x20;
    let bogus = eth(
        0x0800,
        &ipv4(6, [10, 0, 0, 2], [10, 128, 0, 2], 0x2000, 9, &hdr),
    );
    assert_eq!(
        d.decode(LinkType::Ethernet, 2, &bogus, bogus.len() as u32, &mut out),
        Err(Malformed::BadTcpHeader)
    );
    let later = eth(
        0x0800,
        &ipv4(6, [10, 0, 0, 2], [10, 128, 0, 2], 2, 9, &[0u8; 16]),
    );
    d.decode(LinkType::Ethernet, 3, &later, later.len() as u32, &mut out)
        .unwrap();
    assert_eq!((out.sport, out.dport), (0, 0));
}

fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    h.extend_from_slice(payload);
    h
}

#[test]
fn ipv6_extension_headers() {
    // Hop-by-hop (8 bytes) then a first fragment then UDP.
    let mut p = vec![44, 0, 0, 0, 0, 0, 0, 0];
    p.extend_from_slice(&[17, 0, 0x00, 0x01, 0, 0, 0, 9]);
    p.extend_from_slice(&udp(546, 547, b"abcd"));
    let (r, d) = decode(LinkType::Ethernet, &eth(0x86dd, &ipv6(0, &p)));
    assert_eq!(r, Ok(Outcome::Ip));
    assert_eq!((d.proto, d.sport, d.dport, d.ip_version), (17, 546, 547, 6));
    assert!(d.is_fragment);
    assert_eq!(d.ip_len as usize, 40 + p.len());
    // An extension header that runs past the packet.
    let bad = vec![17, 200, 0, 0, 0, 0, 0, 0];
    let (r, _) = decode(LinkType::Ethernet, &eth(0x86dd, &ipv6(0, &bad)));
    assert_eq!(r, Err(Malformed::BadIpv6ExtensionHeader));
}

#[test]
fn vxlan_inner_flow() {
    let inner = eth(
        0x0800,
        &ipv4(
            6,
            [192, 168, 0, 1],
            [192, 168, 0, 2],
            0,
            1,
            &tcp(40000, 443, 0, 0x02, b""),
        ),
    );
    let mut vx = vec![0x08, 0, 0, 0, 0, 0, 1, 0];
    vx.extend_from_slice(&inner);
    let f = eth(
        0x0800,
        &ipv4(
            17,
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            0,
            1,
            &udp(5555, 4789, &vx),
        ),
    );
    let (r, d) = decode(LinkType::Ethernet, &f);
    assert_eq!(r, Ok(Outcome::Ip));
    assert_eq!(d.tunnel, Tunnel::Vxlan);
    assert_eq!(&d.src[..4], &[192, 168, 0, 1]);
    assert_eq!((d.sport, d.dport, d.proto), (40000, 443, 6));
    assert_eq!(d.ip_len, 40);
    // Not VXLAN inside: the outer UDP flow stands.
    let f = eth(
        0x0800,
        &ipv4(
            17,
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            0,
            1,
            &udp(5555, 4789, b"garbage"),
        ),
    );
    let (r, d) = decode(LinkType::Ethernet, &f);
    assert_eq!(r, Ok(Outcome::Ip));
    assert_eq!((d.tunnel, d.dport), (Tunnel::None, 4789));
}

#[test]
fn gre_and_gtpu_and_ipip() {
    let inner = ipv4(17, [172, 16, 0, 1], [172, 16, 0, 2], 0, 1, &udp(1, 2, b""));
    let mut gre = vec![0x20, 0x00, 0x08, 0x00, 0, 0, 0, 42];
    gre.extend_from_slice(&inner);
    let (r, d) = decode(
        LinkType::Ethernet,
        &eth(0x0800, &ipv4(47, [10, 0, 0, 1], [10, 0, 0, 2], 0, 1, &gre)),
    );
    assert_eq!(r, Ok(Outcome::Ip));
    assert_eq!((d.tunnel, d.sport, d.dport), (Tunnel::Gre, 1, 2));

    let mut gtp = vec![0x30, 0xff];
    gtp.extend_from_slice(&(inner.len() as u16).to_be_bytes());
    gtp.extend_from_slice(&[0, 0, 0, 1]);
    gtp.extend_from_slice(&inner);
    let f = eth(
        0x0800,
        &ipv4(
            17,
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            0,
            1,
            &udp(2152, 2152, &gtp),
        ),
    );
    let (r, d) = decode(LinkType::Ethernet, &f);
    assert_eq!(r, Ok(Outcome::Ip));
    assert_eq!(
        (d.tunnel, d.sport, &d.src[..4]),
        (Tunnel::GtpU, 1, &[172u8, 16, 0, 1][..])
    );

    let (r, d) = decode(
        LinkType::Ethernet,
        &eth(0x0800, &ipv4(4, [10, 0, 0, 1], [10, 0, 0, 2], 0, 1, &inner)),
    );
    assert_eq!(r, Ok(Outcome::Ip));
    assert_eq!((d.tunnel, d.dport), (Tunnel::IpInIp, 2));
}

#[test]
fn other_link_types() {
    let ip = ipv4(17, [1, 1, 1, 1], [2, 2, 2, 2], 0, 1, &udp(7, 8, b""));
    assert_eq!(decode(LinkType::Raw, &ip).1.dport, 8);
    let mut null = vec![2, 0, 0, 0];
    null.extend_from_slice(&ip);
    assert_eq!(decode(LinkType::Null, &null).1.dport, 8);
    let mut sll = vec![0, 0, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, 0x08, 0x00];
    sll.extend_from_slice(&ip);
    let (r, d) = decode(LinkType::LinuxSll, &sll);
    assert_eq!(r, Ok(Outcome::Ip));
    assert_eq!((d.dport, d.src_mac), (8, [1, 2, 3, 4, 5, 6]));
    let mut sll2 = vec![
        0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0,
    ];
    sll2.extend_from_slice(&ip);
    assert_eq!(decode(LinkType::LinuxSll2, &sll2).1.dport, 8);
}

#[test]
fn ppp_and_cisco_hdlc_links() {
    let ip = ipv4(17, [1, 1, 1, 1], [2, 2, 2, 2], 0, 1, &udp(7, 8, b"x"));
    let v6 = ipv6(6, &tcp(1, 2, 3, 0x02, b""));
    let with = |head: &[u8], body: &[u8]| [head, body].concat();
    // PPP: bare, in HDLC-like framing, with a compressed (one-byte) protocol field.
    for (frame, ip_offset) in [
        (with(&[0x00, 0x21], &ip), 2),
        (with(&[0xff, 0x03, 0x00, 0x21], &ip), 4),
        (with(&[0xff, 0x03, 0x21], &ip), 3),
        (with(&[0x21], &ip), 1),
    ] {
        let (r, d) = decode(LinkType::Ppp, &frame);
        assert_eq!(r, Ok(Outcome::Ip), "{frame:02x?}");
        assert_eq!(
            (d.dport, d.ip_offset, d.ip_len),
            (8, ip_offset, ip.len() as u32)
        );
    }
    let (r, d) = decode(LinkType::Ppp, &with(&[0xff, 0x03, 0x00, 0x57], &v6));
    assert_eq!((r, d.ip_version, d.sport), (Ok(Outcome::Ip), 6, 1));
    // LCP and a header cut short.
    let lcp = with(&[0xff, 0x03, 0xc0, 0x21], &[1, 1, 0, 4]);
    assert_eq!(decode(LinkType::Ppp, &lcp).0, Ok(Outcome::NonIp));
    assert_eq!(
        decode(LinkType::Ppp, &[0xff, 0x03, 0x00]).0,
        Err(Malformed::TruncatedLinkHeader)
    );
    // Cisco HDLC: unicast and multicast address bytes, an EtherType.
    let (r, d) = decode(LinkType::CHdlc, &with(&[0x0f, 0x00, 0x08, 0x00], &ip));
    assert_eq!((r, d.dport, d.ip_offset), (Ok(Outcome::Ip), 8, 4));
    let (r, d) = decode(LinkType::CHdlc, &with(&[0x8f, 0x00, 0x86, 0xdd], &v6));
    assert_eq!((r, d.ip_version, d.ip_offset), (Ok(Outcome::Ip), 6, 4));
    let slarp = with(&[0x8f, 0x00, 0x80, 0x35], &[0; 20]);
    assert_eq!(decode(LinkType::CHdlc, &slarp).0, Ok(Outcome::NonIp));
    assert_eq!(
        decode(LinkType::CHdlc, &[0x0f, 0x00, 0x08]).0,
        Err(Malformed::TruncatedLinkHeader)
    );
    // The pcap numbers.
    for (n, lt) in [
        (9, LinkType::Ppp),
        (50, LinkType::Ppp),
        (104, LinkType::CHdlc),
    ] {
        assert_eq!(LinkType::from_linktype(n), lt);
        assert!(lt.is_supported());
    }
}

/// Every prefix and every single-byte corruption of valid frames decodes or fails cleanly.
#[test]
fn never_panics_on_prefixes_and_bit_flips() {
    let inner = eth(
        0x0800,
        &ipv4(
            6,
            [192, 168, 0, 1],
            [192, 168, 0, 2],
            0,
            1,
            &tcp(40000, 443, 0, 0x02, b"x"),
        ),
    );
    let mut vx = vec![0x08, 0, 0, 0, 0, 0, 1, 0];
    vx.extend_from_slice(&inner);
    let frames = vec![
        eth(
            0x0800,
            &ipv4(
                17,
                [10, 0, 0, 1],
                [10, 0, 0, 2],
                0,
                1,
                &udp(5555, 4789, &vx),
            ),
        ),
        eth(0x86dd, &ipv6(6, &tcp(1, 2, 3, 0x12, b"abc"))),
        eth(
            0x8100,
            &[
                0, 5, 0x88, 0x47, 0, 0, 1, 0x40, 0x45, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0,
            ],
        ),
    ];
    let mut d = Decoder::default();
    let mut out = Decoded::default();
    let mut seed = 0x1234_5678u32;
    for f in &frames {
        for n in 0..=f.len() {
            let _ = d.decode(LinkType::Ethernet, 0, &f[..n], n as u32, &mut out);
            let _ = d.decode(LinkType::Ethernet, 0, &f[..n], f.len() as u32, &mut out);
        }
        for i in 0..f.len() {
            for _ in 0..8 {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let mut g = f.clone();
                g[i] = seed as u8;
                let _ = d.decode(LinkType::Ethernet, 0, &g, g.len() as u32, &mut out);
                for lt in [
                    LinkType::Raw,
                    LinkType::LinuxSll,
                    LinkType::LinuxSll2,
                    LinkType::Null,
                    LinkType::Ppp,
                    LinkType::CHdlc,
                ] {
                    let _ = d.decode(lt, 0, &g, g.len() as u32, &mut out);
                }
            }
        }
    }
}

/// The fast path must produce exactly what the general decoder produces, on valid frames and on
/// every single-byte mutation of them.
#[test]
fn fast_path_matches_general_decoder() {
    let frames = vec![
        eth(
            0x0800,
            &ipv4(
                6,
                [10, 0, 0, 1],
                [10, 0, 0, 2],
                0,
                1,
                &tcp(1234, 80, 7, 0x12, b"hello"),
            ),
        ),
        eth(
            0x0800,
            &ipv4(
                17,
                [10, 0, 0, 1],
                [10, 0, 0, 2],
                0,
                1,
                &udp(53, 5353, b"query"),
            ),
        ),
        eth(
            0x0800,
            &ipv4(
                17,
                [10, 0, 0, 1],
                [10, 0, 0, 2],
                0,
                1,
                &udp(5555, 4789, &[8, 0, 0, 0, 0, 0, 1, 0]),
            ),
        ),
    ];
    let mut fast = Decoder::default();
    let mut general = Decoder::default();
    let mut seed = 7u32;
    let mut checked = 0;
    for f in &frames {
        let mut variants = vec![f.clone()];
        for i in 0..f.len() {
            for _ in 0..4 {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let mut g = f.clone();
                g[i] = seed as u8;
                variants.push(g);
            }
        }
        variants.push(f[..40].to_vec());
        for g in variants {
            for wire in [g.len() as u32, g.len() as u32 + 100] {
                let mut a = Decoded::default();
                let mut b = Decoded::default();
                let ra = fast.decode(LinkType::Ethernet, 0, &g, wire, &mut a);
                let rb = general.decode_general(LinkType::Ethernet, 0, &g, wire, &mut b);
                assert_eq!(ra, rb, "frame {g:02x?}");
                if ra.is_ok() {
                    assert_eq!(a, b, "frame {g:02x?}");
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 1000);
}

/// CAPWAP data: an 802.11 frame (Cisco's swapped frame control, as nDPI's capwap.pcap has it,
/// and the standard order with QoS), an 802.3 frame; DTLS, fragments and encrypted frames
/// stand as the outer flow.
#[test]
fn capwap_data_inner_flows() {
    let inner_ip = ipv4(
        17,
        [0, 0, 0, 0],
        [255, 255, 255, 255],
        0,
        1,
        &udp(68, 67, b"dhcp"),
    );
    let outer = |capwap: &[u8]| {
        eth(
            0x0800,
            &ipv4(
                17,
                [10, 0, 0, 10],
                [10, 0, 0, 9],
                0,
                1,
                &udp(12380, 5247, capwap),
            ),
        )
    };
    // Header: HLEN 4 words, radio 1, binding 1 (802.11), T set, W set; 4 bytes of wireless
    // information and padding.
    let header = [
        0x00, 0x20, 0x43, 0x20, 0, 0, 0, 0, 0x01, 0x04, 0xed, 0x4d, 0, 0, 0, 0,
    ];
    let wlan = |fc: [u8; 2], extra: usize, snap_ok: bool| {
        let mut v = header.to_vec();
        v.extend_from_slice(&fc);
        v.extend_from_slice(&[0u8; 22]);
        v.extend(std::iter::repeat_n(0u8, extra));
        let snap: &[u8] = if snap_ok {
            &[0xaa, 0xaa, 3, 0, 0, 0]
        } else {
            &[0xf0, 0xf0, 3, 0, 0, 0]
        };
        v.extend_from_slice(snap);
        v.extend_from_slice(&[0x08, 0x00]);
        v.extend_from_slice(&inner_ip);
        v
    };
    let inner_flow = |f: Vec<u8>| {
        let (r, d) = decode(LinkType::Ethernet, &f);
        assert_eq!(r, Ok(Outcome::Ip));
        (d.tunnel, d.sport, d.dport)
    };
    let dhcp = (Tunnel::Capwap, 68, 67);
    let outer_flow = (Tunnel::None, 12380, 5247);
    assert_eq!(
        inner_flow(outer(&wlan([0x01, 0x08], 0, true))),
        dhcp,
        "swapped"
    );
    assert_eq!(
        inner_flow(outer(&wlan([0x88, 0x01], 2, true))),
        dhcp,
        "QoS data"
    );
    assert_eq!(
        inner_flow(outer(&wlan([0x88, 0x03], 8, true))),
        dhcp,
        "four addresses, QoS"
    );
    assert_eq!(
        inner_flow(outer(&wlan([0x08, 0x41], 0, true))),
        outer_flow,
        "protected"
    );
    assert_eq!(
        inner_flow(outer(&wlan([0x48, 0x01], 0, true))),
        outer_flow,
        "null data"
    );
    assert_eq!(
        inner_flow(outer(&wlan([0x08, 0x01], 0, false))),
        outer_flow,
        "no SNAP"
    );
    // 802.3 inside (T clear).
    let mut e = vec![0x00, 0x10, 0x42, 0x00, 0, 0, 0, 0];
    e.extend_from_slice(&eth(0x0800, &inner_ip));
    assert_eq!(inner_flow(outer(&e)), dhcp, "802.3");
    // A fragment, and DTLS (preamble type 1).
    let mut frag = wlan([0x01, 0x08], 0, true);
    frag[3] |= 0x80;
    assert_eq!(inner_flow(outer(&frag)), outer_flow);
    let mut dtls = wlan([0x01, 0x08], 0, true);
    dtls[0] = 0x01;
    assert_eq!(inner_flow(outer(&dtls)), outer_flow);
    assert_eq!(inner_flow(outer(&header[..5])), outer_flow, "cut header");
}
