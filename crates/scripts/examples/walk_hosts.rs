//! What an every_second script that walks all hosts costs per call:
//!
//! ```text
//! cargo run --release -p sonde-scripts --example walk_hosts -- 100000 [MEMORY_MIB]
//! ```
//!
//! The script sums every host's bytes and finds the biggest sender. One call = one
//! `Scripts::tick`: building the 100k host tables in Lua, and the walk. Prints the median of 20
//! calls (after 2 to warm up), the fastest and slowest, and the script's memory.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sonde_scripts::{FlowInfo, HostInfo, Limits, ProbeData, Scripts};

const SCRIPT: &str = r#"
function every_second(now)
  local total, max, max_ip = 0, -1, nil
  for _, h in ipairs(sonde.hosts()) do
    local b = h.sent_bytes + h.rcvd_bytes
    total = total + b
    if h.sent_bytes > max then max, max_ip = h.sent_bytes, h.ip end
  end
  last = {total = total, max = max, max_ip = max_ip}
end
"#;

struct Hosts(Vec<HostInfo>);

impl ProbeData for Hosts {
    fn hosts(&mut self) -> Vec<HostInfo> {
        self.0.clone()
    }
    fn flows(&mut self) -> Vec<FlowInfo> {
        Vec::new()
    }
    fn interface(&mut self) -> serde_json::Value {
        serde_json::Value::Null
    }
    fn filter_sets(&mut self) -> serde_json::Value {
        serde_json::Value::Null
    }
    fn top(&mut self, _: &str, _: usize) -> serde_json::Value {
        serde_json::Value::Null
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let mut limits = Limits::default();
    if let Some(mib) = args.get(2).and_then(|a| a.parse::<usize>().ok()) {
        limits.memory_bytes = mib << 20;
    }
    let hosts: Vec<HostInfo> = (0..n)
        .map(|i| HostInfo {
            ip: format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255),
            vlan: 0,
            mac: Some(format!(
                "02:00:00:{:02x}:{:02x}:{:02x}",
                i >> 16 & 255,
                i >> 8 & 255,
                i & 255
            )),
            sent_bytes: (i as u64 * 7919) % 1_000_003,
            rcvd_bytes: (i as u64 * 104_729) % 999_983,
            sent_packets: i as u64,
            rcvd_packets: i as u64,
            flows_as_client: 3,
            flows_as_server: 1,
            active_flows: 2,
            first_seen: 1_700_000_000,
            last_seen: 1_700_000_100,
            name: None,
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("sonde-walk-hosts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path: PathBuf = dir.join("walk_hosts.lua");
    std::fs::write(&path, SCRIPT).expect("write script");
    let mut scripts = Scripts::load(&[path], limits).unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(&dir);

    // The probe's own copy (the clone in `hosts()`) is timed too: it is what a real probe's
    // snapshot costs at least. Measure it alone to tell the two apart.
    let mut probe = Hosts(hosts);
    let t0 = Instant::now();
    let copy = probe.hosts();
    let copy_time = t0.elapsed();
    drop(copy);

    let mut times: Vec<Duration> = Vec::new();
    for i in 0..22u64 {
        let t0 = Instant::now();
        let actions = scripts.tick(1_700_000_000 + i, &mut probe);
        let took = t0.elapsed();
        assert!(actions.is_empty());
        if i >= 2 {
            times.push(took);
        }
    }
    let status = &scripts.status()[0];
    if !status.enabled {
        eprintln!(
            "the script was disabled: {}",
            status.disabled_reason.as_deref().unwrap_or("?")
        );
        std::process::exit(1);
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "walk_hosts: {n} hosts, every_second: median {:.2} ms per call (min {:.2}, max {:.2}; 20 calls), \
         {:.0} ns per host; of which the probe-side Vec clone {:.2} ms; script memory {:.1} MiB (cap {} MiB)",
        ms(times[times.len() / 2]),
        ms(times[0]),
        ms(times[times.len() - 1]),
        times[times.len() / 2].as_nanos() as f64 / n as f64,
        ms(copy_time),
        status.memory_bytes as f64 / (1 << 20) as f64,
        limits.memory_bytes >> 20,
    );
}
