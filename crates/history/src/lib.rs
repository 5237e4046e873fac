//! History on local disk, in a data directory that needs no server:
//!
//! ```text
//! DATA_DIR/VERSION        "sonde-data 1" (store::prepare_data_dir)
//! DATA_DIR/flows/         flow history: segments and their totals (store, codec, totals, query)
//! DATA_DIR/series/        time series: round-robin ring files per family (series)
//! DATA_DIR/hosts/         host cache: hosts that left memory (hostcache)
//! DATA_DIR/analytics/     top-N and anomaly lists per interval, detections (analytics)
//! ```
//!
//! Every file is sonde's own, versioned and checked: a foreign or damaged one is an error that
//! names it, and what a crash cut off at the end of a file is dropped on the next open.

pub mod analytics;
pub mod codec;
pub mod filter_text;
pub mod hostcache;
pub mod query;
pub mod series;
pub mod store;
pub mod totals;

/// A hash map keyed by what came off the wire (addresses, series keys): foldhash, seeded at
/// random per process so that keys an attacker chose cannot be aimed at one bucket, and
/// several times cheaper than the standard SipHash on such short keys (a million hosts a
/// second go through these maps).
pub type WireMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
