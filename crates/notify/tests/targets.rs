//! Each kind of target against a real receiver on 127.0.0.1.

mod common;

use common::*;
use serde_json::{json, Value};
use sonde_notify::{parse, Notifier};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

fn start(spec: &str) -> Notifier {
    Notifier::start(vec![parse(spec).unwrap()], quick(0)).unwrap()
}

fn wait_sent(n: &Notifier, sent: u64) {
    wait_for(&format!("{sent} sent"), WAIT, || {
        let s = &n.stats()[0];
        assert_eq!(s.failures, 0, "{s:?}");
        s.sent >= sent
    });
}

#[test]
fn webhook_posts_the_alert_record_with_headers() {
    let http = Http::start(200);
    let n = start(&format!(
        "webhook+http://127.0.0.1:{}/hooks/sonde?header=Authorization:Bearer%20s3cret&header=X-Team:net&team=a%20b",
        http.port
    ));
    let a = alert(17, "engaged");
    n.send(&a);
    wait_sent(&n, 1);
    let r = &http.requests()[0];
    assert_eq!(r.method, "POST");
    assert_eq!(
        r.target, "/hooks/sonde?team=a%20b",
        "options not ours stay in the URL"
    );
    assert_eq!(r.header("authorization"), Some("Bearer s3cret"));
    assert_eq!(r.header("x-team"), Some("net"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json(), a, "the body is the alert record itself");
    let s = n.finish(Duration::from_secs(1));
    assert_eq!((s[0].sent, s[0].failures, s[0].queued), (1, 0, 0));
    assert!(!s[0].name.contains("s3cret"), "{}", s[0].name);
    assert!(
        s[0].name.contains("header=Authorization:***"),
        "{}",
        s[0].name
    );
}

#[test]
fn webhook_alertmanager_firing_then_resolved() {
    let http = Http::start(200);
    let n = start(&format!(
        "webhook+http://127.0.0.1:{}/api/alerts?format=alertmanager&receiver=noc&external_url=http://sonde.example:8080",
        http.port
    ));
    n.send(&alert(17, "engaged"));
    n.send(&alert(17, "released"));
    wait_sent(&n, 2);
    let r = http.requests();
    assert_eq!(r.len(), 2);
    let (firing, resolved) = (r[0].json(), r[1].json());
    for (body, status) in [(&firing, "firing"), (&resolved, "resolved")] {
        assert_eq!(body["version"], "4");
        assert_eq!(body["status"], status);
        assert_eq!(body["receiver"], "noc");
        assert_eq!(body["externalURL"], "http://sonde.example:8080");
        assert_eq!(body["groupLabels"], json!({"alertname": "ddos"}));
        assert_eq!(body["groupKey"], "{}:{alertname=\"ddos\"}");
        assert_eq!(body["truncatedAlerts"], 0);
        let alerts = body["alerts"].as_array().unwrap();
        assert_eq!(alerts.len(), 1);
        let a = &alerts[0];
        assert_eq!(a["status"], status);
        assert_eq!(
            a["labels"],
            json!({"alertname": "ddos", "severity": "error", "entity_kind": "host",
                "entity": "10.0.0.5", "source": "analytics", "direction": "in"})
        );
        assert_eq!(body["commonLabels"], a["labels"]);
        assert_eq!(body["commonAnnotations"], a["annotations"]);
        assert_eq!(
            a["annotations"]["summary"],
            "ddos toward 10.0.0.5: 120000 packets/s (threshold 50000)"
        );
        let d = a["annotations"]["description"].as_str().unwrap();
        assert!(
            d.starts_with("sonde alert 17: ddos on host 10.0.0.5; evidence: {"),
            "{d}"
        );
        assert_eq!(a["startsAt"], "2023-11-14T22:13:20Z");
        assert_eq!(a["generatorURL"], "http://sonde.example:8080");
        let fp = a["fingerprint"].as_str().unwrap();
        assert!(
            fp.len() == 16 && fp.bytes().all(|b| b.is_ascii_hexdigit()),
            "{fp}"
        );
    }
    assert_eq!(firing["alerts"][0]["endsAt"], "0001-01-01T00:00:00Z");
    assert_eq!(resolved["alerts"][0]["endsAt"], "2023-11-14T22:23:20Z");
    assert_eq!(
        firing["alerts"][0]["fingerprint"],
        resolved["alerts"][0]["fingerprint"]
    );
}

fn hostile_alert() -> Value {
    let mut a = alert(42, "engaged");
    a["entity"] = json!({"kind": "host", "value": "evil\"] \\x\u{e9}"});
    a["type"] = json!("scan.port\u{e9} x");
    a["severity"] = json!("critical");
    a["summary"] = json!("scan from évil\r\nhost");
    a
}

fn check_syslog(m: &[u8], a: &Value) {
    let s = parse_syslog(m);
    assert_eq!(s.pri, 16 * 8 + 2, "local0 and critical");
    assert_eq!(s.version, "1");
    assert_eq!(s.timestamp, "2023-11-14T22:13:20Z");
    assert_eq!(s.hostname, "probe-1");
    assert_eq!(s.app, "sonde-test");
    assert_eq!(s.procid, std::process::id().to_string());
    assert_eq!(
        s.msgid, "scan.port__x",
        "non-PRINTUSASCII characters replaced"
    );
    assert_eq!(s.sd_id, "sonde@32473");
    assert_eq!(s.param("id"), Some("42"));
    assert_eq!(s.param("state"), Some("engaged"));
    assert_eq!(s.param("entity_kind"), Some("host"));
    assert_eq!(
        s.param("entity"),
        a["entity"]["value"].as_str(),
        "escaped then unescaped back"
    );
    assert_eq!(s.param("type"), a["type"].as_str());
    assert_eq!(s.param("source"), Some("analytics"));
    assert_eq!(&s.msg[..3], b"\xEF\xBB\xBF", "MSG starts with the BOM");
    assert_eq!(
        std::str::from_utf8(&s.msg[3..]).unwrap(),
        "scan from évil  host"
    );
}

#[test]
fn syslog_udp_rfc5424() {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let port = sock.local_addr().unwrap().port();
    let n = start(&format!(
        "syslog+udp://127.0.0.1:{port}?facility=local0&app=sonde-test&hostname=probe-1"
    ));
    let a = hostile_alert();
    n.send(&a);
    let mut buf = [0u8; 65536];
    let len = sock.recv(&mut buf).expect("a datagram");
    check_syslog(&buf[..len], &a);

    // Over 2048 bytes: cut to 2048, still a valid message.
    let mut big = hostile_alert();
    big["summary"] = json!("x".repeat(5000));
    n.send(&big);
    let len = sock.recv(&mut buf).expect("a datagram");
    assert_eq!(len, 2048);
    let s = parse_syslog(&buf[..len]);
    assert_eq!(s.param("entity"), big["entity"]["value"].as_str());
    assert!(s.msg.ends_with(b"xxx"));
    wait_sent(&n, 2);
}

#[test]
fn syslog_tcp_octet_counting_and_reconnect() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // First connection: two frames, then the server closes it; second connection: one frame.
        for frames in [2, 1] {
            let (mut conn, _) = listener.accept().unwrap();
            for _ in 0..frames {
                tx.send(read_frame(&mut conn).expect("a frame")).unwrap();
            }
            drop(conn);
            tx.send(b"closed".to_vec()).unwrap();
        }
    });
    let n = start(&format!(
        "syslog+tcp://127.0.0.1:{port}?facility=local0&app=sonde-test&hostname=probe-1"
    ));
    let a = hostile_alert();
    n.send(&a);
    n.send(&a);
    for _ in 0..2 {
        check_syslog(&rx.recv_timeout(WAIT).unwrap(), &a);
    }
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), b"closed");
    wait_sent(&n, 2);
    // The server closed the connection: the next alert goes over a new one.
    n.send(&a);
    check_syslog(&rx.recv_timeout(WAIT).unwrap(), &a);
    let s = n.finish(Duration::from_secs(1));
    assert_eq!((s[0].sent, s[0].failures), (3, 0));
}

// ---- command ----

fn write_script(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    let mut perm = std::fs::metadata(&p).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&p, perm).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn exec_gets_the_alert_on_stdin_and_never_a_shell() {
    let dir = temp_dir("exec");
    let script = write_script(
        &dir,
        "save",
        r#"cat > "$1/stdin.tmp" && mv "$1/stdin.tmp" "$1/stdin.json"; printf %s "$2" > "$1/arg2""#,
    );
    std::fs::write(dir.join("keep"), "").unwrap();
    let d = dir.to_str().unwrap();
    let mut a = alert(7, "engaged");
    a["entity"] = json!({"kind": "host", "value": format!("$(touch {d}/pwned1)")});
    a["summary"] = json!(format!(
        "; rm -rf {d}/keep; `touch {d}/pwned2` && touch {d}/pwned3"
    ));
    a["type"] = json!(format!("' ; touch {d}/pwned4 #"));
    let n = start(&format!("exec:{script}?arg={d}&arg=a%20b%3Bc%24(x)"));
    n.send(&a);
    wait_sent(&n, 1);
    let got: Value =
        serde_json::from_slice(&std::fs::read(dir.join("stdin.json")).unwrap()).unwrap();
    assert_eq!(got, a, "stdin is the alert record");
    assert_eq!(
        std::fs::read_to_string(dir.join("arg2")).unwrap(),
        "a b;c$(x)",
        "arguments passed as given"
    );
    for f in ["pwned1", "pwned2", "pwned3", "pwned4"] {
        assert!(!dir.join(f).exists(), "{f}: an alert field was executed");
    }
    assert!(dir.join("keep").exists());
    n.finish(Duration::from_secs(1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn exec_failure_and_timeout() {
    let dir = temp_dir("exec-fail");
    let fail = write_script(&dir, "fail", "cat >/dev/null; echo boom >&2; exit 3");
    let n = Notifier::start(vec![parse(&format!("exec:{fail}")).unwrap()], quick(1)).unwrap();
    n.send(&alert(1, "engaged"));
    wait_for("given up", WAIT, || n.stats()[0].given_up == 1);
    let s = &n.stats()[0];
    assert_eq!((s.sent, s.failures, s.retries, s.given_up), (0, 2, 1, 1));
    assert_eq!(
        s.last_error.as_deref(),
        Some(format!("{fail} exited with status 3: boom").as_str())
    );

    // A program that outlives the timeout is killed, with what it started.
    let slow = write_script(
        &dir,
        "slow",
        &format!("sleep 30 & echo $! > {}/child; wait", dir.display()),
    );
    let mut opts = quick(0);
    opts.timeout = Duration::from_millis(300);
    let n = Notifier::start(vec![parse(&format!("exec:{slow}")).unwrap()], opts).unwrap();
    let t = std::time::Instant::now();
    n.send(&alert(2, "engaged"));
    wait_for("given up", WAIT, || n.stats()[0].given_up == 1);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let e = n.stats()[0].last_error.clone().unwrap();
    assert!(e.contains("did not end within 0.3s: killed"), "{e}");
    let pid = std::fs::read_to_string(dir.join("child")).unwrap();
    wait_for(
        "the program's child killed",
        WAIT,
        || match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
            Err(_) => true,
            Ok(stat) => stat.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')),
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- SMTP (aiosmtpd) ----

const SMTP_SERVER: &str = r#"
import email, email.policy, json, os, socket, sys
from aiosmtpd.controller import Controller
out = sys.argv[1]
class Handler:
    n = 0
    async def handle_DATA(self, server, session, envelope):
        Handler.n += 1
        raw = envelope.original_content
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        rec = {"mail_from": envelope.mail_from, "rcpt_tos": envelope.rcpt_tos,
               "headers": [[k, str(v)] for k, v in msg.items()],
               "subject": str(msg["Subject"]), "body": msg.get_content(),
               "raw": raw.decode("utf-8", "replace")}
        path = os.path.join(out, "%03d.json" % Handler.n)
        with open(path + ".tmp", "w") as f:
            json.dump(rec, f)
        os.rename(path + ".tmp", path)
        return "250 OK"
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
c = Controller(Handler(), hostname="127.0.0.1", port=port)
c.start()
print(port, flush=True)
sys.stdin.read()
c.stop()
"#;

struct Smtp {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl Smtp {
    fn start(name: &str) -> Smtp {
        let ok = Command::new("python3")
            .args(["-c", "import aiosmtpd"])
            .stderr(Stdio::null())
            .status();
        assert!(
            ok.is_ok_and(|s| s.success()),
            "the SMTP tests need Python's aiosmtpd: run scripts/setup-test-deps.sh (or python3 -m pip install aiosmtpd)"
        );
        let dir = temp_dir(name);
        let mut child = Command::new("python3")
            .args(["-c", SMTP_SERVER, dir.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("aiosmtpd did not start: {line:?}"));
        Smtp { child, port, dir }
    }

    fn mails(&self) -> Vec<Value> {
        let mut names: Vec<_> = std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|p| serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap())
            .collect()
    }
}

impl Drop for Smtp {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.write_all(b"");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn smtp_mail_without_header_injection() {
    let smtp = Smtp::start("smtp");
    let spec = format!(
        "smtp://127.0.0.1:{}?from=sonde@probe.example&to=noc@example.org&to=Oncall%20%3Concall@example.org%3E",
        smtp.port
    );
    let n = Notifier::start(vec![parse(&spec).unwrap()], quick(0)).unwrap();
    let mut a = alert(17, "engaged");
    a["type"] = json!("host.listed\r\nBcc: victim@example.net\r\nX-Injected: 1");
    a["entity"] = json!({"kind": "host", "value": "evil.example\nX-Injected-Too: yes"});
    a["summary"] = json!("listed host contacted\r\n.\r\nMAIL FROM:<x@y>");
    n.send(&a);
    n.send(&alert(18, "released"));
    wait_sent(&n, 2);
    let mails = smtp.mails();
    assert_eq!(mails.len(), 2);
    let m = &mails[0];
    assert_eq!(m["mail_from"], "sonde@probe.example");
    assert_eq!(
        m["rcpt_tos"],
        json!(["noc@example.org", "oncall@example.org"]),
        "only the URL's recipients"
    );
    assert_eq!(
        m["subject"],
        "[sonde] ERROR host.listed  Bcc: victim@example.net  X-Injected: 1 evil.example X-Injected-Too: yes engaged"
    );
    let headers: Vec<String> = m["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h[0].as_str().unwrap().to_lowercase())
        .collect();
    for bad in ["bcc", "x-injected", "x-injected-too"] {
        assert!(
            !headers.contains(&bad.to_string()),
            "header {bad} injected: {headers:?}"
        );
    }
    for h in ["from", "to", "subject", "date", "content-type"] {
        assert!(headers.contains(&h.to_string()), "{h} missing: {headers:?}");
    }
    let find = |name: &str| {
        m["headers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h[0].as_str().unwrap().eq_ignore_ascii_case(name))
            .unwrap()[1]
            .clone()
    };
    assert_eq!(find("from"), "sonde@probe.example");
    assert_eq!(find("to"), "noc@example.org, Oncall <oncall@example.org>");
    assert!(find("content-type")
        .as_str()
        .unwrap()
        .starts_with("text/plain"));
    let body = m["body"].as_str().unwrap().replace("\r\n", "\n");
    let (summary, json_part) = body.split_once("\n\n").unwrap();
    assert_eq!(
        summary, "listed host contacted\n.\nMAIL FROM:<x@y>",
        "the body keeps the summary as data"
    );
    let got: Value = serde_json::from_str(json_part).unwrap();
    assert_eq!(got, a, "the body holds the alert record");
    assert!(json_part.contains("\n  \"id\": 17"), "pretty-printed");
    assert_eq!(mails[1]["subject"], "[sonde] ERROR ddos 10.0.0.5 released");
    n.finish(Duration::from_secs(1));
}

#[test]
fn smtp_checks_at_start() {
    let port = dead_port();
    let spec = format!("smtp://127.0.0.1:{port}?from=a@b.example&to=c@d.example");
    let e = Notifier::start(vec![parse(&spec).unwrap()], quick(0))
        .err()
        .unwrap();
    assert_eq!(
        e,
        format!("--notify '{spec}': cannot reach the SMTP server: connection refused")
    );

    // Something that is not an SMTP server.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let _ = c.write_all(b"SSH-2.0-OpenSSH_9.6\r\n");
        std::thread::sleep(Duration::from_secs(2));
    });
    let spec = format!("smtp://127.0.0.1:{port}?from=a@b.example&to=c@d.example");
    let e = Notifier::start(vec![parse(&spec).unwrap()], quick(0))
        .err()
        .unwrap();
    assert_eq!(
        e,
        format!("--notify '{spec}': the server answered 'SSH-2.0-OpenSSH_9.6' instead of an SMTP greeting (220)")
    );

    // aiosmtpd offers no STARTTLS without a certificate.
    let smtp = Smtp::start("smtp-starttls");
    let spec = format!(
        "smtp://127.0.0.1:{}?from=a@b.example&to=c@d.example&starttls=1",
        smtp.port
    );
    let e = Notifier::start(vec![parse(&spec).unwrap()], quick(0))
        .err()
        .unwrap();
    assert!(e.starts_with(&format!("--notify '{spec}': ")), "{e}");
    assert!(
        e.ends_with("does not offer STARTTLS: drop starttls=1, or use smtps:// on its TLS port"),
        "{e}"
    );
}
