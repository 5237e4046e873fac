//! `webhook+http(s)://`: a POST of the alert record, or of an Alertmanager webhook payload.

use crate::target::Url;
use crate::time::rfc3339;
use crate::{entity, field, state, unix_seconds, Deliver, Failure, Options};
use serde_json::{json, Map, Value};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Sonde,
    Alertmanager,
}

#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// What is posted to: http(s)://HOST[:PORT]/PATH[?other options].
    pub url: String,
    pub format: Format,
    pub headers: Vec<(String, String)>,
    pub receiver: String,
    pub external_url: String,
}

const OPTIONS: [&str; 4] = ["format", "header", "receiver", "external_url"];

impl Config {
    pub(crate) fn parse(https: bool, u: Url) -> Result<Config, String> {
        let format = match u.get("format") {
            None | Some("sonde") | Some("json") => Format::Sonde,
            Some("alertmanager") => Format::Alertmanager,
            Some(f) => {
                return Err(format!(
                    "format={f}: use format=sonde (default) or format=alertmanager"
                ))
            }
        };
        let mut headers = Vec::new();
        for h in u.all("header") {
            let Some((name, value)) = h.split_once(':') else {
                return Err(format!("header={h}: write header=Name:Value"));
            };
            let value = value.trim();
            if name.is_empty() || !name.bytes().all(is_token) {
                return Err(format!("header={h}: '{name}' is not a header name"));
            }
            if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
                return Err(format!(
                    "header={name}: the value may not hold control characters"
                ));
            }
            headers.push((name.to_string(), value.to_string()));
        }
        if let Some((user, pass)) = &u.user {
            headers.push((
                "Authorization".into(),
                format!("Basic {}", base64(format!("{user}:{pass}").as_bytes())),
            ));
        }
        // Query parameters that are not ours belong to the endpoint.
        let passed: Vec<&str> = u
            .query
            .iter()
            .zip(&u.raw_query)
            .filter(|((k, _), _)| !OPTIONS.contains(&k.as_str()))
            .map(|(_, raw)| raw.as_str())
            .collect();
        let scheme = if https { "https" } else { "http" };
        let port = u.port.map(|p| format!(":{p}")).unwrap_or_default();
        let path = if u.path.is_empty() {
            "/"
        } else {
            u.path.as_str()
        };
        let mut url = format!("{scheme}://{}{port}{path}", u.host);
        if !passed.is_empty() {
            url.push('?');
            url.push_str(&passed.join("&"));
        }
        Ok(Config {
            url,
            format,
            headers,
            receiver: u.get("receiver").unwrap_or("sonde").to_string(),
            external_url: u.get("external_url").unwrap_or("").to_string(),
        })
    }

    /// The request body for `alert`.
    pub(crate) fn body(&self, alert: &Value) -> Value {
        match self.format {
            Format::Sonde => alert.clone(),
            Format::Alertmanager => alertmanager(alert, &self.receiver, &self.external_url),
        }
    }
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

pub(crate) struct Sink {
    config: Config,
    agent: ureq::Agent,
}

impl Sink {
    pub(crate) fn open(config: Config, opts: &Options) -> Result<Sink, String> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .timeout_global(Some(opts.timeout))
            .user_agent(concat!("sonde-notify/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ok(Sink { config, agent })
    }
}

impl Deliver for Sink {
    fn deliver(&mut self, alert: &Value, timeout: Duration) -> Result<(), Failure> {
        let body = serde_json::to_vec(&self.config.body(alert))
            .map_err(|e| Failure::permanent(e.to_string()))?;
        let mut req = self
            .agent
            .post(&self.config.url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Content-Type", "application/json");
        for (k, v) in &self.config.headers {
            req = req.header(k, v);
        }
        let mut resp = req
            .send(&body[..])
            .map_err(|e| Failure::retry(http_error(&e, self.config.url.starts_with("https:"))))?;
        let status = resp.status().as_u16();
        // Read (a bit of) the answer: it tells why, and lets the connection be reused.
        let text = resp
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_to_vec()
            .unwrap_or_default();
        if (200..300).contains(&status) {
            return Ok(());
        }
        let mut msg = format!("HTTP {status}");
        if let Some(reason) = resp.status().canonical_reason() {
            msg.push(' ');
            msg.push_str(reason);
        }
        let text = String::from_utf8_lossy(&text);
        let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
        if !text.trim().is_empty() {
            msg.push_str(": ");
            msg.push_str(text.trim());
        }
        if (400..500).contains(&status) && status != 408 && status != 429 {
            Err(Failure::permanent(msg))
        } else {
            Err(Failure::retry(msg))
        }
    }
}

/// A short text for a transport error (e.g. "connection refused").
fn http_error(e: &ureq::Error, https: bool) -> String {
    match e {
        // rustls reports a bad handshake as invalid data.
        ureq::Error::Io(io) if https && io.kind() == std::io::ErrorKind::InvalidData => {
            format!("TLS: {io}")
        }
        ureq::Error::Io(io) => crate::io_text(io),
        ureq::Error::Timeout(t) => format!("timed out ({t})"),
        ureq::Error::HostNotFound => "host not found".into(),
        ureq::Error::ConnectionFailed => "connection failed".into(),
        ureq::Error::Rustls(e) => format!("TLS: {e}"),
        ureq::Error::Tls(e) => format!("TLS: {e}"),
        e => e.to_string(),
    }
}

/// The body Prometheus Alertmanager's webhook receiver posts (version 4), for one alert.
pub(crate) fn alertmanager(alert: &Value, receiver: &str, external_url: &str) -> Value {
    let (kind, value) = entity(alert);
    let typ = field(alert, "type");
    let mut labels = Map::new();
    labels.insert("alertname".into(), json!(typ));
    labels.insert("severity".into(), json!(field(alert, "severity")));
    labels.insert("entity_kind".into(), json!(kind));
    labels.insert("entity".into(), json!(value));
    labels.insert("source".into(), json!(field(alert, "source")));
    if let Some(d) = alert.get("direction").and_then(Value::as_str) {
        labels.insert("direction".into(), json!(d));
    }
    let summary = field(alert, "summary");
    let evidence = alert
        .get("evidence")
        .map(|e| e.to_string())
        .unwrap_or_default();
    let mut description = format!(
        "sonde alert {}: {typ} on {kind} {value}",
        field(alert, "id")
    );
    if !evidence.is_empty() && evidence != "null" {
        description.push_str("; evidence: ");
        description.push_str(&evidence);
    }
    let annotations = json!({"summary": summary, "description": description});
    let released = state(alert) == "released";
    let status = if released { "resolved" } else { "firing" };
    let starts = unix_seconds(alert, "start")
        .map(rfc3339)
        .unwrap_or_else(|| rfc3339(crate::time::now_unix()));
    let ends = if released {
        unix_seconds(alert, "end")
            .map(rfc3339)
            .unwrap_or_else(|| rfc3339(crate::time::now_unix()))
    } else {
        "0001-01-01T00:00:00Z".to_string()
    };
    let fingerprint = format!("{:016x}", fingerprint(&labels));
    let group_key = format!("{{}}:{{alertname={}}}", json!(typ));
    json!({
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": status,
        "receiver": receiver,
        "groupLabels": {"alertname": typ},
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": external_url,
        "alerts": [{
            "status": status,
            "labels": labels,
            "annotations": annotations,
            "startsAt": starts,
            "endsAt": ends,
            "generatorURL": external_url,
            "fingerprint": fingerprint,
        }],
    })
}

/// Prometheus' label-set fingerprint: FNV-1a 64 over the sorted names and values, each followed
/// by the byte 0xff.
fn fingerprint(labels: &Map<String, Value>) -> u64 {
    let mut pairs: Vec<(&String, String)> = labels
        .iter()
        .map(|(k, v)| (k, crate::value_text(Some(v))))
        .collect();
    pairs.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut add = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for (k, v) in pairs {
        add(k.as_bytes());
        add(&[0xff]);
        add(v.as_bytes());
        add(&[0xff]);
    }
    h
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::parse;
    use crate::target::Kind;

    fn config(spec: &str) -> Config {
        match parse(spec).unwrap().kind {
            Kind::Webhook(c) => c,
            k => panic!("{k:?}"),
        }
    }

    fn alert(state: &str) -> Value {
        json!({"id": 17, "type": "ddos", "severity": "error",
            "entity": {"kind": "host", "value": "10.0.0.5"}, "state": state,
            "event": if state == "engaged" {"start"} else {"end"},
            "start": 1700000000, "end": if state == "engaged" {Value::Null} else {json!(1700000600)},
            "summary": "ddos toward 10.0.0.5", "source": "analytics",
            "evidence": {"seconds": 3}, "host": "10.0.0.5", "direction": "in"})
    }

    #[test]
    fn alertmanager_firing_then_resolved() {
        let f = alertmanager(&alert("engaged"), "ops", "http://sonde:8080");
        assert_eq!(f["version"], "4");
        assert_eq!(f["status"], "firing");
        assert_eq!(f["receiver"], "ops");
        assert_eq!(f["externalURL"], "http://sonde:8080");
        assert_eq!(f["groupLabels"], json!({"alertname": "ddos"}));
        assert_eq!(f["groupKey"], "{}:{alertname=\"ddos\"}");
        let a = &f["alerts"][0];
        assert_eq!(f["alerts"].as_array().unwrap().len(), 1);
        assert_eq!(
            a["labels"],
            json!({"alertname": "ddos", "severity": "error", "entity_kind": "host",
                "entity": "10.0.0.5", "source": "analytics", "direction": "in"})
        );
        assert_eq!(f["commonLabels"], a["labels"]);
        assert_eq!(a["annotations"]["summary"], "ddos toward 10.0.0.5");
        assert_eq!(
            a["annotations"]["description"],
            "sonde alert 17: ddos on host 10.0.0.5; evidence: {\"seconds\":3}"
        );
        assert_eq!(a["startsAt"], "2023-11-14T22:13:20Z");
        assert_eq!(a["endsAt"], "0001-01-01T00:00:00Z");
        assert_eq!(a["fingerprint"].as_str().unwrap().len(), 16);

        let r = alertmanager(&alert("released"), "ops", "");
        assert_eq!(r["status"], "resolved");
        assert_eq!(r["alerts"][0]["status"], "resolved");
        assert_eq!(r["alerts"][0]["endsAt"], "2023-11-14T22:23:20Z");
        // The same alert keeps its fingerprint, so Alertmanager-style receivers pair them.
        assert_eq!(r["alerts"][0]["fingerprint"], a["fingerprint"]);
    }

    #[test]
    fn fingerprint_is_prometheus_fnv() {
        // FNV-1a 64 of "a\xffb\xff" computed independently.
        let mut m = Map::new();
        m.insert("a".into(), json!("b"));
        let mut h: u64 = 0xcbf29ce484222325;
        for b in [b'a', 0xff, b'b', 0xff] {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        assert_eq!(fingerprint(&m), h);
        m.insert("c".into(), json!("d"));
        assert_ne!(fingerprint(&m), h);
    }

    #[test]
    fn url_options() {
        let c = config("webhook+http://u:p@127.0.0.1:9/hook?format=alertmanager&token=a%20b&header=X-A:1&header=Authorization:Bearer%20t");
        assert_eq!(c.url, "http://127.0.0.1:9/hook?token=a%20b");
        assert_eq!(c.format, Format::Alertmanager);
        assert_eq!(
            c.headers,
            vec![
                ("X-A".to_string(), "1".to_string()),
                ("Authorization".to_string(), "Bearer t".to_string()),
                ("Authorization".to_string(), "Basic dTpw".to_string())
            ]
        );
        assert_eq!(
            config("webhook+https://h.example").url,
            "https://h.example/"
        );
        let e = parse("webhook+http://h/?format=slack").unwrap_err();
        assert!(e.contains("format=alertmanager"), "{e}");
        let e = parse("webhook+http://h/?header=NoColon").unwrap_err();
        assert!(e.contains("header=Name:Value"), "{e}");
        let e = parse("webhook+http://h/?header=X-A:a%0D%0AX-B:b").unwrap_err();
        assert!(e.contains("control characters"), "{e}");
    }

    #[test]
    fn base64_matches_rfc4648() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }
}
