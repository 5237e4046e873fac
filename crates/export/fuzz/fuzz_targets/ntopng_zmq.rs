//! Fuzzes the ntopng-format ZMQ ingest behind `--collect zmq+tcp://…?format=ntopng` (what nProbe
//! and ntopng send): a two-part message, header and payload, through `decode_header` (the four
//! header layouts), `payload_json` (zlib, with the collector's size cap; TLV payloads read as
//! nDPI's serializer writes them) and `flows_from_ntopng_json` (numeric nProbe keys turned
//! into labels), then the suspect-record
//! check. The first byte is the header's length, the rest split there. Nothing may panic, and
//! nothing may decompress past the cap.
#![no_main]

const MAX: usize = 1 << 20;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let (header, payload) = rest.split_at((n as usize).min(rest.len()));
    let Ok(h) = sonde_export::ntopng::decode_header(header) else {
        return;
    };
    if !h.is_flow() {
        return;
    }
    let json = match sonde_export::ntopng::payload_json(&h, payload, MAX) {
        Ok(j) => j,
        Err(e) => {
            assert!(!e.is_empty(), "an error says why");
            return;
        }
    };
    assert!(json.len() <= MAX, "decompressed past the cap");
    let r = sonde_export::ingest::flows_from_ntopng_json(&json);
    for f in &r.flows {
        let _ = f.impossible();
    }
    for e in &r.errors {
        assert!(!e.0.is_empty(), "an error says why");
    }
});
