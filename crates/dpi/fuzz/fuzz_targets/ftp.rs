//! Fuzzes the `ftp` detector alone over a short flow (input layout: `src/lib.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sonde_dpi_fuzz::run_detector("ftp", data));
