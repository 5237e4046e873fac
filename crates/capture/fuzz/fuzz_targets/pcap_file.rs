//! Fuzzes the capture file reader (`--read FILE`): the input is written to a file, which
//! `FileSource::open` opens (classic pcap in its four magics, or pcapng) and `next_frame`
//! reads to the end or to the first error, each frame then going through the packet decoder
//! with the link type the file gave it. No input may panic, hang or make the reader allocate
//! far beyond the file's size; a bad file must come back as an error.
#![no_main]

use sonde_capture::FileSource;
use sonde_wire::{Decoded, Decoder};
use std::path::PathBuf;

fn scratch() -> PathBuf {
    // tmpfs when there is one: the target writes a file per input.
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("sonde-fuzz-pcap-{}", std::process::id()))
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = scratch();
    std::fs::write(&path, data).expect("write the scratch file");
    let Ok(mut src) = FileSource::open(&path) else {
        return;
    };
    let mut dec = Decoder::new(64);
    let mut d = Decoded::default();
    let mut frames = 0u64;
    while let Ok(Some((link, frame))) = src.next_frame() {
        assert!(
            frame.data.len() <= data.len(),
            "a frame longer than the file"
        );
        let _ = dec.decode(link, frame.ts_ns, frame.data, frame.wire_len, &mut d);
        frames += 1;
        // Every frame needs at least its record header from the file.
        assert!(frames <= data.len() as u64, "more frames than bytes");
    }
    let (done, total) = src.progress();
    assert!(
        done <= total.max(data.len() as u64),
        "progress past the end"
    );
});
