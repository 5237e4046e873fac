//! The subcommands and modes that do not run the probe: `sonde sinks`, `sonde schema`,
//! `sonde config`, `--threshold help`, and `-w` (the synthetic generator writing a pcap).

use crate::config_file;
use crate::settings::{clap_error_line, parse_flags, prepare, with_config_file};
use anyhow::{bail, Context, Result};
use sonde_capture::{synthetic::fix_ipv4_checksum, PcapWriter, SyntheticSource, SyntheticSpec};
use sonde_probe::format_count;
use std::io::Write as _;
use std::process::ExitCode;

/// `sonde sources`: every kind of input, how to ask for it and what ends it.
pub(crate) fn print_sources() {
    for k in sonde_probe::INPUTS {
        println!(
            "{:<12} {}\n{:<12} {}; ends {}",
            k.name, k.usage, "", k.what, k.ends
        );
    }
    println!();
    println!("Several inputs run in one sonde (-i eth0 -i eth1 --collect udp://0.0.0.0:2055),");
    println!("each on its own --threads shards, one view; a file is read alone.");
}

/// `sonde schema [--json | --clickhouse [DB] [--kafka BROKERS/TOPIC] | --cassandra [KEYSPACE]]`:
/// the flow record's fields (JSON key, kind, unit, group, IPFIX element, history) as Markdown or
/// as `/api/v1/schema` answers, or the ClickHouse statements of `--export clickhouse://…/DB`
/// (with `--kafka`, also the Kafka engine table and view that read sonde's topic), or the CQL
/// statements of `--export cassandra://…/KEYSPACE`.
/// `sonde zmq-keygen NAME`: a CURVE key pair for an encrypted ZMQ collector (`NAME`, the public
/// key for the producers' `--zmq-export …?curve=NAME`; `NAME_secret` for the collector's
/// `--collect zmq+tcp://…?curve=NAME_secret`).
pub(crate) fn zmq_keygen_command(args: &[String]) -> ExitCode {
    let [name] = args else {
        eprintln!("sonde: error: use 'sonde zmq-keygen NAME' (writes NAME and NAME_secret)");
        return ExitCode::from(2);
    };
    match sonde_probe::zmq_curve::keygen(std::path::Path::new(name)) {
        Ok((public, secret)) => {
            println!(
                "wrote {} (public key: producers use --zmq-export tcp://HOST:PORT?curve={}) and \
                 {} (secret key, owner only: the collector uses --collect \
                 zmq+tcp://ADDR:PORT?curve={})",
                public.display(),
                public.display(),
                secret.display(),
                secret.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sonde: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `sonde geoip DIR ADDR…` (or addresses one per line on standard input): what the
/// databases in DIR say of each address, one JSON line each, as `--geoip-dir DIR` gives it
/// to hosts and flows.
pub(crate) fn geoip_command(args: &[String]) -> ExitCode {
    let usage = "use 'sonde geoip DIR ADDRESS…' (or addresses on standard input, one per line)";
    let Some((dir, addrs)) = args.split_first() else {
        eprintln!("sonde: error: geoip: {usage}");
        return ExitCode::from(2);
    };
    let db = match sonde_geo::GeoDb::open_dir(std::path::Path::new(dir)) {
        Ok(db) => db,
        Err(e) => {
            eprintln!("sonde: error: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("sonde: {}", db.describe());
    let from_stdin: Vec<String> = if addrs.is_empty() {
        std::io::stdin().lines().map_while(Result::ok).collect()
    } else {
        Vec::new()
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut bad = 0;
    for a in addrs.iter().chain(&from_stdin) {
        let a = a.trim();
        if a.is_empty() {
            continue;
        }
        let Ok(ip) = a.parse::<std::net::IpAddr>() else {
            eprintln!("sonde: error: geoip: {a:?} is not an IP address");
            bad += 1;
            continue;
        };
        let g = db.lookup(ip);
        let mut line = serde_json::json!({
            "ip": ip.to_string(),
            "country": g.country.map(|c| c.to_string()),
            "asn": (g.asn != 0).then_some(g.asn),
            "as_name": db.as_name(g.asn, ip),
        });
        if db.has_cities() {
            line["city"] = serde_json::json!(db.city(ip));
        }
        if writeln!(out, "{line}").is_err() {
            return ExitCode::FAILURE;
        }
    }
    if out.flush().is_err() || bad > 0 {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

pub(crate) fn schema_command(args: &[String]) -> ExitCode {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let usage = "use 'sonde schema' (Markdown), 'sonde schema --json', 'sonde schema \
                 --clickhouse [DB] [--kafka BROKER:PORT/TOPIC]' or 'sonde schema --cassandra \
                 [KEYSPACE]'";
    match a.as_slice() {
        [] => print!("{}", sonde_export::schema::markdown()),
        ["--json"] => println!("{:#}", sonde_export::schema::json()),
        ["--cassandra", rest @ ..] if rest.len() <= 1 => {
            let ks = rest.first().copied().unwrap_or("sonde");
            // The keyspace name checked as the URL's is.
            if let Err(e) = sonde_probe::CassandraTarget::parse(&format!("cassandra://h:9042/{ks}"))
            {
                eprintln!("sonde: error: schema --cassandra {ks}: {e}");
                return ExitCode::from(2);
            }
            // The statements `--export cassandra://…/KEYSPACE` runs (replication factor 1).
            for st in sonde_probe::cassandra_keyspace_statements(ks, 1)
                .into_iter()
                .chain(sonde_probe::cassandra_statements(ks))
            {
                println!("{st};");
            }
        }
        ["--clickhouse", rest @ ..] => {
            let (db, rest) = match rest {
                [db, rest @ ..] if !db.starts_with("--") => (*db, rest),
                _ => ("sonde", rest),
            };
            let mut statements = sonde_probe::clickhouse_statements(db);
            match rest {
                [] => {}
                ["--kafka", source] => {
                    let Some((brokers, topic)) = source.split_once('/') else {
                        eprintln!("sonde: error: --kafka {source}: give BROKER:PORT[,…]/TOPIC");
                        return ExitCode::from(2);
                    };
                    statements.extend(sonde_probe::clickhouse_kafka_statements(
                        db,
                        brokers,
                        topic,
                        &format!("sonde-clickhouse-{db}"),
                    ));
                }
                _ => {
                    eprintln!("sonde: error: schema {}: {usage}", a.join(" "));
                    return ExitCode::from(2);
                }
            }
            // The statements `--export clickhouse://…/DB` runs, for a DBA to read or apply.
            for st in statements {
                println!("{st};");
            }
        }
        _ => {
            eprintln!("sonde: error: schema {}: {usage}", a.join(" "));
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

/// `sonde sinks`: every kind of flow sink, how to ask for it and what its queue does when full.
pub(crate) fn print_sinks() {
    println!("{:<11} {:<12} {:<9} how", "sink", "when full", "options");
    for k in sonde_probe::sinks::SINKS {
        println!(
            "{:<11} {:<12} {:<9} {}\n{:<34} {}",
            k.name,
            k.when_full.name(),
            if k.options { "yes" } else { "no" },
            k.usage,
            "",
            k.what
        );
    }
    println!(
        "\nQueue options go after the URL: ?when_full=block|drop_newest&queue=BATCHES (default {}\n\
         when it drops, {} when it blocks).\n\
         'when full' is the default on live inputs (-i, --collect); on a file or synthetic input\n\
         every sink blocks unless its URL says otherwise.",
        sonde_probe::sinks::DEFAULT_QUEUE_BATCHES,
        sonde_probe::sinks::BLOCKING_QUEUE_BATCHES
    );
}

/// `sonde --threshold help`: the keys, their meaning and defaults.
pub(crate) fn print_threshold_keys() {
    println!("--threshold [NETWORK:]KEY=VALUE (VALUE: a number with k/M/G, or off)\n");
    for k in sonde_analytics::config::KEYS.iter() {
        let d = k.default.map_or("off".to_string(), |v| v.to_string());
        println!("  {:<20} default {:<8} {}", k.name, d, k.what);
    }
}

/// `sonde config example` prints a commented file; `sonde config check FILE [FLAGS…]` reads
/// it (with any flags, as a run would) and checks every setting without starting anything.
pub(crate) fn config_command(args: Vec<std::ffi::OsString>) -> Result<()> {
    const USAGE: &str = "usage: sonde config example | sonde config check FILE [FLAGS…]";
    match args.first().and_then(|a| a.to_str()) {
        Some("example") if args.len() == 1 => {
            print!("{}", config_file::EXAMPLE);
            Ok(())
        }
        Some("check") if args.len() >= 2 => {
            let mut argv: Vec<std::ffi::OsString> = vec!["sonde".into(), "--config".into()];
            argv.extend(args[1..].iter().cloned());
            let flags = parse_flags(argv).map_err(|e| anyhow::anyhow!(clap_error_line(&e)))?;
            let cli = with_config_file(flags)?;
            let p = prepare(&cli)?;
            let sinks = p.cfg.extra_sinks.len()
                + usize::from(p.cfg.flows_out.is_some())
                + usize::from(p.cfg.hosts_out.is_some());
            println!(
                "{}: ok (input {}, {} shard(s), {} flow/host sink(s){}{})",
                args[1].to_string_lossy(),
                p.source_name,
                p.cfg.threads * p.cfg.inputs.len(),
                sinks,
                cli.http
                    .map(|a| format!(", web console on {a}"))
                    .unwrap_or_default(),
                cli.data_dir
                    .as_ref()
                    .map(|d| format!(", history in {}", d.display()))
                    .unwrap_or_default(),
            );
            Ok(())
        }
        _ => bail!("{USAGE}"),
    }
}

/// The generator: P synthetic packets into a classic pcap, 1 µs apart, for peers to read.
pub(crate) fn write_synthetic(
    spec: &SyntheticSpec,
    path: &std::path::Path,
    quiet: bool,
) -> Result<ExitCode> {
    let Some(total) = spec.packets else {
        bail!("-w needs a packet count: add packets=P to --synthetic");
    };
    let mut w = PcapWriter::create(path, sonde_wire::LinkType::Ethernet)
        .with_context(|| format!("cannot create '{}'", path.display()))?;
    let mut src = SyntheticSource::new(spec.clone(), 0, 1);
    let start_ns: u64 = 1_700_000_000_000_000_000;
    let mut frame = Vec::new();
    let mut i: u64 = 0;
    while let Some(f) = src.next(start_ns + i * 1000) {
        frame.clear();
        frame.extend_from_slice(f.data);
        fix_ipv4_checksum(&mut frame);
        w.write(f.ts_ns, f.wire_len, &frame)
            .with_context(|| format!("cannot write '{}'", path.display()))?;
        i += 1;
    }
    w.finish()
        .with_context(|| format!("cannot write '{}'", path.display()))?;
    if !quiet {
        eprintln!(
            "sonde: wrote {} packets to {}",
            format_count(total),
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
