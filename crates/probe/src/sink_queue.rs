//! A flow sink on its own thread behind a bounded queue. The dispatcher offers every batch to
//! every queue; what a full queue does is the sink's declared [`WhenFull`]: wait, or drop the
//! batch and count its records. So one slow collector cannot stall a file, and a file that
//! must lose nothing holds the shards back instead of losing records.

use crate::sinks::{QueueOptions, RecordSink, SinkReport, WhenFull};
use crossbeam_channel::{bounded, RecvTimeoutError, Sender, TrySendError};
use sonde_flow::FlowRecord;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A batch shared by every sink's queue (one allocation, whatever the number of sinks).
pub type Batch = Arc<Vec<FlowRecord>>;

type SinkThread = JoinHandle<Result<SinkReport, (String, io::Error)>>;

pub struct QueuedSink {
    name: String,
    options: QueueOptions,
    tx: Option<Sender<Batch>>,
    thread: Option<SinkThread>,
    offered: u64,
    queue_dropped: u64,
}

impl QueuedSink {
    /// Starts the sink's thread. It writes batches in the order offered, calls `idle` after a
    /// second without one, and `finish` once the queue is closed and empty.
    pub fn start(mut sink: Box<dyn RecordSink>, options: QueueOptions) -> io::Result<QueuedSink> {
        let name = sink.name();
        let (tx, rx) = bounded::<Batch>(options.batches.max(1));
        let thread = std::thread::Builder::new().name("sink".into()).spawn(
            move || -> Result<SinkReport, (String, io::Error)> {
                loop {
                    match rx.recv_timeout(Duration::from_secs(1)) {
                        Ok(batch) => sink.write(&batch).map_err(|e| (sink.name(), e))?,
                        Err(RecvTimeoutError::Timeout) => {
                            sink.idle().map_err(|e| (sink.name(), e))?
                        }
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                sink.finish().map_err(|e| (sink.name(), e))
            },
        )?;
        Ok(QueuedSink {
            name,
            options,
            tx: Some(tx),
            thread: Some(thread),
            offered: 0,
            queue_dropped: 0,
        })
    }

    /// Hands a batch to the sink's queue: waits when it is full (`block`), or drops the batch
    /// and counts it (`drop_newest`). A sink that failed takes nothing more; its records are
    /// counted as dropped and its error comes out of [`QueuedSink::finish`].
    pub fn offer(&mut self, batch: &Batch) {
        let n = batch.len() as u64;
        self.offered += n;
        let Some(tx) = &self.tx else {
            self.queue_dropped += n;
            return;
        };
        let sent = match self.options.when_full {
            WhenFull::Block => tx.send(batch.clone()).is_ok(),
            WhenFull::DropNewest => match tx.try_send(batch.clone()) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    self.queue_dropped += n;
                    return;
                }
                Err(TrySendError::Disconnected(_)) => false,
            },
        };
        if !sent {
            self.tx = None;
            self.queue_dropped += n;
        }
    }

    /// Closes the queue, waits for the sink to write what is in it and finish, and returns its
    /// report with the queue's counts.
    pub fn finish(mut self) -> Result<SinkReport, (String, io::Error)> {
        drop(self.tx.take());
        let thread = self.thread.take().expect("finished once");
        let mut report = thread.join().map_err(|_| {
            (
                self.name.clone(),
                io::Error::other("the sink's thread panicked"),
            )
        })??;
        report.offered = self.offered;
        report.queue_dropped = self.queue_dropped;
        report.when_full = self.options.when_full;
        Ok(report)
    }
}
