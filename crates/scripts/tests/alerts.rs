//! sonde.alert / sonde.release give exactly the Actions asked for; bad arguments are script
//! errors that name the problem.

mod common;

use common::*;
use serde_json::json;
use sonde_scripts::Action;

const RAISER: &str = r#"
-- engage while a host sends more than LIMIT bytes, release when it drops below
local LIMIT = 1000
local engaged = {}

function every_second(now)
  for _, h in ipairs(sonde.hosts()) do
    if h.sent_bytes > LIMIT then
      sonde.alert{type = "big_sender", entity = h.ip, summary = h.ip .. " sent " .. h.sent_bytes,
                  evidence = {sent = h.sent_bytes, limit = LIMIT, seen = {h.first_seen, h.last_seen}}}
      engaged[h.ip] = true
    elseif engaged[h.ip] then
      sonde.release{type = "big_sender", entity = h.ip}
      engaged[h.ip] = nil
    end
  end
end
"#;

#[test]
fn raises_refreshes_and_releases() {
    let mut scripts = load(&[("raiser.lua", RAISER)]);
    let mut probe = FakeProbe {
        hosts: vec![host("10.0.0.1", 5000, 0), host("10.0.0.2", 10, 0)],
        ..FakeProbe::default()
    };
    probe.hosts[0].first_seen = 100;
    probe.hosts[0].last_seen = 200;
    let engage = Action::Engage {
        kind: "script.big_sender".into(),
        entity_kind: "host".into(),
        entity: "10.0.0.1".into(),
        severity: "warning".into(),
        summary: "10.0.0.1 sent 5000".into(),
        evidence: json!({"sent": 5000, "limit": 1000, "seen": [100, 200]}),
        source: "script:raiser.lua".into(),
    };
    assert_eq!(scripts.tick(1000, &mut probe), vec![engage.clone()]);
    // still above: the same alert again (the caller refreshes it)
    assert_eq!(scripts.tick(1001, &mut probe), vec![engage]);
    probe.hosts[0].sent_bytes = 3;
    assert_eq!(
        scripts.tick(1002, &mut probe),
        vec![Action::Release {
            kind: "script.big_sender".into(),
            entity: "10.0.0.1".into(),
            source: "script:raiser.lua".into(),
        }]
    );
    assert!(scripts.tick(1003, &mut probe).is_empty());
    let st = status_of(&scripts, "raiser.lua");
    assert!(st.enabled && st.calls == 4 && st.errors == 0, "{st:?}");
    assert!(st.max_ns > 0 && st.total_ns >= st.max_ns && st.memory_bytes > 0);
}

#[test]
fn every_field_of_an_alert() {
    let source = r#"
      function every_second(now)
        sonde.alert{type = "a.b-c_9", entity = "eth0", entity_kind = "interface",
                    severity = "critical", summary = "s", evidence = {}}
        sonde.alert{type = "n", entity = 42, summary = "numbers are text",
                    evidence = {list = {1, 2.5, "x", true}, nested = {deep = {deeper = "y"}}, [7] = "seven"}}
      end
    "#;
    let mut scripts = load(&[("fields.lua", source)]);
    let actions = scripts.tick(5, &mut FakeProbe::default());
    assert_eq!(
        actions,
        vec![
            Action::Engage {
                kind: "script.a.b-c_9".into(),
                entity_kind: "interface".into(),
                entity: "eth0".into(),
                severity: "critical".into(),
                summary: "s".into(),
                evidence: json!({}),
                source: "script:fields.lua".into(),
            },
            Action::Engage {
                kind: "script.n".into(),
                entity_kind: "host".into(),
                entity: "42".into(),
                severity: "warning".into(),
                summary: "numbers are text".into(),
                evidence: json!({"list": [1, 2.5, "x", true], "nested": {"deep": {"deeper": "y"}}, "7": "seven"}),
                source: "script:fields.lua".into(),
            },
        ]
    );
}

#[test]
fn on_flow_alerts_and_sonde_now() {
    let source = r#"
      function every_second(now) end
      function on_flow(f)
        sonde.alert{type = "flow_seen", entity = f.client, summary = f.app .. " " .. f.server .. ":" .. f.server_port,
                    evidence = {bytes = f.bytes, packets = f.packets, now = sonde.now(), sni = f.server_name,
                                first = f.first_seen, proto = f.proto, reason = f.end_reason}}
      end
    "#;
    let mut scripts = load(&[("flows.lua", source)]);
    assert!(scripts.wants_flows());
    scripts.tick(1_700_000_100, &mut FakeProbe::default());
    let mut f = flow("10.0.0.1", "1.2.3.4", 700);
    f.server_name = Some("example.com".into());
    let actions = scripts.on_flow(&f);
    assert_eq!(
        actions,
        vec![Action::Engage {
            kind: "script.flow_seen".into(),
            entity_kind: "host".into(),
            entity: "10.0.0.1".into(),
            severity: "warning".into(),
            summary: "TLS 1.2.3.4:443".into(),
            evidence: json!({"bytes": [700, 1000], "packets": [10, 8], "now": 1_700_000_100u64,
                             "sni": "example.com", "first": 1_700_000_000.0, "proto": 6, "reason": "idle"}),
            source: "script:flows.lua".into(),
        }]
    );
}

fn bad_call(call: &str) -> String {
    let source = format!("function every_second(now)\n  {call}\nend\n");
    let mut scripts = load(&[("bad.lua", &source)]);
    // (what a call asked before it failed stands: the 10,000 releases below)
    scripts.tick(1, &mut FakeProbe::default());
    status_of(&scripts, "bad.lua").disabled_reason.unwrap()
}

#[test]
fn bad_arguments_name_the_problem() {
    for (call, expected) in [
        (
            "sonde.alert{entity = 'h', summary = 's'}",
            "sonde.alert: type is missing (the alert's name, e.g. type = \"new_destination\")",
        ),
        (
            "sonde.alert{type = 'x', entity = 'h', summary = 's', severity = 'bad'}",
            "sonde.alert: severity \"bad\" is not one of info, notice, warning, error, critical, emergency",
        ),
        (
            "sonde.alert{type = 'Upper', entity = 'h', summary = 's'}",
            "sonde.alert: type \"Upper\" must be 1 to 64 of a-z 0-9 _ . -",
        ),
        (
            "sonde.alert{type = string.rep('a', 65), entity = 'h', summary = 's'}",
            "sonde.alert: type \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" must be 1 to 64 of a-z 0-9 _ . -",
        ),
        (
            "sonde.alert{type = 'x', summary = 's'}",
            "sonde.alert: entity is missing (what the alert is about, e.g. a host's address)",
        ),
        (
            "sonde.alert{type = 'x', entity = 'h'}",
            "sonde.alert: summary is missing (a string saying what happened)",
        ),
        (
            "sonde.alert{type = 'x', entity = 'h', summary = 's', sevrity = 'error'}",
            "sonde.alert: unknown field \"sevrity\" (it takes type, entity, entity_kind, severity, summary, evidence)",
        ),
        (
            "sonde.alert('x')",
            "sonde.alert takes a table of named fields (sonde.alert{type = ..., entity = ...}), not a string",
        ),
        (
            "sonde.alert{type = 'x', entity = {}, summary = 's'}",
            "sonde.alert: entity must be a string, not a table",
        ),
        (
            "sonde.alert{type = 'x', entity = 'h', summary = 's', evidence = {f = print}}",
            "sonde.alert: evidence.f: a function cannot be evidence",
        ),
        (
            "sonde.alert{type = 'x', entity = 'h', summary = 's', evidence = 3}",
            "sonde.alert: evidence must be a table, not an integer",
        ),
        (
            "sonde.release{type = 'x'}",
            "sonde.release: entity is missing (what the alert is about, e.g. a host's address)",
        ),
        (
            "sonde.release{type = 'x', entity = 'h', severity = 'info'}",
            "sonde.release: unknown field \"severity\" (it takes type, entity)",
        ),
        (
            "for i = 1, 10001 do sonde.release{type = 'x', entity = 'h'} end",
            "sonde.release: more than 10000 alerts and releases in one call",
        ),
        (
            "local t = {} t.self = t sonde.alert{type = 'x', entity = 'h', summary = 's', evidence = t}",
            "sonde.alert: evidence.self.self.self.self.self.self.self.self.self.self.self.self.self.self.self.self: nested deeper than 16 tables",
        ),
    ] {
        assert_eq!(bad_call(call), format!("bad.lua:2: {expected} (in every_second)"), "{call}");
    }
}
