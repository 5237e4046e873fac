//! Values between Rust and Lua: hosts and flows as tables, JSON both ways.

use std::ffi::{c_char, c_int, CStr};

use mlua::{ffi, Lua, Table, Value};

use crate::{FlowInfo, HostInfo};

/// Deepest evidence table, and most values in one evidence.
const EVIDENCE_DEPTH: usize = 16;
const EVIDENCE_VALUES: usize = 10_000;
/// Deepest JSON the probe's answers may nest (deeper parts become nil).
const JSON_DEPTH: usize = 64;

/// A counter as a Lua integer (a float past 2^63, which no counter reaches).
fn count(n: u64) -> Value {
    match i64::try_from(n) {
        Ok(i) => Value::Integer(i),
        Err(_) => Value::Number(n as f64),
    }
}

// Hosts and flows are built with Lua's C API inside one protected call (`Lua::exec_raw`):
// mlua's safe `Table::raw_set` runs a protected call per field, which made 100k hosts cost
// ~1 s; this way they cost what Lua's own table constructor would.
//
// SAFETY (the `unsafe` blocks below): every function is called inside `exec_raw`'s protected
// call on its state, with the stack slots it uses checked (`luaL_checkstack`); a Lua error
// (out of memory) unwinds to that protected call, over frames that hold only references and
// integers (nothing to drop); each builder leaves exactly one table on the stack.

unsafe fn push_str(state: *mut ffi::lua_State, s: &str) {
    ffi::lua_pushlstring(state, s.as_ptr().cast::<c_char>(), s.len());
}

unsafe fn push_count(state: *mut ffi::lua_State, n: u64) {
    match i64::try_from(n) {
        Ok(i) => ffi::lua_pushinteger(state, i),
        Err(_) => ffi::lua_pushnumber(state, n as f64),
    }
}

unsafe fn set_str(state: *mut ffi::lua_State, key: &CStr, s: &str) {
    push_str(state, s);
    ffi::lua_setfield(state, -2, key.as_ptr());
}

unsafe fn set_opt_str(state: *mut ffi::lua_State, key: &CStr, s: &Option<String>) {
    if let Some(s) = s {
        set_str(state, key, s);
    }
}

unsafe fn set_count(state: *mut ffi::lua_State, key: &CStr, n: u64) {
    push_count(state, n);
    ffi::lua_setfield(state, -2, key.as_ptr());
}

unsafe fn set_float(state: *mut ffi::lua_State, key: &CStr, x: f64) {
    ffi::lua_pushnumber(state, x);
    ffi::lua_setfield(state, -2, key.as_ptr());
}

unsafe fn set_pair(state: *mut ffi::lua_State, key: &CStr, v: [u64; 2]) {
    ffi::lua_createtable(state, 2, 0);
    push_count(state, v[0]);
    ffi::lua_rawseti(state, -2, 1);
    push_count(state, v[1]);
    ffi::lua_rawseti(state, -2, 2);
    ffi::lua_setfield(state, -2, key.as_ptr());
}

unsafe fn push_host(state: *mut ffi::lua_State, h: &HostInfo) {
    ffi::lua_createtable(state, 0, 13);
    set_str(state, c"ip", &h.ip);
    set_count(state, c"vlan", u64::from(h.vlan));
    set_opt_str(state, c"mac", &h.mac);
    set_count(state, c"sent_bytes", h.sent_bytes);
    set_count(state, c"rcvd_bytes", h.rcvd_bytes);
    set_count(state, c"sent_packets", h.sent_packets);
    set_count(state, c"rcvd_packets", h.rcvd_packets);
    set_count(state, c"flows_as_client", h.flows_as_client);
    set_count(state, c"flows_as_server", h.flows_as_server);
    set_count(state, c"active_flows", h.active_flows);
    set_count(state, c"first_seen", h.first_seen);
    set_count(state, c"last_seen", h.last_seen);
    set_opt_str(state, c"name", &h.name);
}

unsafe fn push_flow(state: *mut ffi::lua_State, f: &FlowInfo) {
    ffi::lua_createtable(state, 0, 14);
    set_count(state, c"proto", u64::from(f.proto));
    set_str(state, c"client", &f.client);
    set_str(state, c"server", &f.server);
    set_count(state, c"client_port", u64::from(f.client_port));
    set_count(state, c"server_port", u64::from(f.server_port));
    set_count(state, c"vlan", u64::from(f.vlan));
    set_str(state, c"app", &f.app);
    set_pair(state, c"packets", f.packets);
    set_pair(state, c"bytes", f.bytes);
    set_float(state, c"first_seen", f.first_seen);
    set_float(state, c"last_seen", f.last_seen);
    set_str(state, c"end_reason", &f.end_reason);
    set_opt_str(state, c"server_name", &f.server_name);
    set_opt_str(state, c"dns_query", &f.dns_query);
}

/// An array of tables, one per item, built by `push` (which leaves one table on the stack).
fn array_of<T>(
    lua: &Lua,
    items: &[T],
    push: unsafe fn(*mut ffi::lua_State, &T),
) -> mlua::Result<Table> {
    // SAFETY: see above; the slots: the array, an item, its field's value, a pair's value.
    unsafe {
        lua.exec_raw::<Table>((), |state| {
            ffi::luaL_checkstack(state, 4, std::ptr::null());
            ffi::lua_createtable(state, c_int::try_from(items.len()).unwrap_or(c_int::MAX), 0);
            for (i, item) in items.iter().enumerate() {
                push(state, item);
                ffi::lua_rawseti(state, -2, i as ffi::lua_Integer + 1);
            }
        })
    }
}

pub(crate) fn hosts_table(lua: &Lua, hosts: &[HostInfo]) -> mlua::Result<Table> {
    array_of(lua, hosts, push_host)
}

pub(crate) fn flows_table(lua: &Lua, flows: &[FlowInfo]) -> mlua::Result<Table> {
    array_of(lua, flows, push_flow)
}

/// One flow's table (`on_flow`).
pub(crate) fn flow_table(lua: &Lua, f: &FlowInfo) -> mlua::Result<Table> {
    // SAFETY: see above.
    unsafe {
        lua.exec_raw::<Table>((), |state| {
            ffi::luaL_checkstack(state, 3, std::ptr::null());
            push_flow(state, f);
        })
    }
}

/// JSON as Lua: objects and arrays become tables (arrays from 1), null becomes nil.
pub(crate) fn json_to_lua(lua: &Lua, v: &serde_json::Value) -> mlua::Result<Value> {
    json_at(lua, v, 0)
}

fn json_at(lua: &Lua, v: &serde_json::Value, depth: usize) -> mlua::Result<Value> {
    use serde_json::Value as J;
    if depth > JSON_DEPTH {
        return Ok(Value::Nil);
    }
    Ok(match v {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Integer(i),
            (None, Some(u)) => count(u),
            _ => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::String(lua.create_string(s)?),
        J::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, json_at(lua, item, depth + 1)?)?;
            }
            Value::Table(t)
        }
        J::Object(map) => {
            let t = lua.create_table_with_capacity(0, map.len())?;
            for (k, item) in map {
                t.raw_set(k.as_str(), json_at(lua, item, depth + 1)?)?;
            }
            Value::Table(t)
        }
    })
}

/// A Lua value as JSON (an alert's evidence). A table whose keys are exactly 1..n is an array;
/// any other table is an object (integer and float keys written as text; `{}` is `{}`).
/// The error starts with the path to the bad value (`.hosts[2]: …`).
pub(crate) fn lua_to_json(v: &Value) -> Result<serde_json::Value, String> {
    let mut budget = EVIDENCE_VALUES;
    let mut path = String::new();
    to_json(v, 0, &mut budget, &mut path).map_err(|e| format!("{path}: {e}"))
}

fn to_json(
    v: &Value,
    depth: usize,
    budget: &mut usize,
    path: &mut String,
) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    if *budget == 0 {
        return Err(format!("more than {EVIDENCE_VALUES} values"));
    }
    *budget -= 1;
    Ok(match v {
        Value::Nil => J::Null,
        Value::Boolean(b) => J::Bool(*b),
        Value::Integer(i) => J::from(*i),
        Value::Number(n) => serde_json::Number::from_f64(*n).map_or(J::Null, J::Number),
        Value::String(s) => J::String(s.to_string_lossy()),
        Value::Table(t) => {
            if depth >= EVIDENCE_DEPTH {
                return Err(format!("nested deeper than {EVIDENCE_DEPTH} tables"));
            }
            let mut entries = Vec::new();
            for pair in t.pairs::<Value, Value>() {
                let (k, item) = pair.map_err(|e| e.to_string())?;
                if entries.len() >= EVIDENCE_VALUES {
                    return Err(format!("more than {EVIDENCE_VALUES} values"));
                }
                entries.push((k, item));
            }
            let n = t.raw_len();
            let is_array = n > 0 && entries.len() == n;
            let mark = path.len();
            if is_array {
                let mut items = Vec::with_capacity(n);
                for i in 1..=n {
                    let item: Value = t.raw_get(i).map_err(|e| e.to_string())?;
                    path.push_str(&format!("[{i}]"));
                    items.push(to_json(&item, depth + 1, budget, path)?);
                    path.truncate(mark);
                }
                J::Array(items)
            } else {
                let mut map = serde_json::Map::new();
                for (k, item) in entries {
                    let key = match k {
                        Value::String(s) => s.to_string_lossy(),
                        Value::Integer(i) => i.to_string(),
                        Value::Number(n) => n.to_string(),
                        other => {
                            return Err(format!("a {} cannot be a key", other.type_name()));
                        }
                    };
                    path.push('.');
                    path.push_str(&key);
                    let value = to_json(&item, depth + 1, budget, path)?;
                    path.truncate(mark);
                    map.insert(key, value);
                }
                J::Object(map)
            }
        }
        other => return Err(format!("a {} cannot be evidence", other.type_name())),
    })
}
