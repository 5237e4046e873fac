//! Shared by the tests: scripts written to a temporary directory, and a probe that answers
//! from fixed data and counts what it was asked.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use sonde_scripts::{FlowInfo, HostInfo, Limits, ProbeData, ScriptStatus, Scripts};

/// Writes `source` as `name` in a directory of its own, and answers the path.
pub fn script(name: &str, source: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "sonde-scripts-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, source).unwrap();
    path
}

pub fn load(scripts: &[(&str, &str)]) -> Scripts {
    load_with(scripts, Limits::default())
}

pub fn load_with(scripts: &[(&str, &str)], limits: Limits) -> Scripts {
    let paths: Vec<PathBuf> = scripts.iter().map(|(n, s)| script(n, s)).collect();
    Scripts::load(&paths, limits).unwrap_or_else(|e| panic!("load: {e}"))
}

pub fn load_err(name: &str, source: &str) -> (PathBuf, String) {
    let path = script(name, source);
    match Scripts::load(std::slice::from_ref(&path), Limits::default()) {
        Ok(_) => panic!("{name} loaded"),
        Err(e) => (path, e),
    }
}

pub fn status_of(scripts: &Scripts, name: &str) -> ScriptStatus {
    scripts
        .status()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no script {name}"))
}

#[derive(Default)]
pub struct FakeProbe {
    pub hosts: Vec<HostInfo>,
    pub flows: Vec<FlowInfo>,
    pub interface: serde_json::Value,
    pub asked_hosts: usize,
    pub asked_flows: usize,
    pub asked_interface: usize,
    pub asked_top: Vec<(String, usize)>,
}

impl ProbeData for FakeProbe {
    fn hosts(&mut self) -> Vec<HostInfo> {
        self.asked_hosts += 1;
        self.hosts.clone()
    }
    fn flows(&mut self) -> Vec<FlowInfo> {
        self.asked_flows += 1;
        self.flows.clone()
    }
    fn interface(&mut self) -> serde_json::Value {
        self.asked_interface += 1;
        self.interface.clone()
    }
    fn filter_sets(&mut self) -> serde_json::Value {
        json!({"sets": [{"name": "office", "hosts": 3}]})
    }
    fn top(&mut self, what: &str, n: usize) -> serde_json::Value {
        self.asked_top.push((what.to_string(), n));
        json!([{"key": what, "n": n}])
    }
}

pub fn host(ip: &str, sent: u64, rcvd: u64) -> HostInfo {
    HostInfo {
        ip: ip.to_string(),
        sent_bytes: sent,
        rcvd_bytes: rcvd,
        ..HostInfo::default()
    }
}

pub fn flow(client: &str, server: &str, bytes_c2s: u64) -> FlowInfo {
    FlowInfo {
        proto: 6,
        client: client.to_string(),
        server: server.to_string(),
        client_port: 40000,
        server_port: 443,
        app: "TLS".to_string(),
        packets: [10, 8],
        bytes: [bytes_c2s, 1000],
        first_seen: 1_700_000_000.0,
        last_seen: 1_700_000_010.5,
        end_reason: "idle".to_string(),
        ..FlowInfo::default()
    }
}
