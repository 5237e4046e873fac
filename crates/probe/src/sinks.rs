//! Where expired flow records go. One dispatch thread takes the shards' record batches and
//! offers each batch to every configured [`RecordSink`]: a file (JSON lines or CSV), the flow
//! history, flow exporters (NetFlow/IPFIX), publishers. Each sink runs on its own thread behind
//! a bounded queue ([`crate::sink_queue`]) with a declared behaviour when that queue is full:
//! `block` (the dispatcher, then the shards, wait: a file must lose nothing) or `drop_newest`
//! (the batch is dropped and counted: a slow collector never stalls the probe). [`SINKS`] lists
//! every kind with its default.

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
    /// What the destination could not take so far, in the unit of [`SinkReport::dropped`]
    /// (for `/metrics` while the sink runs; the report at the end is the final word).
    fn dropped(&self) -> u64 {
        0
    }
    /// Records `write` took that are not at the destination yet (buffered for a batch, sent
    /// but not acknowledged): what a crash now would lose. A consumer commits its input only
    /// for records past this (see the Kafka source).
    fn pending(&self) -> u64 {
        0
    }
}

/// What a sink delivered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SinkReport {
    pub name: String,
    /// Records the sink took (written, or encoded into messages).
    pub records: u64,
    /// Messages sent (datagrams, ZMQ messages); 0 for files.
    pub messages: u64,
    /// What the destination could not take, in the sink's unit: messages for network sinks.
    pub dropped: u64,
    /// Records offered to the sink's queue: `records + queue_dropped`.
    pub offered: u64,
    /// Records dropped because the sink's queue was full (`drop_newest`) or the sink had failed.
    pub queue_dropped: u64,
    /// The queue's behaviour when full.
    pub when_full: WhenFull,
}

/// What a sink's queue does when the sink is behind and the queue is full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WhenFull {
    /// Wait: the dispatcher, then the shards, slow down; nothing is lost.
    #[default]
    Block,
    /// Drop the batch that does not fit, and count its records.
    DropNewest,
}

impl WhenFull {
    pub fn name(self) -> &'static str {
        match self {
            WhenFull::Block => "block",
            WhenFull::DropNewest => "drop_newest",
        }
    }
}

/// A sink's queue: its behaviour when full, and its length in batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueOptions {
    pub when_full: WhenFull,
    pub batches: usize,
}

/// Batches a sink's queue holds unless told otherwise, when it drops what does not fit: room
/// for a burst while the destination is slow.
pub const DEFAULT_QUEUE_BATCHES: usize = 16;

/// Batches a blocking queue holds unless told otherwise. It waits instead of absorbing bursts,
/// so a few batches keep its sink busy; more would only hold records in memory (a batch of
/// 8192 records is about 2.5 MB).
pub const BLOCKING_QUEUE_BATCHES: usize = 4;

/// The queue options a sink's URL asks for (`?when_full=block&queue=256`); what it does not
/// say comes from the sink's kind ([`SinkKind::queue`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueRequest {
    pub when_full: Option<WhenFull>,
    pub batches: Option<usize>,
}

impl QueueRequest {
    /// Splits the queue options off a sink's URL: `ipfix://HOST:PORT?when_full=block&queue=256`
    /// gives `ipfix://HOST:PORT` and the request.
    pub fn split(text: &str) -> Result<(String, QueueRequest), String> {
        QueueRequest::split_allowing(text, &[])
    }

    /// As [`QueueRequest::split`], for a sink whose URL has options of its own (`extra`, e.g.
    /// Kafka's `format`): those stay in the URL returned, for the sink to read.
    pub fn split_allowing(text: &str, extra: &[&str]) -> Result<(String, QueueRequest), String> {
        let mut req = QueueRequest::default();
        let Some((base, query)) = text.split_once('?') else {
            return Ok((text.to_string(), req));
        };
        let mut kept: Vec<&str> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                _ if extra.contains(&k) => kept.push(pair),
                "when_full" => {
                    req.when_full = Some(match v {
                        "block" => WhenFull::Block,
                        "drop_newest" => WhenFull::DropNewest,
                        _ => {
                            return Err(format!(
                                "'{text}': when_full={v}: use block or drop_newest"
                            ))
                        }
                    })
                }
                "queue" => {
                    req.batches = Some(
                        v.parse::<usize>()
                            .ok()
                            .filter(|n| (1..=65_536).contains(n))
                            .ok_or_else(|| {
                                format!("'{text}': queue={v}: give a number of batches, 1 to 65536")
                            })?,
                    )
                }
                _ => {
                    let mut names: Vec<&str> = vec!["when_full", "queue"];
                    names.extend(extra);
                    let last = names.pop().unwrap_or("queue");
                    return Err(format!(
                        "'{text}': unknown option '{k}' (the options are {} and {last})",
                        names.join(", ")
                    ));
                }
            }
        }
        if kept.is_empty() {
            Ok((base.to_string(), req))
        } else {
            Ok((format!("{base}?{}", kept.join("&")), req))
        }
    }
}

/// One kind of flow sink, as `sonde sinks` lists it.
pub struct SinkKind {
    pub name: &'static str,
    /// How it is asked for.
    pub usage: &'static str,
    /// Its queue's behaviour when full on a live input, unless the URL says otherwise (on a
    /// file every sink blocks by default: nothing is gained by losing a file's records).
    pub when_full: WhenFull,
    /// Whether `?when_full=…&queue=…` may change it (a file and the history lose nothing).
    pub options: bool,
    pub what: &'static str,
}

/// Every kind of flow sink (the way `sonde_dpi::proto::DETECTORS` lists detectors).
pub const SINKS: &[SinkKind] = &[
    SinkKind {
        name: "flows-file",
        usage: "--flows-out FILE [--flows-format json|csv]",
        when_full: WhenFull::Block,
        options: false,
        what: "expired flows as JSON lines (nProbe keys) or CSV, '-' for standard output",
    },
    SinkKind {
        name: "history",
        usage: "--data-dir DIR",
        when_full: WhenFull::Block,
        options: false,
        what: "every expired flow in the on-disk history ('sonde query flows')",
    },
    SinkKind {
        name: "netflow5",
        usage: "--export netflow5://HOST:PORT[?when_full=…&queue=N]",
        when_full: WhenFull::DropNewest,
        options: true,
        what: "NetFlow v5 over UDP (IPv4 flows only)",
    },
    SinkKind {
        name: "netflow9",
        usage: "--export netflow9://HOST:PORT[?…]",
        when_full: WhenFull::DropNewest,
        options: true,
        what: "NetFlow v9 over UDP",
    },
    SinkKind {
        name: "ipfix",
        usage: "--export ipfix://HOST:PORT[?…]",
        when_full: WhenFull::DropNewest,
        options: true,
        what: "IPFIX over UDP",
    },
    SinkKind {
        name: "ipfix+tcp",
        usage: "--export ipfix+tcp://HOST:PORT[?…]",
        when_full: WhenFull::DropNewest,
        options: true,
        what: "IPFIX over TCP, reconnected when the collector comes back",
    },
    SinkKind {
        name: "kafka",
        usage: "--export kafka://BROKER[,BROKER…]/TOPIC[?format=json|protobuf&compression=…&…]",
        when_full: WhenFull::DropNewest,
        options: true,
        what: "one flow per message keyed by the flow (or N per message, one partition per flow), failed deliveries counted",
    },
    SinkKind {
        name: "clickhouse",
        usage: "--export clickhouse://HOST:HTTP_PORT/DB[?retention_days=N&…]",
        when_full: WhenFull::DropNewest,
        options: true,
        what: "rows of a flows table and per-minute/hour rollups sonde creates, RowBinary batches",
    },
    SinkKind {
        name: "cassandra",
        usage: "--export cassandra://HOST:PORT[,HOST:PORT…]/KEYSPACE[?replication=N&bucket=SECONDS&shards=N&…]",
        when_full: WhenFull::DropNewest,
        options: true,
        what: "rows in time-bucketed partitions and per-minute counter tables sonde creates, CQL",
    },
    SinkKind {
        name: "zmq",
        usage: "--zmq-export tcp://HOST:PORT[?…]",
        when_full: WhenFull::DropNewest,
        options: true,
        what: "JSON flows pushed over ZMQ to another sonde's --collect zmq+tcp://…",
    },
];

/// The registry entry of a kind.
pub fn kind(name: &str) -> Option<&'static SinkKind> {
    SINKS.iter().find(|k| k.name == name)
}

impl SinkKind {
    /// The queue of a sink of this kind: what its URL asked for, else the kind's default on a
    /// live input, and `block` on a file or synthetic one (nothing is gained by losing a file's
    /// records).
    pub fn queue(&self, req: QueueRequest, live: bool) -> QueueOptions {
        let default = if live {
            self.when_full
        } else {
            WhenFull::Block
        };
        let when_full = req.when_full.unwrap_or(default);
        QueueOptions {
            when_full,
            batches: req.batches.unwrap_or(match when_full {
                WhenFull::Block => BLOCKING_QUEUE_BATCHES,
                WhenFull::DropNewest => DEFAULT_QUEUE_BATCHES,
            }),
        }
    }
}

/// A kind the code names (`"history"`, a scheme's kind): it is in [`SINKS`], or the code is
/// wrong (the compliance test walks every entry).
pub fn registered(name: &str) -> &'static SinkKind {
    kind(name).unwrap_or_else(|| panic!("sink kind '{name}' is not in SINKS"))
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

    /// Formats `bytes` of records before each write (see [`FlowWriter::batched`]): give the
    /// size of the `BufWriter` in front of the file, so whole chunks skip its copy.
    pub fn batched(mut self, bytes: usize) -> Self {
        self.writer = self.writer.batched(bytes);
        self
    }

    /// Records carry the country and AS of both ends (`--geoip-dir`).
    pub fn with_geo(mut self, geo: Option<std::sync::Arc<sonde_geo::GeoDb>>) -> Self {
        self.writer = self.writer.with_geo(geo);
        self
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

    /// A quiet second: what is pending reaches the file (a reader following it sees the
    /// records of a live run within about a second).
    fn idle(&mut self) -> io::Result<()> {
        self.writer.flush()
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
