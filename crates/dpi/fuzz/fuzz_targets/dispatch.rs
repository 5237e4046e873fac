//! Fuzzes the whole built-in engine: `Dpi::inspect` over a short flow, then `Dpi::finish`
//! (input layout: `src/lib.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sonde_dpi_fuzz::run_dispatch(data));
