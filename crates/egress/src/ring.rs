//! A ring of pcap files on disk: a shard's forwarded packets go into the newest file; past
//! its size the file is closed and a new one started, and past the file count the oldest is
//! deleted (a packet recorder's bounded disk).

use sonde_capture::PcapWriter;
use sonde_wire::LinkType;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// Bytes of a pcap file header and of a record header.
const FILE_HEADER: u64 = 24;
const RECORD_HEADER: u64 = 16;

pub struct PcapRing {
    dir: PathBuf,
    /// `egress-s{shard}`: each shard writes files of its own.
    prefix: String,
    max_bytes: u64,
    max_files: usize,
    current: Option<(PcapWriter, LinkType, u64)>,
    /// Files of this ring still on disk, oldest first (the current one last).
    kept: VecDeque<PathBuf>,
    next_seq: u64,
    /// Files deleted to keep the ring at its size.
    pub deleted: u64,
}

impl PcapRing {
    pub fn new(dir: &Path, shard: usize, max_bytes: u64, max_files: usize) -> PcapRing {
        PcapRing {
            dir: dir.to_path_buf(),
            prefix: format!("egress-s{shard}"),
            max_bytes: max_bytes.max(FILE_HEADER + RECORD_HEADER),
            max_files: max_files.max(1),
            current: None,
            kept: VecDeque::new(),
            next_seq: 0,
            deleted: 0,
        }
    }

    /// Appends one frame, starting a new file when the current one is full or holds another
    /// link type.
    pub fn write(
        &mut self,
        link: LinkType,
        ts_ns: u64,
        wire_len: u32,
        data: &[u8],
    ) -> std::io::Result<()> {
        let size = RECORD_HEADER + data.len() as u64;
        let full = match &self.current {
            Some((_, l, written)) => {
                *l != link || (*written + size > self.max_bytes && *written > FILE_HEADER)
            }
            None => true,
        };
        if full {
            self.rotate(link)?;
        }
        let (w, _, written) = self.current.as_mut().expect("a file was just opened");
        w.write(ts_ns, wire_len, data)?;
        *written += size;
        Ok(())
    }

    fn rotate(&mut self, link: LinkType) -> std::io::Result<()> {
        if let Some((w, _, _)) = self.current.take() {
            w.finish()?;
        }
        while self.kept.len() >= self.max_files {
            if let Some(old) = self.kept.pop_front() {
                // Gone already (a user cleaned up): nothing to keep track of.
                let _ = std::fs::remove_file(&old);
                self.deleted += 1;
            }
        }
        let path = self
            .dir
            .join(format!("{}-{:06}.pcap", self.prefix, self.next_seq));
        self.next_seq += 1;
        let w = PcapWriter::create(&path, link)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        self.kept.push_back(path);
        self.current = Some((w, link, FILE_HEADER));
        Ok(())
    }

    /// Flushes the current file (at the end of a run).
    pub fn finish(&mut self) -> std::io::Result<()> {
        match self.current.take() {
            Some((w, _, _)) => w.finish(),
            None => Ok(()),
        }
    }

    /// The files on disk, oldest first.
    pub fn files(&self) -> impl Iterator<Item = &PathBuf> {
        self.kept.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_rotate_at_their_size_and_the_oldest_go() {
        let dir = std::env::temp_dir().join(format!("sonde-egress-ring-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Room for two 100-byte frames a file (24 + 2 × 116 = 256).
        let mut ring = PcapRing::new(&dir, 3, 256, 2);
        let frame = [0xabu8; 100];
        for i in 0..7u64 {
            ring.write(LinkType::Ethernet, i * 1000, 100, &frame)
                .unwrap();
        }
        ring.finish().unwrap();
        // Files 0..=3 were written (2 + 2 + 2 + 1 frames); the ring keeps the last two.
        let names: Vec<String> = ring
            .files()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["egress-s3-000002.pcap", "egress-s3-000003.pcap"]);
        assert_eq!(ring.deleted, 2);
        let mut on_disk: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        assert_eq!(on_disk, names);
        let sizes: Vec<u64> = ring
            .files()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .collect();
        assert_eq!(sizes, [256, 140]);
        // A frame larger than a file's size still goes into a file of its own.
        let big = vec![0u8; 1000];
        ring.write(LinkType::Ethernet, 1, 1000, &big).unwrap();
        ring.write(LinkType::Raw, 2, 100, &frame).unwrap();
        ring.finish().unwrap();
        let sizes: Vec<u64> = ring
            .files()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .collect();
        assert_eq!(
            sizes,
            [24 + 16 + 1000, 140],
            "a new link type starts a new file"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
