//! Receivers for the integration tests, all on 127.0.0.1 ephemeral ports.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sonde_notify::Options;

/// An alert as the contract describes it.
pub fn alert(id: u64, state: &str) -> Value {
    let released = state == "released";
    json!({
        "id": id,
        "type": "ddos",
        "severity": "error",
        "entity": {"kind": "host", "value": "10.0.0.5"},
        "state": state,
        "event": if released { "end" } else { "start" },
        "start": 1_700_000_000,
        "end": if released { json!(1_700_000_600) } else { Value::Null },
        "summary": "ddos toward 10.0.0.5: 120000 packets/s (threshold 50000)",
        "source": "analytics",
        "evidence": {"crossed": [{"metric": "packets", "peak": 120000, "threshold": 50000}], "seconds": 12,
            "top_sources": [{"host": "192.0.2.1", "packets": 9000, "bytes": 540000}]},
        "host": "10.0.0.5",
        "direction": "in",
    })
}

/// Small backoffs so retry tests take milliseconds.
pub fn quick(retries: u32) -> Options {
    Options {
        queue: 100,
        retries,
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(40),
        timeout: Duration::from_secs(5),
    }
}

/// Polls `f` until it holds, or panics after `limit` naming `what`.
pub fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !f() {
        assert!(
            Instant::now() < end,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A port nobody listens on (bound, then released).
pub fn dead_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A fresh directory under the system's temporary one.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sonde-notify-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// Path and query as sent.
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the body is JSON")
    }
}

/// An HTTP/1.1 server that records each request and answers `status` (or never, when `hang`).
pub struct Http {
    pub port: u16,
    pub requests: Arc<Mutex<Vec<Request>>>,
    pub status: Arc<AtomicU16>,
    pub hang: Arc<AtomicBool>,
}

impl Http {
    pub fn start(status: u16) -> Http {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let status = Arc::new(AtomicU16::new(status));
        let hang = Arc::new(AtomicBool::new(false));
        let (r, s, h) = (requests.clone(), status.clone(), hang.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (r, s, h) = (r.clone(), s.clone(), h.clone());
                std::thread::spawn(move || serve(conn, &r, &s, &h));
            }
        });
        Http {
            port,
            requests,
            status,
            hang,
        }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

fn serve(conn: TcpStream, requests: &Mutex<Vec<Request>>, status: &AtomicU16, hang: &AtomicBool) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.trim_end().splitn(3, ' ');
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').expect("a header line has a colon");
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.parse().unwrap())
            .expect("the request has a Content-Length");
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        requests.lock().unwrap().push(Request {
            method,
            target,
            headers,
            body,
            at: Instant::now(),
        });
        if hang.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_secs(60));
            return;
        }
        let code = status.load(Ordering::SeqCst);
        let text = if (200..300).contains(&code) {
            ""
        } else {
            "nope"
        };
        let _ = write!(
            conn,
            "HTTP/1.1 {code} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
    }
}

/// A parsed RFC 5424 message.
#[derive(Debug)]
pub struct Syslog {
    pub pri: u32,
    pub version: String,
    pub timestamp: String,
    pub hostname: String,
    pub app: String,
    pub procid: String,
    pub msgid: String,
    pub sd_id: String,
    pub params: Vec<(String, String)>,
    /// After the SP that follows the structured data (BOM included).
    pub msg: Vec<u8>,
}

impl Syslog {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses `<PRI>1 TS HOST APP PROCID MSGID [ID k="v"...] MSG` strictly: a value ends at the first
/// `"` not escaped by `\`, and only `\"`, `\\`, `\]` are escapes.
pub fn parse_syslog(m: &[u8]) -> Syslog {
    let text = std::str::from_utf8(m).expect("the message is UTF-8");
    let rest = text.strip_prefix('<').expect("starts with <PRI>");
    let (pri, rest) = rest.split_once('>').unwrap();
    let mut fields = rest.splitn(7, ' ');
    let mut next = || fields.next().expect("a header field").to_string();
    let (version, timestamp, hostname, app, procid, msgid) =
        (next(), next(), next(), next(), next(), next());
    let sd = next();
    let sd = sd.strip_prefix('[').expect("structured data");
    let (sd_id, mut rest) = sd.split_once(' ').unwrap();
    let mut params = Vec::new();
    loop {
        let (name, after) = rest.split_once("=\"").expect("NAME=\"");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            let (i, c) = chars.next().expect("a value ends with '\"'");
            match c {
                '\\' => {
                    let (_, e) = chars.next().unwrap();
                    assert!(
                        matches!(e, '"' | '\\' | ']'),
                        "only \\\" \\\\ \\] are escapes, got \\{e}"
                    );
                    value.push(e);
                }
                '"' => break i,
                ']' => panic!("an unescaped ']' in a value"),
                c => value.push(c),
            }
        };
        params.push((name.to_string(), value));
        rest = &after[end + 1..];
        if let Some(r) = rest.strip_prefix(' ') {
            rest = r;
        } else {
            rest = rest
                .strip_prefix(']')
                .expect("']' ends the structured data");
            break;
        }
    }
    let msg = match rest.strip_prefix(' ') {
        Some(m) => m.as_bytes().to_vec(),
        None => {
            assert!(rest.is_empty(), "SP before MSG");
            Vec::new()
        }
    };
    Syslog {
        pri: pri.parse().unwrap(),
        version,
        timestamp,
        hostname,
        app,
        procid,
        msgid,
        sd_id: sd_id.to_string(),
        params,
        msg,
    }
}

/// Reads one octet-counted frame (`LEN SP MSG`, RFC 6587 §3.4.1); None at the end of the stream.
pub fn read_frame(r: &mut impl Read) -> Option<Vec<u8>> {
    let mut len = String::new();
    let mut b = [0u8; 1];
    loop {
        if r.read(&mut b).ok()? == 0 {
            assert!(len.is_empty(), "the stream ended inside a frame length");
            return None;
        }
        if b[0] == b' ' {
            break;
        }
        assert!(
            b[0].is_ascii_digit(),
            "a frame starts with its length in digits, got {:?}",
            b[0] as char
        );
        len.push(b[0] as char);
    }
    assert!(!len.starts_with('0'), "MSG-LEN has no leading zero");
    let mut msg = vec![0; len.parse().unwrap()];
    r.read_exact(&mut msg).unwrap();
    Some(msg)
}
