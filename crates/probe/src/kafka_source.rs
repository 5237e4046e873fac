//! `--collect kafka://BROKERS/TOPIC?group=G`: flows other sondes (or any producer of the same
//! JSON or protobuf records) put on a Kafka topic, read by a consumer group, so one central
//! sonde (or several sharing the group) sees what many probes export.
//!
//! Offsets are committed by hand, only for records already handed to the flow tables (once a
//! second and at the end): a sonde that crashes or is killed reads again what it had consumed
//! since its last commit, rather than skipping it. Flows still held in memory at a crash are
//! lost as with any input.

use crate::collect::{CollectorCounters, Dispatcher, ExporterReport};
use crate::kafka_sink::KafkaFormat;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::Message;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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

/// Consumes until `stop`, committing what was handed to the shards.
pub(crate) fn run_kafka(
    consumer: BaseConsumer,
    format: KafkaFormat,
    commit_every: Duration,
    mut out: Dispatcher,
    stop: Arc<AtomicBool>,
    counters: Arc<CollectorCounters>,
) -> ExporterReport {
    let mut uncommitted = false;
    let mut last_commit = Instant::now();
    let commit = |out: &mut Dispatcher, mode: CommitMode| {
        // Handed over first: the offsets committed are those of records the shards have.
        out.flush();
        let _ = consumer.commit_consumer_state(mode);
    };
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
                    KafkaFormat::Protobuf => match sonde_export::proto::decode(payload) {
                        Ok(f) => (vec![f], 0),
                        Err(_) => (Vec::new(), 1),
                    },
                };
                counters
                    .records
                    .fetch_add(flows.len() as u64, Ordering::Relaxed);
                counters.errors.fetch_add(errors as u64, Ordering::Relaxed);
                for f in flows {
                    out.flow(f);
                }
                uncommitted = true;
            }
            Some(Err(_)) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
            }
            None => out.flush(),
        }
        if uncommitted && last_commit.elapsed() >= commit_every {
            commit(&mut out, CommitMode::Async);
            uncommitted = false;
            last_commit = Instant::now();
        }
    }
    if uncommitted {
        commit(&mut out, CommitMode::Sync);
    }
    out.flush();
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
