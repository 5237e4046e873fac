//! `--zmq-export`: expired flows as JSON (nProbe key names, the `--flows-out` format) pushed
//! over ZMQ to a collector (`sonde --collect zmq+tcp://…` binds; exporters connect, so one
//! collector takes many probes: sonde's hierarchy). PUSH/PULL rather than PUB/SUB: a message
//! sent before the connection is up is queued, not lost; when the queue (high-water mark) is
//! full, the batch is dropped and counted, never blocking the probe.
//!
//! With `format=ntopng` it speaks ntopng's own framing instead, as nProbe does (see
//! `docs/zmq-interop.md`): a PUB (XPUB) socket that binds (or with `mode=probe` connects to a
//! collector that binds, ntopng's `-i tcp://*:PORTc`), each message a header part (topic
//! `flow`, version, message id counting up) and a payload part (a JSON array of flow objects
//! with nProbe's numeric keys, or labels; zlib-compressed with `compress=zlib`).

use crate::sinks::{RecordSink, SinkReport};
use sonde_export::{FlowWriter, Format};
use sonde_flow::FlowRecord;
use std::io;

pub struct ZmqSink {
    endpoint: String,
    socket: zmq::Socket,
    /// Kept alive as long as the socket.
    _ctx: zmq::Context,
    report: SinkReport,
    /// With `format=ntopng`: ntopng's framing on an XPUB socket (see [`Ntopng`]).
    ntopng: Option<Ntopng>,
    /// `--geoip-dir`: the countries and AS numbers of both ends, in every flow object.
    geo: Option<std::sync::Arc<sonde_geo::GeoDb>>,
}

/// What a `--zmq-export` URL asks for.
#[derive(Clone, Debug, PartialEq)]
struct Options<'a> {
    endpoint: &'a str,
    curve: Option<&'a str>,
    ntopng: Option<NtopngOptions>,
}

/// `format=ntopng` and its options.
#[derive(Clone, Debug, PartialEq)]
struct NtopngOptions {
    /// `mode=probe`: connect to a collector that binds (ntopng's `-i tcp://*:PORTc`); else
    /// bind, as nProbe's `--zmq tcp://*:PORT` does, for ntopng to connect to.
    connect: bool,
    compress: bool,
    /// `payload=tlv`: nDPI's TLV serializer instead of JSON (nProbe's TLV ZMQ format).
    tlv: bool,
    /// nProbe's numeric keys (its default); `keys=labels` writes the names, as nProbe's
    /// `--json-labels` does.
    numeric: bool,
    layout: ntopng::Layout,
    source_id: u32,
    /// How long the first batch waits for a subscriber (`wait=SECONDS`, default 0): a PUB
    /// socket drops what it sends before any subscriber is there.
    wait: std::time::Duration,
}

/// The state of an ntopng-format exporter. The socket is an XPUB (a PUB to its subscribers):
/// it hears their subscriptions, so a batch sent while no subscriber takes the `flow` topic is
/// counted as dropped instead of vanishing.
struct Ntopng {
    opts: NtopngOptions,
    msg_id: u32,
    /// The topics subscribed to (XPUB passes the first subscription of each and the last
    /// unsubscription).
    topics: Vec<Vec<u8>>,
    waited: bool,
}

use sonde_export::ntopng;

const USAGE: &str = "the options are curve=PUBLIC_KEY_FILE, when_full, queue, and with \
    format=ntopng: mode=probe, compress=zlib, payload=json|tlv, keys=ids|labels, header=v1|v4, \
    source_id=N, wait=SECONDS";

impl ZmqSink {
    /// Connects to `tcp://HOST:PORT` (PUSH, sonde's JSON arrays), or with `format=ntopng`
    /// binds (or with `mode=probe` connects) an XPUB speaking ntopng's framing; with
    /// `?curve=PUBLIC_KEY_FILE` (the collector's public key) encrypted with CURVE
    /// ([`crate::zmq_curve`]).
    pub fn connect(url: &str) -> Result<ZmqSink, String> {
        let o = ZmqSink::options(url)?;
        let endpoint = o.endpoint;
        let what = format!("--zmq-export {endpoint}");
        let ctx = zmq::Context::new();
        let kind = if o.ntopng.is_some() {
            zmq::XPUB
        } else {
            zmq::PUSH
        };
        let socket = ctx
            .socket(kind)
            .map_err(|e| format!("{what}: cannot create a socket: {e}"))?;
        if let Some(file) = o.curve {
            crate::zmq_curve::connect(&socket, std::path::Path::new(file), &what)?;
        }
        // On close, wait up to 5 s for queued messages to reach the collector.
        socket
            .set_linger(5000)
            .and_then(|_| socket.set_sndhwm(1000))
            .map_err(|e| format!("{what}: {e}"))?;
        match &o.ntopng {
            Some(n) if !n.connect => socket.bind(endpoint).map_err(|e| {
                format!(
                    "{what}: cannot listen ({e}): format=ntopng binds, as nProbe does, for \
                     ntopng to connect; is the port in use or the address not local? (add \
                     mode=probe to connect to a collector that binds instead)"
                )
            })?,
            _ => socket
                .connect(endpoint)
                .map_err(|e| format!("{what}: {e} (expected tcp://HOST:PORT of a collector)"))?,
        }
        let ntopng = o.ntopng.map(|opts| Ntopng {
            opts,
            msg_id: 0,
            topics: Vec::new(),
            waited: false,
        });
        Ok(ZmqSink {
            endpoint: endpoint.to_string(),
            socket,
            _ctx: ctx,
            report: SinkReport {
                name: format!("zmq {endpoint}"),
                ..SinkReport::default()
            },
            ntopng,
            geo: None,
        })
    }

    /// Flow objects carry the countries and AS numbers of both ends (`--geoip-dir`).
    pub fn with_geo(mut self, geo: Option<std::sync::Arc<sonde_geo::GeoDb>>) -> ZmqSink {
        self.geo = geo;
        self
    }
}

impl ZmqSink {
    /// The endpoint and options of a `--zmq-export` URL.
    fn options(url: &str) -> Result<Options<'_>, String> {
        let (endpoint, query) = url.split_once('?').unwrap_or((url, ""));
        let mut curve = None;
        let mut ntopng = false;
        let mut n = NtopngOptions {
            connect: false,
            compress: false,
            tlv: false,
            numeric: true,
            layout: ntopng::Layout::V1,
            source_id: 0,
            wait: std::time::Duration::ZERO,
        };
        let mut ntopng_only = Vec::new();
        let bad = |pair: &str, why: &str| format!("--zmq-export {url}: '{pair}': {why}");
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "curve" if !v.is_empty() => curve = Some(v),
                "format" => match v {
                    "ntopng" => ntopng = true,
                    "json" | "sonde" => ntopng = false,
                    _ => return Err(bad(pair, "use format=ntopng or format=json (the default)")),
                },
                "mode" => {
                    ntopng_only.push(pair);
                    n.connect = match v {
                        "probe" => true,
                        "bind" => false,
                        _ => return Err(bad(pair, "use mode=probe (connect) or mode=bind")),
                    }
                }
                "compress" => {
                    ntopng_only.push(pair);
                    n.compress = match v {
                        "zlib" => true,
                        "none" => false,
                        _ => return Err(bad(pair, "use compress=zlib or compress=none")),
                    }
                }
                "payload" => {
                    ntopng_only.push(pair);
                    n.tlv = match v {
                        "tlv" => true,
                        "json" => false,
                        _ => {
                            return Err(bad(pair, "use payload=json (the default) or payload=tlv"))
                        }
                    }
                }
                "keys" => {
                    ntopng_only.push(pair);
                    n.numeric = match v {
                        "ids" => true,
                        "labels" => false,
                        _ => {
                            return Err(bad(pair, "use keys=ids (nProbe's default) or keys=labels"))
                        }
                    }
                }
                "header" => {
                    ntopng_only.push(pair);
                    n.layout = ntopng::Layout::parse(v).ok_or_else(|| {
                        bad(pair, "use header=v1 (24 bytes, every ntopng) or header=v4 (36 bytes, ntopng 6.4 and later)")
                    })?;
                }
                "source_id" => {
                    ntopng_only.push(pair);
                    n.source_id = v
                        .parse()
                        .map_err(|_| bad(pair, "give a number (0 to 255 with header=v1)"))?;
                }
                "wait" => {
                    ntopng_only.push(pair);
                    n.wait = v
                        .parse::<f64>()
                        .ok()
                        .filter(|s| (0.0..=3600.0).contains(s))
                        .map(std::time::Duration::from_secs_f64)
                        .ok_or_else(|| bad(pair, "give seconds, 0 to 3600"))?;
                }
                _ => {
                    return Err(format!(
                        "--zmq-export {url}: unknown option '{pair}' ({USAGE})"
                    ))
                }
            }
        }
        if !ntopng {
            if let Some(pair) = ntopng_only.first() {
                return Err(bad(
                    pair,
                    "this option belongs to ntopng's framing: add format=ntopng",
                ));
            }
        }
        if n.tlv && n.compress && n.layout != ntopng::Layout::V4 {
            return Err(format!(
                "--zmq-export {url}: ntopng reads a TLV payload of the 24-byte header as it \
                 comes, never inflated: drop compress=zlib, or add header=v4 (whose flags say \
                 both)"
            ));
        }
        if n.layout == ntopng::Layout::V1 && n.source_id > 255 {
            return Err(format!(
                "--zmq-export {url}: source_id={} does not fit the 24-byte header's one byte: \
                 give 0 to 255, or header=v4",
                n.source_id
            ));
        }
        Ok(Options {
            endpoint,
            curve,
            ntopng: ntopng.then_some(n),
        })
    }

    /// Checks a `--zmq-export` URL's options and key file at start, before any sink runs.
    pub fn check(url: &str) -> Result<(), String> {
        let o = ZmqSink::options(url)?;
        if let Some(file) = o.curve {
            let what = format!("--zmq-export {}", o.endpoint);
            crate::zmq_curve::read_key(
                std::path::Path::new(file),
                crate::zmq_curve::Key::Public,
                &what,
            )?;
        }
        Ok(())
    }

    /// The options `--zmq-export` takes besides the queue's (for the URL splitter).
    pub const OPTIONS: &'static [&'static str] = &[
        "curve",
        "format",
        "mode",
        "compress",
        "payload",
        "keys",
        "header",
        "source_id",
        "wait",
    ];

    /// Sends one batch in ntopng's framing (its JSON array already made).
    fn send_ntopng(&mut self, json: Vec<u8>, records: u64) -> io::Result<()> {
        let n = self.ntopng.as_mut().expect("ntopng mode");
        let flow_taken = |topics: &[Vec<u8>]| topics.iter().any(|t| b"flow".starts_with(t));
        hear(&self.socket, &mut n.topics, 0);
        if !flow_taken(&n.topics) && !n.waited && !n.opts.wait.is_zero() {
            let deadline = std::time::Instant::now() + n.opts.wait;
            while !flow_taken(&n.topics) {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                hear(&self.socket, &mut n.topics, left.as_millis().max(1) as i64);
            }
        }
        n.waited = true;
        if !flow_taken(&n.topics) {
            // A PUB would send it to nobody.
            self.report.dropped += records;
            return Ok(());
        }
        let json = if n.opts.numeric {
            numeric_keys(json)?
        } else {
            json
        };
        let body = if n.opts.tlv { tlv_of(&json)? } else { json };
        let payload = if n.opts.compress {
            ntopng::compress(&body, n.opts.layout)
        } else {
            body.clone()
        };
        n.msg_id = n.msg_id.wrapping_add(1).max(1);
        let kind = ntopng::PayloadKind {
            tlv: n.opts.tlv,
            compressed: n.opts.compress,
        };
        let header = ntopng::encode_header(
            n.opts.layout,
            "flow",
            n.msg_id,
            n.opts.source_id,
            kind,
            body.len(),
            payload.len(),
        );
        // Slices, copied by libzmq (see `write`).
        let sent = self
            .socket
            .send(&header[..], zmq::SNDMORE | zmq::DONTWAIT)
            .and_then(|_| self.socket.send(&payload[..], zmq::DONTWAIT));
        match sent {
            Ok(()) => {
                self.report.messages += 1;
                self.report.records += records;
            }
            Err(zmq::Error::EAGAIN) => self.report.dropped += records,
            Err(e) => return Err(io::Error::other(format!("zmq send: {e}"))),
        }
        Ok(())
    }
}

/// Takes the subscriptions waiting on an XPUB socket (first byte 1: subscribe, 0: unsubscribe,
/// then the topic), waiting up to `timeout_ms` for the first.
fn hear(socket: &zmq::Socket, topics: &mut Vec<Vec<u8>>, timeout_ms: i64) {
    let mut wait = timeout_ms;
    while matches!(socket.poll(zmq::POLLIN, wait), Ok(n) if n > 0) {
        wait = 0;
        match socket.recv_bytes(zmq::DONTWAIT) {
            Ok(m) if m.first() == Some(&1) => {
                if !topics.iter().any(|t| t[..] == m[1..]) {
                    topics.push(m[1..].to_vec());
                }
            }
            Ok(m) if m.first() == Some(&0) => topics.retain(|t| t[..] != m[1..]),
            Ok(_) => {}
            Err(_) => break,
        }
    }
}

/// A JSON array of flow objects as one TLV buffer (nDPI's serializer): a record each.
fn tlv_of(json: &[u8]) -> io::Result<Vec<u8>> {
    let items: Vec<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_slice(json).map_err(io::Error::other)?;
    let mut out = Vec::with_capacity(json.len() / 2 + 2);
    out.extend_from_slice(&sonde_export::tlv::HEADER);
    for o in &items {
        sonde_export::tlv::encode_record(o, &mut out);
    }
    Ok(out)
}

/// A JSON array of flow objects with nProbe's numeric keys.
fn numeric_keys(json: Vec<u8>) -> io::Result<Vec<u8>> {
    let v: serde_json::Value = serde_json::from_slice(&json).map_err(io::Error::other)?;
    let serde_json::Value::Array(items) = v else {
        return Ok(json);
    };
    let items: Vec<serde_json::Value> = items
        .into_iter()
        .map(|item| match item {
            serde_json::Value::Object(o) => serde_json::Value::Object(ntopng::to_numeric_keys(o)),
            other => other,
        })
        .collect();
    serde_json::to_vec(&items).map_err(io::Error::other)
}

impl RecordSink for ZmqSink {
    fn name(&self) -> String {
        format!("zmq {}", self.endpoint)
    }

    fn write(&mut self, batch: &[FlowRecord]) -> io::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        // A JSON array of flow objects: the JSON lines writer's objects, comma-joined.
        let mut w = FlowWriter::new(Vec::with_capacity(batch.len() * 700), Format::Json)
            .with_geo(self.geo.clone());
        for r in batch {
            w.write(r)?;
        }
        let lines = w.into_inner();
        let mut msg = Vec::with_capacity(lines.len() + 2);
        msg.push(b'[');
        for (i, line) in lines
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .enumerate()
        {
            if i > 0 {
                msg.push(b',');
            }
            msg.extend_from_slice(line);
        }
        msg.push(b']');
        if self.ntopng.is_some() {
            return self.send_ntopng(msg, batch.len() as u64);
        }
        // A slice, which libzmq copies: the zmq crate (0.9.2) sends a `Vec` without copying but
        // frees it as a one-byte allocation, which only glibc's size-blind `free` survives
        // (under jemalloc, sonde crashed in that free on libzmq's I/O thread).
        match self.socket.send(&msg[..], zmq::DONTWAIT) {
            Ok(()) => {
                self.report.messages += 1;
                self.report.records += batch.len() as u64;
            }
            Err(zmq::Error::EAGAIN) => self.report.dropped += batch.len() as u64,
            Err(e) => return Err(io::Error::other(format!("zmq send: {e}"))),
        }
        Ok(())
    }

    fn finish(&mut self) -> io::Result<SinkReport> {
        Ok(self.report.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_of_both_formats() {
        let o = ZmqSink::options("tcp://127.0.0.1:5556?curve=k").unwrap();
        assert_eq!(
            (o.endpoint, o.curve, o.ntopng),
            ("tcp://127.0.0.1:5556", Some("k"), None)
        );
        let o = ZmqSink::options("tcp://*:5556?format=ntopng").unwrap();
        let n = o.ntopng.unwrap();
        assert!(!n.connect && !n.compress && n.numeric && n.source_id == 0);
        assert_eq!(n.layout, ntopng::Layout::V1);
        let o = ZmqSink::options(
            "tcp://h:1?format=ntopng&mode=probe&compress=zlib&keys=labels&header=v4&source_id=300&wait=2.5",
        )
        .unwrap();
        let n = o.ntopng.unwrap();
        assert!(n.connect && n.compress && !n.numeric);
        assert_eq!((n.layout, n.source_id), (ntopng::Layout::V4, 300));
        assert_eq!(n.wait, std::time::Duration::from_millis(2500));
        assert!(!n.tlv);
        let o = ZmqSink::options("tcp://h:1?format=ntopng&payload=tlv&compress=zlib&header=v4");
        assert!(o.unwrap().ntopng.unwrap().tlv);
        for (url, says) in [
            ("tcp://h:1?compress=zlib", "add format=ntopng"),
            ("tcp://h:1?format=ntopng&source_id=256", "header=v4"),
            ("tcp://h:1?format=ntopng&compress=lz4", "compress=zlib"),
            ("tcp://h:1?format=ntopng&header=v3", "header=v1"),
            ("tcp://h:1?format=xml", "format=ntopng"),
            ("tcp://h:1?format=ntopng&payload=xml", "payload=tlv"),
            ("tcp://h:1?payload=tlv", "add format=ntopng"),
            (
                "tcp://h:1?format=ntopng&payload=tlv&compress=zlib",
                "header=v4",
            ),
            ("tcp://h:1?colour=red", "unknown option"),
        ] {
            let e = ZmqSink::options(url).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
        }
    }

    fn record(port: u16) -> FlowRecord {
        let mut key = sonde_flow::FlowKey {
            ip_version: 4,
            proto: 6,
            port_a: port,
            port_b: 80,
            ..Default::default()
        };
        key.addr_a[..4].copy_from_slice(&[10, 0, 0, 1]);
        key.addr_b[..4].copy_from_slice(&[10, 0, 0, 9]);
        let mut flow = sonde_flow::Flow {
            key,
            client_is_a: true,
            pkts: [2, 0],
            bytes: [120, 0],
            ..Default::default()
        };
        flow.first_ns = 1_700_000_000_000_000_000;
        flow.last_ns = flow.first_ns + 1_000_000;
        FlowRecord {
            flow,
            ext: Default::default(),
            reason: sonde_flow::EndReason::IdleTimeout,
            meta: None,
            exporter: None,
        }
    }

    /// An exporter in ntopng's framing heard by a SUB socket: two parts, the 24-byte header
    /// with topic `flow` and message ids 1, 2, the payload JSON with numeric keys (zlib with
    /// compress=zlib); a batch sent before any subscriber is counted as dropped.
    #[test]
    fn ntopng_messages_reach_a_subscriber() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut sink = ZmqSink::connect(&format!(
            "tcp://127.0.0.1:{port}?format=ntopng&compress=zlib&wait=5"
        ))
        .unwrap();
        let ctx = zmq::Context::new();
        let sub = ctx.socket(zmq::SUB).unwrap();
        sub.set_subscribe(b"flow").unwrap();
        sub.set_rcvtimeo(5000).unwrap();
        sub.connect(&format!("tcp://127.0.0.1:{port}")).unwrap();
        let records: Vec<FlowRecord> = (1..=2).map(record).collect();
        for _ in 0..2 {
            sink.write(&records).unwrap();
        }
        for want_id in [1u32, 2] {
            let parts = sub.recv_multipart(0).unwrap();
            assert_eq!(parts.len(), 2);
            let h = &parts[0];
            assert_eq!(h.len(), 24);
            assert_eq!(&h[..5], b"flow\0");
            assert_eq!(h[16], 2);
            assert_eq!(u32::from_be_bytes(h[20..24].try_into().unwrap()), want_id);
            assert_eq!(parts[1][0], 0, "compressed: a leading 0");
            let hdr = ntopng::decode_header(h).unwrap();
            let json = ntopng::payload_json(&hdr, &parts[1], 1 << 20).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
            assert_eq!(v.as_array().unwrap().len(), 2);
            assert!(
                v[0].get("8").is_some() && v[0].get("IPV4_SRC_ADDR").is_none(),
                "{v}"
            );
        }
        let r = sink.finish().unwrap();
        assert_eq!((r.messages, r.records, r.dropped), (2, 4, 0));
        // Nobody subscribed and no wait: the batch is counted as dropped, not sent to nobody.
        let mut alone = ZmqSink::connect("tcp://127.0.0.1:0?format=ntopng").unwrap();
        alone.write(&records).unwrap();
        let r = alone.finish().unwrap();
        assert_eq!((r.messages, r.records, r.dropped), (0, 0, 2));
    }
}
