//! `--export clickhouse://HOST:PORT/DB`: flow records into ClickHouse over its HTTP interface,
//! in large RowBinary batches, into a schema sonde creates and migrates itself (Akvorado's and
//! ntopng Enterprise's store for flow history at cluster scale).
//!
//! The schema ([`statements`]) is one `flows` table, a row per flow record, ordered by time then
//! addresses (what users ask: a time range, then hosts), partitioned by day; and rollup tables
//! kept by materialized views, per minute and per hour: traffic by host (both ends), by
//! application, by server port, by exporter and by exporter interface. It keeps to what
//! Debian's ClickHouse 18.16 and current servers both accept (no IPv4/IPv6 types, no Map, no
//! LowCardinality): addresses are `FixedString(16)` (IPv4 mapped into IPv6, `IPv6NumToString`
//! shows them), metadata two parallel arrays of keys and values. Retention (`?retention_days=N`)
//! is a table TTL where the server has TTL (19.6 and later), else sonde drops the day partitions
//! older than that at start and every hour. `sonde_schema` records the applied version, so a
//! later sonde migrates an existing database instead of failing on it. While the server refuses
//! (away, restarting), rows stay buffered and are tried again, 1 s then doubling to 30 s apart,
//! up to a million rows; past that they are dropped and counted.

use crate::sinks::{RecordSink, SinkReport};
use sonde_flow::FlowRecord;
use std::io::{self, Read};
use std::time::{Duration, Instant};

/// Rows per INSERT at most (a batch is also sent after a second without records).
const MAX_ROWS: usize = 100_000;
/// Rows kept while the server does not take them (it is away, restarting): beyond that they
/// are dropped and counted, so an outage costs bounded memory.
const MAX_BUFFERED_ROWS: usize = 1_000_000;
/// Waits between tries while the server refuses: doubling from the first to the last.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(30);
/// How long the end of a run waits for the server to take what is buffered.
const FINISH_TIMEOUT: Duration = Duration::from_secs(30);

/// A parsed `clickhouse://HOST:PORT/DB[?retention_days=N&user=U&password=P]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClickHouseTarget {
    /// `http://HOST:PORT/`
    pub base: String,
    pub db: String,
    pub retention_days: Option<u32>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub text: String,
}

impl ClickHouseTarget {
    pub fn parse(s: &str) -> Result<ClickHouseTarget, String> {
        let help = "(use clickhouse://HOST:PORT/DATABASE, the server's HTTP port, usually 8123)";
        let rest = s
            .strip_prefix("clickhouse://")
            .ok_or_else(|| format!("--export '{s}': not a clickhouse:// URL {help}"))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (host, db) = path.split_once('/').unwrap_or((path, ""));
        if !host.contains(':') {
            return Err(format!("--export '{s}': '{host}' is not HOST:PORT {help}"));
        }
        let db = if db.is_empty() { "sonde" } else { db };
        if !db.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || db.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(format!(
                "--export '{s}': '{db}' is not a database name (letters, digits and _)"
            ));
        }
        let mut t = ClickHouseTarget {
            base: format!("http://{host}/"),
            db: db.to_string(),
            retention_days: None,
            user: None,
            password: None,
            text: s.to_string(),
        };
        // The URL as shown (messages, /metrics, the console): without the password.
        if query.split('&').any(|p| p.starts_with("password=")) {
            let shown: Vec<&str> = query
                .split('&')
                .map(|p| {
                    if p.starts_with("password=") {
                        "password=***"
                    } else {
                        p
                    }
                })
                .collect();
            t.text = format!("clickhouse://{path}?{}", shown.join("&"));
        }
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=').unwrap_or((pair, "")) {
                ("retention_days", v) => {
                    t.retention_days = Some(v.parse().ok().filter(|&d| d > 0).ok_or_else(|| {
                        format!("--export '{s}': retention_days={v}: give a number of days")
                    })?)
                }
                ("user", v) => t.user = Some(v.to_string()),
                ("password", v) => t.password = Some(v.to_string()),
                (k, _) => {
                    return Err(format!(
                        "--export '{s}': unknown option '{k}' (the options are retention_days, \
                         user, password, when_full and queue)"
                    ))
                }
            }
        }
        Ok(t)
    }
}

/// The URL options a ClickHouse sink reads itself.
pub const CLICKHOUSE_OPTIONS: &[&str] = &["retention_days", "user", "password"];

/// The flows table's columns, in RowBinary order.
pub const FLOW_COLUMNS: &[(&str, &str)] = &[
    ("date", "Date"),
    ("time_start", "DateTime"),
    ("time_end", "DateTime"),
    ("first_ms", "UInt64"),
    ("last_ms", "UInt64"),
    ("ip_version", "UInt8"),
    ("src_addr", "FixedString(16)"),
    ("dst_addr", "FixedString(16)"),
    ("src_port", "UInt16"),
    ("dst_port", "UInt16"),
    ("protocol", "UInt8"),
    ("vlan", "UInt16"),
    ("in_packets", "UInt64"),
    ("in_bytes", "UInt64"),
    ("out_packets", "UInt64"),
    ("out_bytes", "UInt64"),
    ("client_tcp_flags", "UInt8"),
    ("server_tcp_flags", "UInt8"),
    ("tos", "UInt8"),
    ("icmp_type", "UInt16"),
    ("end_reason", "String"),
    ("l7_proto", "String"),
    ("l7_proto_name", "String"),
    ("l7_category", "String"),
    ("exporter", "FixedString(16)"),
    ("in_if", "UInt32"),
    ("out_if", "UInt32"),
    ("sampling", "UInt32"),
    ("meta_keys", "Array(String)"),
    ("meta_values", "Array(String)"),
    // Schema version 2: the rest of the record, so a row reads back as the flow it was.
    ("retransmitted_in_packets", "UInt32"),
    ("retransmitted_out_packets", "UInt32"),
    ("ooorder_in_packets", "UInt32"),
    ("ooorder_out_packets", "UInt32"),
    ("client_latency_us", "UInt32"),
    ("server_latency_us", "UInt32"),
    ("client_mac", "FixedString(6)"),
    ("server_mac", "FixedString(6)"),
    ("tunnel", "String"),
    ("fragments", "UInt32"),
    ("l7_confidence", "String"),
    // Schema version 3: where the ends are (`--geoip-dir`, or an exporter's AS numbers); 0 and
    // '' when not known.
    ("src_as", "UInt32"),
    ("dst_as", "UInt32"),
    ("src_country", "String"),
    ("dst_country", "String"),
];

/// How many of [`FLOW_COLUMNS`] schema version 1 had (version 2 added the next ones).
const V1_COLUMNS: usize = 30;
/// How many schema version 2 had (version 3 added the places at the end). They are all a
/// record needs, so the history reads only these: a table of version 2 reads as well.
pub const V2_COLUMNS: usize = 41;

/// A rollup: its name, its key columns (name, type, expression over `flows`).
struct Rollup {
    name: &'static str,
    keys: &'static [(&'static str, &'static str, &'static str)],
}

/// Traffic by application, server port, exporter and exporter interface (hosts are counted
/// from both ends, below).
const ROLLUPS: &[Rollup] = &[
    Rollup {
        name: "apps",
        keys: &[("application", "String", "l7_proto_name")],
    },
    Rollup {
        name: "ports",
        keys: &[
            ("port", "UInt16", "dst_port"),
            ("protocol", "UInt8", "protocol"),
        ],
    },
    Rollup {
        name: "exporters",
        keys: &[("exporter", "FixedString(16)", "exporter")],
    },
    Rollup {
        name: "interfaces",
        keys: &[
            ("exporter", "FixedString(16)", "exporter"),
            ("interface", "UInt32", "in_if"),
        ],
    },
];

/// Per minute and per hour.
const GRAINS: &[(&str, &str)] = &[("1m", "toStartOfMinute"), ("1h", "toStartOfHour")];

/// The schema version [`statements`] creates.
pub const SCHEMA_VERSION: u32 = 3;

/// What turns a database of schema version `from` into the current one.
pub fn migrations(db: &str, from: u32) -> Vec<String> {
    let added_since = |n: usize| {
        FLOW_COLUMNS[n..]
            .iter()
            .map(|(n, t)| format!("ALTER TABLE {db}.flows ADD COLUMN {n} {t}"))
            .collect()
    };
    match from {
        // None yet: create it all.
        0 => statements(db),
        1 => added_since(V1_COLUMNS),
        2 => added_since(V2_COLUMNS),
        _ => Vec::new(),
    }
}

/// Every statement of the current schema, in order; each can run again (IF NOT EXISTS).
pub fn statements(db: &str) -> Vec<String> {
    let mut s = vec![format!("CREATE DATABASE IF NOT EXISTS {db}")];
    let cols: Vec<String> = FLOW_COLUMNS
        .iter()
        .map(|(n, t)| format!("{n} {t}"))
        .collect();
    s.push(format!(
        "CREATE TABLE IF NOT EXISTS {db}.flows ({}) ENGINE = MergeTree() \
         PARTITION BY toYYYYMMDD(date) ORDER BY (time_start, src_addr, dst_addr)",
        cols.join(", ")
    ));
    for (grain, start) in GRAINS {
        let t = format!("{db}.flows_{grain}_hosts");
        s.push(format!(
            "CREATE TABLE IF NOT EXISTS {t} (time DateTime, host FixedString(16), \
             sent_bytes UInt64, rcvd_bytes UInt64, sent_packets UInt64, rcvd_packets UInt64, \
             flows UInt64) ENGINE = SummingMergeTree() PARTITION BY toYYYYMM(time) \
             ORDER BY (time, host)"
        ));
        for (side, host, sent, rcvd) in [
            ("src", "src_addr", "in", "out"),
            ("dst", "dst_addr", "out", "in"),
        ] {
            s.push(format!(
                "CREATE MATERIALIZED VIEW IF NOT EXISTS {t}_{side}_mv TO {t} AS SELECT \
                 {start}(time_start) AS time, {host} AS host, {sent}_bytes AS sent_bytes, \
                 {rcvd}_bytes AS rcvd_bytes, {sent}_packets AS sent_packets, \
                 {rcvd}_packets AS rcvd_packets, toUInt64(1) AS flows FROM {db}.flows"
            ));
        }
        for r in ROLLUPS {
            let t = format!("{db}.flows_{grain}_{}", r.name);
            let key_cols: Vec<String> = r
                .keys
                .iter()
                .map(|(n, ty, _)| format!("{n} {ty}"))
                .collect();
            let key_names: Vec<&str> = r.keys.iter().map(|(n, _, _)| *n).collect();
            let key_exprs: Vec<String> = r
                .keys
                .iter()
                .map(|(n, _, e)| format!("{e} AS {n}"))
                .collect();
            s.push(format!(
                "CREATE TABLE IF NOT EXISTS {t} (time DateTime, {}, bytes UInt64, \
                 packets UInt64, flows UInt64) ENGINE = SummingMergeTree() \
                 PARTITION BY toYYYYMM(time) ORDER BY (time, {})",
                key_cols.join(", "),
                key_names.join(", ")
            ));
            s.push(format!(
                "CREATE MATERIALIZED VIEW IF NOT EXISTS {t}_mv TO {t} AS SELECT \
                 {start}(time_start) AS time, {}, in_bytes + out_bytes AS bytes, \
                 in_packets + out_packets AS packets, toUInt64(1) AS flows FROM {db}.flows",
                key_exprs.join(", ")
            ));
        }
    }
    s
}

/// The other way in (Akvorado's): ClickHouse reads the Kafka topic sonde produces to
/// (`--export kafka://BROKERS/TOPIC`, JSON) itself, through a Kafka engine table whose columns
/// are every key of the flow record's schema, and a materialized view that turns each message
/// into a row of `flows` as the direct sink writes it (so the rollups fill the same way). Run
/// after [`statements`]; ClickHouse's consumer group starts at the topic's end. Numeric
/// metadata equal to 0 are not kept (absent and 0 read the same from JSON).
pub fn kafka_statements(db: &str, brokers: &str, topic: &str, group: &str) -> Vec<String> {
    use sonde_export::schema::{Kind, FIELDS};
    let cols: Vec<String> = FIELDS
        .iter()
        .map(|f| {
            let ty = if f.json_string() {
                "String"
            } else if f.kind == Kind::Duration {
                "Float64"
            } else {
                "UInt64"
            };
            format!("{} {ty}", f.key)
        })
        .collect();
    let addr = |v4: &str, v6: &str| {
        format!(
            "IPv6StringToNum(if({v4} != '', concat('::ffff:', {v4}), if({v6} != '', {v6}, '::')))"
        )
    };
    let meta: Vec<&sonde_export::schema::Field> = FIELDS
        .iter()
        .filter(|f| matches!(f.stored, sonde_export::schema::Stored::Meta(_)))
        .collect();
    let keys: Vec<String> = meta.iter().map(|f| format!("'{}'", f.key)).collect();
    let values: Vec<String> = meta
        .iter()
        .map(|f| {
            if f.json_string() {
                f.key.to_string()
            } else {
                format!("toString({})", f.key)
            }
        })
        .collect();
    let (keys, values) = (keys.join(", "), values.join(", "));
    let present = "v != '' AND v != '0'";
    let ms = |k: &str| format!("toUInt64({k})");
    let select = [
        format!(
            "toDate(intDiv({}, 1000)) AS date",
            ms("FLOW_START_MILLISECONDS")
        ),
        format!(
            "toDateTime(intDiv({}, 1000)) AS time_start",
            ms("FLOW_START_MILLISECONDS")
        ),
        format!(
            "toDateTime(intDiv({}, 1000)) AS time_end",
            ms("FLOW_END_MILLISECONDS")
        ),
        "FLOW_START_MILLISECONDS AS first_ms".into(),
        "FLOW_END_MILLISECONDS AS last_ms".into(),
        "toUInt8(IP_PROTOCOL_VERSION) AS ip_version".into(),
        format!("{} AS src_addr", addr("IPV4_SRC_ADDR", "IPV6_SRC_ADDR")),
        format!("{} AS dst_addr", addr("IPV4_DST_ADDR", "IPV6_DST_ADDR")),
        "toUInt16(L4_SRC_PORT) AS src_port".into(),
        "toUInt16(L4_DST_PORT) AS dst_port".into(),
        "toUInt8(PROTOCOL) AS protocol".into(),
        "toUInt16(VLAN_ID) AS vlan".into(),
        "IN_PKTS AS in_packets".into(),
        "IN_BYTES AS in_bytes".into(),
        "OUT_PKTS AS out_packets".into(),
        "OUT_BYTES AS out_bytes".into(),
        "toUInt8(CLIENT_TCP_FLAGS) AS client_tcp_flags".into(),
        "toUInt8(SERVER_TCP_FLAGS) AS server_tcp_flags".into(),
        "toUInt8(SRC_TOS) AS tos".into(),
        "toUInt16(ICMP_TYPE) AS icmp_type".into(),
        "FLOW_END_REASON AS end_reason".into(),
        "L7_PROTO AS l7_proto".into(),
        "L7_PROTO_NAME AS l7_proto_name".into(),
        "L7_CATEGORY AS l7_category".into(),
        format!(
            "{} AS exporter",
            addr("EXPORTER_IPV4_ADDRESS", "EXPORTER_IPV6_ADDRESS")
        ),
        "toUInt32(INPUT_SNMP) AS in_if".into(),
        "toUInt32(OUTPUT_SNMP) AS out_if".into(),
        "toUInt32(SAMPLING_INTERVAL) AS sampling".into(),
        format!("arrayFilter((v, k) -> {present}, [{values}], [{keys}]) AS meta_keys"),
        format!("arrayFilter(v -> {present}, [{values}]) AS meta_values"),
        "toUInt32(RETRANSMITTED_IN_PKTS) AS retransmitted_in_packets".into(),
        "toUInt32(RETRANSMITTED_OUT_PKTS) AS retransmitted_out_packets".into(),
        "toUInt32(OOORDER_IN_PKTS) AS ooorder_in_packets".into(),
        "toUInt32(OOORDER_OUT_PKTS) AS ooorder_out_packets".into(),
        "toUInt32(round(CLIENT_NW_LATENCY_MS * 1000)) AS client_latency_us".into(),
        "toUInt32(round(SERVER_NW_LATENCY_MS * 1000)) AS server_latency_us".into(),
        "toFixedString(unhex(replaceAll(IN_SRC_MAC, ':', '')), 6) AS client_mac".into(),
        "toFixedString(unhex(replaceAll(IN_DST_MAC, ':', '')), 6) AS server_mac".into(),
        "TUNNEL AS tunnel".into(),
        "toUInt32(FRAGMENTS) AS fragments".into(),
        "L7_CONFIDENCE AS l7_confidence".into(),
        "toUInt32(SRC_AS) AS src_as".into(),
        "toUInt32(DST_AS) AS dst_as".into(),
        "SRC_IP_COUNTRY AS src_country".into(),
        "DST_IP_COUNTRY AS dst_country".into(),
    ];
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.flows_kafka ({}) ENGINE = Kafka('{brokers}', \
             '{topic}', '{group}', 'JSONEachRow')",
            cols.join(", ")
        ),
        format!(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.flows_kafka_mv TO {db}.flows AS SELECT {} \
             FROM {db}.flows_kafka",
            select.join(", ")
        ),
    ]
}

pub struct ClickHouseSink {
    target: ClickHouseTarget,
    agent: ureq::Agent,
    /// RowBinary rows not sent yet, and how many.
    rows: Vec<u8>,
    pending: usize,
    report: SinkReport,
    /// Whether the server has TTL (else retention drops old partitions).
    has_ttl: bool,
    last_retention: Instant,
    last_error: Option<String>,
    /// While the server refuses: when to try again, and the wait after that.
    retry_at: Option<Instant>,
    backoff: Duration,
    /// `--geoip-dir`: the countries and AS numbers of both ends.
    geo: Option<std::sync::Arc<sonde_geo::GeoDb>>,
}

/// The server's answer to a statement, or why there is none.
fn post(
    agent: &ureq::Agent,
    t: &ClickHouseTarget,
    query: &str,
    body: &[u8],
) -> Result<String, String> {
    post_limited(agent, t, query, body, 64 << 10)
}

/// [`post`], reading at most `limit` bytes of the answer.
pub(crate) fn post_limited(
    agent: &ureq::Agent,
    t: &ClickHouseTarget,
    query: &str,
    body: &[u8],
    limit: u64,
) -> Result<String, String> {
    let mut req = agent.post(&t.base).query("query", query);
    if let Some(u) = &t.user {
        req = req.header("X-ClickHouse-User", u);
    }
    if let Some(p) = &t.password {
        req = req.header("X-ClickHouse-Key", p);
    }
    let mut resp = req.send(body).map_err(|e| e.to_string())?;
    let mut text = String::new();
    resp.body_mut()
        .as_reader()
        .take(limit)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if resp.status() == 200 {
        Ok(text)
    } else {
        // ClickHouse's own message: "Code: 60, e.displayText() = DB::Exception: …".
        Err(format!("HTTP {}: {}", resp.status(), text.trim()))
    }
}

/// `18.16.1` → (18, 16).
fn version_of(text: &str) -> (u32, u32) {
    let mut parts = text.trim().split('.').map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

impl ClickHouseSink {
    /// Connects, creates or migrates the schema and sets the retention; every failure is one
    /// message naming the URL.
    pub fn connect(target: ClickHouseTarget) -> Result<ClickHouseSink, String> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        let fail = |what: &str, e: String| format!("--export {}: {what}: {e}", target.text);
        let version = post(&agent, &target, "SELECT version()", b"").map_err(|e| {
            fail(
                "no answer from ClickHouse (is it running, on its HTTP port?)",
                e,
            )
        })?;
        let (major, minor) = version_of(&version);
        let has_ttl = (major, minor) >= (19, 6);
        let db = &target.db;
        post(
            &agent,
            &target,
            &format!("CREATE DATABASE IF NOT EXISTS {db}"),
            b"",
        )
        .map_err(|e| fail("cannot create the database", e))?;
        post(
            &agent,
            &target,
            &format!(
                "CREATE TABLE IF NOT EXISTS {db}.sonde_schema (version UInt32, \
                 applied DateTime) ENGINE = TinyLog"
            ),
            b"",
        )
        .map_err(|e| fail("cannot create sonde_schema", e))?;
        let current: u32 = post(
            &agent,
            &target,
            &format!("SELECT max(version) FROM {db}.sonde_schema"),
            b"",
        )
        .map_err(|e| fail("cannot read sonde_schema", e))?
        .trim()
        .parse()
        .unwrap_or(0);
        if current > SCHEMA_VERSION {
            return Err(format!(
                "--export {}: database '{db}' has schema version {current}, newer than this \
                 sonde's {SCHEMA_VERSION}: use a newer sonde or another database",
                target.text
            ));
        }
        if current < SCHEMA_VERSION {
            for st in migrations(db, current) {
                post(&agent, &target, &st, b"").map_err(|e| fail("schema", e))?;
            }
            post(
                &agent,
                &target,
                &format!("INSERT INTO {db}.sonde_schema VALUES ({SCHEMA_VERSION}, now())"),
                b"",
            )
            .map_err(|e| fail("cannot record the schema version", e))?;
        }
        if let (Some(days), true) = (target.retention_days, has_ttl) {
            post(
                &agent,
                &target,
                &format!("ALTER TABLE {db}.flows MODIFY TTL date + INTERVAL {days} DAY"),
                b"",
            )
            .map_err(|e| fail("cannot set the retention", e))?;
        }
        let mut sink = ClickHouseSink {
            report: SinkReport {
                name: target.text.clone(),
                ..SinkReport::default()
            },
            target,
            agent,
            rows: Vec::with_capacity(1 << 20),
            pending: 0,
            has_ttl,
            last_retention: Instant::now(),
            last_error: None,
            retry_at: None,
            backoff: FIRST_RETRY,
            geo: None,
        };
        sink.enforce_retention()
            .map_err(|e| format!("--export {}: retention: {e}", sink.target.text))?;
        Ok(sink)
    }

    /// Rows carry the countries and AS numbers of both ends (`--geoip-dir`).
    pub fn with_geo(mut self, geo: Option<std::sync::Arc<sonde_geo::GeoDb>>) -> ClickHouseSink {
        self.geo = geo;
        self
    }

    /// Without TTL: drops the day partitions of `flows` older than the retention.
    fn enforce_retention(&mut self) -> Result<(), String> {
        self.last_retention = Instant::now();
        let (Some(days), false) = (self.target.retention_days, self.has_ttl) else {
            return Ok(());
        };
        let db = &self.target.db;
        let old = post(
            &self.agent,
            &self.target,
            &format!(
                "SELECT DISTINCT partition FROM system.parts WHERE database = '{db}' AND \
                 table = 'flows' AND active AND toUInt32OrZero(partition) < toYYYYMMDD(today() - {days})"
            ),
            b"",
        )?;
        for p in old.lines().map(str::trim).filter(|p| !p.is_empty()) {
            if p.chars().all(|c| c.is_ascii_digit()) {
                post(
                    &self.agent,
                    &self.target,
                    &format!("ALTER TABLE {db}.flows DROP PARTITION {p}"),
                    b"",
                )?;
            }
        }
        Ok(())
    }

    /// Sends what is buffered as one INSERT, unless the server refused lately and its next try
    /// is not due (`force` tries anyway). On a refusal the rows stay buffered for the next try;
    /// past [`MAX_BUFFERED_ROWS`] they are dropped and counted.
    fn send(&mut self, force: bool) {
        if self.pending == 0 || (!force && self.retry_at.is_some_and(|t| Instant::now() < t)) {
            return;
        }
        // Columns named: a table migrated from an older version has them in another order.
        let query = format!(
            "INSERT INTO {}.flows ({}) FORMAT RowBinary",
            self.target.db,
            FLOW_COLUMNS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        );
        match post(&self.agent, &self.target, &query, &self.rows) {
            Ok(_) => {
                self.report.records += self.pending as u64;
                self.report.messages += 1;
                self.rows.clear();
                self.pending = 0;
                self.retry_at = None;
                self.backoff = FIRST_RETRY;
            }
            Err(e) => {
                self.last_error = Some(e);
                self.retry_at = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(LAST_RETRY);
                self.drop_if_full();
            }
        }
    }

    /// Bounds what an outage keeps: at [`MAX_BUFFERED_ROWS`], the buffered rows are dropped.
    fn drop_if_full(&mut self) {
        if self.pending >= MAX_BUFFERED_ROWS {
            self.report.dropped += self.pending as u64;
            self.rows.clear();
            self.pending = 0;
        }
    }
}

/// An address as 16 bytes, IPv4 mapped into IPv6 (`::ffff:a.b.c.d`).
pub(crate) fn addr16(a: &[u8; 16], ip_version: u8) -> [u8; 16] {
    if ip_version == 4 {
        let mut m = [0u8; 16];
        m[10] = 0xff;
        m[11] = 0xff;
        m[12..].copy_from_slice(&a[..4]);
        m
    } else {
        *a
    }
}

fn put_leb(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_leb(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// One row of `flows` in RowBinary, in [`FLOW_COLUMNS`] order; the places of its ends from
/// `geo` (`--geoip-dir`).
pub fn row_binary(r: &FlowRecord, geo: Option<&sonde_geo::GeoDb>, out: &mut Vec<u8>) {
    let f = &r.flow;
    let (c, s) = (f.client_dir(), 1 - f.client_dir());
    let e = f.ends();
    let (ca, sa, cp, sp) = (e.client_addr, e.server_addr, e.client_port, e.server_port);
    let secs = |ns: u64| (ns / 1_000_000_000).min(u32::MAX as u64) as u32;
    out.extend_from_slice(&((f.first_ns / 86_400_000_000_000) as u16).to_le_bytes());
    out.extend_from_slice(&secs(f.first_ns).to_le_bytes());
    out.extend_from_slice(&secs(f.last_ns).to_le_bytes());
    out.extend_from_slice(&(f.first_ns / 1_000_000).to_le_bytes());
    out.extend_from_slice(&(f.last_ns / 1_000_000).to_le_bytes());
    out.push(f.key.ip_version);
    out.extend_from_slice(&addr16(ca, f.key.ip_version));
    out.extend_from_slice(&addr16(sa, f.key.ip_version));
    out.extend_from_slice(&cp.to_le_bytes());
    out.extend_from_slice(&sp.to_le_bytes());
    out.push(f.key.proto);
    out.extend_from_slice(&f.key.vlan.to_le_bytes());
    for n in [f.pkts[c], f.bytes[c], f.pkts[s], f.bytes[s]] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.push(f.tcp_flags[c]);
    out.push(f.tcp_flags[s]);
    out.push(f.tos);
    out.extend_from_slice(&f.icmp_type_code.to_le_bytes());
    put_str(out, r.reason.name());
    if f.dpi_done {
        put_str(out, &f.l7.number());
        put_str(out, &f.l7.name());
        put_str(out, f.l7.category.name());
    } else {
        put_str(out, "");
        put_str(out, "");
        put_str(out, "");
    }
    let exporter = match r.exporter {
        Some((std::net::SocketAddr::V4(a), _)) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&a.ip().octets());
            addr16(&b, 4)
        }
        Some((std::net::SocketAddr::V6(a), _)) => a.ip().octets(),
        None => [0; 16],
    };
    out.extend_from_slice(&exporter);
    for n in [r.ext.in_if, r.ext.out_if, f.sampling] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    // Metadata: the keys, then the values (numbers in decimal, lists comma-joined).
    let pairs: Vec<(&str, String)> = r
        .meta
        .as_deref()
        .map(|m| sonde_dpi::meta::text_pairs(m).collect())
        .unwrap_or_default();
    put_leb(out, pairs.len() as u64);
    for (k, _) in &pairs {
        put_str(out, k);
    }
    put_leb(out, pairs.len() as u64);
    for (_, v) in &pairs {
        put_str(out, v);
    }
    for n in [
        r.ext.retransmits[c],
        r.ext.retransmits[s],
        r.ext.out_of_order[c],
        r.ext.out_of_order[s],
        r.ext.rtt_client_us,
        r.ext.rtt_server_us,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    let (cm, sm) = f.macs();
    out.extend_from_slice(&cm);
    out.extend_from_slice(&sm);
    put_str(out, f.tunnel.name());
    out.extend_from_slice(&f.fragments.to_le_bytes());
    put_str(
        out,
        if f.dpi_done {
            f.l7.confidence.name()
        } else {
            ""
        },
    );
    let places = sonde_export::places(r, geo);
    out.extend_from_slice(&places.src_as.to_le_bytes());
    out.extend_from_slice(&places.dst_as.to_le_bytes());
    for c in [places.src_country, places.dst_country] {
        put_str(out, c.as_ref().map_or("", |c| c.as_str()));
    }
}

impl RecordSink for ClickHouseSink {
    fn name(&self) -> String {
        self.target.text.clone()
    }

    fn write(&mut self, batch: &[FlowRecord]) -> io::Result<()> {
        for r in batch {
            row_binary(r, self.geo.as_deref(), &mut self.rows);
            self.pending += 1;
            if self.pending.is_multiple_of(MAX_ROWS) {
                self.send(false);
                self.drop_if_full();
            }
        }
        Ok(())
    }

    fn idle(&mut self) -> io::Result<()> {
        self.send(false);
        if self.last_retention.elapsed() >= Duration::from_secs(3600) {
            if let Err(e) = self.enforce_retention() {
                self.last_error = Some(e);
            }
        }
        Ok(())
    }

    fn dropped(&self) -> u64 {
        self.report.dropped
    }

    fn pending(&self) -> u64 {
        self.pending as u64
    }

    fn finish(&mut self) -> io::Result<SinkReport> {
        // What is buffered gets until FINISH_TIMEOUT for the server to take it.
        let deadline = Instant::now() + FINISH_TIMEOUT;
        self.send(true);
        while self.pending > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            self.send(true);
        }
        self.report.dropped += self.pending as u64;
        self.pending = 0;
        if let Some(e) = &self.last_error {
            eprintln!(
                "sonde: warning: {}: {} records not stored, the last error: {e}",
                self.target.text, self.report.dropped
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
        let t = ClickHouseTarget::parse("clickhouse://127.0.0.1:8123/flowdb?retention_days=30")
            .unwrap();
        assert_eq!(
            (t.base.as_str(), t.db.as_str()),
            ("http://127.0.0.1:8123/", "flowdb")
        );
        assert_eq!(t.retention_days, Some(30));
        let t = ClickHouseTarget::parse("clickhouse://h:8123/db?user=u&password=secret").unwrap();
        assert_eq!(t.password.as_deref(), Some("secret"));
        assert!(!t.text.contains("secret"), "{}", t.text);
        assert_eq!(
            ClickHouseTarget::parse("clickhouse://h:8123").unwrap().db,
            "sonde"
        );
        for (bad, says) in [
            ("clickhouse://h/db", "HOST:PORT"),
            ("clickhouse://h:8123/my-db", "database name"),
            ("clickhouse://h:8123/db?retention_days=x", "number of days"),
            ("clickhouse://h:8123/db?engine=x", "unknown option 'engine'"),
        ] {
            let e = ClickHouseTarget::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn versions_read_and_compare() {
        assert_eq!(version_of("18.16.1\n"), (18, 16));
        assert!(version_of("24.8.4.13") >= (19, 6));
        assert!(version_of("19.5.1") < (19, 6));
    }

    #[test]
    fn migrations_add_each_later_versions_columns() {
        assert_eq!(FLOW_COLUMNS[V1_COLUMNS - 1].0, "meta_values");
        assert_eq!(FLOW_COLUMNS[V2_COLUMNS - 1].0, "l7_confidence");
        let from2 = migrations("db", 2);
        assert_eq!(
            from2,
            [
                "ALTER TABLE db.flows ADD COLUMN src_as UInt32",
                "ALTER TABLE db.flows ADD COLUMN dst_as UInt32",
                "ALTER TABLE db.flows ADD COLUMN src_country String",
                "ALTER TABLE db.flows ADD COLUMN dst_country String",
            ]
        );
        let from1 = migrations("db", 1);
        assert_eq!(from1.len(), FLOW_COLUMNS.len() - V1_COLUMNS);
        assert!(from1.ends_with(&from2));
        assert!(migrations("db", SCHEMA_VERSION).is_empty());
    }

    #[test]
    fn every_rollup_has_its_table_and_view() {
        let s = statements("db");
        // Database, flows, then per grain: hosts table + 2 views, and a table and a view
        // per other rollup.
        assert_eq!(s.len(), 2 + GRAINS.len() * (3 + 2 * ROLLUPS.len()));
        assert!(s.iter().all(|st| st.contains("IF NOT EXISTS")));
    }
}
