//! Runs a probe: one source feeding one [`sonde_flow::Engine`] per shard, a sink thread writing
//! expired flows, and live statistics and snapshots for readers.
//!
//! Why this crate exists: the threading and hand-off rules live in one place. Shards share
//! nothing on the packet path; what crosses threads goes in batches (decoded packets from a file
//! reader, expired flow records to the sink) or as periodic copies (stats every few thousand
//! packets, snapshots on request between batches), so readers never stop packet processing.

pub mod alerts;
mod analytics_sink;
mod cassandra_sink;
mod clickhouse_history;
mod clickhouse_sink;
mod collect;
mod config;
mod cpus;
mod export_url;
mod flow_export;
mod history_sink;
mod host_cache;
mod kafka_sink;
mod kafka_source;
mod report;
mod run;
mod scripts_run;
mod series_sink;
mod shard;
pub mod sink_queue;
pub mod sinks;
mod source;
pub mod zmq_curve;
mod zmq_sink;

pub use alerts::{AlertHub, AlertSettings, CheckSettings};
pub use analytics_sink::{app_namer, AnalyticsReport, AnalyticsSettings, AnalyticsView};
pub use cassandra_sink::{
    keyspace_statements as cassandra_keyspace_statements, statements as cassandra_statements,
    CassandraSink, CassandraTarget, CASSANDRA_OPTIONS,
};
pub use clickhouse_history::{ClickHouseHistory, Origin, SeriesOf, StoredPlace};
pub use clickhouse_sink::{
    kafka_statements as clickhouse_kafka_statements, statements as clickhouse_statements,
    ClickHouseSink, ClickHouseTarget,
};
pub use collect::CollectSource;
pub use config::{Input, InputKind, ProbeConfig, Replay, SinkFactory, SinkPlan, INPUTS};
pub use export_url::ExportSpec;
pub use flow_export::{ExportTarget, FlowExportSink};
pub use history_sink::HistorySink;
pub use host_cache::HostCacheReport;
pub use kafka_sink::{KafkaFormat, KafkaSink, KafkaTarget, KAFKA_OPTIONS};
pub use kafka_source::KafkaSource;
pub use report::{filter_sets_json, format_count, stats_line, summary_json};
pub use run::{start, InputReport, Probe, ProbeError, ProbeView, Summary};
pub use series_sink::SeriesReport;
pub use zmq_sink::ZmqSink;
