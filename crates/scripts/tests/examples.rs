//! The example scripts in examples/lua/, run against a fake probe.

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::json;
use sonde_scripts::{Action, Limits, Scripts};

fn example(name: &str) -> Scripts {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/lua")
        .join(name);
    Scripts::load(&[path], Limits::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// (kind, entity) of each action; "-" before a release's kind.
fn summary(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            Action::Engage { kind, entity, .. } => format!("{kind} {entity}"),
            Action::Release { kind, entity, .. } => format!("-{kind} {entity}"),
        })
        .collect()
}

fn assert_healthy(scripts: &Scripts) {
    for s in scripts.status() {
        assert!(s.enabled, "{s:?}");
    }
}

const MB: u64 = 1_000_000;

#[test]
fn new_destination_volume() {
    let mut scripts = example("new_destination_volume.lua");
    assert!(scripts.wants_flows());
    let t = 1_700_006_400; // a minute boundary
    let mut probe = FakeProbe::default();
    scripts.tick(t - 1, &mut probe); // sets the clock
                                     // minute 1: 80 MB to a new /24 (two hosts in it), 1 KB to another, 60 MB to a new /48
                                     // (as client→server and server→client)
    let mut v6 = flow("2001:db8:aa::1", "2001:db8:1:ffff::1", 10);
    v6.bytes = [10, 60 * MB];
    probe.flows = vec![
        flow("10.0.0.5", "203.0.113.7", 50 * MB),
        flow("10.0.0.5", "203.0.113.9", 30 * MB),
        flow("10.0.0.5", "198.51.100.1", 1000),
        v6,
    ];
    let actions = scripts.tick(t, &mut probe);
    assert_eq!(
        summary(&actions),
        [
            // sorted by host, then network
            "script.new_destination_volume 10.0.0.5",
            "script.new_destination_volume 2001:db8:1:ffff::1"
        ]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>(),
        "{actions:?}"
    );
    let Action::Engage {
        evidence,
        summary: text,
        ..
    } = actions
        .iter()
        .find(|a| matches!(a, Action::Engage { entity, .. } if entity == "10.0.0.5"))
        .unwrap()
    else {
        unreachable!()
    };
    assert_eq!(evidence["network"], json!("203.0.113.0/24"));
    assert_eq!(evidence["bytes"], json!(80 * MB));
    assert!(text.contains("80.0 MB"), "{text}");
    let v6_evidence = match actions
        .iter()
        .find(|a| matches!(a, Action::Engage { entity, .. } if entity.contains(':')))
    {
        Some(Action::Engage { evidence, .. }) => evidence.clone(),
        _ => unreachable!(),
    };
    assert_eq!(v6_evidence["network"], json!("2001:db8:aa::/48"));

    // minute 2: the first flow ended (its last 30 MB came through on_flow), the other sends
    // 30 MB more: still 60 MB to the new /24; the IPv6 flow is quiet: released
    let mut ended = flow("10.0.0.5", "203.0.113.7", 80 * MB);
    ended.end_reason = "fin".into();
    assert!(scripts.on_flow(&ended).is_empty());
    probe.flows = vec![
        flow("10.0.0.5", "203.0.113.9", 60 * MB),
        flow("10.0.0.5", "198.51.100.1", 2000),
    ];
    let actions = scripts.tick(t + 60, &mut probe);
    assert_eq!(
        summary(&actions),
        [
            "script.new_destination_volume 10.0.0.5",
            "-script.new_destination_volume 2001:db8:1:ffff::1"
        ]
    );

    // minute 7: 100 MB more to 198.51.100.0/24, known for 6 minutes: nothing new; the /24
    // alert is released
    probe.flows = vec![flow("10.0.0.5", "198.51.100.1", 100 * MB)];
    for m in 3..7 {
        probe.flows[0].bytes[0] = 2000 + m;
        scripts.tick(t + 60 * m, &mut probe);
    }
    probe.flows[0].bytes[0] = 100 * MB;
    let actions = scripts.tick(t + 420, &mut probe);
    assert!(actions.is_empty(), "{actions:?}");
    assert_healthy(&scripts);
}

#[test]
fn dns_watchlist() {
    let mut scripts = example("dns_watchlist.lua");
    assert!(scripts.wants_flows());
    let mut probe = FakeProbe::default();
    scripts.tick(1000, &mut probe);
    let lookup = |client: &str, query: Option<&str>, sni: Option<&str>| {
        let mut f = flow(client, "192.0.2.53", 60);
        f.dns_query = query.map(str::to_string);
        f.server_name = sni.map(str::to_string);
        f
    };
    let mut all = Vec::new();
    for f in [
        lookup("10.0.0.1", Some("www.EVIL.test."), None),
        lookup("10.0.0.2", Some("notevil.test"), None),
        lookup("10.0.0.3", None, Some("cdn.tracker.example.net")),
        lookup("10.0.0.4", None, Some("example.net")),
        lookup("10.0.0.5", None, None),
        lookup("10.0.0.6", Some("malware.example"), None),
    ] {
        all.extend(scripts.on_flow(&f));
    }
    assert_eq!(
        summary(&all),
        [
            "script.dns_watchlist 10.0.0.1",
            "script.dns_watchlist 10.0.0.3",
            "script.dns_watchlist 10.0.0.6"
        ]
    );
    let Action::Engage {
        severity,
        evidence,
        summary: text,
        ..
    } = &all[0]
    else {
        unreachable!()
    };
    assert_eq!(severity, "error");
    assert_eq!(evidence["domain"], json!("evil.test"));
    assert_eq!(
        text,
        "10.0.0.1 asked for www.evil.test (watchlist: evil.test)"
    );
    // released 10 minutes after the last lookup
    assert!(scripts.tick(1500, &mut probe).is_empty());
    assert_eq!(summary(&scripts.tick(1600, &mut probe)).len(), 3);
    assert_healthy(&scripts);
}

#[test]
fn top_talker_share() {
    let mut scripts = example("top_talker_share.lua");
    assert!(!scripts.wants_flows());
    let t = 1_700_006_400;
    let mut probe = FakeProbe {
        hosts: vec![host("10.0.0.1", 0, 0), host("10.0.0.2", 0, 0)],
        interface: json!({"bytes": 0, "packets": 0}),
        ..FakeProbe::default()
    };
    scripts.tick(t - 1, &mut probe);
    assert!(scripts.tick(t, &mut probe).is_empty()); // the first minute is the baseline
                                                     // 100 MB on the interface, 70 MB of it 10.0.0.1's
    probe.interface = json!({"bytes": 100 * MB});
    probe.hosts = vec![
        host("10.0.0.1", 60 * MB, 10 * MB),
        host("10.0.0.2", 0, 30 * MB),
    ];
    let actions = scripts.tick(t + 60, &mut probe);
    assert_eq!(summary(&actions), ["script.top_talker_share 10.0.0.1"]);
    let Action::Engage { evidence, .. } = &actions[0] else {
        unreachable!()
    };
    assert_eq!(evidence["share_percent"], json!(70.0));
    // next minute: 100 MB more, split evenly: released
    probe.interface = json!({"bytes": 200 * MB});
    probe.hosts = vec![
        host("10.0.0.1", 60 * MB, 60 * MB),
        host("10.0.0.2", 0, 80 * MB),
    ];
    assert_eq!(
        summary(&scripts.tick(t + 120, &mut probe)),
        ["-script.top_talker_share 10.0.0.1"]
    );
    // a quiet minute is not judged
    probe.interface = json!({"bytes": 200 * MB + 1000});
    probe.hosts[1].rcvd_bytes += 1000;
    assert!(scripts.tick(t + 180, &mut probe).is_empty());
    assert_healthy(&scripts);
}
