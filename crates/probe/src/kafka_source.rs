//! `--collect kafka://BROKERS/TOPIC?group=G`: flows other sondes (or any producer of the same
//! JSON or protobuf records) put on a Kafka topic, read by a consumer group, so one central
//! sonde (or several sharing the group) sees what many probes export.
//!
//! Each record is a flow another sonde ended: it goes through the flow and host tables (the
//! live views count it) and out to the sinks at once, not merged with later records. Offsets
//! are committed by hand, only for records the sinks have stored (checked about once a
//! second, and at the end after the sinks have finished): a sonde that crashes or is killed
//! reads again what it had consumed since its last commit, rather than losing it. What it had
//! stored since then is stored again: duplicates, byte for byte the same rows, which
//! ClickHouse removes with `OPTIMIZE TABLE DB.flows FINAL DEDUPLICATE`.

use crate::collect::{CollectorCounters, Dispatcher, ExporterReport, Settlement};
use crate::kafka_sink::KafkaFormat;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A parsed `kafka://BROKER[,BROKER…]/TOPIC[?group=G&format=json|protobuf]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaSource {
    pub brokers: String,
    pub topic: String,
    /// The consumer group (default `sonde`): consumers of one group share the partitions.
    pub group: String,
    pub format: KafkaFormat,
    /// How often the offsets of handed-over records are committed (`commit_interval=SECONDS`,
    /// default 1): what a killed consumer reads again is at most this much.
    pub commit_every: Duration,
    pub text: String,
}

impl KafkaSource {
    pub fn parse(s: &str) -> Result<KafkaSource, String> {
        let help = "(use kafka://BROKER:PORT[,…]/TOPIC[?group=NAME&format=json|protobuf])";
        let rest = s
            .strip_prefix("kafka://")
            .ok_or_else(|| format!("--collect '{s}': not a kafka:// URL {help}"))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (brokers, topic) = path
            .split_once('/')
            .ok_or_else(|| format!("--collect '{s}': no topic {help}"))?;
        if brokers.is_empty() || brokers.split(',').any(|b| !b.contains(':')) {
            return Err(format!(
                "--collect '{s}': brokers must be HOST:PORT, comma-separated {help}"
            ));
        }
        if topic.is_empty() {
            return Err(format!("--collect '{s}': no topic {help}"));
        }
        let mut src = KafkaSource {
            brokers: brokers.to_string(),
            topic: topic.to_string(),
            group: "sonde".into(),
            format: KafkaFormat::Json,
            commit_every: Duration::from_secs(1),
            text: s.to_string(),
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=').unwrap_or((pair, "")) {
                ("group", g) if !g.is_empty() => src.group = g.to_string(),
                ("format", "json") => src.format = KafkaFormat::Json,
                ("format", "protobuf") => src.format = KafkaFormat::Protobuf,
                ("format", v) => {
                    return Err(format!("--collect '{s}': format={v}: use json or protobuf"))
                }
                ("commit_interval", v) => {
                    src.commit_every = v
                        .parse::<f64>()
                        .ok()
                        .filter(|x| *x > 0.0 && x.is_finite())
                        .map(Duration::from_secs_f64)
                        .ok_or_else(|| {
                            format!("--collect '{s}': commit_interval={v}: give seconds, e.g. 1")
                        })?
                }
                (k, _) => {
                    return Err(format!(
                        "--collect '{s}': unknown option '{k}' (the options are group=NAME, \
                         format=json|protobuf and commit_interval=SECONDS)"
                    ))
                }
            }
        }
        Ok(src)
    }

    /// Joins the group and checks a broker answers (so a wrong address fails at start).
    pub fn connect(&self) -> Result<BaseConsumer, String> {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            // A consumer that died (killed, its machine gone) gives its partitions up to the
            // group's others after 10 s rather than librdkafka's 45.
            .set("session.timeout.ms", "10000")
            .set("allow.auto.create.topics", "true")
            .create()
            .map_err(|e| format!("--collect {}: {e}", self.text))?;
        c.fetch_metadata(Some(&self.topic), Duration::from_secs(10))
            .map_err(|e| {
                format!(
                    "--collect {}: no broker answered within 10 s ({e}); is Kafka running at {}?",
                    self.text, self.brokers
                )
            })?;
        c.subscribe(&[&self.topic])
            .map_err(|e| format!("--collect {}: cannot subscribe: {e}", self.text))?;
        Ok(c)
    }
}

/// Offsets to commit once the records read before them are stored.
struct Checkpoint {
    offsets: TopicPartitionList,
    /// Records handed to each shard when the offsets were taken.
    handed: Vec<u64>,
    /// Records passed to the sinks once the shards were done with `handed`.
    sent: Option<u64>,
}

/// Checkpoints waiting for the sinks, at most (beyond, the next waits: an outage delays the
/// commits, it does not grow memory).
const MAX_CHECKPOINTS: usize = 64;

/// What a stopped Kafka source leaves to commit once the sinks have finished: the run's end
/// commits the offsets of everything read only after every sink wrote what it held.
pub(crate) struct FinalCommit {
    consumer: BaseConsumer,
    offsets: TopicPartitionList,
}

impl FinalCommit {
    pub fn commit(self) {
        if self.offsets.count() > 0 {
            let _ = self.consumer.commit(&self.offsets, CommitMode::Sync);
        }
    }
}

/// The consumer's positions (the next offset of each partition it reads), those it has.
fn positions(consumer: &BaseConsumer) -> TopicPartitionList {
    let mut out = TopicPartitionList::new();
    if let Ok(p) = consumer.position() {
        for e in p.elements() {
            if let Offset::Offset(n) = e.offset() {
                let _ = out.add_partition_offset(e.topic(), e.partition(), Offset::Offset(n));
            }
        }
    }
    out
}

/// Consumes until `stop`. Every `commit_every` it notes the consumer's positions; it commits
/// them once the records read before are stored: the shards have passed them on (they leave
/// the flow table at once, `ended`) and every sink has them at its destination (or dropped
/// and counted). A crash replays what was read since the last such commit; nothing read is
/// committed unstored.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_kafka(
    consumer: BaseConsumer,
    format: KafkaFormat,
    commit_every: Duration,
    mut out: Dispatcher,
    stop: Arc<AtomicBool>,
    counters: Arc<CollectorCounters>,
    settlement: Arc<Settlement>,
    finals: Arc<Mutex<Vec<FinalCommit>>>,
) -> ExporterReport {
    let mut uncommitted = false;
    let mut last_checkpoint = Instant::now();
    let mut waiting: VecDeque<Checkpoint> = VecDeque::new();
    while !stop.load(Ordering::Relaxed) {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                counters.messages.fetch_add(1, Ordering::Relaxed);
                let payload = m.payload().unwrap_or(&[]);
                let (flows, errors) = match format {
                    KafkaFormat::Json => {
                        let (f, e) = sonde_export::ingest::flows_from_message(payload);
                        (f, e.len())
                    }
                    KafkaFormat::Protobuf => sonde_export::proto::decode_message(payload),
                };
                counters
                    .records
                    .fetch_add(flows.len() as u64, Ordering::Relaxed);
                counters.errors.fetch_add(errors as u64, Ordering::Relaxed);
                let arrival = crate::collect::now_ms();
                for mut f in flows {
                    if !counters.admit(&mut f, arrival) {
                        continue;
                    }
                    // A sonde's ended flow: passed on as it is, at once.
                    f.ended = true;
                    out.flow(f);
                }
                uncommitted = true;
            }
            Some(Err(_)) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
            }
            None => out.flush(),
        }
        if uncommitted
            && last_checkpoint.elapsed() >= commit_every
            && waiting.len() < MAX_CHECKPOINTS
        {
            out.flush();
            waiting.push_back(Checkpoint {
                offsets: positions(&consumer),
                handed: settlement.handed_now(),
                sent: None,
            });
            uncommitted = false;
            last_checkpoint = Instant::now();
        }
        // The newest checkpoint whose records are stored, committed.
        let mut ready = None;
        while let Some(c) = waiting.front_mut() {
            if c.sent.is_none() && settlement.shards_done(&c.handed) {
                c.sent = Some(settlement.sent_now());
            }
            match c.sent {
                Some(sent) if settlement.sinks_done(sent) => ready = waiting.pop_front(),
                _ => break,
            }
        }
        if let Some(c) = ready {
            if c.offsets.count() > 0 {
                let _ = consumer.commit(&c.offsets, CommitMode::Async);
            }
        }
    }
    out.flush();
    let offsets = positions(&consumer);
    finals
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(FinalCommit { consumer, offsets });
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_what_is_wrong() {
        let s = KafkaSource::parse("kafka://a:9092,b:9092/flows?group=central&format=protobuf")
            .unwrap();
        assert_eq!(
            (s.brokers.as_str(), s.topic.as_str()),
            ("a:9092,b:9092", "flows")
        );
        assert_eq!(
            (s.group.as_str(), s.format),
            ("central", KafkaFormat::Protobuf)
        );
        assert_eq!(
            KafkaSource::parse("kafka://a:9092/f").unwrap().group,
            "sonde"
        );
        for (bad, says) in [
            ("kafka://a:9092", "no topic"),
            ("kafka://a/flows", "HOST:PORT"),
            ("kafka://a:9092/f?format=xml", "json or protobuf"),
            ("kafka://a:9092/f?offset=0", "unknown option 'offset'"),
        ] {
            let e = KafkaSource::parse(bad).unwrap_err();
            assert!(e.starts_with("--collect") && e.contains(says), "{bad}: {e}");
        }
    }
}
