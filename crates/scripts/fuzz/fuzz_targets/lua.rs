//! Fuzzes the Lua bindings (`--script FILE`): what a script hands to `sonde.alert`,
//! `sonde.release`, `sonde.log`, `sonde.top` & co, from every hook, and what the sandbox's
//! guarded base functions take. A script may fail (its error is reported and counted); the
//! probe may not panic, hang past the limits, or take an action the bindings should refuse.
//!
//! Input layout: byte 0 even: the rest is the script's text (lossy UTF-8), so libFuzzer can
//! grow real Lua; odd: the rest is a program of binding calls, each from two bytes (which
//! call, in which hook) and one byte per argument (which of `ARGS`), so hostile arguments
//! reach the bindings without the fuzzer having to learn Lua's syntax first.
#![no_main]

use sonde_scripts::{Action, FlowInfo, HostInfo, Limits, ProbeData, Scripts};
use std::path::PathBuf;
use std::time::Duration;

/// Calls and how many arguments each takes.
const CALLS: &[(&str, usize)] = &[
    ("sonde.alert", 1),
    ("sonde.release", 1),
    ("sonde.log", 1),
    ("sonde.top", 2),
    ("sonde.hosts", 0),
    ("sonde.flows", 0),
    ("sonde.interface", 0),
    ("sonde.filter_sets", 0),
    ("sonde.now", 0),
    ("print", 3),
    ("string.rep", 3),
    ("setmetatable", 2),
    ("load", 3),
    ("collectgarbage", 2),
    ("table.move", 5),
    ("tostring", 1),
    ("string.format", 3),
    ("utf8.char", 2),
];

/// Argument values: odd numbers, odd strings (bidi controls, NUL, invalid UTF-8), tables shaped
/// like alerts with wrong field types, self-referencing tables, metatables that throw, and the
/// host's own tables.
const ARGS: &[&str] = &[
    "nil",
    "true",
    "0",
    "-1",
    "2^63",
    "-2^63",
    "1e308",
    "0/0",
    "math.huge",
    "-math.huge",
    "0.5",
    "''",
    "'x'",
    "'\\0\\255\\xe2\\x80\\xae gnp.exe'",
    "('A'):rep(70000)",
    "{}",
    "{type='scan.lua', severity='error', entity={kind='host', value='10.0.0.1'}}",
    "{type='x', severity='nope', entity={kind='host', value='::1'}, summary='s'}",
    "{type=('t'):rep(300), entity={kind='network', value='10.0.0.0/8'}, evidence={a={b={c={}}}}}",
    "{type=1, severity={}, entity='host', summary=2^63}",
    "{type='bad type!', entity={kind='app', value='\\255'}}",
    "{type='ok.type', entity={kind='host', value='not an address'}}",
    "{type='ok.type', entity={kind='port', value=70000}}",
    "{type='ok.type', entity={kind='host', value='10.0.0.1'}, evidence=R}",
    "R",
    "T",
    "function() error('boom') end",
    "function() return T end",
    "sonde",
    "_G",
    "'hosts'",
    "'talkers'",
    "3",
    "100000000",
    "'%s%s%s%n'",
    "'t'",
    "'b'",
    "'\\27Lua'",
    "'return 1'",
    "'count'",
];

const HOOK_NAMES: [&str; 6] = [
    "",
    "every_second",
    "every_minute",
    "every_hour",
    "every_day",
    "on_flow",
];

/// A Lua program from the call bytes (see the module comment).
fn program(bytes: &[u8]) -> String {
    let mut hooks: Vec<Vec<String>> = vec![Vec::new(); HOOK_NAMES.len()];
    let mut i = 0;
    while i + 1 < bytes.len() {
        let (call, nargs) = CALLS[bytes[i] as usize % CALLS.len()];
        let hook = bytes[i + 1] as usize % HOOK_NAMES.len();
        i += 2;
        let mut args = Vec::with_capacity(nargs);
        for _ in 0..nargs {
            let a = bytes.get(i).map_or(0, |&b| b as usize);
            args.push(ARGS[a % ARGS.len()]);
            i += 1;
        }
        hooks[hook].push(format!("{call}({})", args.join(", ")));
    }
    let mut s = String::from(
        "local R = {} R.type = 'loop.type' R.evidence = R R.entity = {kind='host', value='10.0.0.2'} R.self = R\n\
         local T = setmetatable({}, {__index = function() error('index') end, \
         __tostring = function() error('tostring') end})\n",
    );
    for (name, body) in HOOK_NAMES.iter().zip(&hooks) {
        if name.is_empty() {
            body.iter()
                .for_each(|c| s.push_str(&format!("pcall(function() {c} end)\n")));
        } else {
            let arg = if *name == "on_flow" { "f" } else { "" };
            s.push_str(&format!("function {name}({arg})\n"));
            if *name == "on_flow" {
                s.push_str("  local _ = f.client .. f.app .. tostring(f.packets) .. tostring(f.server_name)\n");
            }
            body.iter().for_each(|c| s.push_str(&format!("  {c}\n")));
            s.push_str("end\n");
        }
    }
    s
}

struct Probe;

impl ProbeData for Probe {
    fn hosts(&mut self) -> Vec<HostInfo> {
        vec![HostInfo {
            ip: "10.0.0.1".into(),
            name: Some("\u{202e}exe.png".into()),
            ..HostInfo::default()
        }]
    }
    fn flows(&mut self) -> Vec<FlowInfo> {
        vec![flow()]
    }
    fn interface(&mut self) -> serde_json::Value {
        serde_json::json!({"packets": u64::MAX, "drops": 0, "name": "\u{0}eth0"})
    }
    fn filter_sets(&mut self) -> serde_json::Value {
        serde_json::json!({"sets": []})
    }
    fn top(&mut self, what: &str, n: usize) -> serde_json::Value {
        serde_json::json!([{"key": what, "n": n}])
    }
}

fn flow() -> FlowInfo {
    FlowInfo {
        proto: 6,
        client: "10.0.0.1".into(),
        server: "10.0.0.2".into(),
        client_port: 40000,
        server_port: 443,
        app: "TLS".into(),
        packets: [u64::MAX, 1],
        bytes: [1, u64::MAX],
        server_name: Some("\u{202e}moc.elgoog".into()),
        ..FlowInfo::default()
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = if mode % 2 == 0 {
        String::from_utf8_lossy(rest).into_owned()
    } else {
        program(rest)
    };
    let path = PathBuf::from(format!(
        "/tmp/sonde-fuzz-lua-{}/fuzz.lua",
        std::process::id()
    ));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    let limits = Limits {
        memory_bytes: 16 << 20,
        instructions: 300_000,
        time: Duration::from_millis(200),
    };
    let Ok(mut scripts) = Scripts::load(&[path], limits) else {
        return;
    };
    // Three ticks a day apart, so every every_* hook runs; on_flow after each.
    let mut probe = Probe;
    for k in 0..3u64 {
        let actions = scripts.tick(1_795_996_800 + k * 86_400, &mut probe);
        let flow_actions = scripts.on_flow(&flow());
        for a in actions.iter().chain(&flow_actions) {
            if let Action::Engage { kind, .. } = a {
                assert!(
                    kind.starts_with("script."),
                    "an alert type outside script.*: {kind}"
                );
            }
        }
    }
    let _ = scripts.status();
});
