use sonde_capture::SyntheticSpec;
use sonde_dpi::DpiConfig;
use sonde_export::Format;
use sonde_flow::EngineConfig;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug)]
pub enum Input {
    File(PathBuf),
    Live(String),
    Synthetic(SyntheticSpec),
    /// Flows from exporters and producers (NetFlow/IPFIX/sFlow, JSON over ZMQ).
    Collect(Vec<crate::collect::CollectSource>),
}

/// How fast a file is read: as fast as the engine goes, or paced by its timestamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replay {
    Fast,
    Realtime,
    /// Paced, and read again at its end with its timestamps moved to now (each pass a second
    /// after the last one's last packet); until stopped.
    Loop,
}

impl Input {
    /// True for inputs that run until stopped (a capture, a collector).
    pub fn is_live(&self) -> bool {
        matches!(self, Input::Live(_) | Input::Collect(_))
    }

    /// Its kinds' names in [`INPUTS`] (a collector input may listen on several).
    pub fn kinds(&self) -> Vec<&'static str> {
        use crate::collect::CollectSource;
        match self {
            Input::File(_) => vec!["file"],
            Input::Live(_) => vec!["live"],
            Input::Synthetic(_) => vec!["synthetic"],
            Input::Collect(sources) => sources
                .iter()
                .map(|s| match s {
                    CollectSource::Udp(..) => "collect-udp",
                    CollectSource::Tcp(..) => "collect-tcp",
                    CollectSource::Zmq(..) => "collect-zmq",
                    CollectSource::Kafka(_) => "collect-kafka",
                })
                .collect(),
        }
    }
}

/// One kind of input, as `sonde sources` lists it.
pub struct InputKind {
    pub name: &'static str,
    pub usage: &'static str,
    /// What ends it.
    pub ends: &'static str,
    pub what: &'static str,
}

/// Every kind of input a probe reads. Each runs on its own shards through the one shard loop
/// (`source::run`, with the kind's `ShardSource`); several may run in one probe, a file alone.
pub const INPUTS: &[InputKind] = &[
    InputKind {
        name: "file",
        usage: "-r FILE",
        ends: "at the end of the file (read alone)",
        what: "pcap or pcapng, BPF filter compiled once, --replay fast or realtime",
    },
    InputKind {
        name: "live",
        usage: "-i IFACE (repeatable)",
        ends: "when stopped (Ctrl-C, --duration)",
        what: "libpcap capture; with --threads N, N handles in one PACKET_FANOUT group",
    },
    InputKind {
        name: "synthetic",
        usage: "--synthetic SPEC",
        ends: "after packets=P (else when stopped)",
        what: "frames forged in memory, each shard its own share (Cento's dummy interface)",
    },
    InputKind {
        name: "collect-udp",
        usage: "--collect udp://ADDR:PORT[?allow=NET,…]",
        ends: "when stopped",
        what: "NetFlow v5/v9, IPFIX and sFlow datagrams (told apart per datagram)",
    },
    InputKind {
        name: "collect-tcp",
        usage: "--collect tcp://ADDR:PORT[?allow=NET,…]",
        ends: "when stopped",
        what: "IPFIX over TCP (RFC 7011), any number of exporters",
    },
    InputKind {
        name: "collect-zmq",
        usage: "--collect zmq+tcp://ADDR:PORT[?curve=SECRET_KEY_FILE&allow=NET,…&format=ntopng&mode=collector]",
        ends: "when stopped",
        what: "nProbe/ntopng JSON flows from a producer's --zmq-export, or with format=ntopng \
               in ntopng's framing from nProbe's --zmq (numeric or label keys, zlib)",
    },
    InputKind {
        name: "collect-kafka",
        usage: "--collect kafka://BROKER:PORT[,…]/TOPIC[?group=G&format=json|protobuf]",
        ends: "when stopped",
        what: "flows on a Kafka topic (another sonde's --export kafka://), consumer group G, \
               offsets committed once the records are in the flow tables",
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::CollectSource;

    #[test]
    fn every_input_is_listed() {
        let inputs = [
            Input::File("a.pcap".into()),
            Input::Live("eth0".into()),
            Input::Synthetic(SyntheticSpec::parse("hosts=2").unwrap()),
            Input::Collect(vec![
                CollectSource::parse("udp://127.0.0.1:1").unwrap(),
                CollectSource::parse("tcp://127.0.0.1:1").unwrap(),
                CollectSource::parse("zmq+tcp://127.0.0.1:1").unwrap(),
                CollectSource::parse("kafka://127.0.0.1:1/flows").unwrap(),
            ]),
        ];
        let mut named: Vec<&str> = inputs.iter().flat_map(Input::kinds).collect();
        named.sort_unstable();
        let mut listed: Vec<&str> = INPUTS.iter().map(|k| k.name).collect();
        listed.sort_unstable();
        assert_eq!(named, listed);
    }
}

#[derive(Clone)]
pub struct ProbeConfig {
    /// What the probe reads: one input, or several at once (interfaces, a collector, the
    /// synthetic source; a file only alone), each with `threads` shards of its own.
    pub inputs: Vec<Input>,
    /// BPF capture filter (tcpdump syntax), for the packet captures among the inputs.
    pub filter: Option<String>,
    /// Shards per input.
    pub threads: usize,
    /// `--cpus`: shard i runs pinned to `cpus[i]` (as many as shards, checked at start).
    pub cpus: Option<Vec<usize>>,
    /// How live interfaces are read (backend, ring sizes): each interface's handles start
    /// from this, with its own name, the filter and a fanout group.
    pub live: sonde_capture::LiveConfig,
    pub replay: Replay,
    /// Table capacities here are totals; each shard gets an equal share.
    pub engine: EngineConfig,
    /// Where expired flows go (`-` for standard output) and in which format.
    pub flows_out: Option<(PathBuf, Format)>,
    /// Stop a live or synthetic run after this long.
    pub duration: Option<Duration>,
    /// Where host records go as JSON lines (`-` for standard output): one per host when it is
    /// purged (idle and flowless), then every remaining host, merged across shards, at the end.
    pub hosts_out: Option<PathBuf>,
    /// Built-in application detection (`None`: off).
    pub dpi: Option<DpiConfig>,
    /// More flow sinks (history, exporters, publishers), each built when the probe starts so
    /// a bad destination is reported before any packet is read.
    pub extra_sinks: Vec<SinkPlan>,
    /// Time series of the interface, applications and hosts, written to this data directory.
    pub series: Option<(PathBuf, sonde_history::series::Config)>,
    /// The most hosts the host cache of that data directory keeps; beyond that, those seen
    /// longest ago are evicted (`--host-cache-max`).
    pub host_cache_max: usize,
    /// At the end of the input, keep the flows and hosts in memory (readers can still look at
    /// them, e.g. through the REST API) until the stop flag is set or `duration` is over.
    pub linger: bool,
    /// Traffic analytics: filter-sets, top-N and anomaly lists, DDoS thresholds (None: off).
    pub analytics: Option<crate::AnalyticsSettings>,
    /// Alerts: the engine's rules, outputs and built-in checks (None: no alerts at all).
    pub alerts: Option<crate::alerts::AlertSettings>,
    /// Trigger capture: a pcap file per alert of the configured types (None: off, and no
    /// shard keeps a ring). Needs analytics, whose detections engage the captures.
    pub trigger: Option<sonde_trigger::TriggerConfig>,
    /// Egress: the packets of chosen flows forwarded to an interface or a pcap ring (None:
    /// off). Needs shards that read packets themselves: live interfaces, or one shard a file.
    pub egress: Option<sonde_egress::EgressConfig>,
    /// `--local-networks`: flows are classified as in, out, internal or transit and hosts as
    /// local or remote (empty: no network is local, nothing is classified).
    pub local_networks: sonde_analytics::Networks,
    /// `--geoip-dir`: country and AS of addresses, for flow records, the API and the console.
    pub geo: Option<std::sync::Arc<sonde_geo::GeoDb>>,
}

/// Builds a flow sink, or says why it cannot (one line, naming the destination and the fix).
pub type SinkFactory =
    std::sync::Arc<dyn Fn() -> Result<Box<dyn crate::sinks::RecordSink>, String> + Send + Sync>;

/// A flow sink to start: its kind (a name in [`crate::sinks::SINKS`]), its queue and how to
/// build it.
#[derive(Clone)]
pub struct SinkPlan {
    pub kind: &'static str,
    pub queue: crate::sinks::QueueOptions,
    pub make: SinkFactory,
}

impl ProbeConfig {
    pub fn new(input: Input) -> ProbeConfig {
        ProbeConfig::with_inputs(vec![input])
    }

    pub fn with_inputs(inputs: Vec<Input>) -> ProbeConfig {
        ProbeConfig {
            inputs,
            filter: None,
            threads: 1,
            cpus: None,
            live: sonde_capture::LiveConfig::new(""),
            replay: Replay::Fast,
            engine: EngineConfig::default(),
            flows_out: None,
            duration: None,
            hosts_out: None,
            dpi: Some(DpiConfig::default()),
            extra_sinks: Vec::new(),
            series: None,
            host_cache_max: sonde_history::hostcache::DEFAULT_MAX_ENTRIES,
            linger: false,
            analytics: None,
            alerts: None,
            trigger: None,
            egress: None,
            local_networks: sonde_analytics::Networks::default(),
            geo: None,
        }
    }
}
