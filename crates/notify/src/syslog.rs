//! `syslog+udp://` and `syslog+tcp://`: RFC 5424 messages (TCP framed by octet counting, RFC 6587).

use crate::target::Url;
use crate::time::{now_unix, rfc3339};
use crate::{entity, field, io_text, state, unix_seconds, value_text, Deliver, Failure};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::Duration;

/// The enterprise number of the structured-data id `sonde@32473` (the one RFC 5612 reserves for
/// documentation and examples).
pub(crate) const SD_ID: &str = "sonde@32473";
/// Largest UDP datagram sent (RFC 5424 §6.1: receivers should take 2048 octets).
pub(crate) const UDP_MAX: usize = 2048;
/// Longest structured-data value (bytes, before escaping).
const VALUE_MAX: usize = 256;

const FACILITIES: [&str; 24] = [
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
    "ftp", "ntp", "audit", "alert", "clock", "local0", "local1", "local2", "local3", "local4",
    "local5", "local6", "local7",
];

#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub tcp: bool,
    pub host: String,
    pub port: u16,
    pub facility: u8,
    pub app: String,
    pub hostname: Option<String>,
}

impl Config {
    pub(crate) fn parse(tcp: bool, u: Url) -> Result<Config, String> {
        u.only(&["facility", "app", "hostname"])?;
        let port = u.require_port("syslog's is 514")?;
        let facility = match u.get("facility") {
            None => 3,
            Some(f) => match FACILITIES.iter().position(|n| n.eq_ignore_ascii_case(f)) {
                Some(i) => i as u8,
                None => match f.parse::<u8>() {
                    Ok(n) if n < 24 => n,
                    _ => {
                        return Err(format!(
                            "facility={f}: use one of {} (or 0-23)",
                            FACILITIES.join(", ")
                        ))
                    }
                },
            },
        };
        let app = u.get("app").unwrap_or("sonde");
        if app.is_empty() || app.len() > 48 || !app.bytes().all(|b| (33..=126).contains(&b)) {
            return Err(format!(
                "app={app}: 1 to 48 printable ASCII characters without spaces"
            ));
        }
        let hostname = u.get("hostname").map(str::to_string);
        if let Some(h) = &hostname {
            if h.is_empty() || h.len() > 255 || !h.bytes().all(|b| (33..=126).contains(&b)) {
                return Err(format!(
                    "hostname={h}: 1 to 255 printable ASCII characters without spaces"
                ));
            }
        }
        if path_given(&u) {
            return Err("syslog URLs have no path: write syslog+udp://HOST:PORT".into());
        }
        Ok(Config {
            tcp,
            host: u.bare_host(),
            port,
            facility,
            app: app.to_string(),
            hostname,
        })
    }
}

fn path_given(u: &Url) -> bool {
    !u.path.is_empty() && u.path != "/"
}

/// The syslog severity of an alert severity (unknown ones: notice).
pub(crate) fn severity_code(s: &str) -> u8 {
    match s {
        "emergency" => 0,
        "alert" => 1,
        "critical" => 2,
        "error" => 3,
        "warning" => 4,
        "notice" => 5,
        "info" => 6,
        "debug" => 7,
        _ => 5,
    }
}

/// One RFC 5424 message; at most `limit` bytes (the summary is cut first, then the last
/// structured-data parameters).
pub(crate) fn format(
    alert: &Value,
    facility: u8,
    hostname: &str,
    app: &str,
    procid: u32,
    limit: Option<usize>,
) -> Vec<u8> {
    let pri = u16::from(facility) * 8 + u16::from(severity_code(&field(alert, "severity")));
    let released = state(alert) == "released";
    let when = if released {
        unix_seconds(alert, "end").or_else(|| unix_seconds(alert, "start"))
    } else {
        unix_seconds(alert, "start")
    };
    let ts = rfc3339(when.unwrap_or_else(now_unix));
    let msgid = ascii_token(&field(alert, "type"), 32);
    let header = format!(
        "<{pri}>1 {ts} {} {} {procid} {msgid} ",
        ascii_token(hostname, 255),
        ascii_token(app, 48)
    );

    let (kind, value) = entity(alert);
    let mut params: Vec<(&str, String)> = vec![
        ("id", field(alert, "id")),
        ("state", state(alert).to_string()),
        ("severity", field(alert, "severity")),
        ("type", field(alert, "type")),
        ("entity_kind", kind),
        ("entity", value),
        ("source", field(alert, "source")),
    ];
    for key in ["direction", "start", "end"] {
        let v = value_text(alert.get(key));
        if !v.is_empty() {
            params.push((key, v));
        }
    }
    let params: Vec<String> = params
        .into_iter()
        .map(|(k, v)| format!(" {k}=\"{}\"", sd_escape(&cut(&v, VALUE_MAX))))
        .collect();
    let summary = clean(&field(alert, "summary"));
    let mut n = params.len();
    let sd_len = |n: usize| SD_ID.len() + 2 + params[..n].iter().map(String::len).sum::<usize>();
    if let Some(limit) = limit {
        while n > 1 && header.len() + sd_len(n) > limit {
            n -= 1;
        }
    }
    let mut out = header.into_bytes();
    out.push(b'[');
    out.extend_from_slice(SD_ID.as_bytes());
    for p in &params[..n] {
        out.extend_from_slice(p.as_bytes());
    }
    out.push(b']');
    if !summary.is_empty() {
        let room = limit.map_or(usize::MAX, |l| l.saturating_sub(out.len() + 4));
        let msg = cut(&summary, room);
        if !msg.is_empty() {
            out.push(b' ');
            out.extend_from_slice(b"\xEF\xBB\xBF");
            out.extend_from_slice(msg.as_bytes());
        }
    }
    out
}

/// Printable US-ASCII (33-126) only, others as '_', at most `max`; "-" (the nil value) if empty.
pub(crate) fn ascii_token(s: &str, max: usize) -> String {
    let t: String = s
        .chars()
        .take(max)
        .map(|c| if ('!'..='~').contains(&c) { c } else { '_' })
        .collect();
    if t.is_empty() {
        "-".into()
    } else {
        t
    }
}

/// A PARAM-VALUE: '"', '\' and ']' escaped with '\' (RFC 5424 §6.3.3); control characters as
/// spaces.
pub(crate) fn sd_escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 8);
    for c in v.chars() {
        match c {
            '"' | '\\' | ']' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The machine's host name (gethostname), "-" if none.
fn local_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "-".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    ascii_token(&String::from_utf8_lossy(&buf[..end]), 255)
}

pub(crate) struct Sink {
    config: Config,
    hostname: String,
    tcp: Option<TcpStream>,
    udp: Option<(UdpSocket, SocketAddr)>,
}

impl Sink {
    pub(crate) fn open(config: Config) -> Result<Sink, String> {
        resolve(&config.host, config.port)?;
        let hostname = config.hostname.clone().unwrap_or_else(local_hostname);
        Ok(Sink {
            config,
            hostname,
            tcp: None,
            udp: None,
        })
    }

    fn message(&self, alert: &Value) -> Vec<u8> {
        let limit = if self.config.tcp { None } else { Some(UDP_MAX) };
        format(
            alert,
            self.config.facility,
            &self.hostname,
            &self.config.app,
            std::process::id(),
            limit,
        )
    }

    fn send_tcp(&mut self, msg: &[u8], timeout: Duration) -> Result<(), String> {
        if let Some(s) = &self.tcp {
            if peer_closed(s) {
                self.tcp = None;
            }
        }
        if self.tcp.is_none() {
            let addrs = resolve(&self.config.host, self.config.port)?;
            let mut last = String::from("no address");
            for a in addrs {
                match TcpStream::connect_timeout(&a, timeout) {
                    Ok(s) => {
                        let _ = s.set_nodelay(true);
                        self.tcp = Some(s);
                        break;
                    }
                    Err(e) => last = format!("cannot connect to {a}: {}", io_text(&e)),
                }
            }
            if self.tcp.is_none() {
                return Err(last);
            }
        }
        let Some(s) = self.tcp.as_mut() else {
            return Err("not connected".into());
        };
        let mut frame = format!("{} ", msg.len()).into_bytes();
        frame.extend_from_slice(msg);
        let r = s
            .set_write_timeout(Some(timeout))
            .and_then(|()| s.write_all(&frame))
            .and_then(|()| s.flush());
        if let Err(e) = r {
            self.tcp = None;
            return Err(format!("sending: {}", io_text(&e)));
        }
        Ok(())
    }

    fn send_udp(&mut self, msg: &[u8]) -> Result<(), String> {
        if self.udp.is_none() {
            let addr = resolve(&self.config.host, self.config.port)?[0];
            let bind: SocketAddr = if addr.is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            }
            .parse()
            .expect("literal");
            let sock = UdpSocket::bind(bind)
                .map_err(|e| format!("cannot open a UDP socket: {}", io_text(&e)))?;
            sock.connect(addr)
                .map_err(|e| format!("cannot address {addr}: {}", io_text(&e)))?;
            self.udp = Some((sock, addr));
        }
        let Some((sock, addr)) = &self.udp else {
            return Err("no socket".into());
        };
        match sock.send(msg) {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = format!("sending to {addr}: {}", io_text(&e));
                self.udp = None;
                Err(e)
            }
        }
    }
}

/// Whether the peer has closed a connection we only write to (its FIN or RST is waiting).
fn peer_closed(s: &TcpStream) -> bool {
    if s.set_nonblocking(true).is_err() {
        return true;
    }
    let mut buf = [0u8; 512];
    let closed = loop {
        match (&*s).read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue, // a server has nothing to say; ignore it
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    s.set_nonblocking(false).is_err() || closed
}

fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve '{host}': {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("'{host}' has no address"));
    }
    Ok(addrs)
}

impl Deliver for Sink {
    fn deliver(&mut self, alert: &Value, timeout: Duration) -> Result<(), Failure> {
        let msg = self.message(alert);
        let r = if self.config.tcp {
            self.send_tcp(&msg, timeout)
        } else {
            self.send_udp(&msg)
        };
        r.map_err(Failure::retry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn alert() -> Value {
        json!({"id": 17, "type": "scan.port x\u{e9}", "severity": "critical",
            "entity": {"kind": "host", "value": "10.0.0.5\"]\\ evil"}, "state": "engaged",
            "event": "start", "start": 1700000000, "end": null,
            "summary": "ports scanned\nby 10.0.0.5", "source": "analytics"})
    }

    #[test]
    fn message_layout_and_escaping() {
        let m = format(&alert(), 16, "probe-1", "sonde", 42, None);
        let text = String::from_utf8(m).unwrap();
        assert_eq!(
            text,
            "<130>1 2023-11-14T22:13:20Z probe-1 sonde 42 scan.port_x_ [sonde@32473 id=\"17\" \
             state=\"engaged\" severity=\"critical\" type=\"scan.port x\u{e9}\" entity_kind=\"host\" \
             entity=\"10.0.0.5\\\"\\]\\\\ evil\" source=\"analytics\" start=\"1700000000\"] \
             \u{feff}ports scanned by 10.0.0.5"
        );
    }

    #[test]
    fn released_uses_the_end_time_and_pri_follows_severity() {
        let mut a = alert();
        a["state"] = json!("released");
        a["end"] = json!(1700000060);
        a["severity"] = json!("info");
        let text = String::from_utf8(format(&a, 3, "h", "sonde", 1, None)).unwrap();
        assert!(
            text.starts_with("<30>1 2023-11-14T22:14:20Z h sonde 1 "),
            "{text}"
        );
        assert!(text.contains(" end=\"1700000060\"]"), "{text}");
        for (s, code) in [
            ("critical", 2),
            ("error", 3),
            ("warning", 4),
            ("notice", 5),
            ("info", 6),
            ("odd", 5),
        ] {
            assert_eq!(severity_code(s), code);
        }
    }

    #[test]
    fn udp_limit_cuts_summary_then_parameters() {
        let mut a = alert();
        a["summary"] = json!("é".repeat(3000));
        let m = format(&a, 3, "h", "sonde", 1, Some(UDP_MAX));
        assert!(m.len() <= UDP_MAX && m.len() > UDP_MAX - 8, "{}", m.len());
        let text = String::from_utf8(m).expect("cut at a character boundary");
        assert!(text.contains("source=\"analytics\" start=\"1700000000\"] \u{feff}éé"));

        // Huge values: the value cap and then dropping trailing parameters keep it valid.
        a["entity"] = json!({"kind": "host", "value": "]".repeat(1000)});
        a["source"] = json!("\"".repeat(1000));
        a["type"] = json!("\\".repeat(1000));
        a["direction"] = json!("\\".repeat(1000));
        let text = String::from_utf8(format(&a, 3, "h", "sonde", 1, Some(UDP_MAX))).unwrap();
        assert!(text.len() <= UDP_MAX, "{}", text.len());
        assert!(text.contains("[sonde@32473 id=\"17\""), "{text}");
        assert!(
            text.contains(&format!("entity=\"{}\"", "\\]".repeat(VALUE_MAX))),
            "{text}"
        );
        assert!(
            text.contains(&format!("source=\"{}\"]", "\\\"".repeat(VALUE_MAX))),
            "{text}"
        );
        assert!(
            !text.contains("direction=") && !text.contains("start="),
            "the last parameters go first"
        );
        assert!(
            text.contains("] \u{feff}é"),
            "the summary fills what is left"
        );
    }

    #[test]
    fn options() {
        let c = match crate::parse("syslog+tcp://[::1]:6514?facility=local7&app=ids")
            .unwrap()
            .kind
        {
            crate::target::Kind::Syslog(c) => c,
            k => panic!("{k:?}"),
        };
        assert_eq!(
            (c.tcp, c.host.as_str(), c.port, c.facility, c.app.as_str()),
            (true, "::1", 6514, 23, "ids")
        );
        assert!(crate::parse("syslog+udp://h:514?facility=locl0")
            .unwrap_err()
            .contains("local0"));
        assert!(crate::parse("syslog+udp://h:514?fac=1")
            .unwrap_err()
            .contains("unknown option 'fac'"));
        assert!(crate::parse("syslog+udp://h")
            .unwrap_err()
            .contains("port is missing"));
        assert!(crate::parse("syslog+udp://h:514?app=a%20b")
            .unwrap_err()
            .contains("app="));
    }
}
