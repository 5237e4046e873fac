//! `--notify URL` parsing (see the crate documentation for the syntax).

use crate::{exec, smtp, syslog, webhook, Deliver, Options};

const SCHEMES: &str =
    "use webhook+http://, webhook+https://, syslog+udp://, syslog+tcp://, smtp://, smtps:// or exec:";

/// A parsed `--notify` URL.
#[derive(Clone, Debug)]
pub struct Target {
    name: String,
    pub(crate) kind: Kind,
}

#[derive(Clone, Debug)]
pub(crate) enum Kind {
    Webhook(webhook::Config),
    Syslog(syslog::Config),
    Smtp(smtp::Config),
    Exec(exec::Config),
}

impl Target {
    /// The URL as given, with a password and header values shown as `***` (for messages and
    /// metrics labels).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `webhook`, `syslog`, `smtp` or `exec`.
    pub fn kind(&self) -> &'static str {
        match self.kind {
            Kind::Webhook(_) => "webhook",
            Kind::Syslog(_) => "syslog",
            Kind::Smtp(_) => "smtp",
            Kind::Exec(_) => "exec",
        }
    }

    /// The start-time checks, then the deliverer (errors without the flag's name).
    pub(crate) fn open(&self, opts: &Options) -> Result<Box<dyn Deliver>, String> {
        Ok(match &self.kind {
            Kind::Webhook(c) => Box::new(webhook::Sink::open(c.clone(), opts)?),
            Kind::Syslog(c) => Box::new(syslog::Sink::open(c.clone())?),
            Kind::Smtp(c) => Box::new(smtp::Sink::open(c.clone(), opts)?),
            Kind::Exec(c) => Box::new(exec::Sink::open(c.clone())?),
        })
    }
}

/// Parses one `--notify` URL. The error names the flag, the URL (password hidden) and the fix.
pub fn parse(spec: &str) -> Result<Target, String> {
    let name = redact(spec);
    let kind = parse_kind(spec).map_err(|e| format!("--notify '{name}': {e}"))?;
    Ok(Target { name, kind })
}

fn parse_kind(spec: &str) -> Result<Kind, String> {
    if let Some(rest) = spec.strip_prefix("exec:") {
        return exec::Config::parse(rest).map(Kind::Exec);
    }
    let Some((scheme, rest)) = spec.split_once("://") else {
        return Err(format!("not a URL: {SCHEMES}"));
    };
    let url = Url::parse(rest)?;
    match scheme.to_ascii_lowercase().as_str() {
        "webhook+http" => webhook::Config::parse(false, url).map(Kind::Webhook),
        "webhook+https" => webhook::Config::parse(true, url).map(Kind::Webhook),
        "syslog+udp" => syslog::Config::parse(false, url).map(Kind::Syslog),
        "syslog+tcp" => syslog::Config::parse(true, url).map(Kind::Syslog),
        "smtp" => smtp::Config::parse(false, url).map(Kind::Smtp),
        "smtps" => smtp::Config::parse(true, url).map(Kind::Smtp),
        "http" | "https" => Err(format!(
            "unknown scheme '{scheme}': write webhook+{scheme}://"
        )),
        "syslog" => Err("unknown scheme 'syslog': write syslog+udp:// or syslog+tcp://".into()),
        _ => Err(format!("unknown scheme '{scheme}': {SCHEMES}")),
    }
}

/// The parts of `[USER[:PASS]@]HOST[:PORT][/PATH][?QUERY]`, user, password and query values
/// percent-decoded.
#[derive(Debug)]
pub(crate) struct Url {
    pub user: Option<(String, String)>,
    /// As written (an IPv6 address keeps its brackets).
    pub host: String,
    pub port: Option<u16>,
    /// As written, "" or starting with '/'.
    pub path: String,
    /// Decoded pairs, in order.
    pub query: Vec<(String, String)>,
    /// The raw query pairs, to pass on unchanged.
    pub raw_query: Vec<String>,
}

impl Url {
    fn parse(rest: &str) -> Result<Url, String> {
        let (before_query, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(i) => before_query.split_at(i),
            None => (before_query, ""),
        };
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => {
                let (name, pass) = u.split_once(':').unwrap_or((u, ""));
                (Some((decode(name)?, decode(pass)?)), h)
            }
            None => (None, authority),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let Some((addr, after)) = v6.split_once(']') else {
                return Err("an IPv6 address needs its closing ']'".into());
            };
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or("expected ':PORT' after the IPv6 address")?,
                ),
            };
            (format!("[{addr}]"), port)
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (hostport.to_string(), None),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err("the host is missing (e.g. 127.0.0.1:514 or host.example:8080)".into());
        }
        if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("'{host}' is not a host name"));
        }
        let port = match port {
            None => None,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => Some(n),
                _ => return Err(format!("'{p}' is not a port (1-65535)")),
            },
        };
        let mut q = Vec::new();
        let mut raw_query = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            q.push((decode(k)?, decode(v)?));
            raw_query.push(pair.to_string());
        }
        Ok(Url {
            user,
            host,
            port,
            path: path.to_string(),
            query: q,
            raw_query,
        })
    }

    /// The port, or an error that says the usual one.
    pub fn require_port(&self, usual: &str) -> Result<u16, String> {
        self.port
            .ok_or_else(|| format!("the port is missing: write {}:PORT ({usual})", self.host))
    }

    /// The host to connect to (an IPv6 address without brackets).
    pub fn bare_host(&self) -> String {
        self.host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string()
    }

    /// Errors for a query option not in `known`.
    pub fn only(&self, known: &[&str]) -> Result<(), String> {
        for (k, _) in &self.query {
            if !known.contains(&k.as_str()) {
                return Err(format!(
                    "unknown option '{k}' (known: {})",
                    known.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// The last value of option `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// All values of option `key`.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// A yes/no option: 1/0, true/false, yes/no.
pub(crate) fn flag(key: &str, v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(format!("{key}={v}: expected 1 or 0")),
    }
}

/// Percent-decoding (`+` stays `+`).
pub(crate) fn decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(v) => out.push(v),
                None => {
                    return Err(format!(
                        "'{s}': '%' must be followed by two hex digits (%25 for '%')"
                    ))
                }
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("'{s}' is not UTF-8 once decoded"))
}

/// The spec with a URL password and `header=` values replaced by `***`.
pub(crate) fn redact(spec: &str) -> String {
    let (head, query) = match spec.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (spec, None),
    };
    let mut out = match head.split_once("://") {
        Some((scheme, rest)) => {
            let auth_end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(auth_end);
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => {
                    let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
                    let pass = if userinfo.contains(':') { ":***" } else { "" };
                    format!("{scheme}://{user}{pass}@{host}{path}")
                }
                None => head.to_string(),
            }
        }
        None => head.to_string(),
    };
    if let Some(q) = query {
        out.push('?');
        let pairs: Vec<String> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some(("header", v)) => {
                    let name = v
                        .split_once(':')
                        .or_else(|| v.split_once("%3A"))
                        .map_or("", |(n, _)| n);
                    format!("header={name}:***")
                }
                Some(("password" | "pass", _)) => {
                    format!("{}=***", p.split('=').next().unwrap_or(""))
                }
                _ => p.to_string(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_and_header_values() {
        assert_eq!(
            redact("smtp://u:secret@h:25?from=a@b"),
            "smtp://u:***@h:25?from=a@b"
        );
        assert_eq!(redact("smtp://u@h:25"), "smtp://u@h:25");
        assert_eq!(
            redact("webhook+https://h/p?header=Authorization:Bearer%20x&format=alertmanager"),
            "webhook+https://h/p?header=Authorization:***&format=alertmanager"
        );
        assert_eq!(redact("exec:/bin/x?arg=1"), "exec:/bin/x?arg=1");
    }

    #[test]
    fn url_parts() {
        let u = Url::parse("us%40er:p%3Ass@[::1]:2525/a/b?x=1&to=a%26b@c&to=d").unwrap();
        assert_eq!(u.user, Some(("us@er".into(), "p:ss".into())));
        assert_eq!(u.host, "[::1]");
        assert_eq!(u.bare_host(), "::1");
        assert_eq!(u.port, Some(2525));
        assert_eq!(u.path, "/a/b");
        assert_eq!(u.all("to"), vec!["a&b@c", "d"]);
        assert_eq!(u.raw_query, vec!["x=1", "to=a%26b@c", "to=d"]);
        assert!(Url::parse(":25").unwrap_err().contains("host is missing"));
        assert!(Url::parse("h:0").unwrap_err().contains("not a port"));
        assert!(Url::parse("h:x").unwrap_err().contains("not a port"));
        assert!(Url::parse("h?a=%zz")
            .unwrap_err()
            .contains("two hex digits"));
    }

    #[test]
    fn unknown_scheme_lists_the_known_ones() {
        let e = parse("foo://x").unwrap_err();
        assert_eq!(
            e,
            "--notify 'foo://x': unknown scheme 'foo': use webhook+http://, webhook+https://, \
             syslog+udp://, syslog+tcp://, smtp://, smtps:// or exec:"
        );
        assert!(parse("https://x/y")
            .unwrap_err()
            .contains("write webhook+https://"));
        assert!(parse("/usr/bin/x").unwrap_err().contains("not a URL"));
    }
}
