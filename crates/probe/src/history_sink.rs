//! `--data-dir`: every expired flow goes into the flow history on local disk
//! ([`sonde_history::store`]), checkpointed (made durable) at least once a second.

use crate::sinks::{RecordSink, SinkReport};
use sonde_flow::FlowRecord;
use sonde_history::store::{FlowStore, Retention};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often appended flows are made durable: a crash loses at most this much history.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

pub struct HistorySink {
    dir: PathBuf,
    store: FlowStore,
    last_checkpoint: Instant,
}

impl HistorySink {
    /// Opens (or creates) the data directory; a foreign or corrupted one is an error that
    /// says which file and what to do.
    pub fn open(dir: &Path, retention: Retention) -> Result<HistorySink, String> {
        let store = FlowStore::open(dir, retention)
            .map_err(|e| format!("--data-dir {}: {e}", dir.display()))?;
        if store.recovered_torn_bytes > 0 {
            eprintln!(
                "sonde: flow history: cut {} bytes of an unfinished write off the end of {} \
                 (the previous run stopped during a write; checkpointed flows are intact)",
                store.recovered_torn_bytes,
                store
                    .segments()
                    .last()
                    .map_or_else(String::new, |s| s.path.display().to_string())
            );
        }
        Ok(HistorySink {
            dir: dir.to_path_buf(),
            store,
            last_checkpoint: Instant::now(),
        })
    }

    fn checkpoint(&mut self) -> io::Result<()> {
        self.last_checkpoint = Instant::now();
        self.store.checkpoint().map_err(io::Error::other)
    }
}

impl RecordSink for HistorySink {
    fn name(&self) -> String {
        format!("flow history in '{}'", self.dir.display())
    }

    fn write(&mut self, batch: &[FlowRecord]) -> io::Result<()> {
        for r in batch {
            self.store.append(r).map_err(io::Error::other)?;
        }
        if self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
            self.checkpoint()?;
        }
        Ok(())
    }

    fn idle(&mut self) -> io::Result<()> {
        if self.store.appended > self.store.checkpointed {
            self.checkpoint()?;
        }
        Ok(())
    }

    fn finish(&mut self) -> io::Result<SinkReport> {
        self.checkpoint()?;
        Ok(SinkReport {
            name: self.name(),
            records: self.store.appended,
            ..SinkReport::default()
        })
    }
}
