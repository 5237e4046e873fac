//! Values between Rust and Lua: hosts and flows as tables, JSON both ways.

use mlua::{Lua, Table, Value};

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

fn opt_str(lua: &Lua, s: &Option<String>) -> mlua::Result<Value> {
    match s {
        Some(s) => Ok(Value::String(lua.create_string(s)?)),
        None => Ok(Value::Nil),
    }
}

pub(crate) fn host_table(lua: &Lua, h: &HostInfo) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(0, 13)?;
    t.raw_set("ip", h.ip.as_str())?;
    t.raw_set("vlan", h.vlan)?;
    t.raw_set("mac", opt_str(lua, &h.mac)?)?;
    t.raw_set("sent_bytes", count(h.sent_bytes))?;
    t.raw_set("rcvd_bytes", count(h.rcvd_bytes))?;
    t.raw_set("sent_packets", count(h.sent_packets))?;
    t.raw_set("rcvd_packets", count(h.rcvd_packets))?;
    t.raw_set("flows_as_client", count(h.flows_as_client))?;
    t.raw_set("flows_as_server", count(h.flows_as_server))?;
    t.raw_set("active_flows", count(h.active_flows))?;
    t.raw_set("first_seen", count(h.first_seen))?;
    t.raw_set("last_seen", count(h.last_seen))?;
    t.raw_set("name", opt_str(lua, &h.name)?)?;
    Ok(t)
}

pub(crate) fn hosts_table(lua: &Lua, hosts: &[HostInfo]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(hosts.len(), 0)?;
    for (i, h) in hosts.iter().enumerate() {
        t.raw_set(i + 1, host_table(lua, h)?)?;
    }
    Ok(t)
}

fn pair(lua: &Lua, v: [u64; 2]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(2, 0)?;
    t.raw_set(1, count(v[0]))?;
    t.raw_set(2, count(v[1]))?;
    Ok(t)
}

pub(crate) fn flow_table(lua: &Lua, f: &FlowInfo) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(0, 16)?;
    t.raw_set("proto", f.proto)?;
    t.raw_set("client", f.client.as_str())?;
    t.raw_set("server", f.server.as_str())?;
    t.raw_set("client_port", f.client_port)?;
    t.raw_set("server_port", f.server_port)?;
    t.raw_set("vlan", f.vlan)?;
    t.raw_set("app", f.app.as_str())?;
    t.raw_set("packets", pair(lua, f.packets)?)?;
    t.raw_set("bytes", pair(lua, f.bytes)?)?;
    t.raw_set("first_seen", f.first_seen)?;
    t.raw_set("last_seen", f.last_seen)?;
    t.raw_set("end_reason", f.end_reason.as_str())?;
    t.raw_set("server_name", opt_str(lua, &f.server_name)?)?;
    t.raw_set("dns_query", opt_str(lua, &f.dns_query)?)?;
    Ok(t)
}

pub(crate) fn flows_table(lua: &Lua, flows: &[FlowInfo]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(flows.len(), 0)?;
    for (i, f) in flows.iter().enumerate() {
        t.raw_set(i + 1, flow_table(lua, f)?)?;
    }
    Ok(t)
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
