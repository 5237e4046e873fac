//! Fuzzes the native matcher with the text a user gives (`--filter-set`) and the packets it
//! sees: `Native::parse` over any text, then `eval` and `plain_shape` over frames decoded from
//! the rest of the input. None of them may panic.
//!
//! Input layout: the expression up to the first 0 byte (lossy UTF-8), then an Ethernet frame.
#![no_main]

use sonde_analytics::filter_expr::{plain_shape, Fields, Native};
use sonde_wire::{Decoded, Decoder, LinkType, Outcome};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let cut = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let text = String::from_utf8_lossy(&data[..cut]);
    let frame = data.get(cut + 1..).unwrap_or(&[]);
    let native = Native::parse(&text);
    let mut d = Decoded::default();
    let mut dec = Decoder::default();
    if let Ok(Outcome::Ip) = dec.decode(LinkType::Ethernet, 0, frame, frame.len() as u32, &mut d) {
        let _ = plain_shape(LinkType::Ethernet, frame, &d);
        if let Some(n) = &native {
            let _ = n.eval(&Fields::from_decoded(&d));
        }
    }
});
