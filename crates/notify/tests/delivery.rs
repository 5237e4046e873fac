//! Retries, giving up, the bounded queue, finish, metrics; and the errors of bad `--notify` URLs.

mod common;

use common::*;
use sonde_notify::{parse, Notifier, Options};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(10);

fn one(spec: &str, opts: Options) -> Notifier {
    Notifier::start(vec![parse(spec).unwrap()], opts).unwrap()
}

#[test]
fn dead_port_is_retried_then_given_up() {
    let n = one(
        &format!("webhook+http://127.0.0.1:{}/x", dead_port()),
        quick(2),
    );
    n.send(&alert(1, "engaged"));
    wait_for("given up", WAIT, || n.stats()[0].given_up == 1);
    let s = n.finish(Duration::from_secs(1)).remove(0);
    assert_eq!(
        (s.sent, s.failures, s.retries, s.dropped, s.given_up, s.queued),
        (0, 3, 2, 0, 1, 0)
    );
    assert_eq!(s.last_error.as_deref(), Some("connection refused"));
}

#[test]
fn http_500_is_retried_with_doubling_backoff() {
    let http = Http::start(500);
    let mut opts = quick(3);
    opts.backoff_initial = Duration::from_millis(40);
    opts.backoff_max = Duration::from_millis(100);
    let n = one(&format!("webhook+http://127.0.0.1:{}/x", http.port), opts);
    n.send(&alert(1, "engaged"));
    wait_for("given up", WAIT, || n.stats()[0].given_up == 1);
    let s = &n.stats()[0];
    assert_eq!(
        (s.sent, s.failures, s.retries, s.given_up, s.queued),
        (0, 4, 3, 1, 0)
    );
    assert_eq!(
        s.last_error.as_deref(),
        Some("HTTP 500 Internal Server Error: nope")
    );
    let r = http.requests();
    assert_eq!(r.len(), 4, "one attempt and three retries");
    // Waits of 40, 80 then 100 ms (capped) between the attempts.
    for (i, least) in [40, 80, 100].into_iter().enumerate() {
        let gap = r[i + 1].at - r[i].at;
        assert!(
            gap >= Duration::from_millis(least),
            "gap {i}: {gap:?} < {least} ms"
        );
    }
}

#[test]
fn http_4xx_is_given_up_at_once_but_429_is_retried() {
    let http = Http::start(404);
    let n = one(
        &format!("webhook+http://127.0.0.1:{}/x", http.port),
        quick(5),
    );
    n.send(&alert(1, "engaged"));
    wait_for("given up", WAIT, || n.stats()[0].given_up == 1);
    let s = &n.stats()[0];
    assert_eq!((s.failures, s.retries, s.given_up), (1, 0, 1));
    assert_eq!(http.count(), 1);

    http.status.store(429, Ordering::SeqCst);
    n.send(&alert(2, "engaged"));
    wait_for("a retry", WAIT, || http.count() >= 3);
    http.status.store(200, Ordering::SeqCst);
    wait_for("sent", WAIT, || n.stats()[0].sent == 1);
    let s = &n.stats()[0];
    assert_eq!(s.given_up, 1, "429 is not given up");
    assert_eq!(s.failures, s.retries + 1, "{s:?}");
}

#[test]
fn full_queue_drops_the_oldest_waiting_and_send_never_blocks() {
    let http = Http::start(503);
    let mut opts = quick(1000);
    opts.queue = 3;
    opts.backoff_initial = Duration::from_millis(50);
    opts.backoff_max = Duration::from_millis(50);
    let n = one(&format!("webhook+http://127.0.0.1:{}/x", http.port), opts);
    n.send(&alert(0, "engaged"));
    wait_for("the first attempt", WAIT, || http.count() >= 1);
    let t = Instant::now();
    for id in 1..100 {
        n.send(&alert(id, "engaged"));
    }
    let took = t.elapsed();
    assert!(took < Duration::from_millis(500), "100 sends took {took:?}");
    let s = &n.stats()[0];
    assert_eq!((s.dropped, s.queued), (97, 3), "{s:?}");
    http.status.store(200, Ordering::SeqCst);
    wait_for("delivered", WAIT, || n.stats()[0].sent == 3);
    let ids: Vec<u64> = http
        .requests()
        .iter()
        .map(|r| r.json()["id"].as_u64().unwrap())
        .collect();
    // Alert 0 was being delivered (kept, retried); 1..=97 were dropped, the newest kept.
    let mut delivered = ids.clone();
    delivered.dedup();
    assert_eq!(delivered, vec![0, 98, 99], "{ids:?}");
    let s = n.finish(Duration::from_secs(1)).remove(0);
    assert_eq!(s.sent + s.dropped + s.given_up + s.queued, 100);
}

#[test]
fn send_does_not_wait_for_a_hung_endpoint_and_finish_keeps_its_deadline() {
    let http = Http::start(200);
    http.hang.store(true, Ordering::SeqCst);
    let mut opts = quick(0);
    opts.queue = 3;
    opts.timeout = Duration::from_secs(30);
    let n = one(&format!("webhook+http://127.0.0.1:{}/x", http.port), opts);
    n.send(&alert(0, "engaged"));
    wait_for("the request", WAIT, || http.count() == 1);
    let t = Instant::now();
    for id in 1..100 {
        n.send(&alert(id, "engaged"));
    }
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let s = n.finish(Duration::from_millis(300)).remove(0);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "finish took {took:?}"
    );
    assert_eq!((s.sent, s.dropped, s.queued), (0, 97, 3), "{s:?}");
}

#[test]
fn finish_delivers_what_is_queued() {
    let http = Http::start(200);
    let n = one(
        &format!("webhook+http://127.0.0.1:{}/x", http.port),
        quick(0),
    );
    for id in 0..20 {
        n.send(&alert(id, "engaged"));
    }
    let s = n.finish(Duration::from_secs(10)).remove(0);
    assert_eq!((s.sent, s.queued, s.failures), (20, 0, 0));
    let ids: Vec<u64> = http
        .requests()
        .iter()
        .map(|r| r.json()["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, (0..20).collect::<Vec<_>>(), "in order");
}

#[test]
fn metrics_per_target() {
    let http = Http::start(200);
    let good = format!(
        "webhook+http://127.0.0.1:{}/x?header=Authorization:Bearer%20t0k",
        http.port
    );
    let dead = format!("webhook+http://127.0.0.1:{}/dead", dead_port());
    let n = Notifier::start(vec![parse(&good).unwrap(), parse(&dead).unwrap()], quick(1)).unwrap();
    n.send(&alert(1, "engaged"));
    wait_for("delivered and given up", WAIT, || {
        let s = n.stats();
        s[0].sent == 1 && s[1].given_up == 1
    });
    let mut m = String::new();
    n.metrics(&mut m);
    let name = format!(
        "webhook+http://127.0.0.1:{}/x?header=Authorization:***",
        http.port
    );
    for line in [
        format!("sonde_notify_sent_total{{target=\"{name}\"}} 1"),
        format!("sonde_notify_failures_total{{target=\"{name}\"}} 0"),
        format!("sonde_notify_sent_total{{target=\"{dead}\"}} 0"),
        format!("sonde_notify_failures_total{{target=\"{dead}\"}} 2"),
        format!("sonde_notify_retries_total{{target=\"{dead}\"}} 1"),
        format!("sonde_notify_given_up_total{{target=\"{dead}\"}} 1"),
        format!("sonde_notify_dropped_total{{target=\"{dead}\"}} 0"),
        format!("sonde_notify_queued{{target=\"{dead}\"}} 0"),
        "# TYPE sonde_notify_queued gauge".to_string(),
    ] {
        assert!(m.lines().any(|l| l == line), "missing {line:?} in\n{m}");
    }
    assert!(!m.contains("t0k"), "a header value in the metrics");
}

// ---- bad input ----

fn parse_err(spec: &str) -> String {
    parse(spec).err().unwrap_or_else(|| panic!("{spec} parsed"))
}

fn start_err(spec: &str) -> String {
    Notifier::start(vec![parse(spec).unwrap()], Options::default())
        .err()
        .unwrap_or_else(|| panic!("{spec} started"))
}

#[test]
fn bad_urls_say_what_to_fix() {
    assert_eq!(
        parse_err("foo://x"),
        "--notify 'foo://x': unknown scheme 'foo': use webhook+http://, webhook+https://, syslog+udp://, \
         syslog+tcp://, smtp://, smtps:// or exec:"
    );
    assert_eq!(
        parse_err("webhook+http:///hook"),
        "--notify 'webhook+http:///hook': the host is missing (e.g. 127.0.0.1:514 or host.example:8080)"
    );
    assert_eq!(
        parse_err("syslog+udp://logs.example"),
        "--notify 'syslog+udp://logs.example': the port is missing: write logs.example:PORT (syslog's is 514)"
    );
    assert_eq!(
        parse_err("syslog+tcp://logs.example:99999"),
        "--notify 'syslog+tcp://logs.example:99999': '99999' is not a port (1-65535)"
    );
    assert_eq!(
        parse_err("smtp://mail.example:25?to=a@b.example"),
        "--notify 'smtp://mail.example:25?to=a@b.example': the sender is missing: write \
         ?from=ADDRESS&to=ADDRESS (to may repeat)"
    );
    assert_eq!(
        parse_err("smtp://mail.example:25?from=a@b.example"),
        "--notify 'smtp://mail.example:25?from=a@b.example': no recipient: write ?from=ADDRESS&to=ADDRESS \
         (to may repeat)"
    );
    assert_eq!(
        parse_err("smtp://u:hunter2@mail.example:25?from=a@b.example&to=c@d.example&cc=x"),
        "--notify 'smtp://u:***@mail.example:25?from=a@b.example&to=c@d.example&cc=x': unknown option 'cc' \
         (known: from, to, starttls)"
    );
    assert_eq!(
        parse_err("exec:"),
        "--notify 'exec:': the program is missing: write exec:/path/to/program"
    );
    assert_eq!(
        parse_err("webhook+http://h/x?format=slack"),
        "--notify 'webhook+http://h/x?format=slack': format=slack: use format=sonde (default) or format=alertmanager"
    );
}

#[test]
fn start_checks_programs() {
    assert_eq!(
        start_err("exec:/nonexistent/notify-hook"),
        "--notify 'exec:/nonexistent/notify-hook': cannot run /nonexistent/notify-hook: not found"
    );
    assert_eq!(
        start_err("exec:no-such-program-sonde"),
        "--notify 'exec:no-such-program-sonde': no program 'no-such-program-sonde' in PATH: give its path"
    );
    let dir = temp_dir("noexec");
    let f = dir.join("hook.sh");
    std::fs::write(&f, "#!/bin/sh\n").unwrap();
    let spec = format!("exec:{}", f.display());
    assert_eq!(
        start_err(&spec),
        format!(
            "--notify '{spec}': {} is not executable: chmod +x it",
            f.display()
        )
    );
    let spec = format!("exec:{}", dir.display());
    assert_eq!(
        start_err(&spec),
        format!("--notify '{spec}': {} is not a file", dir.display())
    );
    let _ = std::fs::remove_dir_all(&dir);
    // A name without '/' is found in PATH.
    assert!(Notifier::start(vec![parse("exec:true").unwrap()], Options::default()).is_ok());
}

#[test]
fn queue_of_zero_is_refused() {
    let o = Options {
        queue: 0,
        ..Options::default()
    };
    assert!(Notifier::start(vec![], o)
        .err()
        .unwrap()
        .contains("at least 1"));
}

#[test]
fn https_speaks_tls() {
    // A plain-HTTP server behind an https URL: rustls refuses its answer.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let mut c = c.unwrap();
            let _ =
                std::io::Write::write_all(&mut c, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let n = one(&format!("webhook+https://127.0.0.1:{port}/x"), quick(0));
    n.send(&alert(1, "engaged"));
    wait_for("given up", WAIT, || n.stats()[0].given_up == 1);
    let s = &n.stats()[0];
    assert_eq!((s.sent, s.failures), (0, 1));
    let e = s.last_error.as_deref().unwrap();
    assert_eq!(
        e,
        "TLS: received corrupt message of type InvalidContentType"
    );
}
