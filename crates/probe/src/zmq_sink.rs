//! `--zmq-export`: expired flows as JSON (nProbe key names, the `--flows-out` format) pushed
//! over ZMQ to a collector (`sonde --collect zmq+tcp://…` binds; exporters connect, so one
//! collector takes many probes: sonde's hierarchy). PUSH/PULL rather than PUB/SUB: a message
//! sent before the connection is up is queued, not lost; when the queue (high-water mark) is
//! full, the batch is dropped and counted, never blocking the probe.

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
}

impl ZmqSink {
    /// Connects to `tcp://HOST:PORT`, or with `?curve=PUBLIC_KEY_FILE` (the collector's public
    /// key) encrypted with CURVE ([`crate::zmq_curve`]).
    pub fn connect(url: &str) -> Result<ZmqSink, String> {
        let (endpoint, curve) = ZmqSink::options(url)?;
        let ctx = zmq::Context::new();
        let socket = ctx
            .socket(zmq::PUSH)
            .map_err(|e| format!("--zmq-export {endpoint}: cannot create a socket: {e}"))?;
        if let Some(file) = curve {
            crate::zmq_curve::connect(
                &socket,
                std::path::Path::new(file),
                &format!("--zmq-export {endpoint}"),
            )?;
        }
        // On close, wait up to 5 s for queued messages to reach the collector.
        socket
            .set_linger(5000)
            .and_then(|_| socket.set_sndhwm(1000))
            .map_err(|e| format!("--zmq-export {endpoint}: {e}"))?;
        socket.connect(endpoint).map_err(|e| {
            format!("--zmq-export {endpoint}: {e} (expected tcp://HOST:PORT of a collector)")
        })?;
        Ok(ZmqSink {
            endpoint: endpoint.to_string(),
            socket,
            _ctx: ctx,
            report: SinkReport {
                name: format!("zmq {endpoint}"),
                ..SinkReport::default()
            },
        })
    }
}

impl ZmqSink {
    /// The endpoint and the `curve=` key file of a `--zmq-export` URL.
    fn options(url: &str) -> Result<(&str, Option<&str>), String> {
        let (endpoint, query) = url.split_once('?').unwrap_or((url, ""));
        let mut curve = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("curve", file)) if !file.is_empty() => curve = Some(file),
                _ => {
                    return Err(format!(
                        "--zmq-export {url}: unknown option '{pair}' (the options are \
                         curve=PUBLIC_KEY_FILE, when_full and queue)"
                    ))
                }
            }
        }
        Ok((endpoint, curve))
    }

    /// Checks a `--zmq-export` URL's options and key file at start, before any sink runs.
    pub fn check(url: &str) -> Result<(), String> {
        let (endpoint, curve) = ZmqSink::options(url)?;
        if let Some(file) = curve {
            let what = format!("--zmq-export {endpoint}");
            crate::zmq_curve::read_key(
                std::path::Path::new(file),
                crate::zmq_curve::Key::Public,
                &what,
            )?;
        }
        Ok(())
    }
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
        let mut w = FlowWriter::new(Vec::with_capacity(batch.len() * 700), Format::Json);
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
        match self.socket.send(msg, zmq::DONTWAIT) {
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
