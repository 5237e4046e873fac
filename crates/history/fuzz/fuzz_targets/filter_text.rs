//! Fuzzes the query filters written as text (`sonde query --from/--to/--host/--port/--proto/
//! --app` and the same REST API parameters): `FilterText::parse` over any six strings. It may
//! refuse them, never panic; a refusal names the parameter.
//!
//! Input layout: the six fields separated by 0 bytes (lossy UTF-8); a missing field is no filter.
#![no_main]

use sonde_history::filter_text::FilterText;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\0');
    let mut next = || parts.next().filter(|s| !s.is_empty());
    let f = FilterText {
        from: next(),
        to: next(),
        host: next(),
        port: next(),
        proto: next(),
        app: next(),
    };
    // A fixed "now" (2026-11-24) so relative times like "-2h" are reproducible.
    if let Err(e) = f.parse(1_795_996_800_000, |n| format!("{n}=")) {
        assert!(e.contains('='), "the error names the parameter: {e}");
    }
});
