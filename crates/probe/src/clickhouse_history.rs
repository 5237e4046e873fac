//! `--history clickhouse://HOST:PORT/DB[?table=T]`: the flow history's questions (flows of a
//! host, port, protocol or application in a time range; top hosts and applications; traffic
//! over time) answered from the ClickHouse `flows` table that `--export clickhouse://` fills,
//! so one sonde serves the history of every probe that writes there (through Kafka or
//! directly). `table=` reads another table of the same columns, e.g. a `Distributed` table over
//! the shards of a cluster. Every answer has the shape the local store's has, so the REST API,
//! the console and `sonde query` print both alike; `exporter=` tells the probes apart.

use crate::clickhouse_sink::{addr16, post_limited, ClickHouseTarget, FLOW_COLUMNS, V2_COLUMNS};
use serde_json::Value;
use sonde_dpi::{Category, Confidence, Proto, L7};
use sonde_flow::{EndReason, Flow, FlowRecord};
use sonde_history::query::{AppId, HostId, Metric, Totals};
use sonde_history::store::{Filter, Network};
use sonde_wire::Tunnel;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The most an answer may weigh (a page of flows is far less).
const MAX_ANSWER: u64 = 64 << 20;

/// A flow history in ClickHouse.
pub struct ClickHouseHistory {
    target: ClickHouseTarget,
    agent: ureq::Agent,
    /// `DB.TABLE` the queries read.
    table: String,
}

impl std::fmt::Debug for ClickHouseHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClickHouseHistory({})", self.table)
    }
}

/// What the ClickHouse history filters by beyond [`Filter`]: the probe or exporter a flow came
/// from, and the places stored with it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    pub exporter: Option<IpAddr>,
    /// Flows with an end placed there, as stored when the row was written (schema version 3).
    pub place: Option<StoredPlace>,
}

/// A country, an AS, or both, that one end of a flow must have (`country=`, `asn=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoredPlace {
    pub country: Option<sonde_geo::Country>,
    pub asn: Option<u32>,
}

impl ClickHouseHistory {
    /// Parses the URL and checks that the server answers and the table is there.
    pub fn open(url: &str) -> Result<ClickHouseHistory, String> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut table = "flows".to_string();
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("table", t)) => table = t.to_string(),
                _ => rest.push(pair),
            }
        }
        if table.is_empty() || !table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "--history '{url}': table={table}: give a table name (letters, digits and _)"
            ));
        }
        let joined = if rest.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let target =
            ClickHouseTarget::parse(&joined).map_err(|e| e.replacen("--export", "--history", 1))?;
        if target.retention_days.is_some() {
            return Err(format!(
                "--history '{url}': retention_days is an --export option (the writer keeps it)"
            ));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(300)))
            .build()
            .into();
        let h = ClickHouseHistory {
            table: format!("{}.{table}", target.db),
            target,
            agent,
        };
        h.ask(&format!("SELECT count() FROM {} WHERE 0", h.table))
            .map_err(|e| {
                format!(
                    "--history '{}': cannot read {} (is ClickHouse up on its HTTP port, and \
                     has a sonde written there with --export clickhouse://?): {e}",
                    h.target.text, h.table
                )
            })?;
        Ok(h)
    }

    /// The URL it was opened with.
    pub fn url(&self) -> &str {
        &self.target.text
    }

    fn ask(&self, query: &str) -> Result<String, String> {
        post_limited(&self.agent, &self.target, query, b"", MAX_ANSWER)
    }

    /// Rows of a `FORMAT JSONCompact` answer.
    fn rows(&self, query: &str) -> Result<Vec<Vec<Value>>, String> {
        // (64-bit numbers come quoted: `num` reads both forms.)
        let text = self.ask(&format!("{query} FORMAT JSONCompact"))?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("ClickHouse's answer: {e}"))?;
        let Some(Value::Array(data)) = v.get("data") else {
            return Err("ClickHouse's answer has no data".into());
        };
        Ok(data
            .iter()
            .map(|r| r.as_array().cloned().unwrap_or_default())
            .collect())
    }

    /// Flows matching the filters, in the order they ended, skipping `offset`, at most
    /// `limit`.
    pub fn flows(
        &self,
        filter: &Filter,
        origin: Origin,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<FlowRecord>, String> {
        // The record's own columns: a table of schema version 2 (no places) reads as well.
        let cols: Vec<String> = FLOW_COLUMNS[..V2_COLUMNS]
            .iter()
            .map(|(n, t)| {
                if t.starts_with("FixedString") {
                    format!("hex({n})")
                } else {
                    n.to_string()
                }
            })
            .collect();
        let q = format!(
            "SELECT {} FROM {} WHERE {} ORDER BY last_ms, first_ms, src_addr, dst_addr, \
             src_port, dst_port LIMIT {offset}, {limit}",
            cols.join(", "),
            self.table,
            where_clause(filter, origin)
        );
        self.rows(&q)?.iter().map(|r| record_of(r)).collect()
    }

    /// Hosts (either end) by the traffic of their flows, largest first.
    pub fn top_hosts(
        &self,
        filter: &Filter,
        origin: Origin,
        by: Metric,
        limit: usize,
    ) -> Result<Vec<(HostId, Totals)>, String> {
        let w = where_clause(filter, origin);
        let side = |addr: &str| {
            format!(
                "SELECT {addr} AS host, ip_version, vlan, in_bytes + out_bytes AS b, \
                 in_packets + out_packets AS p FROM {} WHERE {w}",
                self.table
            )
        };
        let q = format!(
            "SELECT hex(host), ip_version, vlan, sum(b) AS bytes, sum(p) AS packets, \
             count() AS flows FROM ({} UNION ALL {}) GROUP BY host, ip_version, vlan \
             ORDER BY {} DESC, host LIMIT {limit}",
            side("src_addr"),
            side("dst_addr"),
            metric_column(by)
        );
        let mut out = Vec::new();
        for r in self.rows(&q)? {
            let v = num(&r, 1)? as u8;
            let addr = unmap(&hex16(&r, 0)?, v);
            out.push(((addr, v, num(&r, 2)? as u16), totals(&r, 3)?));
        }
        Ok(ranked(out, by))
    }

    /// Applications by traffic, largest first.
    pub fn top_apps(
        &self,
        filter: &Filter,
        origin: Origin,
        by: Metric,
        limit: usize,
    ) -> Result<Vec<(AppId, Totals)>, String> {
        let q = format!(
            "SELECT l7_proto, sum(in_bytes + out_bytes) AS bytes, \
             sum(in_packets + out_packets) AS packets, count() AS flows FROM {} WHERE {} \
             GROUP BY l7_proto ORDER BY {} DESC, l7_proto LIMIT {limit}",
            self.table,
            where_clause(filter, origin),
            metric_column(by)
        );
        let mut out = Vec::new();
        for r in self.rows(&q)? {
            let l7 = l7_of(text(&r, 0)?);
            out.push(((l7.proto.0, l7.app.0), totals(&r, 1)?));
        }
        Ok(ranked(out, by))
    }

    /// Traffic per `step` seconds by flow start (a flow's traffic counts at its start): the
    /// start of each step with data, and bytes in, bytes out, packets in, packets out, flows.
    /// In and out are seen from `of`, as in the local series: the host's received and sent
    /// for a host, server to client and client to server otherwise.
    pub fn series(
        &self,
        filter: &Filter,
        origin: Origin,
        of: &SeriesOf,
        step: u64,
    ) -> Result<Vec<(u64, [u64; 5])>, String> {
        let mut w = where_clause(filter, origin);
        let (bin, bout, pin, pout) = match of {
            SeriesOf::Host(addr, v, vlan) => {
                let a = hex(&addr16(addr, *v));
                let _ = write!(
                    w,
                    " AND vlan = {vlan} AND (src_addr = unhex('{a}') OR dst_addr = unhex('{a}'))"
                );
                let recv = |to_client: &str, to_server: &str| {
                    format!("sum(if(src_addr = unhex('{a}'), {to_client}, {to_server}))")
                };
                (
                    recv("out_bytes", "in_bytes"),
                    recv("in_bytes", "out_bytes"),
                    recv("out_packets", "in_packets"),
                    recv("in_packets", "out_packets"),
                )
            }
            SeriesOf::App(label) => {
                let _ = write!(w, " AND l7_proto_name = '{}'", sql_string(label));
                totals_in_out()
            }
            SeriesOf::Total => totals_in_out(),
        };
        let q = format!(
            "SELECT intDiv(toUInt64(time_start), {step}) * {step} AS t, {bin}, {bout}, {pin}, \
             {pout}, count() FROM {} WHERE {w} GROUP BY t ORDER BY t",
            self.table,
        );
        self.rows(&q)?
            .iter()
            .map(|r| {
                Ok((
                    num(r, 0)?,
                    [num(r, 1)?, num(r, 2)?, num(r, 3)?, num(r, 4)?, num(r, 5)?],
                ))
            })
            .collect()
    }

    /// The exporters (probes) with flows in the range, by traffic.
    pub fn exporters(&self, filter: &Filter) -> Result<Vec<(Option<IpAddr>, Totals)>, String> {
        let q = format!(
            "SELECT hex(exporter), sum(in_bytes + out_bytes), sum(in_packets + out_packets), \
             count() FROM {} WHERE {} GROUP BY exporter ORDER BY 2 DESC",
            self.table,
            where_clause(filter, Origin::default())
        );
        self.rows(&q)?
            .iter()
            .map(|r| Ok((ip_of(&hex16(r, 0)?), totals(r, 1)?)))
            .collect()
    }
}

/// Which traffic a series sums.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeriesOf {
    /// Every flow.
    Total,
    /// A host's (address as the store keeps it, IP version, VLAN).
    Host([u8; 16], u8, u16),
    /// An application's, by its label (`TLS.Google`).
    App(String),
}

/// In and out as the local series count them: in is server to client, out client to server.
fn totals_in_out() -> (String, String, String, String) {
    (
        "sum(out_bytes)".into(),
        "sum(in_bytes)".into(),
        "sum(out_packets)".into(),
        "sum(in_packets)".into(),
    )
}

/// Text inside a ClickHouse string literal.
fn sql_string(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\'', "\\'")
}

fn metric_column(by: Metric) -> &'static str {
    match by {
        Metric::Bytes => "bytes",
        Metric::Packets => "packets",
        Metric::Flows => "flows",
    }
}

/// The local store's order: by the metric, ties by key.
fn ranked<K: Ord + Copy>(mut v: Vec<(K, Totals)>, by: Metric) -> Vec<(K, Totals)> {
    let get = |t: &Totals| match by {
        Metric::Bytes => t.bytes,
        Metric::Packets => t.packets,
        Metric::Flows => t.flows,
    };
    v.sort_unstable_by(|a, b| get(&b.1).cmp(&get(&a.1)).then(a.0.cmp(&b.0)));
    v
}

/// The SQL condition of a filter (values are numbers and hex only: nothing of the user's text
/// reaches the query).
pub fn where_clause(f: &Filter, origin: Origin) -> String {
    let mut w = String::from("1");
    if let Some(from) = f.from_ms {
        let _ = write!(w, " AND last_ms >= {from}");
    }
    if let Some(to) = f.to_ms {
        // time_start leads the sort key: the range prunes parts and granules.
        let _ = write!(
            w,
            " AND first_ms <= {to} AND time_start <= toDateTime({})",
            to / 1000
        );
    }
    if let Some(n) = &f.host {
        let (lo, hi) = range16(n);
        let _ = write!(
            w,
            " AND (src_addr BETWEEN unhex('{lo}') AND unhex('{hi}') OR dst_addr BETWEEN \
             unhex('{lo}') AND unhex('{hi}'))"
        );
    }
    if let Some(p) = f.port {
        let _ = write!(w, " AND (src_port = {p} OR dst_port = {p})");
    }
    if let Some(p) = f.proto {
        let _ = write!(w, " AND protocol = {p}");
    }
    if let Some(a) = f.app {
        let _ = write!(
            w,
            " AND l7_proto != '' AND (splitByChar('.', l7_proto)[1] = '{a}' OR \
             splitByChar('.', l7_proto)[2] = '{a}')"
        );
    }
    if let Some(e) = origin.exporter {
        let b = match e {
            IpAddr::V4(a) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a.octets());
                addr16(&b, 4)
            }
            IpAddr::V6(a) => a.octets(),
        };
        let _ = write!(w, " AND exporter = unhex('{}')", hex(&b));
    }
    if let Some(p) = origin.place {
        // One end with both, as the local store's test; a country is two ASCII letters.
        let end = |side: &str| {
            let mut t = String::from("1");
            if let Some(c) = p.country {
                let _ = write!(t, " AND {side}_country = '{c}'");
            }
            if let Some(a) = p.asn {
                let _ = write!(t, " AND {side}_as = {a}");
            }
            t
        };
        let _ = write!(w, " AND (({}) OR ({}))", end("src"), end("dst"));
    }
    w
}

/// The lowest and highest 16-byte column values inside a network.
fn range16(n: &Network) -> (String, String) {
    let base = addr16(&n.addr, n.ip_version);
    let bits = n.prefix as usize + if n.ip_version == 4 { 96 } else { 0 };
    let (mut lo, mut hi) = (base, base);
    for i in bits.min(128)..128 {
        let (byte, bit) = (i / 8, 7 - i % 8);
        lo[byte] &= !(1 << bit);
        hi[byte] |= 1 << bit;
    }
    (hex(&lo), hex(&hi))
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02X}");
            s
        })
}

fn cell(r: &[Value], i: usize) -> Result<&Value, String> {
    r.get(i)
        .ok_or_else(|| format!("ClickHouse's answer: a row without column {i}"))
}

fn num(r: &[Value], i: usize) -> Result<u64, String> {
    let v = cell(r, i)?;
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .ok_or_else(|| format!("ClickHouse's answer: column {i} is not a number: {v}"))
}

fn text(r: &[Value], i: usize) -> Result<&str, String> {
    let v = cell(r, i)?;
    v.as_str()
        .ok_or_else(|| format!("ClickHouse's answer: column {i} is not text: {v}"))
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn hex16(r: &[Value], i: usize) -> Result<[u8; 16], String> {
    unhex(text(r, i)?)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| format!("ClickHouse's answer: column {i} is not 16 bytes"))
}

/// 16 column bytes back to the store's form (IPv4 in the first 4 bytes).
fn unmap(b: &[u8; 16], ip_version: u8) -> [u8; 16] {
    if ip_version == 4 {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&b[12..]);
        a
    } else {
        *b
    }
}

fn ip_of(b: &[u8; 16]) -> Option<IpAddr> {
    if *b == [0; 16] {
        return None;
    }
    let v6 = std::net::Ipv6Addr::from(*b);
    Some(match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    })
}

fn totals(r: &[Value], at: usize) -> Result<Totals, String> {
    Ok(Totals {
        bytes: num(r, at)?,
        packets: num(r, at + 1)?,
        flows: num(r, at + 2)?,
    })
}

/// `91.126` → the label; empty (DPI had not finished) → unknown.
fn l7_of(number: &str) -> L7 {
    let (p, a) = number.split_once('.').unwrap_or((number, "0"));
    L7 {
        proto: Proto(p.parse().unwrap_or(0)),
        app: Proto(a.parse().unwrap_or(0)),
        ..L7::default()
    }
}

/// An enum's value from the name its `name()` gives.
fn by_name<T: Copy>(
    name: &str,
    from_number: impl Fn(u8) -> Option<T>,
    name_of: impl Fn(T) -> &'static str,
) -> Option<T> {
    (0..=u8::MAX)
        .filter_map(from_number)
        .find(|v| name_of(*v) == name)
}

/// A row of [`FLOW_COLUMNS`] (FixedStrings in hex) back into the record it was written from.
fn record_of(r: &[Value]) -> Result<FlowRecord, String> {
    let col = |name: &str| {
        FLOW_COLUMNS
            .iter()
            .position(|(n, _)| *n == name)
            .expect("a column of FLOW_COLUMNS")
    };
    let n = |name: &str| num(r, col(name));
    let t = |name: &str| text(r, col(name));
    let bytes = |name: &str| -> Result<Vec<u8>, String> {
        unhex(t(name)?).ok_or_else(|| format!("ClickHouse's answer: {name} is not hex"))
    };
    let v = n("ip_version")? as u8;
    let mut f = Flow::default();
    let mut x = sonde_flow::FlowExt::default();
    f.key.ip_version = v;
    f.key.addr_a = unmap(&hex16(r, col("src_addr"))?, v);
    f.key.addr_b = unmap(&hex16(r, col("dst_addr"))?, v);
    f.key.port_a = n("src_port")? as u16;
    f.key.port_b = n("dst_port")? as u16;
    f.key.proto = n("protocol")? as u8;
    f.key.vlan = n("vlan")? as u16;
    f.client_is_a = true;
    f.first_ns = n("first_ms")? * 1_000_000;
    f.last_ns = n("last_ms")? * 1_000_000;
    f.record_start_ns = f.first_ns;
    f.pkts = [n("in_packets")?, n("out_packets")?];
    f.bytes = [n("in_bytes")?, n("out_bytes")?];
    f.tcp_flags = [n("client_tcp_flags")? as u8, n("server_tcp_flags")? as u8];
    f.tos = n("tos")? as u8;
    f.icmp_type_code = n("icmp_type")? as u16;
    x.in_if = n("in_if")? as u32;
    x.out_if = n("out_if")? as u32;
    f.sampling = n("sampling")? as u32;
    x.retransmits = [
        n("retransmitted_in_packets")? as u32,
        n("retransmitted_out_packets")? as u32,
    ];
    x.out_of_order = [
        n("ooorder_in_packets")? as u32,
        n("ooorder_out_packets")? as u32,
    ];
    x.rtt_client_us = n("client_latency_us")? as u32;
    x.rtt_server_us = n("server_latency_us")? as u32;
    let mac = |name: &str| -> Result<[u8; 6], String> {
        bytes(name)?
            .try_into()
            .map_err(|_| format!("ClickHouse's answer: {name} is not 6 bytes"))
    };
    f.mac_a = mac("client_mac")?;
    f.mac_b = mac("server_mac")?;
    f.tunnel = by_name(t("tunnel")?, Tunnel::from_number, Tunnel::name).unwrap_or_default();
    f.fragments = n("fragments")? as u32;
    let l7 = t("l7_proto")?;
    if !l7.is_empty() {
        f.dpi_done = true;
        f.l7 = L7 {
            category: by_name(t("l7_category")?, Category::from_number, Category::name)
                .unwrap_or_default(),
            confidence: by_name(
                t("l7_confidence")?,
                Confidence::from_number,
                Confidence::name,
            )
            .unwrap_or_default(),
            ..l7_of(l7)
        };
    }
    let reason_name = t("end_reason")?;
    let reason = EndReason::ALL
        .into_iter()
        .find(|e| e.name() == reason_name)
        .unwrap_or(EndReason::IdleTimeout);
    let exporter = ip_of(&hex16(r, col("exporter"))?).map(|ip| (SocketAddr::new(ip, 0), 0));
    let list = |name: &str| -> Result<Vec<&str>, String> {
        match cell(r, col(name))? {
            Value::Array(a) => Ok(a.iter().filter_map(Value::as_str).collect()),
            other => Err(format!(
                "ClickHouse's answer: {name} is not a list: {other}"
            )),
        }
    };
    let (keys, values) = (list("meta_keys")?, list("meta_values")?);
    let meta = if keys.is_empty() {
        None
    } else {
        let mut m = sonde_dpi::Meta::default();
        for (k, v) in keys.iter().zip(values) {
            sonde_dpi::meta::set_text(&mut m, k, v);
        }
        Some(Box::new(m))
    };
    Ok(FlowRecord {
        flow: f,
        ext: x,
        reason,
        meta,
        exporter,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RowBinary row as the flows query gets it back in JSON (FixedStrings in hex).
    fn row_as_clickhouse_answers(mut b: &[u8]) -> Vec<Value> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> &'a [u8] {
            let (h, t) = b.split_at(n);
            *b = t;
            h
        }
        fn leb(b: &mut &[u8]) -> usize {
            let (mut n, mut shift) = (0usize, 0);
            loop {
                let x = take(b, 1)[0];
                n |= ((x & 0x7f) as usize) << shift;
                shift += 7;
                if x < 0x80 {
                    return n;
                }
            }
        }
        fn string(b: &mut &[u8]) -> String {
            let n = leb(b);
            String::from_utf8(take(b, n).to_vec()).unwrap()
        }
        let mut row = Vec::new();
        for (_, ty) in FLOW_COLUMNS {
            let uint = |b: &mut &[u8], n: usize| {
                let mut x = [0u8; 8];
                x[..n].copy_from_slice(take(b, n));
                Value::from(u64::from_le_bytes(x))
            };
            row.push(match *ty {
                "UInt8" => uint(&mut b, 1),
                "UInt16" | "Date" => uint(&mut b, 2),
                "UInt32" | "DateTime" => uint(&mut b, 4),
                "UInt64" => uint(&mut b, 8),
                "String" => Value::from(string(&mut b)),
                "Array(String)" => {
                    let n = leb(&mut b);
                    Value::from((0..n).map(|_| string(&mut b)).collect::<Vec<_>>())
                }
                t => {
                    let n: usize = t
                        .strip_prefix("FixedString(")
                        .and_then(|x| x.strip_suffix(')'))
                        .and_then(|x| x.parse().ok())
                        .unwrap_or_else(|| panic!("a type this test knows: {t}"));
                    Value::from(hex(take(&mut b, n)))
                }
            });
        }
        assert!(b.is_empty(), "the row has more bytes than FLOW_COLUMNS");
        row
    }

    #[test]
    fn a_place_is_one_end_with_all_of_it() {
        let place = |country: Option<&str>, asn| Origin {
            place: Some(StoredPlace {
                country: country.and_then(sonde_geo::Country::parse),
                asn,
            }),
            ..Origin::default()
        };
        let f = Filter::default();
        assert_eq!(where_clause(&f, Origin::default()), "1");
        assert_eq!(
            where_clause(&f, place(Some("de"), None)),
            "1 AND ((1 AND src_country = 'DE') OR (1 AND dst_country = 'DE'))"
        );
        assert_eq!(
            where_clause(&f, place(Some("US"), Some(15169))),
            "1 AND ((1 AND src_country = 'US' AND src_as = 15169) OR \
             (1 AND dst_country = 'US' AND dst_as = 15169))"
        );
    }

    #[test]
    fn labels_cannot_leave_their_string_literal() {
        assert_eq!(sql_string(r"a'b\c"), r"a\'b\\c");
    }

    #[test]
    fn networks_become_byte_ranges_of_the_mapped_column() {
        let n = Network {
            addr: [10, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            ip_version: 4,
            prefix: 16,
        };
        let (lo, hi) = range16(&n);
        assert_eq!(lo, "00000000000000000000FFFF0A010000");
        assert_eq!(hi, "00000000000000000000FFFF0A01FFFF");
        let mut a = [0u8; 16];
        a[..2].copy_from_slice(&[0x20, 0x01]);
        let (lo, hi) = range16(&Network {
            addr: a,
            ip_version: 6,
            prefix: 12,
        });
        assert_eq!(lo, "20000000000000000000000000000000");
        assert_eq!(hi, "200FFFFFFFFFFFFFFFFFFFFFFFFFFFFF");
    }

    #[test]
    fn a_row_reads_back_as_the_record_it_was_written_from() {
        // Through row_binary's order: every column, FixedStrings in hex as the query asks.
        let mut f = Flow::default();
        let mut x = sonde_flow::FlowExt::default();
        f.key.ip_version = 4;
        f.key.addr_a[..4].copy_from_slice(&[192, 0, 2, 1]);
        f.key.addr_b[..4].copy_from_slice(&[198, 51, 100, 7]);
        (f.key.port_a, f.key.port_b, f.key.proto) = (443, 50000, 6);
        f.client_is_a = false;
        f.first_ns = 1_700_000_000_123_000_000;
        f.last_ns = 1_700_000_001_456_000_000;
        f.record_start_ns = f.first_ns;
        f.pkts = [3, 5];
        f.bytes = [300, 5000];
        x.retransmits = [1, 2];
        x.rtt_client_us = 1500;
        f.mac_b = [2, 0, 0, 0, 0, 9];
        f.tunnel = Tunnel::Vxlan;
        f.dpi_done = true;
        f.l7 = L7 {
            proto: Proto(91),
            app: Proto(126),
            category: Category::Web,
            confidence: Confidence::Dpi,
        };
        let mut m = sonde_dpi::Meta::default();
        sonde_dpi::meta::set_text(&mut m, "TLS_SERVER_NAME", "example.org");
        let r = FlowRecord {
            flow: f,
            ext: x,
            reason: EndReason::TcpEnd,
            meta: Some(Box::new(m)),
            exporter: Some(("10.9.8.7:0".parse().unwrap(), 0)),
        };
        let mut bin = Vec::new();
        crate::clickhouse_sink::row_binary(&r, None, &mut bin);
        let row = row_as_clickhouse_answers(&bin);
        let back = record_of(&row).unwrap();
        let json = |r: &FlowRecord| {
            let mut out = Vec::new();
            let mut w = sonde_export::FlowWriter::new(&mut out, sonde_export::Format::Json);
            w.write(r).unwrap();
            w.flush().unwrap();
            drop(w);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(json(&back), json(&r));
        assert_eq!(
            back.exporter.map(|e| e.0.ip()),
            r.exporter.map(|e| e.0.ip())
        );
    }
}
