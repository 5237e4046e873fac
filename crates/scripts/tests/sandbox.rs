//! Scripts that misbehave are stopped, reported and disabled; the process and the other
//! scripts carry on.

mod common;

use std::time::{Duration, Instant};

use common::*;
use sonde_scripts::Limits;

/// Loads `bad.lua` (whose every_second does `body`) beside a good script, ticks twice, and
/// answers the bad one's disabled reason; checks the good one ran both times.
fn misbehave(body: &str, limits: Limits) -> String {
    let bad = format!("function every_second(now)\n{body}\nend\n");
    let good = "n = 0\nfunction every_second(now)\n  n = n + 1\n  sonde.alert{type='alive', entity=tostring(n), summary='tick'}\nend\n";
    let mut scripts = load_with(&[("bad.lua", &bad), ("good.lua", good)], limits);
    let mut probe = FakeProbe::default();
    let first = scripts.tick(1000, &mut probe);
    let second = scripts.tick(1001, &mut probe);
    assert_eq!(
        first.len() + second.len(),
        2,
        "the good script raised one alert per tick"
    );
    let good = status_of(&scripts, "good.lua");
    assert!(good.enabled && good.calls == 2, "{good:?}");
    let bad = status_of(&scripts, "bad.lua");
    assert!(!bad.enabled, "{bad:?}");
    assert_eq!((bad.calls, bad.errors), (1, 1), "{bad:?}");
    assert!(!scripts.wants_flows());
    bad.disabled_reason.unwrap()
}

fn quick() -> Limits {
    Limits {
        memory_bytes: 16 << 20,
        instructions: 5_000_000,
        time: Duration::from_secs(5),
    }
}

#[test]
fn infinite_loop_is_stopped_by_the_time_budget() {
    let limits = Limits {
        instructions: u64::MAX,
        time: Duration::from_millis(200),
        ..Limits::default()
    };
    let t0 = Instant::now();
    let reason = misbehave("while true do end", limits);
    // Stopped near the limit; the bound only guards against "never" on a loaded machine.
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(
        reason,
        "bad.lua:2: time budget exceeded (200 ms per call) (in every_second)"
    );
}

#[test]
fn infinite_loop_is_stopped_by_the_instruction_budget() {
    let reason = misbehave("local i = 0\nwhile true do i = i + 1 end", quick());
    assert_eq!(
        reason,
        "bad.lua:3: instruction budget exceeded (5000000 instructions per call) (in every_second)"
    );
}

#[test]
fn pcall_cannot_swallow_the_budget() {
    let body = "while true do pcall(function() while true do end end) end";
    let reason = misbehave(body, quick());
    assert!(reason.contains("instruction budget exceeded"), "{reason}");
}

#[test]
fn a_huge_string_hits_the_memory_cap() {
    // 1e9 bytes is under Lua's own size limit: the allocation itself must be refused.
    let reason = misbehave("local s = string.rep('x', 1e9)", quick());
    assert_eq!(reason, "memory limit exceeded (16 MiB) (in every_second)");
    let reason = misbehave("local s = ('x'):rep(1e10)", quick());
    assert_eq!(
        reason,
        "bad.lua:2: resulting string too large (in every_second)"
    );
    let reason = misbehave("local s = 'x' while true do s = s .. s end", quick());
    assert_eq!(reason, "memory limit exceeded (16 MiB) (in every_second)");
}

#[test]
fn a_huge_table_hits_the_memory_cap() {
    let reason = misbehave("big = {} for i = 1, 1e9 do big[i] = {i} end", quick());
    assert_eq!(reason, "memory limit exceeded (16 MiB) (in every_second)");
}

#[test]
fn a_runtime_error_names_the_line() {
    let reason = misbehave("local t = nil\nlocal x = t.field", quick());
    assert_eq!(
        reason,
        "bad.lua:3: attempt to index a nil value (local 't') (in every_second)"
    );
    let reason = misbehave("error('custom failure')", quick());
    assert_eq!(reason, "bad.lua:2: custom failure (in every_second)");
}

#[test]
fn no_file_system_process_or_modules() {
    for (body, expected) in [
        (
            "io.open('/etc/passwd')",
            "bad.lua:2: attempt to index a nil value (global 'io')",
        ),
        (
            "os.execute('id')",
            "bad.lua:2: attempt to index a nil value (global 'os')",
        ),
        (
            "require 'x'",
            "bad.lua:2: attempt to call a nil value (global 'require')",
        ),
        (
            "dofile('/etc/passwd')",
            "bad.lua:2: attempt to call a nil value (global 'dofile')",
        ),
        (
            "loadfile('/etc/passwd')",
            "bad.lua:2: attempt to call a nil value (global 'loadfile')",
        ),
        (
            "package.loadlib('x', 'y')",
            "bad.lua:2: attempt to index a nil value (global 'package')",
        ),
        (
            "debug.sethook()",
            "bad.lua:2: attempt to index a nil value (global 'debug')",
        ),
        (
            "coroutine.wrap(print)",
            "bad.lua:2: attempt to index a nil value (global 'coroutine')",
        ),
        (
            "local f = function() return 1 end\nlocal g = load(string.dump(f))",
            "bad.lua:3: attempt to call a nil value (field 'dump')",
        ),
        (
            // a binary chunk, whatever its content, is refused by load
            "assert(load('\\27Lua\\84\\0'))",
            "bad.lua:2: attempt to load a binary chunk (mode is 't')",
        ),
        (
            "assert(load('\\27Lua\\84\\0', 'x', 'b'))",
            "bad.lua:2: attempt to load a binary chunk (mode is 't')",
        ),
        (
            "collectgarbage('stop')",
            "bad.lua:2: collectgarbage: option 'stop' is not allowed in scripts",
        ),
        (
            "setmetatable({}, {__gc = function() while true do end end})",
            "bad.lua:2: setmetatable: __gc metamethods are not allowed in scripts",
        ),
    ] {
        let reason = misbehave(body, quick());
        assert_eq!(reason, format!("{expected} (in every_second)"), "{body}");
    }
}

#[test]
fn what_the_sandbox_keeps_works() {
    let source = r#"
        function every_second(now)
          local f = assert(load("return 1 + ..."))
          local parts = {}
          for w in string.gmatch("a b c", "%a") do parts[#parts + 1] = w:upper() end
          local t = table.move({1, 2, 3}, 1, 3, 1, {})
          local s = table.concat(parts, ",") .. string.rep("", 1e15) .. ("ab"):rep(2, "-")
          sonde.alert{type = "ok", entity = "x", summary = s,
            evidence = {f(41), math.floor(2.5), utf8.char(233), #t, collectgarbage("count") > 0,
                        type(io), type(os), type(string.dump)}}
        end
    "#;
    let mut scripts = load(&[("ok.lua", source)]);
    let actions = scripts.tick(1, &mut FakeProbe::default());
    let sonde_scripts::Action::Engage {
        summary, evidence, ..
    } = &actions[0]
    else {
        panic!("{actions:?}")
    };
    assert_eq!(summary, "A,B,Cab-ab");
    assert_eq!(
        evidence,
        &serde_json::json!([42, 2, "é", 3, true, "nil", "nil", "nil"])
    );
}

#[test]
fn load_runs_text_in_the_same_sandbox() {
    let reason = misbehave("load('while true do end')()", quick());
    assert_eq!(
        reason,
        "[string \"while true do end\"]:1: instruction budget exceeded (5000000 instructions per call) (in every_second)"
    );
}

#[test]
fn a_bad_top_level_is_an_error_at_load() {
    let (path, e) = load_err("top.lua", "local x = 1\nlocal y = nil + x\n");
    assert_eq!(
        e,
        format!(
            "--script {}:2: attempt to perform arithmetic on a nil value",
            path.display()
        )
    );
    let (path, e) = load_err("spin.lua", "while true do end\n");
    assert!(
        e.starts_with(&format!("--script {}:1: ", path.display())) && e.contains("budget exceeded"),
        "{e}"
    );
}

#[test]
fn a_syntax_error_names_the_flag_file_and_line() {
    let (path, e) = load_err("a.lua", "local t = {}\n\nt.x\nend\n");
    assert_eq!(
        e,
        format!("--script {}:4: syntax error near 'end'", path.display())
    );
    let (path, e) = load_err("c.lua", "function f()\n  return 1\nend end\n");
    assert_eq!(
        e,
        format!("--script {}:3: <eof> expected near 'end'", path.display())
    );
    let (path, e) = load_err("b.lua", "function f()\n  return 1\n");
    assert_eq!(
        e,
        format!(
            "--script {}:3: 'end' expected (to close 'function' at line 1) near <eof>",
            path.display()
        )
    );
}

#[test]
fn a_missing_file_and_a_duplicate_name_are_errors() {
    let missing = std::path::PathBuf::from("/nonexistent/x.lua");
    let e = sonde_scripts::Scripts::load(&[missing], Limits::default())
        .err()
        .unwrap();
    assert!(e.starts_with("--script /nonexistent/x.lua: "), "{e}");
    let a = script("same.lua", "x = 1");
    let b = script("same.lua", "x = 2");
    let e = sonde_scripts::Scripts::load(&[a, b.clone()], Limits::default())
        .err()
        .unwrap();
    assert!(
        e.starts_with(&format!("--script {}: another script", b.display())),
        "{e}"
    );
}

#[test]
fn on_flow_errors_disable_too_and_flows_stop() {
    let source = "function on_flow(f)\n  local x = f.nothing.deeper\nend\n";
    let mut scripts = load(&[("flows.lua", source)]);
    assert!(scripts.wants_flows());
    assert!(scripts.on_flow(&flow("10.0.0.1", "10.0.0.2", 5)).is_empty());
    let st = status_of(&scripts, "flows.lua");
    assert_eq!(
        st.disabled_reason.as_deref(),
        Some("flows.lua:2: attempt to index a nil value (field 'nothing') (in on_flow)")
    );
    assert!(!scripts.wants_flows());
    scripts.on_flow(&flow("10.0.0.1", "10.0.0.2", 5));
    assert_eq!(status_of(&scripts, "flows.lua").calls, 1);
}

#[test]
fn scripts_can_move_between_threads() {
    let mut scripts = load(&[("t.lua", "function every_second(now) n = (n or 0) + 1 end")]);
    let scripts = std::thread::spawn(move || {
        scripts.tick(1, &mut FakeProbe::default());
        scripts
    })
    .join()
    .unwrap();
    assert_eq!(status_of(&scripts, "t.lua").calls, 1);
}

#[test]
fn too_many_hosts_for_the_memory_cap_is_a_script_error() {
    let source = "function every_second(now)\n  local hosts = sonde.hosts()\nend\n";
    let limits = Limits {
        memory_bytes: 2 << 20,
        ..Limits::default()
    };
    let mut scripts = load_with(&[("many.lua", source)], limits);
    let mut probe = FakeProbe {
        hosts: (0..100_000)
            .map(|i| host(&format!("10.0.{}.{}", i / 256, i % 256), i, i))
            .collect(),
        ..FakeProbe::default()
    };
    scripts.tick(1, &mut probe);
    assert_eq!(
        status_of(&scripts, "many.lua").disabled_reason.as_deref(),
        Some("memory limit exceeded (2 MiB) (in every_second)")
    );
}
