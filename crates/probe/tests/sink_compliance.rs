//! The test every flow sink passes (Vector's component compliance idea). For each kind in
//! `sinks::SINKS`, a real sink writing to a real destination on this machine (a file, a
//! history directory, a UDP or TCP collector socket, a ZMQ PULL socket) behind its queue:
//! - order kept: what the destination reads back comes in the order it was offered;
//! - flush at the end: after `finish`, everything the sink took is at the destination;
//! - counts: records taken + records dropped at the queue = records offered, and what the
//!   destination reads back = records taken;
//! - when full: with the sink made slow and a queue of 2 batches, `block` loses nothing and
//!   `drop_newest` drops whole batches, counts them, and keeps the order of the rest.

use sonde_flow::{EndReason, Flow, FlowKey, FlowRecord};
use sonde_probe::sink_queue::{Batch, QueuedSink};
use sonde_probe::sinks::{
    self, FileSink, QueueOptions, QueueRequest, RecordSink, SinkReport, WhenFull,
};
use sonde_probe::{
    CassandraSink, CassandraTarget, ClickHouseSink, ClickHouseTarget, ExportTarget, FlowExportSink,
    HistorySink, KafkaSink, KafkaTarget, ZmqSink,
};
use std::io::{self, Read};
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// A record numbered `id` (its client port): the destination says which records it got.
fn record(id: u16) -> FlowRecord {
    let mut key = FlowKey {
        ip_version: 4,
        proto: 6,
        port_a: id,
        port_b: 80,
        ..Default::default()
    };
    key.addr_a[..4].copy_from_slice(&[10, 0, 0, 1]);
    key.addr_b[..4].copy_from_slice(&[10, 0, 0, 9]);
    let mut flow = Flow {
        key,
        client_is_a: true,
        pkts: [2, 0],
        bytes: [120, 0],
        ..Flow::default()
    };
    flow.first_ns = 1_700_000_000_000_000_000 + u64::from(id) * 1_000_000;
    flow.last_ns = flow.first_ns + 1_000_000;
    FlowRecord {
        flow,
        ext: Default::default(),
        reason: EndReason::IdleTimeout,
        meta: None,
        exporter: None,
    }
}

fn batches(n: usize, per: usize) -> Vec<Batch> {
    (0..n)
        .map(|b| Arc::new((0..per).map(|i| record((1 + b * per + i) as u16)).collect()))
        .collect()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sonde-sink-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A sink made slow: every batch waits before it is written, so its queue fills.
struct Slow(Box<dyn RecordSink>);

impl RecordSink for Slow {
    fn name(&self) -> String {
        self.0.name()
    }
    fn write(&mut self, batch: &[FlowRecord]) -> io::Result<()> {
        std::thread::sleep(Duration::from_millis(15));
        self.0.write(batch)
    }
    fn idle(&mut self) -> io::Result<()> {
        self.0.idle()
    }
    fn finish(&mut self) -> io::Result<sinks::SinkReport> {
        self.0.finish()
    }
}

/// A destination: builds its sink, and after the sink finished reads back the record ids it
/// got, in order.
trait Destination {
    fn sink(&mut self) -> Box<dyn RecordSink>;
    fn read_back(&mut self) -> Vec<u16>;
}

struct FlowsFile(PathBuf);

impl Destination for FlowsFile {
    fn sink(&mut self) -> Box<dyn RecordSink> {
        let f = std::fs::File::create(&self.0).unwrap();
        Box::new(FileSink::new(
            "flows file".into(),
            io::BufWriter::new(f),
            sonde_export::Format::Json,
        ))
    }
    fn read_back(&mut self) -> Vec<u16> {
        std::fs::read_to_string(&self.0)
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["L4_SRC_PORT"].as_u64().unwrap() as u16
            })
            .collect()
    }
}

struct History(PathBuf);

impl Destination for History {
    fn sink(&mut self) -> Box<dyn RecordSink> {
        Box::new(HistorySink::open(&self.0, Default::default()).unwrap())
    }
    fn read_back(&mut self) -> Vec<u16> {
        let reader = sonde_history::store::FlowReader::open(&self.0).unwrap();
        let mut ids = Vec::new();
        reader
            .scan(&Default::default(), |s, _| {
                ids.push(s.key.port_a);
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
        ids
    }
}

/// A UDP or TCP collector on 127.0.0.1 decoding with sonde's own collector.
struct Collector {
    scheme: &'static str,
    addr: std::net::SocketAddr,
    thread: Option<JoinHandle<Vec<u16>>>,
}

impl Collector {
    fn start(scheme: &'static str) -> Collector {
        let (addr, thread) = if scheme == "ipfix+tcp" {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let t = std::thread::spawn(move || {
                let (mut s, peer) = l.accept().unwrap();
                let mut stream = sonde_flowproto::decode::IpfixStream::default();
                let mut all = Vec::new();
                let mut buf = vec![0u8; 65536];
                let mut dec = sonde_flowproto::decode::Collector::new(Default::default());
                loop {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    stream.push(&buf[..n]).unwrap();
                    while let Some(m) = stream.next_message().unwrap() {
                        let mut flows = Vec::new();
                        dec.decode(peer, m, 0, &mut flows, &mut Vec::new()).unwrap();
                        all.extend(flows.iter().map(|f| f.sport));
                    }
                }
                all
            });
            (addr, t)
        } else {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            let addr = s.local_addr().unwrap();
            // The first datagram may be a while coming on a loaded machine; after it, the
            // sender is done once it has been quiet for a while (after its finish).
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let t = std::thread::spawn(move || {
                let mut dec = sonde_flowproto::decode::Collector::new(Default::default());
                let mut all = Vec::new();
                let mut buf = vec![0u8; 65536];
                while let Ok((n, peer)) = s.recv_from(&mut buf) {
                    s.set_read_timeout(Some(Duration::from_millis(700)))
                        .unwrap();
                    let mut flows = Vec::new();
                    dec.decode(peer, &buf[..n], 0, &mut flows, &mut Vec::new())
                        .unwrap();
                    all.extend(flows.iter().map(|f| f.sport));
                }
                all
            });
            (addr, t)
        };
        Collector {
            scheme,
            addr,
            thread: Some(thread),
        }
    }
}

impl Destination for Collector {
    fn sink(&mut self) -> Box<dyn RecordSink> {
        let target = ExportTarget::parse(&format!("{}://{}", self.scheme, self.addr)).unwrap();
        Box::new(FlowExportSink::open(target).unwrap())
    }
    fn read_back(&mut self) -> Vec<u16> {
        self.thread.take().unwrap().join().unwrap()
    }
}

struct Zmq {
    endpoint: String,
    _ctx: zmq::Context,
    pull: zmq::Socket,
}

impl Zmq {
    fn start() -> Zmq {
        let ctx = zmq::Context::new();
        let pull = ctx.socket(zmq::PULL).unwrap();
        pull.bind("tcp://127.0.0.1:*").unwrap();
        let endpoint = pull.get_last_endpoint().unwrap().unwrap();
        pull.set_rcvtimeo(700).unwrap();
        Zmq {
            endpoint,
            _ctx: ctx,
            pull,
        }
    }
}

impl Destination for Zmq {
    fn sink(&mut self) -> Box<dyn RecordSink> {
        Box::new(ZmqSink::connect(&self.endpoint).unwrap())
    }
    fn read_back(&mut self) -> Vec<u16> {
        let mut ids = Vec::new();
        while let Ok(msg) = self.pull.recv_bytes(0) {
            let v: serde_json::Value = serde_json::from_slice(&msg).unwrap();
            for f in v.as_array().unwrap() {
                ids.push(f["L4_SRC_PORT"].as_u64().unwrap() as u16);
            }
        }
        ids
    }
}

/// A Kafka broker for the whole test binary (scripts/kafka-server.sh; it stops when this
/// process ends). Its topics have one partition, so the order of all records is the order of
/// the partition; that a flow's records share a partition is shown in tests/system.
fn kafka_bootstrap() -> &'static str {
    static BROKER: OnceLock<String> = OnceLock::new();
    BROKER.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = std::process::Command::new(root.join("scripts/kafka-server.sh"))
            .arg(scratch("kafka"))
            .arg("1")
            .env("KAFKA_PARENT_PID", std::process::id().to_string())
            .output()
            .expect(
                "scripts/kafka-server.sh runs (needs java and mvn: scripts/setup-test-deps.sh)",
            );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "kafka-server.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.split_whitespace()
            .find_map(|w| w.strip_prefix("BOOTSTRAP="))
            .expect("BOOTSTRAP= line")
            .to_string()
    })
}

struct Kafka {
    topic: String,
}

impl Destination for Kafka {
    fn sink(&mut self) -> Box<dyn RecordSink> {
        let url = format!("kafka://{}/{}", kafka_bootstrap(), self.topic);
        Box::new(KafkaSink::connect(KafkaTarget::parse(&url).unwrap()).unwrap())
    }
    fn read_back(&mut self) -> Vec<u16> {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        use rdkafka::{Message, Offset, TopicPartitionList};
        let c: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", kafka_bootstrap())
            .set("group.id", format!("compliance-{}", self.topic))
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, Offset::Beginning)
            .unwrap();
        c.assign(&tpl).unwrap();
        let mut ids = Vec::new();
        while let Some(m) = c.poll(Duration::from_secs(3)) {
            let m = m.unwrap();
            let v: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
            ids.push(v["L4_SRC_PORT"].as_u64().unwrap() as u16);
        }
        ids
    }
}

/// A ClickHouse server for the whole test binary (scripts/clickhouse-server.sh; it stops when
/// this process ends): its HTTP address.
fn clickhouse_http() -> &'static str {
    static SERVER: OnceLock<String> = OnceLock::new();
    SERVER.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = std::process::Command::new(root.join("scripts/clickhouse-server.sh"))
            .arg(scratch("clickhouse"))
            .env("CLICKHOUSE_PARENT_PID", std::process::id().to_string())
            .output()
            .expect("scripts/clickhouse-server.sh runs (needs clickhouse-server)");
        assert!(
            out.status.success(),
            "clickhouse-server.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .find_map(|w| w.strip_prefix("HTTP="))
            .expect("HTTP= line")
            .to_string()
    })
}

struct ClickHouse {
    db: String,
}

impl Destination for ClickHouse {
    fn sink(&mut self) -> Box<dyn RecordSink> {
        let url = format!("clickhouse://{}/{}", clickhouse_http(), self.db);
        Box::new(ClickHouseSink::connect(ClickHouseTarget::parse(&url).unwrap()).unwrap())
    }
    /// A table has no order of its own: rows come back in the order of their time (the test
    /// records' times increase with their ids).
    fn read_back(&mut self) -> Vec<u16> {
        let query = format!("SELECT src_port FROM {}.flows ORDER BY first_ms", self.db);
        let mut resp = ureq::post(&format!("http://{}/", clickhouse_http()))
            .send(query.as_bytes())
            .unwrap();
        let text = resp.body_mut().read_to_string().unwrap();
        text.lines().map(|l| l.trim().parse().unwrap()).collect()
    }
}

/// A Cassandra node for the whole test binary (scripts/cassandra-server.sh; it stops when this
/// process ends): its CQL address.
fn cassandra_cql() -> &'static str {
    static SERVER: OnceLock<String> = OnceLock::new();
    SERVER.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = std::process::Command::new(root.join("scripts/cassandra-server.sh"))
            .arg(scratch("cassandra"))
            .env("CASSANDRA_PARENT_PID", std::process::id().to_string())
            .output()
            .expect(
                "scripts/cassandra-server.sh runs (needs java and mvn: scripts/setup-test-deps.sh)",
            );
        assert!(
            out.status.success(),
            "cassandra-server.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .find_map(|w| w.strip_prefix("CQL="))
            .expect("CQL= line")
            .to_string()
    })
}

struct Cassandra {
    keyspace: String,
}

impl Destination for Cassandra {
    fn sink(&mut self) -> Box<dyn RecordSink> {
        let url = format!("cassandra://{}/{}", cassandra_cql(), self.keyspace);
        Box::new(CassandraSink::connect(CassandraTarget::parse(&url).unwrap()).unwrap())
    }
    /// Rows come back by partition: sorted by their start time (the test records' times
    /// increase with their ids).
    fn read_back(&mut self) -> Vec<u16> {
        use scylla::value::CqlTimestamp;
        let rt = tokio::runtime::Runtime::new().unwrap();
        let mut rows: Vec<(i64, i32)> = rt.block_on(async {
            let session = scylla::client::session_builder::SessionBuilder::new()
                .known_node(cassandra_cql())
                .build()
                .await
                .unwrap();
            let result = session
                .query_unpaged(
                    format!("SELECT time_start, src_port FROM {}.flows", self.keyspace),
                    (),
                )
                .await
                .unwrap()
                .into_rows_result()
                .unwrap();
            let out: Vec<(i64, i32)> = result
                .rows::<(CqlTimestamp, i32)>()
                .unwrap()
                .map(|r| r.map(|(t, p)| (t.0, p)).unwrap())
                .collect();
            out
        });
        rows.sort();
        rows.into_iter().map(|(_, p)| p as u16).collect()
    }
}

/// Every registered kind, with a destination made for the run.
fn destination(kind: &str, run: &str) -> Box<dyn Destination> {
    match kind {
        "flows-file" => Box::new(FlowsFile(scratch(run).join("flows.jsonl"))),
        "history" => Box::new(History(scratch(run))),
        "netflow5" | "netflow9" | "ipfix" | "ipfix+tcp" => {
            Box::new(Collector::start(sinks::kind(kind).unwrap().name))
        }
        "zmq" => Box::new(Zmq::start()),
        "clickhouse" => Box::new(ClickHouse {
            db: format!("compliance_{}", run.replace(['-', '+'], "_")),
        }),
        "cassandra" => Box::new(Cassandra {
            keyspace: format!("compliance_{}", run.replace(['-', '+'], "_")),
        }),
        "kafka" => Box::new(Kafka {
            topic: format!("compliance-{}", run.replace('+', "-")),
        }),
        other => panic!("sink kind '{other}' has no destination in the compliance test: add one"),
    }
}

fn run(sink: Box<dyn RecordSink>, q: QueueOptions, b: &[Batch]) -> SinkReport {
    use std::sync::atomic::Ordering::Relaxed;
    let mut queued = QueuedSink::start(sink, q).unwrap();
    let live = queued.live();
    for batch in b {
        queued.offer(batch);
    }
    let report = queued.finish().unwrap();
    // The counters `/metrics` shows while the sink runs end equal to its report.
    assert_eq!(live.name, report.name);
    assert_eq!(
        live.offered.load(Relaxed),
        report.offered,
        "{}",
        report.name
    );
    assert_eq!(
        live.queue_dropped.load(Relaxed),
        report.queue_dropped,
        "{}",
        report.name
    );
    assert_eq!(
        live.written.load(Relaxed),
        report.records,
        "{}",
        report.name
    );
    assert_eq!(
        live.dropped.load(Relaxed),
        report.dropped,
        "{}",
        report.name
    );
    assert!(!live.failed.load(Relaxed));
    report
}

fn check(kind: &str, report: &SinkReport, got: &[u16], offered: u64) {
    assert_eq!(report.offered, offered, "{kind}: offered");
    assert_eq!(
        report.records + report.queue_dropped,
        report.offered,
        "{kind}: taken + dropped at the queue = offered"
    );
    assert_eq!(report.dropped, 0, "{kind}: the destination took everything");
    assert_eq!(
        got.len() as u64,
        report.records,
        "{kind}: read back = taken"
    );
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "{kind}: order kept (ids read back strictly increase)"
    );
}

#[test]
fn every_sink_keeps_order_flushes_and_counts() {
    let input = batches(10, 100);
    for k in sinks::SINKS {
        let mut dest = destination(k.name, &format!("plain-{}", k.name));
        let sink = dest.sink();
        let report = run(sink, k.queue(QueueRequest::default(), true), &input);
        let got = dest.read_back();
        check(k.name, &report, &got, 1000);
        // Nothing is slow here: even a dropping queue keeps up with 10 batches.
        assert_eq!(got.len(), 1000, "{}: every record delivered", k.name);
        assert_eq!(report.when_full, k.when_full);
    }
}

#[test]
fn a_full_queue_blocks_or_drops_as_declared() {
    let input = batches(30, 20);
    for k in sinks::SINKS {
        for when_full in [WhenFull::Block, WhenFull::DropNewest] {
            let run_name = format!("full-{}-{}", k.name, when_full.name());
            let mut dest = destination(k.name, &run_name);
            let sink = Box::new(Slow(dest.sink()));
            let q = QueueOptions {
                when_full,
                batches: 2,
            };
            let report = run(sink, q, &input);
            let got = dest.read_back();
            check(&run_name, &report, &got, 600);
            match when_full {
                WhenFull::Block => {
                    assert_eq!(report.queue_dropped, 0, "{run_name}");
                    assert_eq!(got.len(), 600, "{run_name}");
                }
                WhenFull::DropNewest => {
                    // 30 batches offered at once to a queue of 2 in front of a sink taking
                    // 15 ms a batch: most are dropped, whole.
                    assert!(report.queue_dropped >= 300, "{run_name}: {report:?}");
                    assert_eq!(report.queue_dropped % 20, 0, "{run_name}: whole batches");
                }
            }
        }
    }
}
