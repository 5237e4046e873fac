//! Where expired flow records go. One sink thread takes the shards' record batches and hands
//! each batch to every configured [`RecordSink`] in turn: a file (JSON lines or CSV), flow
//! exporters (NetFlow/IPFIX), publishers. A sink that cannot keep up slows the sink thread,
//! whose bounded channel then makes shards wait (a file must lose nothing); network sinks drop
//! and count instead of blocking, so they never stall the others.

use sonde_export::{FlowWriter, Format};
use sonde_flow::FlowRecord;
use std::io::{self, Write};

/// A destination for flow records. `write` gets every batch in order; `finish` is called once
/// at the end and returns how many records the sink delivered.
pub trait RecordSink: Send {
    /// What the sink is, for error messages and stats (`flows file 'x.jsonl'`, `ipfix://…`).
    fn name(&self) -> String;
    fn write(&mut self, batch: &[FlowRecord]) -> io::Result<()>;
    /// Called when no batch came for a while (about a second): time to make pending output
    /// durable or flush it.
    fn idle(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn finish(&mut self) -> io::Result<SinkReport>;
}

/// What a sink delivered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SinkReport {
    pub name: String,
    /// Records delivered (written, or sent as part of a message).
    pub records: u64,
    /// Messages sent (datagrams, ZMQ messages); 0 for files.
    pub messages: u64,
    /// Records dropped because the destination could not take them.
    pub dropped: u64,
}

/// Flow records as text lines into a file or standard output.
pub struct FileSink<W: Write + Send> {
    name: String,
    writer: FlowWriter<W>,
}

impl<W: Write + Send> FileSink<W> {
    pub fn new(name: String, out: W, format: Format) -> Self {
        FileSink {
            name,
            writer: FlowWriter::new(out, format),
        }
    }
}

impl<W: Write + Send> RecordSink for FileSink<W> {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn write(&mut self, batch: &[FlowRecord]) -> io::Result<()> {
        for r in batch {
            self.writer.write(r)?;
        }
        Ok(())
    }

    fn finish(&mut self) -> io::Result<SinkReport> {
        self.writer.flush()?;
        Ok(SinkReport {
            name: self.name.clone(),
            records: self.writer.written(),
            ..SinkReport::default()
        })
    }
}
