//! The collector's decoder over a sequence of datagrams from two exporters (so templates,
//! sequence numbers and options from earlier datagrams shape how later ones decode), and the
//! IPFIX-over-TCP framer over the same bytes as a stream.
//!
//! Input: chunks of [flags: 1 byte (bit 0: second exporter)][length: 2 bytes BE][datagram].
#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde_flowproto::decode::{Collector, Config, IpfixStream};

fuzz_target!(|data: &[u8]| {
    let mut c = Collector::new(Config::default());
    let exporters = [
        "192.0.2.1:2055".parse().unwrap(),
        "[2001:db8::1]:4739".parse().unwrap(),
    ];
    let (mut flows, mut samples) = (Vec::new(), Vec::new());
    let mut rest = data;
    let mut now = 1_700_000_000_000u64;
    while rest.len() >= 3 {
        let who = exporters[(rest[0] & 1) as usize];
        let len = (u16::from_be_bytes([rest[1], rest[2]]) as usize).min(rest.len() - 3);
        let dgram = &rest[3..3 + len];
        let _ = c.decode(who, dgram, now, &mut flows, &mut samples);
        flows.clear();
        samples.clear();
        now += 1000;
        rest = &rest[3 + len..];
    }
    let mut s = IpfixStream::new(1 << 16);
    if s.push(data).is_ok() {
        while let Ok(Some(msg)) = s.next_message() {
            let _ = c.decode(exporters[0], &msg.to_vec(), now, &mut flows, &mut samples);
        }
    }
});
