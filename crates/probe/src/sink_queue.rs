//! A flow sink on its own thread behind a bounded queue. The dispatcher offers every batch to
//! every queue; what a full queue does is the sink's declared [`WhenFull`]: wait, or drop the
//! batch and count its records. So one slow collector cannot stall a file, and a file that
//! must lose nothing holds the shards back instead of losing records.

use crate::sinks::{QueueOptions, RecordSink, SinkReport, WhenFull};
use crossbeam_channel::{bounded, RecvTimeoutError, Sender, TrySendError};
use sonde_flow::FlowRecord;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A batch shared by every sink's queue (one allocation, whatever the number of sinks).
pub type Batch = Arc<Vec<FlowRecord>>;

type SinkThread = JoinHandle<Result<SinkReport, (String, io::Error)>>;

/// A sink's counters while it runs (`/metrics`): records offered to its queue, dropped there,
/// written by the sink, and what the destination could not take so far (in the sink's unit,
/// [`RecordSink::dropped`]); `failed` once the sink has stopped on an error. `pending` is what
/// the sink holds that is not at its destination yet ([`RecordSink::pending`]).
#[derive(Debug, Default)]
pub struct SinkLive {
    pub name: String,
    pub offered: AtomicU64,
    pub queue_dropped: AtomicU64,
    pub written: AtomicU64,
    pub dropped: AtomicU64,
    pub pending: AtomicU64,
    pub failed: AtomicBool,
}

impl SinkLive {
    /// Records this sink is done with: at their destination, or dropped and counted. The
    /// sink works in the order offered, so the first `settled()` records offered are done
    /// (except that a batch dropped at a full queue counts before the batches queued ahead
    /// of it are written: at most a queue's worth).
    pub fn settled(&self) -> u64 {
        // `written` first: the sink thread stores `pending` before adding to `written`, so
        // a `written` seen here comes with its batch's `pending` or a later one (an
        // undercount at worst, never an overcount).
        let written = self.written.load(Ordering::Acquire);
        let pending = self.pending.load(Ordering::Acquire);
        (written + self.queue_dropped.load(Ordering::Acquire)).saturating_sub(pending)
    }
}

pub struct QueuedSink {
    name: String,
    options: QueueOptions,
    tx: Option<Sender<Batch>>,
    thread: Option<SinkThread>,
    offered: u64,
    queue_dropped: u64,
    live: Arc<SinkLive>,
}

impl QueuedSink {
    /// Starts the sink's thread. It writes batches in the order offered, calls `idle` after a
    /// second without one, and `finish` once the queue is closed and empty.
    pub fn start(mut sink: Box<dyn RecordSink>, options: QueueOptions) -> io::Result<QueuedSink> {
        let name = sink.name();
        let live = Arc::new(SinkLive {
            name: name.clone(),
            ..SinkLive::default()
        });
        let (tx, rx) = bounded::<Batch>(options.batches.max(1));
        let counters = live.clone();
        let thread = std::thread::Builder::new().name("sink".into()).spawn(
            move || -> Result<SinkReport, (String, io::Error)> {
                let fail = |sink: &dyn RecordSink, e: io::Error| {
                    counters.failed.store(true, Ordering::Relaxed);
                    (sink.name(), e)
                };
                loop {
                    match rx.recv_timeout(Duration::from_secs(1)) {
                        Ok(batch) => {
                            sink.write(&batch).map_err(|e| fail(&*sink, e))?;
                            // Pending before written (see SinkLive::settled).
                            counters.pending.store(sink.pending(), Ordering::Release);
                            counters
                                .written
                                .fetch_add(batch.len() as u64, Ordering::Release);
                        }
                        Err(RecvTimeoutError::Timeout) => {
                            sink.idle().map_err(|e| fail(&*sink, e))?
                        }
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                    counters.pending.store(sink.pending(), Ordering::Release);
                    counters.dropped.store(sink.dropped(), Ordering::Relaxed);
                }
                let report = sink.finish().map_err(|e| fail(&*sink, e))?;
                counters.pending.store(0, Ordering::Release);
                counters.dropped.store(report.dropped, Ordering::Relaxed);
                Ok(report)
            },
        )?;
        Ok(QueuedSink {
            name,
            options,
            tx: Some(tx),
            thread: Some(thread),
            offered: 0,
            queue_dropped: 0,
            live,
        })
    }

    /// The sink's counters while it runs.
    pub fn live(&self) -> Arc<SinkLive> {
        self.live.clone()
    }

    /// Hands a batch to the sink's queue: waits when it is full (`block`), or drops the batch
    /// and counts it (`drop_newest`). A sink that failed takes nothing more; its records are
    /// counted as dropped and its error comes out of [`QueuedSink::finish`].
    pub fn offer(&mut self, batch: &Batch) {
        let n = batch.len() as u64;
        let before = self.queue_dropped;
        self.offer_counted(batch, n);
        self.live.offered.fetch_add(n, Ordering::Relaxed);
        self.live
            .queue_dropped
            .fetch_add(self.queue_dropped - before, Ordering::Relaxed);
    }

    fn offer_counted(&mut self, batch: &Batch, n: u64) {
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
