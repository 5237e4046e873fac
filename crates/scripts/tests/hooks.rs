//! Hooks run at the right times, and the probe is asked at most once per tick.

mod common;

use common::*;
use serde_json::json;
use sonde_scripts::Action;

/// Raises one alert per hook call: type = the hook, entity = its `now`.
const RECORDER: &str = r#"
local function record(hook) return function(now)
  sonde.alert{type = hook, entity = tostring(now), summary = hook}
end end
every_second = record("second")
every_minute = record("minute")
every_hour = record("hour")
every_day = record("day")
"#;

fn hooks_run(scripts: &mut sonde_scripts::Scripts, now: u64) -> Vec<String> {
    scripts
        .tick(now, &mut FakeProbe::default())
        .into_iter()
        .map(|a| match a {
            Action::Engage { kind, entity, .. } => {
                assert_eq!(entity, now.to_string());
                kind.trim_start_matches("script.").to_string()
            }
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn hooks_at_minute_hour_and_day_boundaries() {
    let mut scripts = load(&[("rec.lua", RECORDER)]);
    let day = 1_700_006_400; // a UTC midnight (multiple of 86400)
    assert_eq!(day % 86_400, 0);
    // the first tick only sets the clock
    assert_eq!(hooks_run(&mut scripts, day - 3601), ["second"]);
    assert_eq!(
        hooks_run(&mut scripts, day - 3600),
        ["second", "minute", "hour"]
    );
    assert_eq!(hooks_run(&mut scripts, day - 3599), ["second"]);
    assert_eq!(hooks_run(&mut scripts, day - 3541), ["second"]);
    assert_eq!(hooks_run(&mut scripts, day - 3540), ["second", "minute"]);
    assert_eq!(hooks_run(&mut scripts, day - 1), ["second", "minute"]);
    assert_eq!(
        hooks_run(&mut scripts, day),
        ["second", "minute", "hour", "day"]
    );
    // a second tick in the same second runs every_second again, nothing else
    assert_eq!(hooks_run(&mut scripts, day), ["second"]);
    // a jump over several minutes: every_minute once
    assert_eq!(hooks_run(&mut scripts, day + 600), ["second", "minute"]);
    // a clock that went back runs nothing but every_second, then counts from there
    assert_eq!(hooks_run(&mut scripts, day - 30), ["second"]);
    assert_eq!(
        hooks_run(&mut scripts, day),
        ["second", "minute", "hour", "day"]
    );
    assert_eq!(status_of(&scripts, "rec.lua").calls, 11 + 6 + 3 + 2);
}

#[test]
fn a_script_without_hooks_is_never_called() {
    let mut scripts = load(&[("quiet.lua", "x = 1"), ("rec.lua", RECORDER)]);
    assert!(!scripts.wants_flows());
    assert!(scripts.on_flow(&flow("a", "b", 1)).is_empty());
    hooks_run(&mut scripts, 60);
    hooks_run(&mut scripts, 120);
    assert_eq!(status_of(&scripts, "quiet.lua").calls, 0);
}

#[test]
fn the_probe_is_asked_once_per_tick() {
    let reader = r#"
      function every_second(now)
        local hosts, again = sonde.hosts(), sonde.hosts()
        assert(#hosts == 2 and #again == 2 and hosts[1].ip == "10.0.0.1" and hosts[2].sent_bytes == 7)
        assert(hosts[1].mac == nil and hosts[1].vlan == 0)
        local flows = sonde.flows()
        assert(#flows == 1 and flows[1].bytes[1] == 99 and flows[1].dns_query == "x.example")
        assert(sonde.interface().packets == 1234 and sonde.interface().nested.list[2] == "b")
        assert(sonde.interface().nothing == nil)
        assert(sonde.filter_sets().sets[1].name == "office")
        local top = sonde.top("apps", 5)
        assert(top[1].key == "apps" and top[1].n == 5)
        sonde.top("apps", 5)
        sonde.top("hosts", 3)
      end
      function every_minute(now) assert(#sonde.hosts() == 2) end
    "#;
    let mut scripts = load(&[("a.lua", reader), ("b.lua", reader)]);
    let mut f = flow("10.0.0.1", "10.0.0.2", 99);
    f.dns_query = Some("x.example".into());
    let mut probe = FakeProbe {
        hosts: vec![host("10.0.0.1", 1, 2), host("10.0.0.2", 7, 0)],
        flows: vec![f],
        interface: json!({"packets": 1234, "nested": {"list": ["a", "b"]}, "nothing": null}),
        ..FakeProbe::default()
    };
    scripts.tick(59, &mut probe);
    scripts.tick(60, &mut probe);
    for s in scripts.status() {
        assert!(s.enabled, "{s:?}");
        assert_eq!(s.calls, 3);
    }
    assert_eq!(
        (probe.asked_hosts, probe.asked_flows, probe.asked_interface),
        (2, 2, 2)
    );
    assert_eq!(
        probe.asked_top,
        [("apps", 5), ("hosts", 3), ("apps", 5), ("hosts", 3)].map(|(w, n)| (w.to_string(), n))
    );
}

#[test]
fn probe_data_outside_a_tick_is_an_error() {
    let source = "local h = sonde.hosts\nfunction on_flow(f)\n  h()\nend\n";
    let mut scripts = load(&[("f.lua", source)]);
    scripts.on_flow(&flow("a", "b", 1));
    assert_eq!(
        status_of(&scripts, "f.lua").disabled_reason.as_deref(),
        Some("f.lua:3: sonde.hosts() works only in every_second/every_minute/every_hour/every_day (in on_flow)")
    );
}

#[test]
fn bad_top_arguments() {
    let source = "function every_second(now)\n  sonde.top('apps', 0)\nend\n";
    let mut scripts = load(&[("t.lua", source)]);
    scripts.tick(1, &mut FakeProbe::default());
    assert_eq!(
        status_of(&scripts, "t.lua").disabled_reason.as_deref(),
        Some("t.lua:2: sonde.top(what, n): n must be a positive integer (in every_second)")
    );
}

#[test]
fn state_persists_between_calls() {
    let source = r#"
      local count = 0
      seen = {}
      function every_second(now)
        count = count + 1
        seen[#seen + 1] = now
        if count == 3 then
          sonde.alert{type = "third", entity = table.concat(seen, ","), summary = "x"}
        end
      end
    "#;
    let mut scripts = load(&[("s.lua", source)]);
    let mut probe = FakeProbe::default();
    scripts.tick(10, &mut probe);
    scripts.tick(11, &mut probe);
    let actions = scripts.tick(12, &mut probe);
    assert!(
        matches!(&actions[..], [Action::Engage { entity, .. }] if entity == "10,11,12"),
        "{actions:?}"
    );
}

#[test]
fn log_and_print_do_not_fail() {
    let source = "function every_second(now)\n  sonde.log('hello ' .. now)\n  print('a', 1, nil, {})\n  for i = 1, 500 do sonde.log(i) end\nend\n";
    let mut scripts = load(&[("log.lua", source)]);
    scripts.tick(1, &mut FakeProbe::default());
    assert!(status_of(&scripts, "log.lua").enabled);
}
