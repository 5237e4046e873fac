//! `--trigger-capture TYPE[:victim|attacker|both|bpf=EXPR][,…]` and the other settings.

use crate::matcher::Target;
use std::path::{Path, PathBuf};

/// One alert type to capture, and whose packets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub kind: String,
    pub target: Target,
}

#[derive(Clone, Debug)]
pub struct TriggerConfig {
    pub rules: Vec<Rule>,
    /// Where the pcap files go (`--trigger-dir`).
    pub dir: PathBuf,
    /// Packets from this long before the alert's start on (`--trigger-pre`).
    pub pre_ns: u64,
    /// A file is cut at this size (`--trigger-max-mb`).
    pub max_bytes: u64,
    /// A file is cut this long after the alert's start, in packet time, or after this long on
    /// the wall clock without a release (`--trigger-max-seconds`).
    pub max_seconds: u64,
    /// Each shard's ring of recent packets (`--trigger-ring-mb`).
    pub ring_bytes: usize,
}

pub const MIB: u64 = 1 << 20;

impl TriggerConfig {
    /// The defaults: 5 s before the trigger, 100 MiB and 300 s per file, 16 MiB of ring per
    /// shard.
    pub fn new(rules: Vec<Rule>, dir: PathBuf) -> TriggerConfig {
        TriggerConfig {
            rules,
            dir,
            pre_ns: 5_000_000_000,
            max_bytes: 100 * MIB,
            max_seconds: 300,
            ring_bytes: (16 * MIB) as usize,
        }
    }

    /// The rule for an alert type, if captures are wanted for it.
    pub fn rule(&self, kind: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.kind == kind)
    }

    /// How long a ring keeps packets: `pre`, plus the time a detection takes to reach a shard
    /// (its second, or its interval, must close and be merged first).
    pub fn ring_keep_ns(&self) -> u64 {
        self.pre_ns + 5_000_000_000
    }
}

/// Parses one `--trigger-capture` value: `TYPE[:victim|attacker|both|bpf=EXPR]` items separated
/// by commas (a `bpf=` expression runs to the end of the value, commas included).
pub fn parse_rules(text: &str) -> Result<Vec<Rule>, String> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (item, next) = match (rest.find(','), rest.find(":bpf=")) {
            (Some(c), Some(b)) if b < c => (rest, ""),
            (Some(c), _) => (&rest[..c], &rest[c + 1..]),
            (None, _) => (rest, ""),
        };
        rest = next.trim_start();
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let (kind, target) = match item.split_once(':') {
            None => (item, Target::Entity),
            Some((k, t)) => {
                let target = match t.trim() {
                    "victim" => Target::Victim,
                    "attacker" => Target::Attacker,
                    "both" => Target::Both,
                    "entity" => Target::Entity,
                    t if t.starts_with("bpf=") => {
                        let expr = t["bpf=".len()..].trim();
                        sonde_analytics::bpf::Program::compile(
                            expr,
                            sonde_wire::LinkType::Ethernet,
                        )
                        .map_err(|e| format!("'{item}': the expression '{expr}': {e}"))?;
                        Target::Bpf(expr.to_string())
                    }
                    t => {
                        return Err(format!(
                            "'{item}': '{t}' is not victim, attacker, both or bpf=EXPR"
                        ))
                    }
                };
                (k.trim(), target)
            }
        };
        if kind.is_empty()
            || !kind
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(format!(
                "'{item}': give an alert type (e.g. syn_flood, ddos, scan.port), then \
                 optionally :victim, :attacker, :both or :bpf=EXPR"
            ));
        }
        if out.iter().any(|r: &Rule| r.kind == kind) {
            return Err(format!("'{kind}' is given twice"));
        }
        out.push(Rule {
            kind: kind.to_string(),
            target,
        });
    }
    if out.is_empty() {
        return Err("give at least one alert type, e.g. syn_flood,ddos:both".into());
    }
    Ok(out)
}

/// Checks that `dir` is a directory this process can create files in (by creating and removing
/// one), so a bad `--trigger-dir` is reported before the run.
pub fn check_dir(dir: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("'{}': {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("'{}' is not a directory", dir.display()));
    }
    let probe = dir.join(format!(".sonde-trigger-check-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| format!("'{}' is not writable: {e}", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse() {
        let r = parse_rules("syn_flood, scan.port:attacker,ddos:both").unwrap();
        assert_eq!(
            r,
            vec![
                Rule {
                    kind: "syn_flood".into(),
                    target: Target::Entity
                },
                Rule {
                    kind: "scan.port".into(),
                    target: Target::Attacker
                },
                Rule {
                    kind: "ddos".into(),
                    target: Target::Both
                },
            ]
        );
        let r = parse_rules("ddos:victim,noisy_host:bpf=tcp port 80 or host 2001:db8::1").unwrap();
        assert_eq!(
            r[1].target,
            Target::Bpf("tcp port 80 or host 2001:db8::1".into())
        );
    }

    #[test]
    fn bad_rules_say_why() {
        for (bad, want) in [
            ("", "at least one"),
            ("ddos:sideways", "not victim"),
            ("ddos:bpf=tcp prot 80", "expression"),
            ("dd/os", "alert type"),
            ("ddos,ddos:both", "twice"),
        ] {
            let e = parse_rules(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn dir_checks() {
        assert!(check_dir(Path::new("/nonexistent/sonde")).is_err());
        assert!(check_dir(Path::new("/etc/passwd"))
            .unwrap_err()
            .contains("not a directory"));
        assert!(check_dir(&std::env::temp_dir()).is_ok());
    }
}
