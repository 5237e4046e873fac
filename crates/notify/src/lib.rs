//! Alert notifications: delivers each alert record (the JSON object the alert engine emits:
//! `id`, `type`, `severity`, `entity: {kind, value}`, `state`, `start`, `end`, `summary`, `source`,
//! `evidence`, …) to the places named by `--notify URL` flags.
//!
//! ```no_run
//! use std::time::Duration;
//! let targets = ["webhook+https://hooks.example/sonde?format=alertmanager", "syslog+udp://127.0.0.1:514"]
//!     .iter()
//!     .map(|s| sonde_notify::parse(s))
//!     .collect::<Result<Vec<_>, String>>()?;
//! let notifier = sonde_notify::Notifier::start(targets, sonde_notify::Options::default())?;
//! # let alert = serde_json::json!({});
//! notifier.send(&alert); // from the alert engine's thread: never blocks
//! let mut metrics = String::new();
//! notifier.metrics(&mut metrics); // for /metrics
//! for s in notifier.finish(Duration::from_secs(5)) {
//!     if s.queued > 0 {
//!         eprintln!("{}: {} alerts not delivered", s.name, s.queued);
//!     }
//! }
//! # Ok::<(), String>(())
//! ```
//!
//! # Targets (`--notify URL`, repeatable)
//!
//! | URL | what is sent |
//! |-----|--------------|
//! | `webhook+http://HOST[:PORT]/PATH`, `webhook+https://…` | `POST` of a JSON body: the alert record itself, or with `?format=alertmanager` the payload of Prometheus Alertmanager's webhook receiver (version `"4"`, one alert per request, `firing` then `resolved`). `?header=Name:Value` (repeatable) adds a request header (e.g. `header=Authorization:Bearer%20xyz`); `?receiver=NAME` (default `sonde`) and `?external_url=URL` fill the Alertmanager fields of those names. `user:pass@` sends HTTP basic authentication. Any other query parameter is kept in the URL that is posted to. |
//! | `syslog+udp://HOST:PORT`, `syslog+tcp://HOST:PORT` | one RFC 5424 message per alert: `<PRI>1 TIMESTAMP HOSTNAME APP PROCID MSGID [sonde@32473 id=".." …] BOM+summary`. PRI = facility × 8 + the alert's severity (critical 2, error 3, warning 4, notice 5, info 6). `?facility=` (`kern`…`local7`, default `daemon`), `?app=` (default `sonde`), `?hostname=` (default: this machine's). TCP frames by octet counting (RFC 6587 §3.4.1) and reconnects after an error; UDP sends one datagram of at most 2048 bytes (the summary is cut first, then the last structured-data parameters). |
//! | `smtp://[USER:PASS@]HOST:PORT?from=A&to=B[&to=C…]` | a plain-text mail, Subject `[sonde] SEVERITY TYPE ENTITY engaged\|released`, body the summary and the alert record pretty-printed. `?starttls=1` requires STARTTLS; `smtps://` speaks TLS from the first byte (port 465). |
//! | `exec:/path/to/program[?arg=X&arg=Y…]` | runs the program directly (no shell; the alert is never put into its arguments or environment) with the alert record as one line of JSON on its standard input. Exit status 0 = delivered; past the timeout the program and its process group are killed and the attempt fails. A name without `/` is looked up in `PATH` at start. |
//!
//! Query values are percent-decoded (`%20`, `%26` for `&`). Every error names the flag and the
//! URL as given (a password shown as `***`) and says what to change.
//!
//! # Delivery
//!
//! [`Notifier::start`] checks what it can first (an SMTP server answers 220 and EHLO, and offers
//! STARTTLS when asked to; a program exists and is executable), then starts one worker thread per
//! target. [`Notifier::send`] never blocks: it puts the alert on each target's bounded queue
//! ([`Options::queue`]); when a queue is full the *oldest* alert waiting there is dropped (not the
//! one being delivered) and counted as `dropped`, so a target that comes back gets the most recent
//! alerts. A failed attempt is retried after a backoff that doubles from
//! [`Options::backoff_initial`] up to [`Options::backoff_max`], at most [`Options::retries`]
//! times; then the alert is given up (`given_up`). Failures that retrying cannot fix are given up at
//! once: an HTTP 4xx other than 408 and 429, an SMTP 5xx. Each attempt has [`Options::timeout`].
//! Failures are written to standard error at most once per target every 10 s, with the number not
//! shown. [`Notifier::finish`] delivers what is queued until a deadline and stops the workers
//! (dropping the `Notifier` instead stops them after their current attempt, sending nothing more).
//!
//! Counters per target ([`Notifier::stats`], and for `/metrics` [`Notifier::metrics`]):
//! `sent` (delivered alerts), `failures` (failed attempts), `retries` (attempts after the first),
//! `dropped` (queue full), `given_up` (retries exhausted or a permanent failure), `queued` (waiting
//! or being delivered now), and the last error. For the alerts given to `send` (before `finish`):
//! `sent + dropped + given_up + queued` = their number.
//!
//! # Escaping
//!
//! Every string of an alert may have come off the wire. Webhook bodies are JSON; syslog
//! structured-data values escape `"`, `\` and `]` (RFC 5424 §6.3.3), the MSGID and header fields
//! keep printable US-ASCII only, the message has control characters replaced by spaces; mail
//! subjects have control characters (CR, LF) replaced by spaces before the header is encoded, and
//! the addresses come only from the URL; commands get the alert on standard input only.

mod exec;
mod smtp;
mod syslog;
mod target;
mod time;
mod webhook;

use serde_json::Value;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use target::{parse, Target};

/// Delivery settings shared by all targets.
#[derive(Clone, Debug)]
pub struct Options {
    /// Alerts waiting per target (at least 1); when full the oldest waiting one is dropped.
    pub queue: usize,
    /// Attempts after the first before an alert is given up.
    pub retries: u32,
    /// Wait before the first retry; doubled before each next one.
    pub backoff_initial: Duration,
    /// Longest wait between two attempts.
    pub backoff_max: Duration,
    /// Limit of one attempt (connect, send, answer; a command's run time).
    pub timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            queue: 1000,
            retries: 5,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
        }
    }
}

/// Counters of one target (see the crate documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetStats {
    /// The URL as given, with a password and header values shown as `***`.
    pub name: String,
    pub sent: u64,
    pub failures: u64,
    pub retries: u64,
    pub dropped: u64,
    pub given_up: u64,
    pub queued: u64,
    pub last_error: Option<String>,
}

/// Why one attempt failed.
pub(crate) struct Failure {
    pub msg: String,
    /// Retrying cannot help (HTTP 4xx, SMTP 5xx): give up at once.
    pub permanent: bool,
}

impl Failure {
    pub(crate) fn retry(msg: impl Into<String>) -> Failure {
        Failure {
            msg: msg.into(),
            permanent: false,
        }
    }
    pub(crate) fn permanent(msg: impl Into<String>) -> Failure {
        Failure {
            msg: msg.into(),
            permanent: true,
        }
    }
}

/// One target's way of delivering an alert (one attempt).
pub(crate) trait Deliver: Send {
    fn deliver(&mut self, alert: &Value, timeout: Duration) -> Result<(), Failure>;
}

struct Queue {
    /// Front: the alert being delivered when `in_flight`.
    items: VecDeque<Arc<Value>>,
    in_flight: bool,
    /// Set by `finish` (or drop): deliver what is queued until then, then stop.
    stop: Option<Instant>,
}

struct Shared {
    name: String,
    capacity: usize,
    queue: Mutex<Queue>,
    wake: Condvar,
    sent: AtomicU64,
    failures: AtomicU64,
    retries: AtomicU64,
    dropped: AtomicU64,
    given_up: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Shared {
    fn stats(&self) -> TargetStats {
        let queued = self
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .items
            .len() as u64;
        TargetStats {
            name: self.name.clone(),
            sent: self.sent.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            given_up: self.given_up.load(Ordering::Relaxed),
            queued,
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Delivers alerts to the targets, one worker thread each.
pub struct Notifier {
    targets: Vec<Arc<Shared>>,
    workers: Vec<JoinHandle<()>>,
    done: mpsc::Receiver<()>,
}

impl Notifier {
    /// Checks each target (see the crate documentation) and starts its worker. The error names
    /// the flag, the target and what to do.
    pub fn start(targets: Vec<Target>, opts: Options) -> Result<Notifier, String> {
        if opts.queue == 0 {
            return Err("notify: the queue must hold at least 1 alert".into());
        }
        let mut sinks = Vec::with_capacity(targets.len());
        for t in &targets {
            let sink = t
                .open(&opts)
                .map_err(|e| format!("--notify '{}': {e}", t.name()))?;
            sinks.push(sink);
        }
        let (done_tx, done) = mpsc::channel();
        let mut shared = Vec::new();
        let mut workers = Vec::new();
        for (i, (t, sink)) in targets.into_iter().zip(sinks).enumerate() {
            let s = Arc::new(Shared {
                name: t.name().to_string(),
                capacity: opts.queue,
                queue: Mutex::new(Queue {
                    items: VecDeque::new(),
                    in_flight: false,
                    stop: None,
                }),
                wake: Condvar::new(),
                sent: AtomicU64::new(0),
                failures: AtomicU64::new(0),
                retries: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                given_up: AtomicU64::new(0),
                last_error: Mutex::new(None),
            });
            let worker = Worker {
                shared: s.clone(),
                sink,
                opts: opts.clone(),
                log: Log::default(),
            };
            let tx = done_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("notify-{i}"))
                .spawn(move || {
                    worker.run();
                    let _ = tx.send(());
                })
                .map_err(|e| format!("notify: cannot start a thread: {e}"))?;
            shared.push(s);
            workers.push(handle);
        }
        Ok(Notifier {
            targets: shared,
            workers,
            done,
        })
    }

    /// Queues the alert for every target; never waits for a delivery.
    pub fn send(&self, alert: &Value) {
        if self.targets.is_empty() {
            return;
        }
        let alert = Arc::new(alert.clone());
        for t in &self.targets {
            let mut q = t.lock();
            if q.stop.is_some() {
                continue;
            }
            if q.items.len() >= t.capacity {
                // Drop the oldest waiting alert; the one being delivered stays.
                let oldest = usize::from(q.in_flight);
                if oldest < q.items.len() {
                    q.items.remove(oldest);
                    q.items.push_back(alert.clone());
                }
                // else: a queue of 1 whose alert is being delivered: the new one is dropped.
                t.dropped.fetch_add(1, Ordering::Relaxed);
            } else {
                q.items.push_back(alert.clone());
            }
            drop(q);
            t.wake.notify_one();
        }
    }

    /// Counters per target, in the order the targets were given.
    pub fn stats(&self) -> Vec<TargetStats> {
        self.targets.iter().map(|t| t.stats()).collect()
    }

    /// Appends the counters in the Prometheus text format (one family per counter, a `target`
    /// label per target).
    pub fn metrics(&self, out: &mut String) {
        write_metrics(&self.stats(), out);
    }

    /// Delivers what is queued (retrying as usual) for at most `deadline`, stops the workers and
    /// returns the final counters; `queued` counts the alerts left undelivered.
    pub fn finish(mut self, deadline: Duration) -> Vec<TargetStats> {
        let until = Instant::now() + deadline;
        self.stop(until);
        let mut left = self.workers.len();
        while left > 0 {
            // A worker's attempt never outlasts the deadline by more than a connect's slack.
            let wait =
                (until + Duration::from_millis(250)).saturating_duration_since(Instant::now());
            match self.done.recv_timeout(wait) {
                Ok(()) => left -= 1,
                Err(_) => break,
            }
        }
        if left == 0 {
            for w in self.workers.drain(..) {
                let _ = w.join();
            }
        }
        // Workers still in an attempt are left to end on their own (their timeout ends it).
        self.stats()
    }

    fn stop(&self, until: Instant) {
        for t in &self.targets {
            let mut q = t.lock();
            if q.stop.is_none() {
                q.stop = Some(until);
            }
            drop(q);
            t.wake.notify_all();
        }
    }
}

impl Drop for Notifier {
    /// Without `finish`: workers stop after their current attempt; queued alerts are not sent.
    fn drop(&mut self) {
        self.stop(Instant::now());
    }
}

/// The Prometheus text of `stats` (what [`Notifier::metrics`] writes).
pub fn write_metrics(stats: &[TargetStats], out: &mut String) {
    type Family = (
        &'static str,
        &'static str,
        &'static str,
        fn(&TargetStats) -> u64,
    );
    let families: [Family; 6] = [
        (
            "sonde_notify_sent_total",
            "counter",
            "Alerts delivered.",
            |s| s.sent,
        ),
        (
            "sonde_notify_failures_total",
            "counter",
            "Delivery attempts that failed.",
            |s| s.failures,
        ),
        (
            "sonde_notify_retries_total",
            "counter",
            "Delivery attempts after the first.",
            |s| s.retries,
        ),
        (
            "sonde_notify_dropped_total",
            "counter",
            "Alerts dropped because the queue was full.",
            |s| s.dropped,
        ),
        (
            "sonde_notify_given_up_total",
            "counter",
            "Alerts given up after failed attempts.",
            |s| s.given_up,
        ),
        (
            "sonde_notify_queued",
            "gauge",
            "Alerts waiting or being delivered.",
            |s| s.queued,
        ),
    ];
    for (name, kind, help, get) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for s in stats {
            let _ = writeln!(
                out,
                "{name}{{target=\"{}\"}} {}",
                escape_label(&s.name),
                get(s)
            );
        }
    }
}

/// A label value of the Prometheus text format: `\`, `"` and newline escaped.
fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Writes failures to stderr at most once per `LOG_EVERY`.
#[derive(Default)]
struct Log {
    last: Option<Instant>,
    hidden: u64,
}

const LOG_EVERY: Duration = Duration::from_secs(10);

impl Log {
    /// Writes the line unless one was written in the last `LOG_EVERY`; answers whether it did.
    fn failure(&mut self, name: &str, what: &str) -> bool {
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
            self.hidden += 1;
            return false;
        }
        let hidden = match self.hidden {
            0 => String::new(),
            n => format!(" ({n} more failure messages not shown)"),
        };
        eprintln!("sonde: --notify '{name}': {what}{hidden}");
        self.last = Some(now);
        self.hidden = 0;
        true
    }
}

struct Worker {
    shared: Arc<Shared>,
    sink: Box<dyn Deliver>,
    opts: Options,
    log: Log,
}

enum Outcome {
    Done,
    /// The stop deadline came first: the alert stays queued (undelivered).
    Stopped,
}

impl Worker {
    fn run(mut self) {
        loop {
            let alert = {
                let mut q = self.shared.lock();
                loop {
                    if let Some(stop) = q.stop {
                        if q.items.is_empty() || Instant::now() >= stop {
                            return;
                        }
                    }
                    if let Some(front) = q.items.front().cloned() {
                        q.in_flight = true;
                        break front;
                    }
                    q = self.shared.wake.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            let outcome = self.deliver(&alert);
            let mut q = self.shared.lock();
            q.in_flight = false;
            match outcome {
                Outcome::Done => {
                    q.items.pop_front();
                }
                Outcome::Stopped => return,
            }
        }
    }

    /// The stop deadline, if `finish` set one.
    fn stop(&self) -> Option<Instant> {
        self.shared.lock().stop
    }

    fn deliver(&mut self, alert: &Value) -> Outcome {
        let s = self.shared.clone();
        let mut backoff = self.opts.backoff_initial;
        let mut attempt: u32 = 0;
        loop {
            let mut timeout = self.opts.timeout;
            if let Some(stop) = self.stop() {
                let left = stop.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Outcome::Stopped;
                }
                timeout = timeout.min(left);
            }
            if attempt > 0 {
                s.retries.fetch_add(1, Ordering::Relaxed);
            }
            let err = match self.sink.deliver(alert, timeout) {
                Ok(()) => {
                    s.sent.fetch_add(1, Ordering::Relaxed);
                    return Outcome::Done;
                }
                Err(e) => e,
            };
            s.failures.fetch_add(1, Ordering::Relaxed);
            *s.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(err.msg.clone());
            let id = alert_id(alert);
            if err.permanent || attempt >= self.opts.retries {
                s.given_up.fetch_add(1, Ordering::Relaxed);
                let why = if err.permanent {
                    "retrying cannot help"
                } else {
                    "no retries left"
                };
                let _ = self.log.failure(
                    &s.name,
                    &format!(
                        "alert {id} given up after {} attempts ({why}): {}",
                        attempt + 1,
                        err.msg
                    ),
                );
                return Outcome::Done;
            }
            let _ = self.log.failure(
                &s.name,
                &format!(
                    "alert {id}: attempt {} failed: {}; retrying in {:.1}s",
                    attempt + 1,
                    err.msg,
                    backoff.as_secs_f64()
                ),
            );
            if !self.pause(backoff) {
                return Outcome::Stopped;
            }
            backoff = (backoff * 2).min(self.opts.backoff_max);
            attempt += 1;
        }
    }

    /// Waits `d`, or less when the stop deadline comes first (then answers false).
    fn pause(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        let mut q = self.shared.lock();
        loop {
            let now = Instant::now();
            if let Some(stop) = q.stop {
                if stop <= now {
                    return false;
                }
            }
            if now >= end {
                return true;
            }
            let until = match q.stop {
                Some(stop) => end.min(stop),
                None => end,
            };
            q = self
                .shared
                .wake
                .wait_timeout(q, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

fn alert_id(alert: &Value) -> String {
    match alert.get("id") {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => "?".into(),
    }
}

/// A short text for an I/O error ("connection refused", "timed out", …).
pub(crate) fn io_text(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => "connection refused".into(),
        K::ConnectionReset => "connection reset".into(),
        K::ConnectionAborted => "connection aborted".into(),
        K::TimedOut | K::WouldBlock => "timed out".into(),
        K::BrokenPipe => "connection closed by the peer".into(),
        K::NotFound => "not found".into(),
        K::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// A string field of the alert (numbers written as numbers), or "".
pub(crate) fn field(alert: &Value, key: &str) -> String {
    value_text(alert.get(key))
}

pub(crate) fn value_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

/// The entity's kind and value (`entity: {kind, value}`).
pub(crate) fn entity(alert: &Value) -> (String, String) {
    match alert.get("entity") {
        Some(e @ Value::Object(_)) => (value_text(e.get("kind")), value_text(e.get("value"))),
        other => (String::new(), value_text(other)),
    }
}

/// `engaged` or `released` (from `state`, else from `event`).
pub(crate) fn state(alert: &Value) -> &'static str {
    match alert.get("state").and_then(Value::as_str) {
        Some("released") => "released",
        Some(_) => "engaged",
        None => match alert.get("event").and_then(Value::as_str) {
            Some("end") => "released",
            _ => "engaged",
        },
    }
}

/// A Unix time field in whole seconds.
pub(crate) fn unix_seconds(alert: &Value, key: &str) -> Option<i64> {
    let v = alert.get(key)?;
    v.as_i64()
        .or_else(|| v.as_u64().map(|u| u as i64))
        .or_else(|| v.as_f64().map(|f| f.floor() as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_escapes_labels() {
        let s = TargetStats {
            name: "exec:/x\"y\\z\nw".into(),
            sent: 3,
            failures: 2,
            retries: 1,
            dropped: 4,
            given_up: 5,
            queued: 6,
            last_error: None,
        };
        let mut out = String::new();
        write_metrics(&[s], &mut out);
        assert!(
            out.contains("# TYPE sonde_notify_sent_total counter\n"),
            "{out}"
        );
        assert!(
            out.contains("sonde_notify_sent_total{target=\"exec:/x\\\"y\\\\z\\nw\"} 3\n"),
            "{out}"
        );
        assert!(out.contains("sonde_notify_failures_total{target=\"exec:/x\\\"y\\\\z\\nw\"} 2\n"));
        assert!(out.contains("sonde_notify_retries_total{target=\"exec:/x\\\"y\\\\z\\nw\"} 1\n"));
        assert!(out.contains("sonde_notify_dropped_total{target=\"exec:/x\\\"y\\\\z\\nw\"} 4\n"));
        assert!(out.contains("sonde_notify_given_up_total{target=\"exec:/x\\\"y\\\\z\\nw\"} 5\n"));
        assert!(out.contains("# TYPE sonde_notify_queued gauge\nsonde_notify_queued{target=\"exec:/x\\\"y\\\\z\\nw\"} 6\n"));
        // Every sample line is NAME{target="..."} VALUE, with no raw newline inside.
        for line in out.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                line.starts_with("sonde_notify_") && line.contains("{target=\""),
                "{line}"
            );
        }
    }

    #[test]
    fn failure_log_is_rate_limited() {
        let mut log = Log::default();
        assert!(log.failure("t", "first"));
        assert!(!log.failure("t", "second"));
        assert!(!log.failure("t", "third"));
        assert_eq!(log.hidden, 2);
        log.last = Some(Instant::now() - LOG_EVERY);
        assert!(log.failure("t", "after 10 s"));
        assert_eq!(log.hidden, 0);
    }

    #[test]
    fn alert_accessors() {
        let a = serde_json::json!({"id": 17, "entity": {"kind": "host", "value": "10.0.0.5"},
            "event": "end", "start": 1700000000, "end": 1700000060.7});
        assert_eq!(entity(&a), ("host".into(), "10.0.0.5".into()));
        assert_eq!(state(&a), "released");
        assert_eq!(unix_seconds(&a, "end"), Some(1700000060));
        assert_eq!(field(&a, "id"), "17");
        assert_eq!(field(&a, "missing"), "");
    }
}
