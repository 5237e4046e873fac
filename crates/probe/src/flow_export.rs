//! `--export`: expired flows as NetFlow v5/v9 or IPFIX to a collector (nfcapd, nfacctd, another
//! sonde …) over UDP, or IPFIX over TCP. Encoding is sonde_flowproto's; this is the socket side.
//! UDP send errors (no listener yet: ICMP port unreachable) drop the datagram and count it; a
//! broken TCP connection is retried on the next batch, its records counted as dropped meanwhile.

use crate::sinks::{RecordSink, SinkReport};
use sonde_flow::FlowRecord;
use sonde_flowproto::encode::{ExportFormat, Exporter, ExporterConfig, Transport};
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A parsed `--export` destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportTarget {
    pub format: ExportFormat,
    pub transport: Transport,
    pub addr: SocketAddr,
    pub text: String,
}

impl ExportTarget {
    /// `netflow5://HOST:PORT`, `netflow9://…`, `ipfix://…` (UDP) or `ipfix+tcp://…`.
    pub fn parse(s: &str) -> Result<ExportTarget, String> {
        let help = "(use netflow5://HOST:PORT, netflow9://HOST:PORT, ipfix://HOST:PORT or \
                    ipfix+tcp://HOST:PORT)";
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| format!("--export '{s}': no scheme {help}"))?;
        let (format, transport) = match scheme {
            "netflow5" | "nf5" => (ExportFormat::NetflowV5, Transport::Udp),
            "netflow9" | "nf9" => (ExportFormat::NetflowV9, Transport::Udp),
            "ipfix" | "ipfix+udp" => (ExportFormat::Ipfix, Transport::Udp),
            "ipfix+tcp" => (ExportFormat::Ipfix, Transport::Tcp),
            other => return Err(format!("--export '{s}': unknown format '{other}' {help}")),
        };
        let addr = rest
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| format!("--export '{s}': '{rest}' is not HOST:PORT {help}"))?;
        Ok(ExportTarget {
            format,
            transport,
            addr,
            text: s.to_string(),
        })
    }
}

impl ExportTarget {
    /// Its kind's name in [`crate::sinks::SINKS`].
    pub fn kind(&self) -> &'static str {
        match (self.format, self.transport) {
            (ExportFormat::NetflowV5, _) => "netflow5",
            (ExportFormat::NetflowV9, _) => "netflow9",
            (_, Transport::Udp) => "ipfix",
            (_, Transport::Tcp) => "ipfix+tcp",
        }
    }
}

enum Conn {
    Udp(UdpSocket),
    Tcp(Option<TcpStream>),
}

pub struct FlowExportSink {
    target: ExportTarget,
    exporter: Exporter,
    conn: Conn,
    datagrams: Vec<Vec<u8>>,
    flows: Vec<sonde_flowproto::ExportFlow>,
    report: SinkReport,
    /// `--geoip-dir`: AS numbers for flows no exporter gave them for.
    geo: Option<std::sync::Arc<sonde_geo::GeoDb>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl FlowExportSink {
    /// Flows get the AS numbers of `geo` where no exporter gave them (`--geoip-dir`).
    pub fn with_geo(mut self, geo: Option<std::sync::Arc<sonde_geo::GeoDb>>) -> Self {
        self.geo = geo;
        self
    }

    pub fn open(target: ExportTarget) -> Result<FlowExportSink, String> {
        let mut cfg = ExporterConfig::new(target.format);
        cfg.transport = target.transport;
        cfg.boot_ms = now_ms();
        let conn = match target.transport {
            Transport::Udp => {
                let bind: SocketAddr = if target.addr.is_ipv4() {
                    "0.0.0.0:0".parse().unwrap_or(target.addr)
                } else {
                    "[::]:0".parse().unwrap_or(target.addr)
                };
                let s = UdpSocket::bind(bind)
                    .and_then(|s| s.connect(target.addr).map(|_| s))
                    .map_err(|e| format!("--export {}: {e}", target.text))?;
                Conn::Udp(s)
            }
            Transport::Tcp => {
                let s = TcpStream::connect_timeout(&target.addr, Duration::from_secs(5)).map_err(
                    |e| {
                        format!(
                            "--export {}: cannot connect ({e}); is the collector listening?",
                            target.text
                        )
                    },
                )?;
                Conn::Tcp(Some(s))
            }
        };
        let mut sink = FlowExportSink {
            report: SinkReport {
                name: target.text.clone(),
                ..SinkReport::default()
            },
            exporter: Exporter::new(cfg),
            target,
            conn,
            datagrams: Vec::new(),
            flows: Vec::new(),
            geo: None,
        };
        if let Conn::Tcp(Some(s)) = &mut sink.conn {
            let t = sink.exporter.templates_now(now_ms());
            if !t.is_empty() {
                s.write_all(&t)
                    .map_err(|e| format!("--export {}: {e}", sink.target.text))?;
            }
        }
        Ok(sink)
    }

    fn send_all(&mut self) {
        for d in self.datagrams.drain(..) {
            let ok = match &mut self.conn {
                Conn::Udp(s) => s.send(&d).is_ok(),
                Conn::Tcp(slot) => {
                    if slot.is_none() {
                        *slot =
                            TcpStream::connect_timeout(&self.target.addr, Duration::from_secs(1))
                                .ok();
                        if let Some(s) = slot.as_mut() {
                            let t = self.exporter.templates_now(now_ms());
                            if s.write_all(&t).is_err() {
                                *slot = None;
                            }
                        }
                    }
                    match slot.as_mut().map(|s| s.write_all(&d)) {
                        Some(Ok(())) => true,
                        _ => {
                            *slot = None;
                            false
                        }
                    }
                }
            };
            if ok {
                self.report.messages += 1;
            } else {
                self.report.dropped += 1;
            }
        }
    }
}

impl RecordSink for FlowExportSink {
    fn name(&self) -> String {
        self.target.text.clone()
    }

    fn write(&mut self, batch: &[FlowRecord]) -> io::Result<()> {
        self.flows.clear();
        let geo = self.geo.as_deref();
        self.flows
            .extend(batch.iter().map(|r| sonde_export::export_flow(r, geo)));
        self.exporter
            .encode(&self.flows, now_ms(), &mut self.datagrams);
        self.report.records += batch.len() as u64;
        self.send_all();
        Ok(())
    }

    fn finish(&mut self) -> io::Result<SinkReport> {
        if let Conn::Tcp(Some(s)) = &mut self.conn {
            let _ = s.flush();
        }
        Ok(self.report.clone())
    }
}
