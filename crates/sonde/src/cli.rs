//! The command line: every flag of the probe. `--config FILE` says the same in TOML
//! (config_file.rs); flags given here win over the file.

use clap::{Parser, ValueEnum};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "sonde",
    version,
    about = "Real-time network traffic monitor: packets in, exact flows and hosts out"
)]
// The inputs: from these flags, or from the config file's [input] (checked once both are read).
#[command(group = clap::ArgGroup::new("input").multiple(true).args(["read", "interface", "synthetic", "collect"]))]
pub struct Cli {
    /// Read settings from a TOML file ('sonde config example' prints one); flags given here
    /// win over it, and list flags (--export, --threshold, --filter-set…) add to its lists.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Read packets from a pcap or pcapng file.
    #[arg(short = 'r', long = "read", value_name = "FILE")]
    pub read: Option<PathBuf>,
    /// Capture live on an interface (needs root or CAP_NET_RAW); may be given several times,
    /// and with --collect or --synthetic: one sonde, one view of them all (-t shards each).
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    pub interface: Vec<String>,
    /// Forge traffic in memory: hosts=N,size=BYTES[,packets=P][,random-src][,seed=S]
    /// [,payload=zero|http|tls|dns|mix].
    #[arg(long, value_name = "SPEC")]
    pub synthetic: Option<String>,
    /// Collect flows instead of capturing packets: udp://ADDR:PORT (NetFlow v5/v9, IPFIX,
    /// sFlow), tcp://ADDR:PORT (IPFIX over TCP), zmq+tcp://ADDR:PORT (JSON flows from
    /// --zmq-export), kafka://BROKER:PORT/TOPIC[?group=G&format=json|protobuf] (a topic another
    /// sonde exports to); may be given several times. Runs until Ctrl-C or --duration.
    #[arg(long, value_name = "SOURCE")]
    pub collect: Vec<String>,
    /// Export expired flows to a collector: netflow5://HOST:PORT, netflow9://HOST:PORT,
    /// ipfix://HOST:PORT (UDP) or ipfix+tcp://HOST:PORT, or to Kafka:
    /// kafka://BROKER:PORT[,…]/TOPIC[?format=json|protobuf&compression=lz4]; may be given several
    /// times. Each has its own queue, which drops (and counts) when the destination is behind;
    /// add 'when_full=block' to wait instead, 'queue=N' for its length in batches ('sonde sinks').
    #[arg(long, value_name = "TARGET")]
    pub export: Vec<String>,
    /// Push expired flows as JSON to a collector over ZMQ (tcp://HOST:PORT of another sonde's
    /// --collect zmq+tcp://…); queue options as for --export.
    #[arg(long, value_name = "ENDPOINT")]
    pub zmq_export: Vec<String>,
    /// Capture filter in tcpdump syntax, e.g. 'tcp port 443'.
    #[arg(short = 'f', long = "filter", value_name = "BPF")]
    pub filter: Option<String>,
    /// With --synthetic: write the generated packets to a pcap file and exit.
    #[arg(
        short = 'w',
        long = "write",
        value_name = "FILE",
        requires = "synthetic"
    )]
    pub write: Option<PathBuf>,
    /// Shards per input (one per core); both directions of a flow always go to the same shard.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: usize,
    /// Pin the shards to these CPUs, one each, in order (e.g. 2-9 or 0,2,4-7): shard i runs on
    /// the i-th CPU listed. As many CPUs as shards (--threads × inputs), among those sonde may use
    #[arg(long, value_name = "LIST", value_parser = parse_cpu_list)]
    pub cpus: Option<CpuList>,
    /// How -i interfaces are read: auto (ring where it applies, else pcap), ring (sonde's own
    /// AF_PACKET TPACKET_V3 ring, the filter in the kernel), xdp (AF_XDP, one receive queue
    /// a shard: --threads as many as the interface has; its packets no longer reach this
    /// host's own stack, for span and tap ports), pcap (libpcap).
    #[arg(long, value_enum, default_value_t = CaptureArg::Auto)]
    pub capture: CaptureArg,
    /// Memory of each shard's capture ring, MiB (the AF_PACKET ring, libpcap's buffer, or
    /// AF_XDP's frames): what absorbs a burst while the shard is busy.
    #[arg(long, default_value_t = 64, value_name = "MIB", value_parser = parse_ring_mb)]
    pub capture_ring_mb: u64,
    /// Size of a TPACKET_V3 ring block, KiB (a power of two from 4 to 65536): the kernel hands
    /// the ring over a block at a time.
    #[arg(long, default_value_t = 256, value_name = "KIB", value_parser = parse_block_kb)]
    pub capture_block_kb: u64,
    /// Longest the kernel holds a partly filled ring block before handing it over, ms: the
    /// most a packet waits on a quiet link (1 to 1000).
    #[arg(long, default_value_t = 50, value_name = "MS", value_parser = parse_block_ms)]
    pub capture_block_ms: u64,
    /// Read a file as fast as possible (fast), paced by its timestamps (realtime), or paced and
    /// over and over with its times moved to now, each pass after the last (loop: a demo or
    /// a test bench that looks live; runs until Ctrl-C or --duration).
    #[arg(long, value_enum, default_value_t = ReplayArg::Fast)]
    pub replay: ReplayArg,
    /// Write expired flows to FILE ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    pub flows_out: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = FormatArg::Json)]
    pub flows_format: FormatArg,
    /// Write hosts as JSON lines: each purged host (idle and flowless) when it goes, then
    /// every remaining host, merged across shards, at the end.
    #[arg(long, value_name = "FILE")]
    pub hosts_out: Option<PathBuf>,
    /// Serve the web console (/), the REST API (/api/v1/…, OpenAPI at /api/v1/openapi.json)
    /// and Prometheus metrics (/metrics) on ADDR:PORT, e.g. 127.0.0.1:3000. Logins are
    /// required (see --users). With a file or synthetic input, sonde keeps serving what it
    /// counted after the end, until Ctrl-C or --duration.
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<std::net::SocketAddr>,
    /// The users of the console and the API (default ~/.config/sonde/users). When it has no
    /// user, sonde creates 'admin' with a generated password and prints it once. Manage it with
    /// 'sonde user add|del|token|list'.
    #[arg(long, value_name = "FILE")]
    pub users: Option<PathBuf>,
    /// Serve the console and the API without logins: allowed on loopback addresses only.
    #[arg(long)]
    pub no_auth: bool,
    /// Speak HTTPS on --http with this PEM certificate chain (with --https-key).
    #[arg(long, value_name = "FILE", requires = "https_key")]
    pub https_cert: Option<PathBuf>,
    /// The PEM private key of --https-cert.
    #[arg(long, value_name = "FILE", requires = "https_cert")]
    pub https_key: Option<PathBuf>,
    /// Keep history in DIR: every expired flow, and per-second time series of the traffic, each
    /// application and each host (made durable every second; query them with
    /// 'sonde query --data-dir DIR flows|hosts|apps|series').
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Answer the console's history pages, /api/v1/history/* and /api/v1/series from the
    /// ClickHouse flows table that '--export clickhouse://' fills (every probe writing there)
    /// instead of --data-dir: clickhouse://HOST:PORT/DB[?table=T] (T: e.g. a Distributed
    /// table over a cluster's shards).
    #[arg(long, value_name = "URL")]
    pub history: Option<String>,
    /// Time series retention, in rows of each resolution: 1 s,1 min,1 h,1 day (default
    /// 3600,10080,8760,1826: an hour, a week, a year, five years).
    #[arg(long, value_name = "S,M,H,D")]
    pub series_retention: Option<String>,
    /// Seconds a time series (a host, an application, an exporter) may go without traffic
    /// before its column in DATA_DIR/series is given to a new one (its history stays
    /// readable); 0 keeps a column per key for ever, up to 262,144 per kind. At least 120.
    #[arg(long, default_value_t = 600, value_name = "SECS")]
    pub series_reuse_after: u64,
    /// Flow history retention: delete flows older than this many days (0: no age limit).
    #[arg(long, default_value_t = 30.0, value_name = "DAYS")]
    pub history_max_age: f64,
    /// Flow history retention: keep at most this many GiB (0: no size limit).
    #[arg(long, default_value_t = 10.0, value_name = "GIB")]
    pub history_max_size: f64,
    /// Host cache capacity (the counters of hosts that left memory, in --data-dir); beyond it
    /// the hosts seen longest ago are evicted. Accepts k/M suffixes; at most 1073741824.
    #[arg(long, default_value = "1M", value_parser = parse_count, value_name = "N")]
    pub host_cache_max: usize,
    /// Write the final summary as JSON to FILE ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    pub stats_json: Option<PathBuf>,
    /// Print a stats line per shard every SECS seconds (0: never). Default: 1 for live capture.
    #[arg(long, value_name = "SECS")]
    pub stats_interval: Option<f64>,
    /// Seconds without packets after which a flow is expired.
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    pub idle_timeout: u64,
    /// Seconds after which a long flow is exported and its counters restarted (0: never).
    #[arg(long, default_value_t = 1800, value_name = "SECS")]
    pub active_timeout: u64,
    /// Flow table capacity (all shards together); accepts k/M suffixes.
    #[arg(long, default_value = "2M", value_parser = parse_count, value_name = "N")]
    pub max_flows: usize,
    /// Host table capacity (all shards together); accepts k/M suffixes.
    #[arg(long, default_value = "2M", value_parser = parse_count, value_name = "N")]
    pub max_hosts: usize,
    /// Local networks: a comma list of prefixes, e.g. 10.0.0.0/8,192.168.0.0/16,2001:db8::/32
    /// (may be given several times). Hosts in them are local, the others remote; each flow is
    /// in (remote client → local server), out (local → remote), internal (local ↔ local) or
    /// transit (remote ↔ remote), counted per direction in the stats, /metrics, the time
    /// series and the flow records. Default: no network is local (nothing is classified).
    #[arg(long, value_parser = parse_local_networks, value_name = "NETS")]
    pub local_networks: Vec<sonde_analytics::Networks>,
    /// Country and AS number of every address, from the databases in DIR and its
    /// subdirectories: MaxMind-format .mmdb files (GeoLite2 Country/City/ASN, DB-IP,
    /// ip-location-db) and ip-location-db's range CSVs (asn-ipv4.csv, …). `make geoip` fetches
    /// free ones into geoip/node_modules/@ip-location-db. Hosts, flows (SRC_AS, DST_AS,
    /// SRC_IP_COUNTRY, DST_IP_COUNTRY), the API and the console show them.
    #[arg(long, value_name = "DIR")]
    pub geoip_dir: Option<PathBuf>,
    /// When the flow table is full: evict the longest-idle flows, or drop new ones.
    #[arg(long, value_enum, default_value_t = TableFullArg::Evict)]
    pub table_full: TableFullArg,
    /// Stop a live or synthetic run after SECS seconds.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Application detection: off, builtin (sonde's own detectors) or ndpi.
    #[arg(long, value_enum, default_value_t = DpiArg::Builtin)]
    pub dpi: DpiArg,
    /// Extra service rules (host names and address blocks → application), in the format of
    /// crates/dpi/data/services.txt; may be given several times.
    #[arg(long, value_name = "FILE")]
    pub dpi_services: Vec<PathBuf>,
    /// Count the packets and bytes matching labelled tcpdump expressions, one chart per set:
    /// 'NAME=LABEL:EXPR;LABEL:EXPR…', e.g. 'web=http:tcp port 80;tls:tcp port 443'; may be
    /// given several times.
    #[arg(long, value_name = "SPEC")]
    pub filter_set: Vec<String>,
    /// Length of the top-N and anomaly lists' interval, in seconds (Ourmon's 30 s lists).
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub top_interval: u64,
    /// Entries kept per top-N list and interval.
    #[arg(long, default_value_t = 25, value_name = "N")]
    pub top_n: usize,
    /// A detection threshold, [NETWORK:]KEY=VALUE, e.g. ddos.pps=50k or
    /// 10.0.0.0/8:ddos.mbps=5000 (value 'off' turns a check off); may be given several times.
    /// 'sonde --threshold help' lists the keys.
    #[arg(long, value_name = "[NET:]KEY=VALUE")]
    pub threshold: Vec<String>,
    /// Write alerts (detections, built-in checks, scripts) as JSON lines to FILE, one line when
    /// an alert engages and one when it is released ('-' for standard output).
    #[arg(long, value_name = "FILE")]
    pub alerts_out: Option<PathBuf>,
    /// Never raise alerts that match SPEC: type=TYPE (or a prefix: scan.*), host=ADDR,
    /// net=CIDR, app=NAME, comment=TEXT, comma-separated; may be given several times.
    #[arg(long, value_name = "SPEC")]
    pub alert_exclude: Vec<String>,
    /// The alert rules: hold=SECS (a release waits this long for the condition to come back),
    /// burst=N and per_minute=N (new alerts of one type), per_entity_hour=N (of one type about
    /// one entity), exporter_silent=SECS (a collected exporter that stopped sending). Default:
    /// hold=30,burst=20,per_minute=10,per_entity_hour=6,exporter_silent=60.
    #[arg(long, value_name = "KEY=VALUE,...")]
    pub alert_limits: Option<String>,
    /// Addresses and networks, one per line ('#' comments), whose presence in the traffic
    /// raises a host.listed alert.
    #[arg(long, value_name = "FILE")]
    pub alert_hosts: Option<PathBuf>,
    /// Send every engaged and released alert to URL: webhook+http://HOST:PORT/PATH
    /// (?format=alertmanager), webhook+https://..., syslog+udp://HOST:PORT,
    /// syslog+tcp://HOST:PORT, smtp://HOST:PORT?from=A&to=B, or exec:PROGRAM (the alert as JSON
    /// on its standard input); may be given several times.
    #[arg(long, value_name = "URL")]
    pub notify: Vec<String>,
    /// A user script in Lua 5.4 (hooks every second, minute, hour, day and per ended flow;
    /// see docs/scripts.md); may be given several times.
    #[arg(long, value_name = "FILE.lua")]
    pub script: Vec<PathBuf>,
    /// Traffic analytics (top-N and anomaly lists, detections, filter-sets): on or off.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub analytics: OnOff,
    /// Trigger capture: when an alert of TYPE engages (syn_flood, ddos, scan.port, …), write
    /// its packets to a pcap file in --trigger-dir, from --trigger-pre seconds before until
    /// its release. TYPE:victim, TYPE:attacker or TYPE:both choose whose packets (default: the
    /// alert's host), TYPE:bpf=EXPR a tcpdump expression instead; comma-separated, repeatable.
    #[arg(long, value_name = "TYPE[:WHO]", value_parser = parse_trigger_rules)]
    pub trigger_capture: Vec<Vec<sonde_trigger::Rule>>,
    /// Where trigger capture writes its pcap files (an existing, writable directory).
    #[arg(long, value_name = "DIR")]
    pub trigger_dir: Option<PathBuf>,
    /// Seconds of packets before the trigger that a capture starts with (kept by each
    /// shard's ring).
    #[arg(long, default_value_t = 5.0, value_name = "SECS", value_parser = parse_trigger_pre)]
    pub trigger_pre: f64,
    /// A capture file is cut at this many MiB.
    #[arg(long, default_value_t = 100, value_name = "MIB", value_parser = parse_positive_u64)]
    pub trigger_max_mb: u64,
    /// A capture file is cut this many seconds after its alert started.
    #[arg(long, default_value_t = 300, value_name = "SECS", value_parser = parse_positive_u64)]
    pub trigger_max_seconds: u64,
    /// MiB of recent packets each shard keeps for trigger capture (bounds --trigger-pre).
    #[arg(long, default_value_t = 16, value_name = "MIB", value_parser = parse_ring_mb)]
    pub trigger_ring_mb: u64,
    /// Egress: write the chosen packets to a ring of pcap files in DIR (an existing,
    /// writable directory; files egress-s<shard>-<n>.pcap).
    #[arg(long, value_name = "DIR")]
    pub egress_pcap: Option<PathBuf>,
    /// Egress: send the chosen packets out of IFACE as they came in (needs CAP_NET_RAW;
    /// Ethernet inputs).
    #[arg(long, value_name = "IFACE")]
    pub egress_iface: Option<String>,
    /// Egress selector: a tcpdump expression each forwarded packet matches.
    #[arg(long, value_name = "EXPR")]
    pub egress_bpf: Option<String>,
    /// Egress selector: addresses and networks (comma-separated, or @FILE one a line); a
    /// packet is forwarded when either end is in one.
    #[arg(long, value_name = "NETS", value_parser = parse_egress_hosts)]
    pub egress_hosts: Option<EgressHosts>,
    /// Egress selector: applications or protocols (DNS,TLS,YouTube, …); a packet is forwarded
    /// when its flow's label names one (needs DPI).
    #[arg(long, value_name = "APPS", value_parser = parse_egress_apps)]
    pub egress_app: Option<EgressApps>,
    /// With --egress-app: what happens to a flow's packets before its application is known.
    #[arg(long, value_enum, default_value_t = UndecidedArg::Forward)]
    pub egress_undecided: UndecidedArg,
    /// Egress: forward only the first N packets of each flow, shunt the rest (0: all).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub egress_shunt_after: u64,
    /// Egress: a ring file is closed at this many MiB and a new one started.
    #[arg(long, default_value_t = 64, value_name = "MIB", value_parser = parse_positive_u64)]
    pub egress_file_mb: u64,
    /// Egress: ring files kept per shard; the oldest is deleted past this.
    #[arg(long, default_value_t = 16, value_name = "N", value_parser = parse_positive_u64)]
    pub egress_files: u64,
    /// No progress bar and no summary on stderr (errors are still printed).
    #[arg(short, long)]
    pub quiet: bool,
}

/// `--egress-undecided`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UndecidedArg {
    /// Forwarded until the application is known (an IDS sees each flow's start).
    Forward,
    /// Shunted until then: only packets of flows known to match go out.
    Shunt,
}

/// `--egress-hosts` (a type of its own: clap reads a bare `Vec` as a repeated flag).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressHosts(pub Vec<(std::net::IpAddr, u8)>);

/// `--egress-app`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressApps(pub Vec<sonde_dpi::Proto>);

pub fn parse_egress_hosts(s: &str) -> Result<EgressHosts, String> {
    sonde_egress::parse_hosts(s).map(EgressHosts)
}

pub fn parse_egress_apps(s: &str) -> Result<EgressApps, String> {
    sonde_egress::parse_apps(s).map(EgressApps)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOff {
    On,
    Off,
}

#[derive(Clone, Copy, Debug, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplayArg {
    Fast,
    Realtime,
    Loop,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DpiArg {
    Off,
    Builtin,
    Ndpi,
}

#[derive(Clone, Copy, Debug, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FormatArg {
    Json,
    Csv,
}

#[derive(Clone, Copy, Debug, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CaptureArg {
    Auto,
    Ring,
    Xdp,
    Pcap,
}

#[derive(Clone, Copy, Debug, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TableFullArg {
    Evict,
    Drop,
}

/// `--local-networks 10.0.0.0/8,2001:db8::/32`: a bad prefix is named, with an example.
/// `--cpus`: CPU numbers, each once, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// `2-9`, `0,2,4-7`.
pub fn parse_cpu_list(s: &str) -> Result<CpuList, String> {
    let bad = |part: &str| format!("'{part}' is not a CPU number or a range like 2-9");
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        let (from, to) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let (from, to): (usize, usize) = (
            from.parse().map_err(|_| bad(part))?,
            to.parse().map_err(|_| bad(part))?,
        );
        if from > to || to >= 1 << 16 {
            return Err(bad(part));
        }
        for cpu in from..=to {
            if cpus.contains(&cpu) {
                return Err(format!("CPU {cpu} is listed twice: one shard a CPU"));
            }
            cpus.push(cpu);
        }
    }
    Ok(CpuList(cpus))
}

pub fn parse_local_networks(s: &str) -> Result<sonde_analytics::Networks, String> {
    let n = sonde_analytics::Networks::parse(s)?;
    if n.is_empty() {
        return Err("no network given: a comma list such as 10.0.0.0/8,192.168.0.0/16".into());
    }
    Ok(n)
}

pub fn parse_count(s: &str) -> Result<usize, String> {
    let t = s.trim().replace('_', "");
    let (digits, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1_000),
        Some('m' | 'M') => (&t[..t.len() - 1], 1_000_000),
        _ => (&t[..], 1),
    };
    match digits.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n * mult),
        _ => Err(format!(
            "'{s}' is not a positive count (examples: 500000, 500k, 2M)"
        )),
    }
}

pub fn parse_trigger_rules(s: &str) -> Result<Vec<sonde_trigger::Rule>, String> {
    sonde_trigger::parse_rules(s)
}

pub fn parse_trigger_pre(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not a number of seconds between 0 and 3600"
        )),
    }
}

pub fn parse_positive_u64(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("'{s}' is not a positive whole number")),
    }
}

pub fn parse_ring_mb(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if (1..=4096).contains(&n) => Ok(n),
        _ => Err(format!(
            "'{s}' is not a whole number of MiB between 1 and 4096"
        )),
    }
}

pub fn parse_block_kb(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if (4..=65536).contains(&n) && n.is_power_of_two() => Ok(n),
        _ => Err(format!(
            "'{s}' is not a power of two of KiB between 4 and 65536 (e.g. 1024)"
        )),
    }
}

pub fn parse_block_ms(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if (1..=1000).contains(&n) => Ok(n),
        _ => Err(format!(
            "'{s}' is not a whole number of milliseconds between 1 and 1000"
        )),
    }
}
