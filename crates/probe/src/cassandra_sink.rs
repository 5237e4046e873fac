//! `--export cassandra://HOST:PORT[,HOST:PORT…]/KEYSPACE`: flow records written straight into
//! Cassandra as they expire, and per-minute traffic statistics kept there instead of RRD files
//! (the design of seed 002: a probe writing to a scalable store needs no central collector, and
//! a statistics write costs the same whatever the number of series, where RRD opens, writes and
//! closes one file per series).
//!
//! The schema ([`statements`], created by the sink with its keyspace, version recorded in
//! `sonde_schema`):
//! - `flows`: a row per flow record, every field of ClickHouse's `flows` table (client and
//!   server orientation, metadata as a `map<text, text>`). Rows live in time-bucketed
//!   partitions, `((bucket, shard), time_start, id)`: a bucket is `?bucket=SECONDS` of flow start
//!   time (an hour by default), split in `?shards=N` partitions (4) so one bucket's writes spread
//!   over the ring; within a partition rows are ordered by start time, and `id` (random per sink,
//!   then counting) keeps two records of the same millisecond apart.
//! - `stats_1m_hosts` (both ends of each flow), `stats_1m_apps`, `stats_1m_ports` (server port and
//!   protocol), `stats_1m_exporters` and `stats_1m_interfaces` (collected flows only: a capture has
//!   no exporter): traffic per minute, one partition per series and day, `((series…, day), minute)`.
//!   They are **counter tables**: a minute's traffic comes in pieces (a flow's record comes when it
//!   expires, from any number of probes writing to the same keyspace), and a counter adds each piece
//!   on the server, where a written aggregate would need one writer that has seen every record of
//!   the minute. The price: a counter update is not idempotent, so it is never retried after a
//!   timeout whose outcome is unknown (the driver's default for non-idempotent statements); the
//!   sink retries only updates the server did not get.
//!
//! Writes are prepared statements sent through the driver's default token-aware policy: flow rows
//! as unlogged batches of rows of one partition only (a batch then goes to the partition's
//! replicas, as one row would), at most [`MAX_IN_FLIGHT`] requests at a time. Statistics are
//! summed per series and minute in the sink for [`STATS_EVERY`] first, then sent as one counter
//! update per series and minute.
//!
//! While the server does not take writes (away, restarting), rows stay buffered and are tried
//! again, 1 s then doubling to 30 s apart; the driver reconnects by itself. Past
//! [`MAX_BUFFERED_ROWS`] the oldest rows are dropped and counted (`dropped()`); at the end what the
//! server still refuses after [`FINISH_TIMEOUT`] is counted as dropped too.

use crate::sinks::{RecordSink, SinkReport};
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::Consistency;
use scylla::value::{Counter, CqlDate, CqlTimestamp, CqlValue};
use sonde_flow::FlowRecord;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Requests in flight at most (batches and counter updates together).
pub const MAX_IN_FLIGHT: usize = 64;
/// Rows of one partition per unlogged batch at most (Cassandra warns past 5 KiB a batch; a row
/// is about 200-400 bytes).
const BATCH_ROWS: usize = 16;
/// Rows buffered before the sink sends them (also sent after a second without records).
const SEND_ROWS: usize = 5_000;
/// Rows kept while the server does not take them unless `?buffer=ROWS` says otherwise: beyond
/// that the oldest are dropped and counted, so an outage costs bounded memory (about 1 KB a row).
pub const MAX_BUFFERED_ROWS: usize = 200_000;
/// Statistics series (series × minute) kept while the server does not take them.
const MAX_BUFFERED_SERIES: usize = 200_000;
/// Statistics are summed in the sink for this long before they are sent (or until
/// [`SEND_SERIES`] series minutes are pending): a host seen in many flows costs one counter
/// update per interval, not one per send of flow rows (ntopng writes its RRDs once a minute).
const STATS_EVERY: Duration = Duration::from_secs(10);
const SEND_SERIES: usize = 50_000;
/// Waits between tries while the server refuses: doubling from the first to the last.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(30);
/// How long the end of a run waits for the server to take what is buffered.
const FINISH_TIMEOUT: Duration = Duration::from_secs(30);
/// One request's limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed `cassandra://HOST:PORT[,HOST:PORT…]/KEYSPACE[?replication=N&bucket=S&shards=N&buffer=ROWS]`:
/// - `replication`: the keyspace's replication factor when sonde creates it (SimpleStrategy, 1);
/// - `bucket`: seconds of flow start time per partition of `flows`, dividing a day (3600);
/// - `shards`: partitions per bucket (4);
/// - `buffer`: rows kept while the server is away, beyond which the oldest are dropped and
///   counted (200000);
/// - `stats`: `on` keeps the per-minute statistics tables, `off` writes flows only (on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CassandraTarget {
    pub nodes: Vec<String>,
    pub keyspace: String,
    /// The keyspace's replication factor (SimpleStrategy), when sonde creates it.
    pub replication: u32,
    /// Seconds of flow start time per partition of `flows`.
    pub bucket_secs: u32,
    /// Partitions per bucket.
    pub shards: u32,
    /// Rows kept while the server does not take them.
    pub buffer_rows: usize,
    /// Whether the per-minute statistics tables are kept (`?stats=off`: flows only).
    pub stats: bool,
    pub text: String,
}

/// The URL options a Cassandra sink reads itself.
pub const CASSANDRA_OPTIONS: &[&str] = &["replication", "bucket", "shards", "buffer", "stats"];

impl CassandraTarget {
    pub fn parse(s: &str) -> Result<CassandraTarget, String> {
        let help = "(use cassandra://HOST:PORT[,HOST:PORT…]/KEYSPACE, the CQL port, usually 9042)";
        let rest = s
            .strip_prefix("cassandra://")
            .ok_or_else(|| format!("--export '{s}': not a cassandra:// URL {help}"))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (hosts, ks) = path.split_once('/').unwrap_or((path, ""));
        let mut nodes = Vec::new();
        for h in hosts.split(',') {
            let port_ok = h
                .rsplit_once(':')
                .is_some_and(|(host, p)| !host.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
            if !port_ok {
                return Err(format!("--export '{s}': '{h}' is not HOST:PORT {help}"));
            }
            nodes.push(h.to_string());
        }
        let ks = if ks.is_empty() { "sonde" } else { ks };
        if ks.len() > 48
            || !ks.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || !ks.starts_with(|c: char| c.is_ascii_alphabetic())
        {
            return Err(format!(
                "--export '{s}': '{ks}' is not a keyspace name (a letter, then letters, digits \
                 and _, 48 at most)"
            ));
        }
        let mut t = CassandraTarget {
            nodes,
            keyspace: ks.to_ascii_lowercase(),
            replication: 1,
            bucket_secs: 3600,
            shards: 4,
            buffer_rows: MAX_BUFFERED_ROWS,
            stats: true,
            text: s.to_string(),
        };
        let number = |k: &str, v: &str, range: std::ops::RangeInclusive<u32>, what: &str| {
            v.parse::<u32>()
                .ok()
                .filter(|n| range.contains(n))
                .ok_or_else(|| {
                    format!(
                        "--export '{s}': {k}={v}: give {what}, {} to {}",
                        range.start(),
                        range.end()
                    )
                })
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=').unwrap_or((pair, "")) {
                ("replication", v) => {
                    t.replication = number("replication", v, 1..=16, "a replication factor")?
                }
                ("bucket", v) => {
                    t.bucket_secs = number("bucket", v, 60..=86_400, "seconds per partition")?;
                    if 86_400 % t.bucket_secs != 0 {
                        return Err(format!(
                            "--export '{s}': bucket={v}: give seconds that divide a day \
                             (60, 300, 600, 3600, 86400…)"
                        ));
                    }
                }
                ("shards", v) => t.shards = number("shards", v, 1..=256, "partitions per bucket")?,
                ("stats", "on") => t.stats = true,
                ("stats", "off") => t.stats = false,
                ("stats", v) => {
                    return Err(format!(
                        "--export '{s}': stats={v}: use on (per-minute statistics, the default) \
                         or off (flows only)"
                    ))
                }
                ("buffer", v) => {
                    t.buffer_rows =
                        number("buffer", v, 1..=10_000_000, "a number of rows")? as usize
                }
                (k, _) => {
                    return Err(format!(
                        "--export '{s}': unknown option '{k}' (the options are replication, \
                         bucket, shards, buffer, stats, when_full and queue)"
                    ))
                }
            }
        }
        Ok(t)
    }
}

/// The flows table's columns after its key (`bucket`, `shard`, `time_start`, `id`), in the order
/// [`flow_row`] binds them.
pub const FLOW_COLUMNS: &[(&str, &str)] = &[
    ("time_end", "timestamp"),
    ("ip_version", "int"),
    ("src_addr", "inet"),
    ("dst_addr", "inet"),
    ("src_port", "int"),
    ("dst_port", "int"),
    ("protocol", "int"),
    ("vlan", "int"),
    ("in_packets", "bigint"),
    ("in_bytes", "bigint"),
    ("out_packets", "bigint"),
    ("out_bytes", "bigint"),
    ("client_tcp_flags", "int"),
    ("server_tcp_flags", "int"),
    ("tos", "int"),
    ("icmp_type", "int"),
    ("end_reason", "text"),
    ("l7_proto", "text"),
    ("l7_proto_name", "text"),
    ("l7_category", "text"),
    ("exporter", "inet"),
    ("in_if", "bigint"),
    ("out_if", "bigint"),
    ("sampling", "bigint"),
    ("meta", "map<text, text>"),
    // Schema version 2: where the ends are (`--geoip-dir`, or an exporter's AS numbers); 0 and
    // '' when not known.
    ("src_as", "bigint"),
    ("dst_as", "bigint"),
    ("src_country", "text"),
    ("dst_country", "text"),
];

/// How many of [`FLOW_COLUMNS`] schema version 1 had (version 2 added the places at the end).
const V1_COLUMNS: usize = 25;

/// A per-minute statistics table: its name, its series key columns and its counters.
pub struct StatsTable {
    pub name: &'static str,
    pub keys: &'static [(&'static str, &'static str)],
    pub counters: &'static [&'static str],
}

const HOST_COUNTERS: &[&str] = &[
    "sent_bytes",
    "rcvd_bytes",
    "sent_packets",
    "rcvd_packets",
    "flows",
];
const COUNTERS: &[&str] = &["bytes", "packets", "flows"];

/// Per minute: hosts (both ends), applications, server ports, exporters and their interfaces.
pub const STATS_TABLES: &[StatsTable] = &[
    StatsTable {
        name: "stats_1m_hosts",
        keys: &[("host", "inet")],
        counters: HOST_COUNTERS,
    },
    StatsTable {
        name: "stats_1m_apps",
        keys: &[("application", "text")],
        counters: COUNTERS,
    },
    StatsTable {
        name: "stats_1m_ports",
        keys: &[("port", "int"), ("protocol", "int")],
        counters: COUNTERS,
    },
    StatsTable {
        name: "stats_1m_exporters",
        keys: &[("exporter", "inet")],
        counters: COUNTERS,
    },
    StatsTable {
        name: "stats_1m_interfaces",
        keys: &[("exporter", "inet"), ("interface", "bigint")],
        counters: COUNTERS,
    },
];
const HOSTS: usize = 0;
const APPS: usize = 1;
const PORTS: usize = 2;
const EXPORTERS: usize = 3;
const INTERFACES: usize = 4;

/// The schema version [`statements`] creates.
pub const SCHEMA_VERSION: i32 = 2;

/// What turns a keyspace of schema version `from` (1 or later) into the current one.
pub fn migrations(ks: &str, from: i32) -> Vec<String> {
    match from {
        1 => FLOW_COLUMNS[V1_COLUMNS..]
            .iter()
            .map(|(n, t)| format!("ALTER TABLE {ks}.flows ADD {n} {t}"))
            .collect(),
        _ => Vec::new(),
    }
}

/// The keyspace (SimpleStrategy, `replication` copies) and its `sonde_schema` table, which
/// [`statements`] follow.
pub fn keyspace_statements(ks: &str, replication: u32) -> Vec<String> {
    vec![
        format!(
            "CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {{'class': \
             'SimpleStrategy', 'replication_factor': {replication}}}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.sonde_schema (version int PRIMARY KEY, \
             applied timestamp)"
        ),
    ]
}

/// Every statement of the current schema after the keyspace and `sonde_schema`, in order; each
/// can run again (IF NOT EXISTS).
pub fn statements(ks: &str) -> Vec<String> {
    let cols: Vec<String> = FLOW_COLUMNS
        .iter()
        .map(|(n, t)| format!("{n} {t}"))
        .collect();
    let mut s = vec![format!(
        "CREATE TABLE IF NOT EXISTS {ks}.flows (bucket timestamp, shard int, time_start \
         timestamp, id bigint, {}, PRIMARY KEY ((bucket, shard), time_start, id)) WITH \
         CLUSTERING ORDER BY (time_start ASC, id ASC)",
        cols.join(", ")
    )];
    for t in STATS_TABLES {
        let keys: Vec<String> = t.keys.iter().map(|(n, ty)| format!("{n} {ty}")).collect();
        let names: Vec<&str> = t.keys.iter().map(|(n, _)| *n).collect();
        let counters: Vec<String> = t.counters.iter().map(|c| format!("{c} counter")).collect();
        s.push(format!(
            "CREATE TABLE IF NOT EXISTS {ks}.{} ({}, day date, minute timestamp, {}, \
             PRIMARY KEY (({}, day), minute))",
            t.name,
            keys.join(", "),
            counters.join(", "),
            names.join(", ")
        ));
    }
    s
}

fn insert_flow(ks: &str) -> String {
    let names: Vec<&str> = FLOW_COLUMNS.iter().map(|(n, _)| *n).collect();
    format!(
        "INSERT INTO {ks}.flows (bucket, shard, time_start, id, {}) VALUES (?, ?, ?, ?, {})",
        names.join(", "),
        vec!["?"; names.len()].join(", ")
    )
}

fn update_stats(ks: &str, t: &StatsTable) -> String {
    let set: Vec<String> = t
        .counters
        .iter()
        .map(|c| format!("{c} = {c} + ?"))
        .collect();
    let mut key: Vec<String> = t.keys.iter().map(|(n, _)| format!("{n} = ?")).collect();
    key.push("day = ?".into());
    key.push("minute = ?".into());
    format!(
        "UPDATE {ks}.{} SET {} WHERE {}",
        t.name,
        set.join(", "),
        key.join(" AND ")
    )
}

/// A flow row ready to send: its partition and its bound values.
struct FlowRow {
    partition: (i64, i32),
    values: Vec<Option<CqlValue>>,
}

/// One value of a series key (what the statistics tables are keyed by).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum KeyValue {
    Inet(IpAddr),
    Text(String),
    Int(i32),
    BigInt(i64),
}

impl KeyValue {
    fn cql(&self) -> CqlValue {
        match self {
            KeyValue::Inet(a) => CqlValue::Inet(*a),
            KeyValue::Text(t) => CqlValue::Text(t.clone()),
            KeyValue::Int(n) => CqlValue::Int(*n),
            KeyValue::BigInt(n) => CqlValue::BigInt(*n),
        }
    }
}

/// A series in a statistics table at one minute.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesMinute {
    table: usize,
    key: Vec<KeyValue>,
    minute_ms: i64,
}

/// Counters of a series minute, in the table's counter order.
type Sums = [i64; 5];

/// The client and server addresses and ports of a flow.
fn ends(r: &FlowRecord) -> (IpAddr, IpAddr, u16, u16) {
    let f = &r.flow;
    let (ca, sa, cp, sp) = if f.client_dir() == 0 {
        (&f.key.addr_a, &f.key.addr_b, f.key.port_a, f.key.port_b)
    } else {
        (&f.key.addr_b, &f.key.addr_a, f.key.port_b, f.key.port_a)
    };
    let ip = |a: &[u8; 16]| -> IpAddr {
        if f.key.ip_version == 4 {
            IpAddr::from([a[0], a[1], a[2], a[3]])
        } else {
            IpAddr::from(*a)
        }
    };
    (ip(ca), ip(sa), cp, sp)
}

fn exporter_ip(r: &FlowRecord) -> Option<IpAddr> {
    r.exporter.map(|(a, _): (SocketAddr, u32)| a.ip())
}

fn ms(ns: u64) -> i64 {
    (ns / 1_000_000).min(i64::MAX as u64) as i64
}

/// The bound values of a record's row of `flows`, after the key, in [`FLOW_COLUMNS`] order; the
/// places of its ends from `geo` (`--geoip-dir`).
fn flow_values(r: &FlowRecord, geo: Option<&sonde_geo::GeoDb>) -> Vec<Option<CqlValue>> {
    let f = &r.flow;
    let (c, s) = (f.client_dir(), 1 - f.client_dir());
    let (ca, sa, cp, sp) = ends(r);
    let places = sonde_export::places(r, geo);
    let big = |n: u64| Some(CqlValue::BigInt(n.min(i64::MAX as u64) as i64));
    let int = |n: u32| Some(CqlValue::Int(n as i32));
    let text = |t: &str| Some(CqlValue::Text(t.to_string()));
    let (l7, l7_name, l7_cat) = if f.dpi_done {
        (f.l7.number(), f.l7.name().to_string(), f.l7.category.name())
    } else {
        (String::new(), String::new(), "")
    };
    let meta: Vec<(CqlValue, CqlValue)> = r
        .meta
        .as_deref()
        .map(|m| {
            sonde_dpi::meta::text_pairs(m)
                .map(|(k, v)| (CqlValue::Text(k.to_string()), CqlValue::Text(v)))
                .collect()
        })
        .unwrap_or_default();
    vec![
        Some(CqlValue::Timestamp(CqlTimestamp(ms(f.last_ns)))),
        int(f.key.ip_version.into()),
        Some(CqlValue::Inet(ca)),
        Some(CqlValue::Inet(sa)),
        int(cp.into()),
        int(sp.into()),
        int(f.key.proto.into()),
        int(f.key.vlan.into()),
        big(f.pkts[c]),
        big(f.bytes[c]),
        big(f.pkts[s]),
        big(f.bytes[s]),
        int(f.tcp_flags[c].into()),
        int(f.tcp_flags[s].into()),
        int(f.tos.into()),
        int(f.icmp_type_code.into()),
        text(r.reason.name()),
        Some(CqlValue::Text(l7)),
        Some(CqlValue::Text(l7_name)),
        text(l7_cat),
        exporter_ip(r).map(CqlValue::Inet),
        big(r.ext.in_if.into()),
        big(r.ext.out_if.into()),
        big(f.sampling.into()),
        Some(CqlValue::Map(meta)),
        big(places.src_as.into()),
        big(places.dst_as.into()),
        text(places.src_country.as_ref().map_or("", |c| c.as_str())),
        text(places.dst_country.as_ref().map_or("", |c| c.as_str())),
    ]
}

/// What a send left undone.
enum Failed {
    Rows(Vec<FlowRow>, String),
    Series(Vec<(SeriesMinute, Sums)>, String),
    /// A counter update whose outcome is unknown (a timeout, a connection lost with the
    /// request sent): not retried, since it may have been applied.
    Uncertain(String),
}

/// Whether a request certainly did not reach a replica (no connection, no node, refused
/// before the write), so that sending it again cannot apply it twice.
fn not_applied(e: &scylla::errors::ExecutionError) -> bool {
    use scylla::errors::{DbError, ExecutionError as E, RequestAttemptError as A};
    match e {
        E::EmptyPlan | E::ConnectionPoolError(_) | E::PrepareError(_) | E::BadQuery(_) => true,
        E::LastAttemptError(A::DbError(db, _)) => matches!(
            db,
            DbError::Unavailable { .. } | DbError::Overloaded | DbError::IsBootstrapping
        ),
        E::LastAttemptError(A::UnableToAllocStreamId) => true,
        _ => false,
    }
}

pub struct CassandraSink {
    target: CassandraTarget,
    rt: tokio::runtime::Runtime,
    session: Arc<Session>,
    insert: Arc<PreparedStatement>,
    updates: Arc<Vec<PreparedStatement>>,
    /// Rows not written yet, oldest first.
    rows: Vec<FlowRow>,
    /// Statistics not written yet.
    series: HashMap<SeriesMinute, Sums>,
    /// This sink's flow ids: a random high part, then counting.
    next_id: i64,
    report: SinkReport,
    /// Statistics updates (series minutes) lost: not written by the end, or past the bound.
    series_dropped: u64,
    /// Statistics updates that failed with an unknown outcome (maybe applied, maybe not).
    series_uncertain: u64,
    last_error: Option<String>,
    retry_at: Option<Instant>,
    backoff: Duration,
    /// When statistics were last sent.
    stats_sent: Instant,
    /// `--geoip-dir`: the countries and AS numbers of both ends.
    geo: Option<Arc<sonde_geo::GeoDb>>,
}

/// A random number (no extra crate: std's hasher is randomly keyed per process).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}

impl CassandraSink {
    /// Connects, creates the keyspace and schema (or checks its version) and prepares the
    /// statements; every failure is one message naming the URL.
    pub fn connect(target: CassandraTarget) -> Result<CassandraSink, String> {
        let fail = |what: &str, e: String| format!("--export {}: {what}: {e}", target.text);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sonde-cassandra")
            .enable_all()
            .build()
            .map_err(|e| fail("cannot start the client's runtime", e.to_string()))?;
        let ks = target.keyspace.clone();
        let (session, insert, updates) = rt.block_on(async {
            let profile = ExecutionProfile::builder()
                .consistency(Consistency::LocalOne)
                .request_timeout(Some(REQUEST_TIMEOUT))
                .build();
            let session = SessionBuilder::new()
                .known_nodes(&target.nodes)
                .connection_timeout(Duration::from_secs(10))
                .default_execution_profile_handle(profile.into_handle())
                .build()
                .await
                .map_err(|e| {
                    fail(
                        "no answer from Cassandra (is it running, on its CQL port?)",
                        e.to_string(),
                    )
                })?;
            let run = |q: String| {
                let session = &session;
                async move { session.query_unpaged(q, ()).await.map(|_| ()) }
            };
            let [keyspace, schema_table] =
                <[String; 2]>::try_from(keyspace_statements(&ks, target.replication))
                    .expect("two statements");
            run(keyspace)
                .await
                .map_err(|e| fail("cannot create the keyspace", e.to_string()))?;
            run(schema_table)
                .await
                .map_err(|e| fail("cannot create sonde_schema", e.to_string()))?;
            let current = session
                .query_unpaged(format!("SELECT version FROM {ks}.sonde_schema"), ())
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.into_rows_result().map_err(|e| e.to_string()))
                .and_then(|rows| {
                    rows.rows::<(i32,)>()
                        .map_err(|e| e.to_string())?
                        .map(|r| r.map(|(v,)| v).map_err(|e| e.to_string()))
                        .collect::<Result<Vec<i32>, String>>()
                })
                .map_err(|e| fail("cannot read sonde_schema", e))?
                .into_iter()
                .max()
                .unwrap_or(0);
            if current > SCHEMA_VERSION {
                return Err(format!(
                    "--export {}: keyspace '{ks}' has schema version {current}, newer than \
                     this sonde's {SCHEMA_VERSION}: use a newer sonde or another keyspace",
                    target.text
                ));
            }
            if current < SCHEMA_VERSION {
                let todo = if current == 0 {
                    statements(&ks)
                } else {
                    migrations(&ks, current)
                };
                for st in todo {
                    run(st).await.map_err(|e| fail("schema", e.to_string()))?;
                }
                run(format!(
                    "INSERT INTO {ks}.sonde_schema (version, applied) VALUES \
                     ({SCHEMA_VERSION}, toTimestamp(now()))"
                ))
                .await
                .map_err(|e| fail("cannot record the schema version", e.to_string()))?;
            }
            let _ = session.await_schema_agreement().await;
            let mut insert = session
                .prepare(insert_flow(&ks))
                .await
                .map_err(|e| fail("cannot prepare the insert", e.to_string()))?;
            // Same key, same row: writing it twice changes nothing, so the driver may retry.
            insert.set_is_idempotent(true);
            let mut updates = Vec::new();
            for t in STATS_TABLES {
                updates.push(
                    session
                        .prepare(update_stats(&ks, t))
                        .await
                        .map_err(|e| fail("cannot prepare a statistics update", e.to_string()))?,
                );
            }
            Ok::<_, String>((session, insert, updates))
        })?;
        Ok(CassandraSink {
            report: SinkReport {
                name: target.text.clone(),
                ..SinkReport::default()
            },
            target,
            rt,
            session: Arc::new(session),
            insert: Arc::new(insert),
            updates: Arc::new(updates),
            rows: Vec::with_capacity(SEND_ROWS),
            series: HashMap::new(),
            next_id: (random_u64() & 0x7f_ffff) as i64 * (1 << 40),
            series_dropped: 0,
            series_uncertain: 0,
            last_error: None,
            retry_at: None,
            backoff: FIRST_RETRY,
            stats_sent: Instant::now(),
            geo: None,
        })
    }

    /// Rows carry the countries and AS numbers of both ends (`--geoip-dir`).
    pub fn with_geo(mut self, geo: Option<Arc<sonde_geo::GeoDb>>) -> CassandraSink {
        self.geo = geo;
        self
    }

    /// A record: its row, and its traffic added to the statistics of its start minute.
    fn add(&mut self, r: &FlowRecord) {
        let f = &r.flow;
        let start = ms(f.first_ns);
        let bucket_ms = i64::from(self.target.bucket_secs) * 1000;
        let bucket = start - start.rem_euclid(bucket_ms);
        let id = self.next_id;
        self.next_id += 1;
        let shard = (id.rem_euclid(i64::from(self.target.shards))) as i32;
        let mut values = Vec::with_capacity(4 + FLOW_COLUMNS.len());
        values.push(Some(CqlValue::Timestamp(CqlTimestamp(bucket))));
        values.push(Some(CqlValue::Int(shard)));
        values.push(Some(CqlValue::Timestamp(CqlTimestamp(start))));
        values.push(Some(CqlValue::BigInt(id)));
        values.extend(flow_values(r, self.geo.as_deref()));
        self.rows.push(FlowRow {
            partition: (bucket, shard),
            values,
        });
        if !self.target.stats {
            return;
        }

        let minute_ms = start - start.rem_euclid(60_000);
        let (c, s) = (f.client_dir(), 1 - f.client_dir());
        let (ca, sa, _, sp) = ends(r);
        let clamp = |n: u64| n.min(i64::MAX as u64) as i64;
        let (cb, sb, cpk, spk) = (
            clamp(f.bytes[c]),
            clamp(f.bytes[s]),
            clamp(f.pkts[c]),
            clamp(f.pkts[s]),
        );
        let mut add = |table: usize, key: Vec<KeyValue>, sums: Sums| {
            let e = self
                .series
                .entry(SeriesMinute {
                    table,
                    key,
                    minute_ms,
                })
                .or_default();
            for (a, b) in e.iter_mut().zip(sums) {
                *a = a.saturating_add(b);
            }
        };
        add(HOSTS, vec![KeyValue::Inet(ca)], [cb, sb, cpk, spk, 1]);
        add(HOSTS, vec![KeyValue::Inet(sa)], [sb, cb, spk, cpk, 1]);
        let total = [cb.saturating_add(sb), cpk.saturating_add(spk), 1, 0, 0];
        let app = if f.dpi_done {
            f.l7.name().to_string()
        } else {
            String::new()
        };
        add(APPS, vec![KeyValue::Text(app)], total);
        add(
            PORTS,
            vec![KeyValue::Int(sp.into()), KeyValue::Int(f.key.proto.into())],
            total,
        );
        if let Some(e) = exporter_ip(r) {
            add(EXPORTERS, vec![KeyValue::Inet(e)], total);
            add(
                INTERFACES,
                vec![KeyValue::Inet(e), KeyValue::BigInt(r.ext.in_if.into())],
                total,
            );
        }
    }

    /// For benchmarks (`crates/probe/examples/cassandra_stats_bench.rs`): one minute of a host's
    /// statistics (sent and received bytes and packets, flows) added as records would add them,
    /// without a flow row.
    #[doc(hidden)]
    pub fn add_host_minute(&mut self, host: IpAddr, minute_ms: i64, sums: [i64; 5]) {
        let e = self
            .series
            .entry(SeriesMinute {
                table: HOSTS,
                key: vec![KeyValue::Inet(host)],
                minute_ms,
            })
            .or_default();
        for (a, b) in e.iter_mut().zip(sums) {
            *a = a.saturating_add(b);
        }
    }

    /// For benchmarks: sends everything buffered now, as the sink does when it is due; whether
    /// the server took it all.
    #[doc(hidden)]
    pub fn flush_now(&mut self) -> bool {
        self.send(true);
        self.rows.is_empty() && self.series.is_empty()
    }

    /// Sends what is buffered, unless the server refused lately and its next try is not due
    /// (`force` tries anyway). What the server does not take stays buffered, within the bounds.
    fn send(&mut self, force: bool) {
        let stats_due =
            force || self.stats_sent.elapsed() >= STATS_EVERY || self.series.len() >= SEND_SERIES;
        if (self.rows.is_empty() && (self.series.is_empty() || !stats_due))
            || (!force && self.retry_at.is_some_and(|t| Instant::now() < t))
        {
            return;
        }
        // Flow rows grouped by partition, in batches of one partition each.
        let mut by_partition: HashMap<(i64, i32), Vec<FlowRow>> = HashMap::new();
        for row in self.rows.drain(..) {
            by_partition.entry(row.partition).or_default().push(row);
        }
        let series: Vec<(SeriesMinute, Sums)> = if stats_due {
            self.stats_sent = Instant::now();
            self.series.drain().collect()
        } else {
            Vec::new()
        };
        let (session, insert, updates) = (
            self.session.clone(),
            self.insert.clone(),
            self.updates.clone(),
        );
        let (written, failed) = self.rt.block_on(async move {
            let limit = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
            // After the first failure the rest is not sent this time (it comes back buffered):
            // an unreachable node costs one request timeout, not one per batch.
            let refused = Arc::new(AtomicBool::new(false));
            let mut tasks: JoinSet<Result<usize, Failed>> = JoinSet::new();
            for (_, mut rows) in by_partition {
                while !rows.is_empty() {
                    let chunk: Vec<FlowRow> = rows.drain(..rows.len().min(BATCH_ROWS)).collect();
                    let permit = limit.clone().acquire_owned().await.expect("never closed");
                    let (session, insert) = (session.clone(), insert.clone());
                    let refused = refused.clone();
                    tasks.spawn(async move {
                        let _permit = permit;
                        if refused.load(Relaxed) {
                            return Err(Failed::Rows(chunk, String::new()));
                        }
                        let mut batch = Batch::new(BatchType::Unlogged);
                        for _ in 0..chunk.len() {
                            batch.append_statement((*insert).clone());
                        }
                        batch.set_is_idempotent(true);
                        let values: Vec<&Vec<Option<CqlValue>>> =
                            chunk.iter().map(|r| &r.values).collect();
                        match session.batch(&batch, values).await {
                            Ok(_) => Ok(chunk.len()),
                            Err(e) => {
                                refused.store(true, Relaxed);
                                Err(Failed::Rows(chunk, e.to_string()))
                            }
                        }
                    });
                }
            }
            for (s, sums) in series {
                let permit = limit.clone().acquire_owned().await.expect("never closed");
                let (session, updates) = (session.clone(), updates.clone());
                let refused = refused.clone();
                tasks.spawn(async move {
                    let _permit = permit;
                    if refused.load(Relaxed) {
                        return Err(Failed::Series(vec![(s, sums)], String::new()));
                    }
                    let t = &STATS_TABLES[s.table];
                    let mut values: Vec<CqlValue> = sums[..t.counters.len()]
                        .iter()
                        .map(|&n| CqlValue::Counter(Counter(n)))
                        .collect();
                    values.extend(s.key.iter().map(KeyValue::cql));
                    values.push(CqlValue::Date(CqlDate(
                        (1u32 << 31).wrapping_add(s.minute_ms.div_euclid(86_400_000) as u32),
                    )));
                    values.push(CqlValue::Timestamp(CqlTimestamp(s.minute_ms)));
                    match session.execute_unpaged(&updates[s.table], values).await {
                        Ok(_) => Ok(0),
                        Err(e) => {
                            refused.store(true, Relaxed);
                            if not_applied(&e) {
                                Err(Failed::Series(vec![(s, sums)], e.to_string()))
                            } else {
                                Err(Failed::Uncertain(e.to_string()))
                            }
                        }
                    }
                });
            }
            let (mut written, mut failed) = (0usize, Vec::new());
            while let Some(done) = tasks.join_next().await {
                match done {
                    Ok(Ok(n)) => written += n,
                    Ok(Err(f)) => failed.push(f),
                    Err(e) => failed.push(Failed::Series(Vec::new(), e.to_string())),
                }
            }
            (written, failed)
        });
        self.report.records += written as u64;
        if written > 0 {
            self.report.messages += 1;
        }
        if failed.is_empty() {
            self.retry_at = None;
            self.backoff = FIRST_RETRY;
            return;
        }
        for f in failed {
            match f {
                Failed::Rows(rows, e) => {
                    self.rows.extend(rows);
                    if !e.is_empty() {
                        self.last_error = Some(e);
                    }
                }
                Failed::Series(series, e) => {
                    if !e.is_empty() {
                        self.last_error = Some(e);
                    }
                    for (s, sums) in series {
                        let entry = self.series.entry(s).or_default();
                        for (a, b) in entry.iter_mut().zip(sums) {
                            *a = a.saturating_add(b);
                        }
                    }
                }
                Failed::Uncertain(e) => {
                    self.series_uncertain += 1;
                    self.last_error = Some(e);
                }
            }
        }
        // Oldest first again (the rows came back partition by partition).
        self.rows.sort_by_key(|r| match r.values[3] {
            Some(CqlValue::BigInt(id)) => id,
            _ => 0,
        });
        self.retry_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(LAST_RETRY);
        self.drop_if_full();
    }

    /// Bounds what an outage keeps: past the target's `buffer_rows` the oldest rows are dropped
    /// and counted; past [`MAX_BUFFERED_SERIES`] the statistics buffered are dropped and counted.
    fn drop_if_full(&mut self) {
        if self.rows.len() > self.target.buffer_rows {
            let excess = self.rows.len() - self.target.buffer_rows;
            self.rows.drain(..excess);
            self.report.dropped += excess as u64;
        }
        if self.series.len() > MAX_BUFFERED_SERIES {
            self.series_dropped += self.series.len() as u64;
            self.series.clear();
        }
    }
}

impl RecordSink for CassandraSink {
    fn name(&self) -> String {
        self.target.text.clone()
    }

    fn write(&mut self, batch: &[FlowRecord]) -> io::Result<()> {
        let send_at = SEND_ROWS.min(self.target.buffer_rows);
        for r in batch {
            self.add(r);
            if self.rows.len() >= send_at || self.series.len() >= SEND_SERIES {
                // Sent unless the server refused lately and its next try is not due; then
                // the bound applies.
                self.send(false);
                self.drop_if_full();
            }
        }
        Ok(())
    }

    fn idle(&mut self) -> io::Result<()> {
        self.send(false);
        Ok(())
    }

    fn dropped(&self) -> u64 {
        self.report.dropped
    }

    fn pending(&self) -> u64 {
        // Flow rows not written yet (the statistics follow them).
        self.rows.len() as u64
    }

    fn finish(&mut self) -> io::Result<SinkReport> {
        // What is buffered gets until FINISH_TIMEOUT for the server to take it.
        let deadline = Instant::now() + FINISH_TIMEOUT;
        self.send(true);
        while !(self.rows.is_empty() && self.series.is_empty()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            self.send(true);
        }
        self.report.dropped += self.rows.len() as u64;
        self.rows.clear();
        self.series_dropped += self.series.len() as u64;
        self.series.clear();
        if let Some(e) = &self.last_error {
            eprintln!(
                "sonde: warning: {}: {} records and {} per-minute statistics updates not \
                 stored, {} with an unknown outcome, the last error: {e}",
                self.target.text, self.report.dropped, self.series_dropped, self.series_uncertain
            );
        }
        Ok(self.report.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_what_is_wrong() {
        let t = CassandraTarget::parse(
            "cassandra://10.0.0.1:9042,10.0.0.2:9042/FlowKs?replication=3&bucket=600&shards=8",
        )
        .unwrap();
        assert_eq!(t.nodes, vec!["10.0.0.1:9042", "10.0.0.2:9042"]);
        assert_eq!(t.keyspace, "flowks");
        assert_eq!((t.replication, t.bucket_secs, t.shards), (3, 600, 8));
        assert_eq!(t.buffer_rows, MAX_BUFFERED_ROWS);
        let b = CassandraTarget::parse("cassandra://h:9042/ks?buffer=50").unwrap();
        assert_eq!(b.buffer_rows, 50);
        assert!(t.stats);
        assert!(
            !CassandraTarget::parse("cassandra://h:9042/ks?stats=off")
                .unwrap()
                .stats
        );
        let d = CassandraTarget::parse("cassandra://h:9042").unwrap();
        assert_eq!(
            (d.keyspace.as_str(), d.replication, d.bucket_secs, d.shards),
            ("sonde", 1, 3600, 4)
        );
        assert_eq!(
            CassandraTarget::parse("cassandra://[::1]:9042/ks")
                .unwrap()
                .nodes,
            vec!["[::1]:9042"]
        );
        for (bad, says) in [
            ("cassandra://h/ks", "'h' is not HOST:PORT"),
            ("cassandra://h:9042,h2/ks", "'h2' is not HOST:PORT"),
            ("cassandra://h:0/ks", "is not HOST:PORT"),
            ("cassandra://:9042/ks", "is not HOST:PORT"),
            ("cassandra://h:9042/my-ks", "keyspace name"),
            ("cassandra://h:9042/1ks", "keyspace name"),
            (
                "cassandra://h:9042/ks?replication=0",
                "replication=0: give a replication",
            ),
            ("cassandra://h:9042/ks?bucket=10", "bucket=10: give seconds"),
            ("cassandra://h:9042/ks?bucket=7000", "divide a day"),
            ("cassandra://h:9042/ks?shards=x", "shards=x"),
            ("cassandra://h:9042/ks?ttl=5", "unknown option 'ttl'"),
            (
                "cassandra://h:9042/ks?buffer=0",
                "buffer=0: give a number of rows",
            ),
            ("cassandra:/h:9042/ks", "not a cassandra:// URL"),
        ] {
            let e = CassandraTarget::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_schema_has_every_table_and_statements_match_it() {
        let s = statements("ks");
        assert_eq!(s.len(), 1 + STATS_TABLES.len());
        assert!(keyspace_statements("ks", 3)[0].contains("'replication_factor': 3"));
        assert!(s.iter().all(|st| st.contains("IF NOT EXISTS")));
        assert!(s[0].contains("PRIMARY KEY ((bucket, shard), time_start, id)"));
        let insert = insert_flow("ks");
        assert_eq!(insert.matches('?').count(), 4 + FLOW_COLUMNS.len());
        for t in STATS_TABLES {
            let u = update_stats("ks", t);
            assert_eq!(u.matches('?').count(), t.counters.len() + t.keys.len() + 2);
            assert!(t.counters.len() <= 5);
        }
    }

    #[test]
    fn version_1_gets_the_places_and_rows_bind_every_column() {
        assert_eq!(FLOW_COLUMNS[V1_COLUMNS - 1].0, "meta");
        assert_eq!(
            migrations("ks", 1),
            [
                "ALTER TABLE ks.flows ADD src_as bigint",
                "ALTER TABLE ks.flows ADD dst_as bigint",
                "ALTER TABLE ks.flows ADD src_country text",
                "ALTER TABLE ks.flows ADD dst_country text",
            ]
        );
        assert!(migrations("ks", SCHEMA_VERSION).is_empty());
        let mut r = FlowRecord {
            flow: sonde_flow::Flow::default(),
            ext: Default::default(),
            reason: sonde_flow::EndReason::IdleTimeout,
            meta: Some(Box::new(sonde_dpi::Meta {
                dst_as: 64500,
                ..Default::default()
            })),
            exporter: None,
        };
        r.flow.key.ip_version = 4;
        let v = flow_values(&r, None);
        assert_eq!(v.len(), FLOW_COLUMNS.len());
        assert_eq!(v[V1_COLUMNS + 1], Some(CqlValue::BigInt(64500)));
        assert_eq!(v[V1_COLUMNS + 3], Some(CqlValue::Text(String::new())));
    }
}
