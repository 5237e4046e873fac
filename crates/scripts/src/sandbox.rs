//! One script's Lua state: the libraries it may use, the `sonde` table, and the hook that holds
//! every call to its instruction and time budget.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mlua::{Function, HookTriggers, Lua, LuaOptions, StdLib, Value, VmState};

use crate::{alerts, Action, Limits};

/// Instructions between two budget checks. A check costs a clock read and a lock: every 10,000
/// instructions it is lost in the noise, and a budget overrun is seen within ~50 µs.
const CHECK_EVERY: u32 = 10_000;

/// The registry key under which a tick stores the function that answers `sonde.hosts()` & co.
/// It exists only while a tick runs this script's hooks.
pub(crate) const FETCH_KEY: &str = "sonde.fetch";

/// Log lines one call may write (then one line saying how many were dropped).
const LOGS_PER_CALL: u32 = 100;
/// Longest log line, in bytes.
const LOG_LINE_MAX: usize = 1024;

/// What the Rust side of the `sonde` table and the budget hook share with the caller.
/// Locked only around plain Rust work, never while Lua runs (a finalizer or hook would
/// deadlock on it).
pub(crate) struct Shared {
    /// A call is running (the budget applies); Lua that runs outside one is stopped.
    pub active: bool,
    pub started: Instant,
    pub instructions: u64,
    /// Why the current call was stopped (budget), with the script's line.
    pub abort: Option<String>,
    pub actions: Vec<Action>,
    pub logs: u32,
    /// The `now` of the latest tick (`sonde.now()`).
    pub now: Option<u64>,
}

pub(crate) fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Replaces base functions that reach the file system, load bytecode, or run C loops the budget
/// cannot interrupt; then builds `sonde` on the raw Rust functions (which answer `nil, message`
/// so that the wrapper raises the error at the script's line).
const PRELUDE: &str = r#"
local raw = ...
local error, type, select, tostring, rawget = error, type, select, tostring, rawget
local concat = table.concat

dofile, loadfile, require, warn = nil, nil, nil, nil
io, os, package, debug, coroutine = nil, nil, nil, nil, nil
string.dump = nil

local pack, unpack, pcall, gsub = table.pack, table.unpack, pcall, string.gsub

-- The replacements below call the original in pcall and raise its error again at the
-- script's line (an error raised inside them would otherwise point into this prelude).
local function guard(name, f)
  return function(...)
    local r = pack(pcall(f, ...))
    if r[1] then return unpack(r, 2, r.n) end
    local msg = r[2]
    if type(msg) == "string" then
      msg = gsub(gsub(msg, "^sonde:%d+: ", ""), "'%?'", "'" .. name .. "'")
    end
    error(msg, 2)
  end
end

local base_load = load
load = guard("load", function(chunk, name, mode, ...)
  -- text only: a binary chunk can break the VM's invariants
  if select('#', ...) > 0 then return base_load(chunk, name, "t", ...) end
  return base_load(chunk, name, "t")
end)

local base_collect = collectgarbage
local allowed_gc = { collect = true, count = true, step = true, isrunning = true }
collectgarbage = guard("collectgarbage", function(opt, ...)
  opt = opt or "collect"
  if not allowed_gc[opt] then
    error("collectgarbage: option '" .. tostring(opt) .. "' is not allowed in scripts", 0)
  end
  return base_collect(opt, ...)
end)

-- finalizers run with hooks off, so the budget could not stop one
local base_setmetatable = setmetatable
setmetatable = guard("setmetatable", function(t, mt)
  if type(mt) == "table" and rawget(mt, "__gc") ~= nil then
    error("setmetatable: __gc metamethods are not allowed in scripts", 0)
  end
  return base_setmetatable(t, mt)
end)

-- string.rep('', huge) loops in C without allocating: answer it here
local rep, len = string.rep, string.len
string.rep = guard("string.rep", function(s, n, sep)
  if len(s) == 0 and (sep == nil or len(sep) == 0) then return rep(s, 0) end
  return rep(s, n, sep)
end)

-- table.move(t, 1, huge, 2) moves nils in C without allocating
local move = table.move
table.move = guard("table.move", function(a1, f, e, t, a2)
  if type(f) == "number" and type(e) == "number" and e - f > 16777216 then
    error("table.move: more than 16777216 elements", 0)
  end
  return move(a1, f, e, t, a2)
end)

local function fetch(what, a, b)
  local v, err = raw.fetch(what, a, b)
  if err ~= nil then error(err, 3) end
  return v
end

sonde = {
  hosts = function() return (fetch("hosts")) end,
  flows = function() return (fetch("flows")) end,
  interface = function() return (fetch("interface")) end,
  filter_sets = function() return (fetch("filter_sets")) end,
  top = function(what, n) return (fetch("top", what, n)) end,
  alert = function(args)
    local ok, err = raw.alert(args)
    if not ok then error(err, 2) end
  end,
  release = function(args)
    local ok, err = raw.release(args)
    if not ok then error(err, 2) end
  end,
  log = function(msg) raw.log(tostring(msg)) end,
  now = function() return raw.now() end,
}

print = function(...)
  local parts = {}
  for i = 1, select('#', ...) do parts[i] = tostring((select(i, ...))) end
  raw.log(concat(parts, "\t"))
end
"#;

/// A fresh state for script `name`: the allowed libraries, the `sonde` table, the memory cap
/// and the budget hook. The caller runs the script's chunk.
pub(crate) fn new_state(
    name: &Arc<str>,
    limits: &Limits,
    shared: &Arc<Mutex<Shared>>,
) -> mlua::Result<Lua> {
    let libs = StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8;
    let lua = Lua::new_with(libs, LuaOptions::new())?;
    let raw = lua.create_table()?;
    raw.set("fetch", fetch_dispatch(&lua)?)?;
    raw.set("alert", alert_fn(&lua, name, shared)?)?;
    raw.set("release", release_fn(&lua, name, shared)?)?;
    raw.set("log", log_fn(&lua, name, shared)?)?;
    let sh = shared.clone();
    raw.set(
        "now",
        lua.create_function(move |_, ()| {
            let now = lock(&sh).now;
            Ok(now.unwrap_or_else(crate::wall_clock) as i64)
        })?,
    )?;
    lua.load(PRELUDE).set_name("=sonde").call::<()>(raw)?;
    lua.set_memory_limit(limits.memory_bytes)?;
    set_budget_hook(&lua, name, limits, shared)?;
    Ok(lua)
}

fn set_budget_hook(
    lua: &Lua,
    name: &Arc<str>,
    limits: &Limits,
    shared: &Arc<Mutex<Shared>>,
) -> mlua::Result<()> {
    let (sh, name) = (shared.clone(), name.clone());
    let (max_instructions, max_time) = (limits.instructions, limits.time);
    let triggers = HookTriggers {
        every_nth_instruction: Some(CHECK_EVERY),
        ..HookTriggers::new()
    };
    lua.set_hook(triggers, move |lua, debug| {
        let why = {
            let mut s = lock(&sh);
            s.instructions += u64::from(CHECK_EVERY);
            if !s.active {
                // a metamethod our own code triggered between calls: never let it run on
                "ran outside a hook call".to_string()
            } else if s.instructions > max_instructions {
                format!("instruction budget exceeded ({max_instructions} instructions per call)")
            } else if s.started.elapsed() > max_time {
                format!(
                    "time budget exceeded ({} per call)",
                    show_duration(max_time)
                )
            } else {
                return Ok(VmState::Continue);
            }
        };
        let source = debug.source().short_src.map(|s| s.into_owned());
        let place = match (source, debug.current_line()) {
            (Some(src), Some(line)) => format!("{src}:{line}: "),
            _ => format!("{name}: "),
        };
        let msg = format!("{place}{why}");
        lock(&sh).abort = Some(msg.clone());
        // From now on every instruction fails, so that pcall cannot keep the script going.
        stop_everything(lua, &msg)?;
        Err(mlua::Error::runtime(msg))
    })
}

/// Makes every further instruction of this state raise `msg` (used once a call overran, and
/// before the state is closed, so that nothing the script left behind runs unbounded).
pub(crate) fn stop_everything(lua: &Lua, msg: &str) -> mlua::Result<()> {
    let msg = msg.to_string();
    let triggers = HookTriggers {
        every_nth_instruction: Some(1),
        ..HookTriggers::new()
    };
    lua.set_hook(triggers, move |_, _| Err(mlua::Error::runtime(msg.clone())))
}

fn show_duration(d: Duration) -> String {
    if d.as_millis() >= 1000 && d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// `raw.fetch`: calls the function a tick stored in the registry; outside a tick, an error.
fn fetch_dispatch(lua: &Lua) -> mlua::Result<Function> {
    lua.create_function(|lua, (what, a, b): (String, Value, Value)| {
        match lua.named_registry_value::<Option<Function>>(FETCH_KEY)? {
            Some(f) => f.call::<(Value, Value)>((what, a, b)),
            None => Ok((
                Value::Nil,
                Value::String(lua.create_string(format!(
                    "sonde.{what}() works only in every_second/every_minute/every_hour/every_day"
                ))?),
            )),
        }
    })
}

fn push_action(func: &str, shared: &Mutex<Shared>, action: Action) -> Result<(), String> {
    let mut s = lock(shared);
    if s.actions.len() >= alerts::ACTIONS_PER_CALL {
        return Err(format!(
            "{func}: more than {} alerts and releases in one call",
            alerts::ACTIONS_PER_CALL
        ));
    }
    s.actions.push(action);
    Ok(())
}

fn alert_fn(lua: &Lua, name: &Arc<str>, shared: &Arc<Mutex<Shared>>) -> mlua::Result<Function> {
    let (sh, source) = (shared.clone(), format!("script:{name}"));
    lua.create_function(move |_, args: Value| {
        let result =
            alerts::engage(&args, &source).and_then(|a| push_action("sonde.alert", &sh, a));
        Ok(answer(result))
    })
}

fn release_fn(lua: &Lua, name: &Arc<str>, shared: &Arc<Mutex<Shared>>) -> mlua::Result<Function> {
    let (sh, source) = (shared.clone(), format!("script:{name}"));
    lua.create_function(move |_, args: Value| {
        let result =
            alerts::release(&args, &source).and_then(|a| push_action("sonde.release", &sh, a));
        Ok(answer(result))
    })
}

fn answer(result: Result<(), String>) -> (bool, Option<String>) {
    match result {
        Ok(()) => (true, None),
        Err(e) => (false, Some(e)),
    }
}

fn log_fn(lua: &Lua, name: &Arc<str>, shared: &Arc<Mutex<Shared>>) -> mlua::Result<Function> {
    let (sh, name) = (shared.clone(), name.clone());
    lua.create_function(move |_, msg: mlua::LuaString| {
        let n = {
            let mut s = lock(&sh);
            s.logs += 1;
            s.logs
        };
        if n <= LOGS_PER_CALL {
            let bytes = msg.as_bytes();
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(LOG_LINE_MAX)]);
            eprintln!("script {name}: {}", text.replace(['\n', '\r'], " "));
        } else if n == LOGS_PER_CALL + 1 {
            eprintln!("script {name}: more than {LOGS_PER_CALL} log lines in one call; the rest are dropped");
        }
        Ok(())
    })
}
