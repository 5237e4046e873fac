//! `smtp://` and `smtps://`: one plain-text mail per alert (lettre's blocking SMTP transport).

use crate::target::{flag, Url};
use crate::{entity, field, io_text, state, Deliver, Failure, Options};
use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{Message, SmtpTransport, Transport};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Security {
    /// smtp:// (the password, if any, only to a server on this machine).
    Plain,
    /// smtp://…?starttls=1
    StartTls,
    /// smtps://
    Wrapper,
}

#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub host: String,
    pub port: u16,
    pub security: Security,
    pub credentials: Option<(String, String)>,
    pub from: Mailbox,
    pub to: Vec<Mailbox>,
}

impl Config {
    pub(crate) fn parse(smtps: bool, u: Url) -> Result<Config, String> {
        u.only(&["from", "to", "starttls"])?;
        let port = match (smtps, u.port) {
            (true, None) => 465,
            (_, p) => match p {
                Some(p) => p,
                None => u.require_port("25 for a relay, 587 for submission with starttls=1")?,
            },
        };
        if !u.path.is_empty() && u.path != "/" {
            return Err(
                "SMTP URLs have no path: write smtp://HOST:PORT?from=ADDRESS&to=ADDRESS".into(),
            );
        }
        let starttls = match u.get("starttls") {
            Some(v) => flag("starttls", v)?,
            None => false,
        };
        let security = match (smtps, starttls) {
            (true, true) => return Err("smtps:// is TLS from the start: drop starttls=1".into()),
            (true, false) => Security::Wrapper,
            (false, true) => Security::StartTls,
            (false, false) => Security::Plain,
        };
        let need = "write ?from=ADDRESS&to=ADDRESS (to may repeat)";
        let from = match u.get("from") {
            Some(f) => mailbox("from", f)?,
            None => return Err(format!("the sender is missing: {need}")),
        };
        let to = u
            .all("to")
            .into_iter()
            .map(|t| mailbox("to", t))
            .collect::<Result<Vec<_>, _>>()?;
        if to.is_empty() {
            return Err(format!("no recipient: {need}"));
        }
        let host = u.bare_host();
        let local = matches!(host.as_str(), "localhost" | "127.0.0.1" | "::1");
        if u.user.is_some() && security == Security::Plain && !local {
            return Err(
                "the password would cross the network in clear: add starttls=1 or use smtps://"
                    .into(),
            );
        }
        Ok(Config {
            host,
            port,
            security,
            credentials: u.user.clone(),
            from,
            to,
        })
    }
}

fn mailbox(key: &str, v: &str) -> Result<Mailbox, String> {
    v.parse::<Mailbox>()
        .map_err(|e| format!("{key}={v} is not an e-mail address ({e})"))
}

/// `[sonde] ERROR ddos 10.0.0.5 engaged`, with control characters (CR, LF) as spaces.
pub(crate) fn subject(alert: &Value) -> String {
    let (_, value) = entity(alert);
    let s = format!(
        "[sonde] {} {} {} {}",
        field(alert, "severity").to_uppercase(),
        field(alert, "type"),
        value,
        state(alert)
    );
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(250)
        .collect()
}

/// The summary, a blank line, the alert record pretty-printed.
pub(crate) fn body(alert: &Value) -> String {
    let pretty = serde_json::to_string_pretty(alert).unwrap_or_default();
    format!("{}\n\n{pretty}\n", field(alert, "summary"))
}

pub(crate) struct Sink {
    config: Config,
}

impl Sink {
    pub(crate) fn open(config: Config, opts: &Options) -> Result<Sink, String> {
        if config.security != Security::Wrapper {
            probe(&config, opts.timeout)?;
        }
        if config.security != Security::Plain {
            let t = transport(&config, opts.timeout)
                .map_err(|e| format!("TLS setup: {}", lettre_text(&e)))?;
            match t.test_connection() {
                Ok(true) => {}
                Ok(false) => return Err("the SMTP server did not answer NOOP over TLS".into()),
                Err(e) => {
                    return Err(format!(
                        "cannot talk TLS to the SMTP server: {}",
                        lettre_text(&e)
                    ))
                }
            }
        }
        Ok(Sink { config })
    }
}

/// Connects, reads the 220 greeting, says EHLO (and checks STARTTLS is offered when needed), QUIT.
fn probe(c: &Config, timeout: Duration) -> Result<(), String> {
    let addrs: Vec<_> = (c.host.as_str(), c.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve the SMTP server '{}': {e}", c.host))?
        .collect();
    let mut last = String::from("no address");
    let mut stream = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = io_text(&e),
        }
    }
    let Some(stream) = stream else {
        return Err(format!("cannot reach the SMTP server: {last}"));
    };
    let local = stream
        .local_addr()
        .map(|a| a.ip())
        .map_err(|e| io_text(&e))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| io_text(&e))?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| io_text(&e))?;
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| io_text(&e))?);
    let mut writer = stream;
    let greeting = reply(&mut reader).map_err(|e| format!("the SMTP server did not greet: {e}"))?;
    if !greeting.starts_with("220") {
        return Err(format!(
            "the server answered '{}' instead of an SMTP greeting (220)",
            greeting.trim_end()
        ));
    }
    let ehlo = match local {
        std::net::IpAddr::V4(a) => format!("EHLO [{a}]\r\n"),
        std::net::IpAddr::V6(a) => format!("EHLO [IPv6:{a}]\r\n"),
    };
    writer
        .write_all(ehlo.as_bytes())
        .map_err(|e| format!("sending EHLO: {}", io_text(&e)))?;
    let answer = reply(&mut reader).map_err(|e| format!("no answer to EHLO: {e}"))?;
    if !answer.starts_with("250") {
        let first = answer.lines().next().unwrap_or("");
        return Err(format!("the SMTP server refused EHLO: '{first}'"));
    }
    let _ = writer.write_all(b"QUIT\r\n");
    if c.security == Security::StartTls
        && !answer.lines().any(|l| {
            l.get(4..)
                .is_some_and(|k| k.trim().eq_ignore_ascii_case("STARTTLS"))
        })
    {
        return Err("the SMTP server does not offer STARTTLS: drop starttls=1, or use smtps:// on its TLS port".into());
    }
    Ok(())
}

/// One SMTP reply (all its lines: "250-…" continue, "250 …" ends).
fn reply(r: &mut impl BufRead) -> Result<String, String> {
    let mut all = String::new();
    for _ in 0..100 {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) => return Err("connection closed".into()),
            Ok(_) => {}
            Err(e) => return Err(io_text(&e)),
        }
        all.push_str(&line);
        let code = line.len() >= 3 && line.as_bytes()[..3].iter().all(u8::is_ascii_digit);
        if !code || line.as_bytes().get(3) != Some(&b'-') {
            return Ok(all);
        }
    }
    Err("an endless reply".into())
}

fn transport(
    c: &Config,
    timeout: Duration,
) -> Result<SmtpTransport, lettre::transport::smtp::Error> {
    let mut b = SmtpTransport::builder_dangerous(c.host.as_str())
        .port(c.port)
        .timeout(Some(timeout));
    b = match c.security {
        Security::Plain => b.tls(Tls::None),
        Security::StartTls => b.tls(Tls::Required(TlsParameters::new(c.host.clone())?)),
        Security::Wrapper => b.tls(Tls::Wrapper(TlsParameters::new(c.host.clone())?)),
    };
    if let Some((user, pass)) = &c.credentials {
        b = b.credentials(Credentials::new(user.clone(), pass.clone()));
    }
    Ok(b.build())
}

/// lettre's error with an I/O cause said shortly ("connection refused").
fn lettre_text(e: &lettre::transport::smtp::Error) -> String {
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io_text(io);
        }
        src = s.source();
    }
    e.to_string()
}

impl Deliver for Sink {
    fn deliver(&mut self, alert: &Value, timeout: Duration) -> Result<(), Failure> {
        let mut b = Message::builder()
            .from(self.config.from.clone())
            .subject(subject(alert))
            .header(ContentType::TEXT_PLAIN);
        for t in &self.config.to {
            b = b.to(t.clone());
        }
        let msg = b
            .body(body(alert))
            .map_err(|e| Failure::permanent(format!("building the mail: {e}")))?;
        let t = transport(&self.config, timeout).map_err(|e| Failure::retry(lettre_text(&e)))?;
        match t.send(&msg) {
            Ok(_) => Ok(()),
            Err(e) if e.is_permanent() => Err(Failure::permanent(lettre_text(&e))),
            Err(e) => Err(Failure::retry(lettre_text(&e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subject_has_no_line_breaks() {
        let a = json!({"severity": "warning", "type": "host.listed\r\nBcc: x@y",
            "entity": {"kind": "host", "value": "h\n.example"}, "state": "released"});
        assert_eq!(
            subject(&a),
            "[sonde] WARNING host.listed  Bcc: x@y h .example released"
        );
    }

    #[test]
    fn options() {
        let c = match crate::parse(
            "smtp://u:p%40ss@localhost:2525?from=a@b.example&to=c@d.example&to=e@f.example",
        )
        .unwrap()
        .kind
        {
            crate::target::Kind::Smtp(c) => c,
            k => panic!("{k:?}"),
        };
        assert_eq!(c.credentials, Some(("u".into(), "p@ss".into())));
        assert_eq!(c.to.len(), 2);
        assert_eq!(c.security, Security::Plain);
        let e = crate::parse("smtp://u:secret@mail.example:25?from=a@b&to=c@d").unwrap_err();
        assert!(
            e.contains("in clear") && e.contains("u:***@") && !e.contains("secret"),
            "{e}"
        );
        assert!(crate::parse("smtps://mail.example?from=a@b&to=c@d").is_ok());
        let e = crate::parse("smtp://h:25?from=a@b&to=not-an-address").unwrap_err();
        assert!(
            e.contains("to=not-an-address is not an e-mail address"),
            "{e}"
        );
    }
}
