//! `--export URL`: which sink a URL names, its own options and its queue options, parsed
//! without opening anything (the config file's check and the flag share it); [`ExportSpec::plan`]
//! turns it into the sink the probe builds at start.

use crate::cassandra_sink::{CassandraSink, CassandraTarget, CASSANDRA_OPTIONS};
use crate::clickhouse_sink::{ClickHouseSink, ClickHouseTarget, CLICKHOUSE_OPTIONS};
use crate::config::SinkPlan;
use crate::flow_export::{ExportTarget, FlowExportSink};
use crate::kafka_sink::{KafkaSink, KafkaTarget, KAFKA_OPTIONS};
use crate::sinks::{self, QueueRequest, RecordSink};
use std::sync::Arc;

#[derive(Clone, Debug)]
enum Target {
    /// NetFlow v5/v9 or IPFIX to a collector.
    Flow(ExportTarget),
    Kafka(KafkaTarget),
    ClickHouse(ClickHouseTarget),
    Cassandra(CassandraTarget),
}

/// A parsed `--export` URL.
#[derive(Clone, Debug)]
pub struct ExportSpec {
    target: Target,
    queue: QueueRequest,
    geo: Option<Arc<sonde_geo::GeoDb>>,
}

impl ExportSpec {
    /// Parses `netflow5|netflow9|ipfix|ipfix+tcp://HOST:PORT`,
    /// `kafka://BROKERS/TOPIC[?format=…]`, `clickhouse://HOST:PORT/DB[?retention_days=N]` or
    /// `cassandra://HOST:PORT[,…]/KEYSPACE[?replication=N&bucket=S&shards=N]`, with `when_full`/`queue` options. Errors name the
    /// flag and say what is wrong.
    pub fn parse(text: &str) -> Result<ExportSpec, String> {
        if text.starts_with("kafka://") {
            let (url, queue) = QueueRequest::split_allowing(text, KAFKA_OPTIONS)
                .map_err(|e| format!("--export {e}"))?;
            let t = KafkaTarget::parse(&url).map_err(|e| format!("--export {e}"))?;
            return Ok(ExportSpec {
                target: Target::Kafka(t),
                queue,
                geo: None,
            });
        }
        if text.starts_with("clickhouse://") {
            let (url, queue) = QueueRequest::split_allowing(text, CLICKHOUSE_OPTIONS)
                .map_err(|e| format!("--export {e}"))?;
            return Ok(ExportSpec {
                target: Target::ClickHouse(ClickHouseTarget::parse(&url)?),
                queue,
                geo: None,
            });
        }
        if text.starts_with("cassandra://") {
            let (url, queue) = QueueRequest::split_allowing(text, CASSANDRA_OPTIONS)
                .map_err(|e| format!("--export {e}"))?;
            return Ok(ExportSpec {
                target: Target::Cassandra(CassandraTarget::parse(&url)?),
                queue,
                geo: None,
            });
        }
        let (url, queue) = QueueRequest::split(text).map_err(|e| format!("--export {e}"))?;
        Ok(ExportSpec {
            target: Target::Flow(ExportTarget::parse(&url)?),
            queue,
            geo: None,
        })
    }

    /// Its kind's name in [`sinks::SINKS`].
    pub fn kind(&self) -> &'static str {
        match &self.target {
            Target::Flow(t) => t.kind(),
            Target::Kafka(_) => "kafka",
            Target::ClickHouse(_) => "clickhouse",
            Target::Cassandra(_) => "cassandra",
        }
    }

    /// Records carry the places of `geo` (`--geoip-dir`): AS numbers in NetFlow/IPFIX (where no
    /// exporter gave them), AS numbers and countries in Kafka, ClickHouse and Cassandra.
    pub fn with_geo(mut self, geo: Option<Arc<sonde_geo::GeoDb>>) -> ExportSpec {
        self.geo = geo;
        self
    }

    /// The sink to build at start, with its queue (`live`: the kind's default when full).
    pub fn plan(self, live: bool) -> SinkPlan {
        let kind = self.kind();
        let queue = sinks::registered(kind).queue(self.queue, live);
        let geo = self.geo;
        let make: crate::config::SinkFactory = match self.target {
            Target::Flow(t) => Arc::new(move || {
                FlowExportSink::open(t.clone())
                    .map(|s| Box::new(s.with_geo(geo.clone())) as Box<dyn RecordSink>)
            }),
            Target::Kafka(t) => Arc::new(move || {
                KafkaSink::connect(t.clone())
                    .map(|s| Box::new(s.with_geo(geo.clone())) as Box<dyn RecordSink>)
            }),
            Target::ClickHouse(t) => Arc::new(move || {
                ClickHouseSink::connect(t.clone())
                    .map(|s| Box::new(s.with_geo(geo.clone())) as Box<dyn RecordSink>)
            }),
            Target::Cassandra(t) => Arc::new(move || {
                CassandraSink::connect(t.clone())
                    .map(|s| Box::new(s.with_geo(geo.clone())) as Box<dyn RecordSink>)
            }),
        };
        SinkPlan { kind, queue, make }
    }
}
