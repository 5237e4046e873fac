//! `--export kafka://BROKERS/TOPIC`: expired flows produced to a Kafka topic, one flow per
//! message (Cento's and Akvorado's transport between probes and stores). The message is the
//! flow as JSON with nProbe keys (`format=json`, the default: what ntopng and most tools read)
//! or as the `sonde.flow.v1.Flow` protobuf (`format=protobuf`, crates/export/proto). Its key is
//! the flow's canonical key, so every record of a flow lands in the same partition, in order.
//!
//! librdkafka batches, compresses and retries; its local queue is bounded
//! (`queue.buffering.max.messages`) and the sink waits while it is full, so the sink's own
//! queue ([`crate::sink_queue`], `drop_newest` by default on live inputs) is where a slow
//! cluster costs records, counted. librdkafka reports only failed deliveries (after its
//! retries, `message.timeout.ms`): a report per message cost as much as the rest of the
//! sink's work. Delivered is what was produced, less the failed and what is still in flight.

use crate::sinks::{RecordSink, SinkReport};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use sonde_export::{FlowWriter, Format};
use sonde_flow::{FlowKey, FlowRecord};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the sink waits for a broker's answer at start, and for the last deliveries at the
/// end.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

/// The message format (`?format=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KafkaFormat {
    Json,
    Protobuf,
}

/// A parsed `kafka://BROKER[,BROKER…]/TOPIC[?format=json|protobuf&compression=CODEC]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaTarget {
    pub brokers: String,
    pub topic: String,
    pub format: KafkaFormat,
    /// librdkafka's `compression.type`: none, gzip, snappy, lz4 or zstd.
    pub compression: String,
    /// `probe=ADDR`: the address this probe's own flows carry as their exporter
    /// (`EXPORTER_IPV4_ADDRESS`…), so a central sonde and ClickHouse tell the probes apart.
    /// Collected flows keep their exporter's.
    pub probe: Option<std::net::IpAddr>,
    /// `records_per_message=N`: flows per Kafka message (default 1). Above 1, a JSON message
    /// is an array and a protobuf one a `FlowBatch`, filled per partition (a flow's records
    /// still share one) and sent when full or after a second: the transport's per-message
    /// cost is shared.
    pub per_message: usize,
    /// The URL as given, for messages.
    pub text: String,
}

/// The URL options a Kafka sink reads itself (the queue's are `when_full` and `queue`).
pub const KAFKA_OPTIONS: &[&str] = &["format", "compression", "probe", "records_per_message"];

impl KafkaTarget {
    pub fn parse(s: &str) -> Result<KafkaTarget, String> {
        let help = "(use kafka://BROKER:PORT[,BROKER:PORT…]/TOPIC[?format=json|protobuf])";
        let rest = s
            .strip_prefix("kafka://")
            .ok_or_else(|| format!("'{s}': not a kafka:// URL {help}"))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (brokers, topic) = path
            .split_once('/')
            .ok_or_else(|| format!("'{s}': no topic {help}"))?;
        if brokers.is_empty() || brokers.split(',').any(|b| !b.contains(':')) {
            return Err(format!(
                "'{s}': brokers must be HOST:PORT, comma-separated {help}"
            ));
        }
        // Kafka's own rule for topic names.
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if topic.is_empty() || topic.len() > 249 || !topic.chars().all(legal) {
            return Err(format!(
                "'{s}': '{topic}' is not a topic name (1 to 249 of a-z A-Z 0-9 . _ -)"
            ));
        }
        let mut t = KafkaTarget {
            brokers: brokers.to_string(),
            topic: topic.to_string(),
            format: KafkaFormat::Json,
            compression: "lz4".into(),
            probe: None,
            per_message: 1,
            text: s.to_string(),
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=').unwrap_or((pair, "")) {
                ("format", "json") => t.format = KafkaFormat::Json,
                ("format", "protobuf") => t.format = KafkaFormat::Protobuf,
                ("format", v) => {
                    return Err(format!("'{s}': format={v}: use json or protobuf"));
                }
                ("compression", v @ ("none" | "gzip" | "snappy" | "lz4" | "zstd")) => {
                    t.compression = v.to_string()
                }
                ("compression", v) => {
                    return Err(format!(
                        "'{s}': compression={v}: use none, gzip, snappy, lz4 or zstd"
                    ));
                }
                ("records_per_message", v) => {
                    t.per_message = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=10_000).contains(n))
                        .ok_or_else(|| format!("'{s}': records_per_message={v}: give 1 to 10000"))?
                }
                ("probe", v) => {
                    t.probe =
                        Some(v.parse().map_err(|_| {
                            format!("'{s}': probe={v}: give this probe's IP address")
                        })?)
                }
                (k, _) => {
                    return Err(format!(
                        "'{s}': unknown option '{k}' (the options are format, compression, \
                         probe, records_per_message, when_full and queue)"
                    ))
                }
            }
        }
        Ok(t)
    }
}

/// Failed deliveries, counted on librdkafka's callback (called from `poll`/`flush`).
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
}

struct Context(Arc<Deliveries>);

impl ClientContext for Context {}

impl ProducerContext for Context {
    /// The records the message holds.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, records: usize) {
        match result {
            Ok(_) => {}
            Err((e, _)) => {
                self.0.failed.fetch_add(records as u64, Ordering::Relaxed);
                *self.0.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
            }
        }
    }
}

pub struct KafkaSink {
    target: KafkaTarget,
    producer: BaseProducer<Context>,
    deliveries: Arc<Deliveries>,
    /// One message's payload, reused.
    payload: Vec<u8>,
    json: FlowWriter<Vec<u8>>,
    /// `--geoip-dir`: the places of both ends, in the JSON writer and the protobuf fields.
    geo: Option<Arc<sonde_geo::GeoDb>>,
    records: u64,
    /// With several records per message: the topic's partition count, the message being
    /// filled for each partition and its records, and the records in all of them.
    partitions: usize,
    open: Vec<(Vec<u8>, usize)>,
    buffered: u64,
}

/// Produces one message, waiting while librdkafka's queue is full.
fn produce(
    producer: &BaseProducer<Context>,
    topic: &str,
    key: Option<&[u8]>,
    partition: Option<i32>,
    payload: &[u8],
    records: usize,
) -> io::Result<()> {
    loop {
        let mut record = BaseRecord::with_opaque_to(topic, records).payload(payload);
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(p) = partition {
            record = record.partition(p);
        }
        match producer.send(record) {
            Ok(()) => return Ok(()),
            // librdkafka's queue is full: serve delivery reports until there is room.
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                producer.poll(Duration::from_millis(50));
            }
            Err((e, _)) => return Err(io::Error::other(format!("{topic}: {e}"))),
        }
    }
}

/// The message key of a flow: its canonical key (the same for both directions and on every
/// probe), so a flow's records share a partition.
fn flow_key_bytes(k: &FlowKey, out: &mut [u8; 38]) {
    out[..16].copy_from_slice(&k.addr_a);
    out[16..32].copy_from_slice(&k.addr_b);
    out[32..34].copy_from_slice(&k.port_a.to_be_bytes());
    out[34..36].copy_from_slice(&k.port_b.to_be_bytes());
    out[36] = k.proto;
    out[37] = k.ip_version;
}

impl KafkaSink {
    /// Creates the producer and checks that a broker answers for the topic (creating it where
    /// the cluster auto-creates topics), so a wrong address is one error at start.
    pub fn connect(target: KafkaTarget) -> Result<KafkaSink, String> {
        let deliveries = Arc::new(Deliveries::default());
        let producer: BaseProducer<Context> = ClientConfig::new()
            .set("bootstrap.servers", &target.brokers)
            .set("compression.type", &target.compression)
            .set("linger.ms", "20")
            .set("batch.num.messages", "10000")
            .set("queue.buffering.max.messages", "200000")
            // A broker away for up to 5 minutes (a restart, a failover) loses nothing: the
            // records wait, up to the queue's bound.
            .set("message.timeout.ms", "300000")
            .set("enable.idempotence", "true")
            .set("delivery.report.only.error", "true")
            .create_with_context(Context(deliveries.clone()))
            .map_err(|e| format!("--export {}: {e}", target.text))?;
        // The first answer for a topic the cluster auto-creates is "unknown" while it creates
        // it: ask again until it has a leader, or say why not.
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let partitions = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let meta = producer
                .client()
                .fetch_metadata(Some(&target.topic), left.max(Duration::from_millis(500)))
                .map_err(|e| {
                    format!(
                        "--export {}: no broker answered within {} s ({e}); is Kafka running at \
                         {}?",
                        target.text,
                        CONNECT_TIMEOUT.as_secs(),
                        target.brokers
                    )
                })?;
            let topic = meta.topics().iter().find(|t| t.name() == target.topic);
            let error = topic.and_then(|t| t.error()).map(RDKafkaErrorCode::from);
            match error {
                None => break topic.map_or(1, |t| t.partitions().len().max(1)),
                Some(
                    RDKafkaErrorCode::UnknownTopicOrPartition
                    | RDKafkaErrorCode::LeaderNotAvailable,
                ) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
                Some(e) => {
                    return Err(format!(
                        "--export {}: topic '{}': {e:?} (create it, or let the cluster \
                         auto-create topics)",
                        target.text, target.topic
                    ))
                }
            }
        };
        let open = if target.per_message > 1 {
            vec![(Vec::new(), 0); partitions]
        } else {
            Vec::new()
        };
        Ok(KafkaSink {
            target,
            producer,
            deliveries,
            payload: Vec::with_capacity(1024),
            json: FlowWriter::new(Vec::with_capacity(1024), Format::Json),
            geo: None,
            records: 0,
            partitions,
            open,
            buffered: 0,
        })
    }

    /// Records carry the AS numbers and countries of both ends (`--geoip-dir`), in both forms.
    pub fn with_geo(mut self, geo: Option<Arc<sonde_geo::GeoDb>>) -> KafkaSink {
        self.json = std::mem::replace(&mut self.json, FlowWriter::new(Vec::new(), Format::Json))
            .with_geo(geo.clone());
        self.geo = geo;
        self
    }

    /// Sends the message being filled for partition `p`, if it holds any record.
    fn send_open(&mut self, p: usize) -> io::Result<()> {
        let (buf, n) = &mut self.open[p];
        if *n == 0 {
            return Ok(());
        }
        if self.target.format == KafkaFormat::Json {
            buf.push(b']');
        }
        produce(
            &self.producer,
            &self.target.topic,
            None,
            Some(p as i32),
            buf,
            *n,
        )?;
        self.buffered -= *n as u64;
        buf.clear();
        *n = 0;
        Ok(())
    }

    fn encode(&mut self, r: &FlowRecord) -> io::Result<()> {
        self.payload.clear();
        match self.target.format {
            KafkaFormat::Json => {
                self.json.write(r)?;
                let line = self.json.get_mut();
                // One JSON object per message, without the line's newline.
                let end = line.len() - usize::from(line.last() == Some(&b'\n'));
                self.payload.extend_from_slice(&line[..end]);
                line.clear();
                if let (Some(ip), None) = (self.target.probe, r.exporter) {
                    // The object's last key: the probe that measured the flow.
                    if self.payload.last() == Some(&b'}') {
                        self.payload.pop();
                        let key = if ip.is_ipv4() {
                            "EXPORTER_IPV4_ADDRESS"
                        } else {
                            "EXPORTER_IPV6_ADDRESS"
                        };
                        self.payload
                            .extend_from_slice(format!(",\"{key}\":\"{ip}\"}}").as_bytes());
                    }
                }
            }
            KafkaFormat::Protobuf => {
                sonde_export::proto::encode(r, self.geo.as_deref(), &mut self.payload);
                if let (Some(ip), None) = (self.target.probe, r.exporter) {
                    sonde_export::proto::append_exporter(ip, &mut self.payload);
                }
            }
        }
        Ok(())
    }
}

impl RecordSink for KafkaSink {
    fn name(&self) -> String {
        self.target.text.clone()
    }

    fn write(&mut self, batch: &[FlowRecord]) -> io::Result<()> {
        let mut key = [0u8; 38];
        for r in batch {
            self.encode(r)?;
            if self.open.is_empty() {
                flow_key_bytes(&r.flow.key, &mut key);
                produce(
                    &self.producer,
                    &self.target.topic,
                    Some(&key),
                    None,
                    &self.payload,
                    1,
                )?;
            } else {
                // The partition the key would pick for a message of its own, as it were.
                let p = (r.flow.key.hash() % self.partitions as u64) as usize;
                let (buf, n) = &mut self.open[p];
                match self.target.format {
                    KafkaFormat::Json => {
                        buf.push(if *n == 0 { b'[' } else { b',' });
                        buf.extend_from_slice(&self.payload);
                    }
                    KafkaFormat::Protobuf => sonde_export::proto::push_to_batch(&self.payload, buf),
                }
                *n += 1;
                self.buffered += 1;
                if *n >= self.target.per_message {
                    self.send_open(p)?;
                }
            }
            self.records += 1;
        }
        self.producer.poll(Duration::ZERO);
        Ok(())
    }

    fn idle(&mut self) -> io::Result<()> {
        for p in 0..self.open.len() {
            self.send_open(p)?;
        }
        self.producer.poll(Duration::ZERO);
        Ok(())
    }

    fn dropped(&self) -> u64 {
        self.deliveries.failed.load(Ordering::Relaxed)
    }

    fn pending(&self) -> u64 {
        // Being batched, or produced and not acknowledged by the cluster (nor failed) yet: a
        // message in flight counted as full (an overcount at worst).
        let in_flight = self.producer.in_flight_count().max(0) as u64;
        (self.buffered + in_flight * self.target.per_message as u64).min(self.records)
    }

    fn finish(&mut self) -> io::Result<SinkReport> {
        let started = Instant::now();
        for p in 0..self.open.len() {
            self.send_open(p)?;
        }
        let flushed = self.producer.flush(FLUSH_TIMEOUT);
        // What is still queued after the timeout never reached a broker (messages counted as
        // full ones when they hold several records).
        let undelivered = (self.producer.in_flight_count().max(0) as u64
            * self.target.per_message as u64)
            .min(self.records);
        let d = &self.deliveries;
        let failed = d.failed.load(Ordering::Relaxed) + undelivered;
        if let Err(e) = flushed {
            eprintln!(
                "sonde: warning: {}: {undelivered} messages not delivered after {:.0} s ({e})",
                self.target.text,
                started.elapsed().as_secs_f64()
            );
        }
        if let Some(e) = d
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            eprintln!(
                "sonde: warning: {}: {failed} messages failed, the last: {e}",
                self.target.text
            );
        }
        Ok(SinkReport {
            name: self.target.text.clone(),
            records: self.records,
            messages: self.records.saturating_sub(failed),
            dropped: failed,
            ..SinkReport::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_what_is_wrong() {
        let t = KafkaTarget::parse("kafka://127.0.0.1:9092,10.0.0.2:9092/flows?format=protobuf")
            .unwrap();
        assert_eq!(t.brokers, "127.0.0.1:9092,10.0.0.2:9092");
        assert_eq!(
            (t.topic.as_str(), t.format),
            ("flows", KafkaFormat::Protobuf)
        );
        assert_eq!(t.compression, "lz4");
        let d = KafkaTarget::parse("kafka://k:9092/sonde.flows-1").unwrap();
        assert_eq!(d.format, KafkaFormat::Json);
        for (bad, says) in [
            ("kafka://k:9092", "no topic"),
            ("kafka://k/flows", "HOST:PORT"),
            ("kafka://k:9092/fl ows", "topic name"),
            ("kafka://k:9092/flows?format=avro", "json or protobuf"),
            ("kafka://k:9092/flows?records_per_message=0", "1 to 10000"),
            ("kafka://k:9092/flows?probe=eth0", "IP address"),
            ("kafka://k:9092/flows?compression=brotli", "zstd"),
            ("kafka://k:9092/flows?acks=0", "unknown option 'acks'"),
        ] {
            let e = KafkaTarget::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn an_unreachable_broker_is_one_error_at_start() {
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let t = KafkaTarget::parse(&format!("kafka://127.0.0.1:{port}/flows")).unwrap();
        let e = KafkaSink::connect(t).err().expect("no broker");
        assert!(e.contains("no broker answered"), "{e}");
    }
}
