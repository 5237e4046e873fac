//! Classic pcap writer (microsecond timestamps, the format every peer tool reads).

use sonde_wire::LinkType;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

pub struct PcapWriter {
    out: BufWriter<File>,
}

impl PcapWriter {
    pub fn create(path: &Path, link: LinkType) -> std::io::Result<PcapWriter> {
        let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
        out.write_all(&0xa1b2_c3d4u32.to_le_bytes())?;
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&262_144u32.to_le_bytes())?;
        out.write_all(&link.to_linktype().to_le_bytes())?;
        Ok(PcapWriter { out })
    }

    pub fn write(&mut self, ts_ns: u64, wire_len: u32, data: &[u8]) -> std::io::Result<()> {
        let sec = (ts_ns / 1_000_000_000) as u32;
        let usec = ((ts_ns % 1_000_000_000) / 1000) as u32;
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&sec.to_le_bytes());
        h[4..8].copy_from_slice(&usec.to_le_bytes());
        h[8..12].copy_from_slice(&(data.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&wire_len.max(data.len() as u32).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(data)
    }

    pub fn finish(mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}
