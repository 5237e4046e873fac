//! Fuzzes the JSON flow ingest behind `--collect zmq+tcp://…` and `--collect kafka://…`:
//! `flows_from_message` over any message (one object, an array, or one object per line, as
//! nProbe, ntopng and sonde's own publisher send them), then the suspect-record check every
//! collector applies. Nothing may panic; each object is a flow or a counted error.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (flows, errors) = sonde_export::ingest::flows_from_message(data);
    // Every flow and every error came from at least one byte of the message.
    assert!(flows.len() + errors.len() <= data.len().max(1));
    for f in &flows {
        let _ = f.impossible();
    }
    for e in &errors {
        assert!(!e.0.is_empty(), "an error says why");
    }
});
