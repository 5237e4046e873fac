//! User scripts in Lua 5.4, sandboxed (ntopng's model): small scripts that read the probe's
//! live state and raise or release alerts. The user's guide is `docs/scripts.md`; this is the
//! reference.
//!
//! # Rust side
//!
//! [`Scripts::load`] compiles every `--script` file into its own Lua state and runs its top
//! level; the probe then calls [`Scripts::tick`] once a second with its clock and a
//! [`ProbeData`], and [`Scripts::on_flow`] for each ended flow when [`Scripts::wants_flows`].
//! Both answer the [`Action`]s the scripts asked for. [`Scripts::status`] reports each
//! script's state and costs. Nothing here panics on a script's behalf: a script that fails is
//! disabled (status, and one line on stderr), the others carry on.
//!
//! # Hooks
//!
//! A script may define these global functions (the top level runs once, at load):
//!
//! ```lua
//! function every_second(now) end  -- each tick; now = Unix seconds (integer), the probe's clock
//! function every_minute(now) end  -- when the minute changed since the previous tick
//! function every_hour(now) end    -- when the hour changed
//! function every_day(now) end     -- when the UTC day changed
//! function on_flow(flow) end      -- each ended flow (called only if defined)
//! ```
//!
//! In one tick they run in that order. The first tick only runs `every_second`; a jump over
//! several minutes runs `every_minute` once; a clock that went back runs only `every_second`
//! until a new minute. State between calls is the script's own globals and upvalues.
//!
//! # The `sonde` table
//!
//! ```lua
//! sonde.hosts()        --> { {ip=, vlan=, mac=, sent_bytes=, rcvd_bytes=, sent_packets=,
//!                      --     rcvd_packets=, flows_as_client=, flows_as_server=,
//!                      --     active_flows=, first_seen=, last_seen=, name=}, ... }
//! sonde.flows()        --> { {proto=, client=, server=, client_port=, server_port=, vlan=,
//!                      --     app=, packets={c2s, s2c}, bytes={c2s, s2c}, first_seen=,
//!                      --     last_seen=, end_reason=, server_name=, dns_query=}, ... }
//! sonde.interface()    --> the interface's counters (packets, bytes, drops, active flows/hosts…)
//! sonde.filter_sets()  --> the filter sets
//! sonde.top(what, n)   --> the top n (1..10000) of what: "hosts", "apps", "ports", "talkers"…
//! sonde.alert{type=, entity=, entity_kind="host", severity="warning", summary=, evidence={}}
//! sonde.release{type=, entity=}
//! sonde.log(msg)       -- "script NAME: msg" on stderr (print does the same); 100 lines a call
//! sonde.now()          --> the latest tick's now (Unix s), the wall clock before the first
//! ```
//!
//! Optional strings (`mac`, `name`, `server_name`, `dns_query`) are nil when absent; counters
//! are integers; a flow's times are seconds with fractions. The probe data is available in the
//! `every_*` hooks only (elsewhere it raises an error); the probe is asked at most once per
//! tick whatever the number of scripts and calls, and each call builds new tables. JSON
//! answers become tables (arrays from 1), `null` becomes nil.
//!
//! `sonde.alert` engages an alert, or refreshes it if engaged (type and entity identify it):
//! `type` (required, 1 to 64 of `a-z 0-9 _ . -`, becomes `script.TYPE`), `entity` (required,
//! a string or an integer, at most 256 bytes), `entity_kind` (default `"host"`, `a-z 0-9 _`),
//! `severity` (default `"warning"`; one of [`SEVERITIES`]: info, notice, warning, error,
//! critical, emergency), `summary` (required, at most 1024 bytes), `evidence` (optional table,
//! as JSON: keys exactly 1..n make an array, others an object; at most 16 levels and 10,000
//! values). The source is `script:FILENAME`. `sonde.release` takes `type` and `entity`. Any
//! other field, a missing one or a wrong value is an error at the script's line, naming the
//! problem. At most 10,000 alerts and releases per call; those made before an error stand.
//!
//! # Sandbox and limits
//!
//! Libraries: base (without `dofile`, `loadfile`, `require`, `warn`; `load` compiles text only;
//! `collectgarbage` takes `collect`, `count`, `step`, `isrunning` only; `setmetatable`
//! refuses `__gc`, which would run with hooks off), `string` (without `dump`), `table`,
//! `math`, `utf8`. No `io`, `os`, `package`, `debug`, `coroutine`. `string.rep` of empty
//! strings and `table.move` over more than 2^24 elements, C loops that allocate nothing, are
//! answered or refused before they start.
//!
//! [`Limits`] (per script): memory of its Lua state (default 64 MiB; `string.rep('x', 1e9)`
//! fails inside the script), instructions per call (default 50 million) and wall time per
//! call (default 1 s), both checked every 10,000 instructions by a count hook. Once over
//! budget every further instruction fails, so `pcall` cannot keep the script going. A call
//! into the string library is not interrupted: a backtracking pattern over a long string
//! (`s:find(".-.-.-x")`) is seen as over time only when it returns.
//!
//! A failing script (error, budget, memory) is disabled; its [`ScriptStatus::disabled_reason`]
//! is Lua's message with file and line (`a.lua:3: attempt to index a nil value (local 't')
//! (in every_minute)`; memory errors have no line).

mod alerts;
mod convert;
mod sandbox;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlua::{Function, Lua, Value};

pub use alerts::{valid_type, SEVERITIES, TYPE_MAX};
use sandbox::{lock, Shared};

/// A host as scripts see it (`sonde.hosts()`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostInfo {
    pub ip: String,
    pub vlan: u16,
    pub mac: Option<String>,
    pub sent_bytes: u64,
    pub rcvd_bytes: u64,
    pub sent_packets: u64,
    pub rcvd_packets: u64,
    pub flows_as_client: u64,
    pub flows_as_server: u64,
    pub active_flows: u64,
    /// Unix seconds.
    pub first_seen: u64,
    /// Unix seconds.
    pub last_seen: u64,
    pub name: Option<String>,
}

/// A flow as scripts see it (`sonde.flows()`, `on_flow(flow)`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlowInfo {
    /// IP protocol number (6 TCP, 17 UDP, …).
    pub proto: u8,
    pub client: String,
    pub server: String,
    pub client_port: u16,
    pub server_port: u16,
    pub vlan: u16,
    /// The DPI label, e.g. "TLS.Google".
    pub app: String,
    /// Client→server, server→client.
    pub packets: [u64; 2],
    /// Client→server, server→client.
    pub bytes: [u64; 2],
    /// Unix seconds.
    pub first_seen: f64,
    /// Unix seconds.
    pub last_seen: f64,
    pub end_reason: String,
    /// SNI, HTTP host or DNS query.
    pub server_name: Option<String>,
    pub dns_query: Option<String>,
}

/// What the probe tells scripts. Each method is called lazily, at most once per [`Scripts::tick`]
/// (whatever the number of scripts and hooks asking).
pub trait ProbeData {
    fn hosts(&mut self) -> Vec<HostInfo>;
    /// Live flows.
    fn flows(&mut self) -> Vec<FlowInfo>;
    /// Counters: packets, bytes, drops, active flows/hosts, …
    fn interface(&mut self) -> serde_json::Value;
    fn filter_sets(&mut self) -> serde_json::Value;
    /// `what`: hosts, apps, ports, talkers, …
    fn top(&mut self, what: &str, n: usize) -> serde_json::Value;
}

/// What one script may use. Each script has its own memory; the budgets apply to each call
/// (one hook, or the top level at load).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Memory of the script's Lua state (default 64 MiB).
    pub memory_bytes: usize,
    /// Lua VM instructions per call (default 50 million), checked every 10,000.
    pub instructions: u64,
    /// Wall time per call (default 1 s), checked every 10,000 instructions.
    pub time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 64 << 20,
            instructions: 50_000_000,
            time: Duration::from_secs(1),
        }
    }
}

/// What scripts asked for, in the order they asked.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Raise the alert, or refresh it if it is engaged (same kind and entity).
    Engage {
        /// `script.` + the type the script gave.
        kind: String,
        entity_kind: String,
        entity: String,
        severity: String,
        summary: String,
        /// An object (possibly empty) or an array.
        evidence: serde_json::Value,
        /// `script:` + the script's file name.
        source: String,
    },
    /// End the alert (nothing if it is not engaged).
    Release {
        kind: String,
        entity: String,
        source: String,
    },
}

/// One script's state and costs ([`Scripts::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptStatus {
    /// The file name (alerts' `source` is `script:` + name).
    pub name: String,
    pub path: PathBuf,
    pub enabled: bool,
    /// Why the script was disabled: the error with its file and line, and the hook.
    pub disabled_reason: Option<String>,
    /// Hook calls (not counting the top level at load).
    pub calls: u64,
    pub errors: u64,
    /// Time in calls, including building the tables handed to the script.
    pub total_ns: u64,
    pub max_ns: u64,
    /// Memory of the script's Lua state now.
    pub memory_bytes: usize,
}

const HOOKS: [&str; 4] = ["every_second", "every_minute", "every_hour", "every_day"];
const PERIODS: [u64; 4] = [1, 60, 3600, 86_400];
const TOP_MAX: usize = 10_000;

struct Script {
    name: Arc<str>,
    path: PathBuf,
    lua: Lua,
    shared: Arc<Mutex<Shared>>,
    limits: Limits,
    stats: Stats,
}

#[derive(Default)]
struct Stats {
    disabled_reason: Option<String>,
    calls: u64,
    errors: u64,
    total_ns: u64,
    max_ns: u64,
}

/// The loaded scripts. Each has its own Lua state; a script that fails is disabled, the others
/// carry on.
pub struct Scripts {
    scripts: Vec<Script>,
    last_tick: Option<u64>,
}

/// What a tick fetched from the probe, shared by every script it runs.
#[derive(Default)]
struct TickCache {
    hosts: Option<Vec<HostInfo>>,
    flows: Option<Vec<FlowInfo>>,
    interface: Option<serde_json::Value>,
    filter_sets: Option<serde_json::Value>,
    top: Vec<((String, usize), serde_json::Value)>,
}

struct TickInput<'a> {
    data: &'a mut dyn ProbeData,
    cache: TickCache,
}

pub(crate) fn wall_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Scripts {
    /// Loads and compiles every file, and runs its top level (under the limits). A syntax error
    /// names the flag, file and line: `--script /x/a.lua:3: syntax error near 'end'`; so does an
    /// error of the top level. Two scripts may not have the same file name (it is their
    /// alerts' source).
    pub fn load(paths: &[PathBuf], limits: Limits) -> Result<Scripts, String> {
        let mut scripts: Vec<Script> = Vec::with_capacity(paths.len());
        for path in paths {
            let script = Script::load(path, limits)?;
            if let Some(other) = scripts.iter().find(|s| s.name == script.name) {
                return Err(format!(
                    "--script {}: another script has the same file name ({}); alerts name their script by its file name",
                    path.display(),
                    other.path.display()
                ));
            }
            scripts.push(script);
        }
        Ok(Scripts {
            scripts,
            last_tick: None,
        })
    }

    /// Whether an enabled script defines `on_flow` (else the caller need not call
    /// [`Scripts::on_flow`]).
    pub fn wants_flows(&self) -> bool {
        self.scripts
            .iter()
            .any(|s| s.enabled() && s.hook("on_flow").is_some())
    }

    /// Runs the hooks due at `now` (Unix seconds): `every_second` at each call; `every_minute`,
    /// `every_hour` and `every_day` (UTC) when `now` is in a later minute, hour or day than at
    /// the previous call. The first call sets the clock (only `every_second` runs), a clock that
    /// went back resets it, and a jump over several minutes runs `every_minute` once.
    pub fn tick(&mut self, now: u64, data: &mut dyn ProbeData) -> Vec<Action> {
        let due: Vec<&str> = HOOKS
            .iter()
            .zip(PERIODS)
            .filter(|(_, period)| match self.last_tick {
                _ if *period == 1 => true,
                Some(last) if last <= now => now / period > last / period,
                _ => false,
            })
            .map(|(hook, _)| *hook)
            .collect();
        self.last_tick = Some(now);
        let input = RefCell::new(TickInput {
            data,
            cache: TickCache::default(),
        });
        let mut actions = Vec::new();
        for script in self.scripts.iter_mut().filter(|s| s.enabled()) {
            lock(&script.shared).now = Some(now);
            let hooks: Vec<(&str, Function)> = due
                .iter()
                .filter_map(|h| script.hook(h).map(|f| (*h, f)))
                .collect();
            if hooks.is_empty() {
                continue;
            }
            let Script {
                lua,
                shared,
                stats,
                name,
                path,
                limits,
            } = script;
            let scoped = lua.scope(|scope| {
                let fetch = scope.create_function(|lua, args: (String, Value, Value)| {
                    fetch(lua, &input, args)
                })?;
                lua.set_named_registry_value(sandbox::FETCH_KEY, fetch)?;
                for (hook, f) in &hooks {
                    let ok = call(
                        lua,
                        shared,
                        stats,
                        &Who { name, path, limits },
                        hook,
                        |_| f.call::<()>(now as i64),
                    );
                    actions.append(&mut lock(shared).actions);
                    if !ok {
                        break;
                    }
                }
                Ok(())
            });
            let _ = lua.set_named_registry_value(sandbox::FETCH_KEY, Value::Nil);
            if let Err(e) = scoped {
                // Only the registry or the scope itself can fail here (out of memory).
                disable(stats, &Who { name, path, limits }, &describe(&e, limits));
            }
        }
        actions
    }

    /// Calls `on_flow(flow)` of every enabled script that defines it, for one ended flow.
    pub fn on_flow(&mut self, flow: &FlowInfo) -> Vec<Action> {
        let mut actions = Vec::new();
        for script in self.scripts.iter_mut().filter(|s| s.enabled()) {
            let Some(f) = script.hook("on_flow") else {
                continue;
            };
            let Script {
                lua,
                shared,
                stats,
                name,
                path,
                limits,
            } = script;
            call(
                lua,
                shared,
                stats,
                &Who { name, path, limits },
                "on_flow",
                |lua| f.call::<()>(convert::flow_table(lua, flow)?),
            );
            actions.append(&mut lock(shared).actions);
        }
        actions
    }

    /// Every script, in the order loaded.
    pub fn status(&self) -> Vec<ScriptStatus> {
        self.scripts
            .iter()
            .map(|s| ScriptStatus {
                name: s.name.to_string(),
                path: s.path.clone(),
                enabled: s.enabled(),
                disabled_reason: s.stats.disabled_reason.clone(),
                calls: s.stats.calls,
                errors: s.stats.errors,
                total_ns: s.stats.total_ns,
                max_ns: s.stats.max_ns,
                memory_bytes: s.lua.used_memory(),
            })
            .collect()
    }
}

impl Script {
    fn load(path: &Path, limits: Limits) -> Result<Script, String> {
        let flag = format!("--script {}", path.display());
        let source = std::fs::read(path).map_err(|e| format!("{flag}: {e}"))?;
        let name: Arc<str> = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string())
            .into();
        let shared = Arc::new(Mutex::new(Shared {
            active: false,
            started: Instant::now(),
            instructions: 0,
            abort: None,
            actions: Vec::new(),
            logs: 0,
            now: None,
        }));
        let lua = sandbox::new_state(&name, &limits, &shared)
            .map_err(|e| format!("{flag}: cannot set up Lua: {e}"))?;
        // "=name": Lua writes the name as is in messages ("a.lua:3: …").
        let chunk = lua
            .load(&source[..])
            .set_name(format!("={name}"))
            .set_mode(mlua::chunk::ChunkMode::Text);
        let main = chunk
            .into_function()
            .map_err(|e| located(&flag, &name, &describe(&e, &limits)))?;
        let mut script = Script {
            name: name.clone(),
            path: path.to_path_buf(),
            lua,
            shared,
            limits,
            stats: Stats::default(),
        };
        begin(&script.shared);
        let result = main.call::<()>(());
        let abort = end(&script.shared);
        if let Err(e) = result {
            let msg = abort.unwrap_or_else(|| describe(&e, &limits));
            return Err(located(&flag, &name, &msg));
        }
        // Alerts raised at the top level go nowhere: there is no caller yet.
        lock(&script.shared).actions.clear();
        script.stats = Stats::default();
        Ok(script)
    }

    fn enabled(&self) -> bool {
        self.stats.disabled_reason.is_none()
    }

    /// The script's global function `name`, if it defines one (read raw: a metatable on the
    /// globals runs nothing of ours).
    fn hook(&self, name: &str) -> Option<Function> {
        match self.lua.globals().raw_get::<Value>(name) {
            Ok(Value::Function(f)) => Some(f),
            _ => None,
        }
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        // Whatever runs while the state closes (a to-be-closed value) stops at once.
        let _ = sandbox::stop_everything(&self.lua, "the script is being unloaded");
    }
}

/// "--script /x/a.lua:3: msg" from "a.lua:3: msg" (Lua's message, written with the chunk name).
fn located(flag: &str, name: &str, msg: &str) -> String {
    match msg.strip_prefix(name) {
        Some(rest) if rest.starts_with(':') => format!("{flag}{rest}"),
        _ => format!("{flag}: {msg}"),
    }
}

fn begin(shared: &Mutex<Shared>) {
    let mut s = lock(shared);
    s.active = true;
    s.started = Instant::now();
    s.instructions = 0;
    s.logs = 0;
}

/// Ends a call's budget window; answers why the budget stopped it, if it did.
fn end(shared: &Mutex<Shared>) -> Option<String> {
    let mut s = lock(shared);
    s.active = false;
    s.abort.clone()
}

/// One hook call under the budget, timed. A failure disables the script (status and one line
/// on stderr); answers whether the call succeeded.
fn call(
    lua: &Lua,
    shared: &Mutex<Shared>,
    stats: &mut Stats,
    who: &Who<'_>,
    hook: &str,
    run: impl FnOnce(&Lua) -> mlua::Result<()>,
) -> bool {
    let t0 = Instant::now();
    begin(shared);
    let result = run(lua);
    let abort = end(shared);
    let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
    stats.calls += 1;
    stats.total_ns = stats.total_ns.saturating_add(ns);
    stats.max_ns = stats.max_ns.max(ns);
    match result {
        Ok(()) => true,
        Err(e) => {
            let msg = abort.unwrap_or_else(|| describe(&e, who.limits));
            disable(stats, who, &format!("{msg} (in {hook})"));
            false
        }
    }
}

/// Which script a call is of.
struct Who<'a> {
    name: &'a str,
    path: &'a Path,
    limits: &'a Limits,
}

fn disable(stats: &mut Stats, who: &Who<'_>, reason: &str) {
    stats.errors += 1;
    eprintln!(
        "sonde: script {} ({}) disabled: {reason}",
        who.name,
        who.path.display()
    );
    stats.disabled_reason = Some(reason.to_string());
}

/// An mlua error as one line: Lua's message with its position, without the traceback.
fn describe(e: &mlua::Error, limits: &Limits) -> String {
    match e {
        mlua::Error::CallbackError { cause, .. } => describe(cause, limits),
        mlua::Error::WithContext { cause, .. } => describe(cause, limits),
        mlua::Error::MemoryError(_) => memory_message(limits),
        mlua::Error::SyntaxError { message, .. } => first_part(message),
        mlua::Error::RuntimeError(m) if m.contains("not enough memory") => memory_message(limits),
        mlua::Error::RuntimeError(m) => first_part(m),
        other => first_part(&other.to_string()),
    }
}

fn memory_message(limits: &Limits) -> String {
    format!(
        "memory limit exceeded ({} MiB)",
        limits.memory_bytes as f64 / (1u64 << 20) as f64
    )
}

fn first_part(msg: &str) -> String {
    let msg = msg.split("\nstack traceback:").next().unwrap_or(msg);
    msg.trim().replace('\n', " ")
}

/// The tick's answer to `sonde.hosts()` & co: `(value, nil)` or `(nil, message)`.
fn fetch(
    lua: &Lua,
    input: &RefCell<TickInput<'_>>,
    (what, a, b): (String, Value, Value),
) -> mlua::Result<(Value, Option<String>)> {
    let Ok(mut input) = input.try_borrow_mut() else {
        return Ok((
            Value::Nil,
            Some(format!("sonde.{what}(): called while it runs")),
        ));
    };
    let TickInput { data, cache } = &mut *input;
    let value = match what.as_str() {
        "hosts" => Value::Table(convert::hosts_table(
            lua,
            cache.hosts.get_or_insert_with(|| data.hosts()),
        )?),
        "flows" => Value::Table(convert::flows_table(
            lua,
            cache.flows.get_or_insert_with(|| data.flows()),
        )?),
        "interface" => {
            convert::json_to_lua(lua, cache.interface.get_or_insert_with(|| data.interface()))?
        }
        "filter_sets" => convert::json_to_lua(
            lua,
            cache.filter_sets.get_or_insert_with(|| data.filter_sets()),
        )?,
        "top" => {
            let kind = match &a {
                Value::String(s) if s.as_bytes().len() <= 64 => s.to_string_lossy(),
                _ => {
                    return Ok((
                        Value::Nil,
                        Some("sonde.top(what, n): what must be a short string (hosts, apps, ports, talkers, …)".into()),
                    ))
                }
            };
            let n = match b {
                Value::Integer(n) if n >= 1 => (n as u64).min(TOP_MAX as u64) as usize,
                Value::Number(n) if n >= 1.0 && n.fract() == 0.0 => {
                    (n as u64).min(TOP_MAX as u64) as usize
                }
                _ => {
                    return Ok((
                        Value::Nil,
                        Some("sonde.top(what, n): n must be a positive integer".into()),
                    ))
                }
            };
            let key = (kind, n);
            let json = match cache.top.iter().position(|(k, _)| *k == key) {
                Some(i) => &cache.top[i].1,
                None => {
                    let v = data.top(&key.0, n);
                    cache.top.push((key, v));
                    &cache.top.last().expect("just pushed").1
                }
            };
            convert::json_to_lua(lua, json)?
        }
        other => {
            return Ok((Value::Nil, Some(format!("sonde has no function {other:?}"))));
        }
    };
    Ok((value, None))
}

#[allow(dead_code)]
fn assert_send() {
    fn is_send<T: Send>() {}
    is_send::<Scripts>();
}
