//! The arguments of `sonde.alert{…}` and `sonde.release{…}`, checked: every mistake is an error
//! that names the field and what it should be.

use mlua::Value;

use crate::convert::lua_to_json;
use crate::Action;

/// Alerts and releases one call may make.
pub(crate) const ACTIONS_PER_CALL: usize = 10_000;
/// The severities an alert may have, lowest first.
pub const SEVERITIES: &[&str] = &[
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "emergency",
];
/// Longest alert type a script may give (before the `script.` prefix).
pub const TYPE_MAX: usize = 64;
const ENTITY_MAX: usize = 256;
const ENTITY_KIND_MAX: usize = 32;
const SUMMARY_MAX: usize = 1024;

const ALERT_FIELDS: &[&str] = &[
    "type",
    "entity",
    "entity_kind",
    "severity",
    "summary",
    "evidence",
];
const RELEASE_FIELDS: &[&str] = &["type", "entity"];

pub(crate) fn engage(args: &Value, source: &str) -> Result<Action, String> {
    let f = Fields::read("sonde.alert", args, ALERT_FIELDS)?;
    let kind = f.kind()?;
    let entity = f.entity()?;
    let entity_kind = match f.string("entity_kind")? {
        None => "host".to_string(),
        Some(k) => {
            let ok = !k.is_empty()
                && k.len() <= ENTITY_KIND_MAX
                && k.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !ok {
                return Err(format!(
                    "sonde.alert: entity_kind {k:?} must be 1 to {ENTITY_KIND_MAX} of a-z 0-9 _ (e.g. \"host\")"
                ));
            }
            k
        }
    };
    let severity = match f.string("severity")? {
        None => "warning".to_string(),
        Some(s) if SEVERITIES.contains(&s.as_str()) => s,
        Some(s) => {
            return Err(format!(
                "sonde.alert: severity {s:?} is not one of {}",
                SEVERITIES.join(", ")
            ))
        }
    };
    let summary = f
        .string("summary")?
        .ok_or("sonde.alert: summary is missing (a string saying what happened)")?;
    if summary.len() > SUMMARY_MAX {
        return Err(format!(
            "sonde.alert: summary is longer than {SUMMARY_MAX} bytes"
        ));
    }
    let evidence = match f.get("evidence") {
        Value::Nil => serde_json::Value::Object(Default::default()),
        v @ Value::Table(_) => lua_to_json(&v).map_err(|e| format!("sonde.alert: evidence{e}"))?,
        other => {
            return Err(format!(
                "sonde.alert: evidence must be a table, not {}",
                article(other.type_name())
            ))
        }
    };
    Ok(Action::Engage {
        kind,
        entity_kind,
        entity,
        severity,
        summary,
        evidence,
        source: source.to_string(),
    })
}

pub(crate) fn release(args: &Value, source: &str) -> Result<Action, String> {
    let f = Fields::read("sonde.release", args, RELEASE_FIELDS)?;
    Ok(Action::Release {
        kind: f.kind()?,
        entity: f.entity()?,
        source: source.to_string(),
    })
}

/// Checks an alert type as a script gives it (without the `script.` prefix).
pub fn valid_type(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= TYPE_MAX
        && t.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-')
        })
}

/// The named arguments of one call, every key checked against the ones it takes.
struct Fields {
    func: &'static str,
    values: Vec<(&'static str, Value)>,
}

impl Fields {
    fn read(func: &'static str, args: &Value, known: &[&'static str]) -> Result<Fields, String> {
        let Value::Table(t) = args else {
            return Err(format!(
                "{func} takes a table of named fields ({func}{{type = ..., entity = ...}}), not {}",
                article(args.type_name())
            ));
        };
        let mut values = Vec::new();
        for pair in t.pairs::<Value, Value>() {
            let (k, v) = pair.map_err(|e| format!("{func}: {e}"))?;
            let key = match &k {
                Value::String(s) => s.to_string_lossy(),
                other => {
                    return Err(format!(
                        "{func}: unexpected positional argument ({}); the fields are named: {}",
                        other.type_name(),
                        known.join(", ")
                    ))
                }
            };
            match known.iter().find(|n| **n == key) {
                Some(name) => values.push((*name, v)),
                None => {
                    return Err(format!(
                        "{func}: unknown field {key:?} (it takes {})",
                        known.join(", ")
                    ))
                }
            }
        }
        Ok(Fields { func, values })
    }

    fn get(&self, name: &str) -> Value {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or(Value::Nil)
    }

    /// A string field (numbers are taken as their text), `None` when absent.
    fn string(&self, name: &str) -> Result<Option<String>, String> {
        match self.get(name) {
            Value::Nil => Ok(None),
            Value::String(s) => Ok(Some(s.to_string_lossy())),
            Value::Integer(i) => Ok(Some(i.to_string())),
            other => Err(format!(
                "{}: {name} must be a string, not {}",
                self.func,
                article(other.type_name())
            )),
        }
    }

    fn kind(&self) -> Result<String, String> {
        let func = self.func;
        let t = self.string("type")?.ok_or_else(|| {
            format!("{func}: type is missing (the alert's name, e.g. type = \"new_destination\")")
        })?;
        if !valid_type(&t) {
            return Err(format!(
                "{func}: type {t:?} must be 1 to {TYPE_MAX} of a-z 0-9 _ . -"
            ));
        }
        Ok(format!("script.{t}"))
    }

    fn entity(&self) -> Result<String, String> {
        let func = self.func;
        let e = self.string("entity")?.ok_or_else(|| {
            format!("{func}: entity is missing (what the alert is about, e.g. a host's address)")
        })?;
        if e.is_empty() || e.len() > ENTITY_MAX {
            return Err(format!(
                "{func}: entity must be 1 to {ENTITY_MAX} bytes long"
            ));
        }
        Ok(e)
    }
}

/// "a string", "an integer".
fn article(type_name: &str) -> String {
    match type_name.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => format!("an {type_name}"),
        _ => format!("a {type_name}"),
    }
}
