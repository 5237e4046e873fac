//! The analytics thread: shards hand over their per-second and per-interval reports
//! ([`sonde_analytics::Report`]); one [`Merger`] adds them up, checks the thresholds, and
//! hands detections to the alert hub (`crate::alerts`: `--alerts-out`, the alert store,
//! notifications) and, with a data directory, writes intervals and detections to the history
//! (`sonde_history::analytics`).

use crossbeam_channel::{Receiver, Sender};
use serde_json::Value;
use sonde_analytics::merge::{AppNamer, Live, Merger, Output};
use sonde_analytics::{AnalyticsConfig, FilterCounts, FilterSets, Report, WatchList};
use sonde_history::analytics::{self as store, Kind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Analytics of a run: what to compute, and where detections and intervals go.
#[derive(Clone, Debug)]
pub struct AnalyticsSettings {
    pub config: AnalyticsConfig,
    /// The data directory and its retention in seconds (0: none), for the history.
    pub history: Option<(PathBuf, u64)>,
}

/// What a shard sends.
pub(crate) struct AnalyticsMsg {
    pub shard: usize,
    pub reports: Vec<Report>,
    /// The shard is done: nothing more will come from it.
    pub last: bool,
    /// With trigger capture: told once these reports are merged (the captures they engage or
    /// release are in the registry); for a `last` message, once every shard's is, so that a
    /// shard sees the detections that end the run before it lets go of its ring.
    pub ack: Option<Sender<()>>,
}

/// Read access for the API while the probe runs.
#[derive(Clone)]
pub struct AnalyticsView {
    pub live: Arc<Mutex<Live>>,
    pub config: Arc<AnalyticsConfig>,
}

impl AnalyticsView {
    pub fn filter_sets(&self) -> Option<&FilterSets> {
        self.config.filter_sets.as_deref()
    }
}

/// What the analytics thread did, for the summary.
#[derive(Clone, Debug, Default)]
pub struct AnalyticsReport {
    pub detections: std::collections::BTreeMap<String, u64>,
    pub intervals: u64,
    pub seconds: u64,
    pub late_reports: u64,
}

/// Names an application the way flow records do (`TLS.Google`, `Unknown`).
pub fn app_namer() -> AppNamer {
    Arc::new(|(proto, app): (u16, u16)| {
        sonde_dpi::L7 {
            proto: sonde_dpi::Proto(proto),
            app: sonde_dpi::Proto(app),
            ..sonde_dpi::L7::default()
        }
        .name()
    })
}

struct History {
    w: store::Writer,
    error: Arc<Mutex<Option<String>>>,
}

impl History {
    fn fail(&self, e: std::io::Error) {
        let mut s = self.error.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_none() {
            *s = Some(format!("analytics history: {e}"));
        }
    }
}

impl Output for History {
    fn detection(&mut self, record: &Value) {
        let at = if record["event"] == "end" {
            record["last_seen"].as_u64()
        } else {
            record["first_seen"].as_u64()
        }
        .unwrap_or(0);
        if let Err(e) = self.w.append(Kind::Detections, at, record) {
            self.fail(e);
        }
    }

    fn interval(&mut self, summary: &Value) {
        let start = summary["start"].as_u64().unwrap_or(0);
        let r = self
            .w
            .append(Kind::Intervals, start, summary)
            .and_then(|_| self.w.sync(start));
        if let Err(e) = r {
            self.fail(e);
        }
    }

    fn second(&mut self, _second: u64, _filters: &FilterCounts) {}
}

type Thread = JoinHandle<Result<AnalyticsReport, String>>;

/// Opens the outputs (a bad path is reported before anything runs) and starts the thread.
pub(crate) fn start(
    settings: &AnalyticsSettings,
    config: Arc<AnalyticsConfig>,
    watch: Arc<WatchList>,
    alerts: Option<Arc<crate::alerts::AlertHub>>,
) -> Result<(Sender<AnalyticsMsg>, Thread, AnalyticsView), String> {
    let mut outputs: Vec<Box<dyn Output>> = Vec::new();
    // Detections become alerts (the hub writes --alerts-out and the alert store, and engages
    // trigger capture).
    if let Some(hub) = alerts {
        outputs.push(Box::new(crate::alerts::DetectionFeed { hub }));
    }
    let history_error = Arc::new(Mutex::new(None));
    if let Some((dir, max_age)) = &settings.history {
        let w = store::Writer::open(dir, *max_age)
            .map_err(|e| format!("--data-dir {}: analytics history: {e}", dir.display()))?;
        outputs.push(Box::new(History {
            w,
            error: history_error.clone(),
        }));
    }
    let merger = Merger::new(config.clone(), app_namer(), watch, outputs);
    let view = AnalyticsView {
        live: merger.live.clone(),
        config,
    };
    let (tx, rx) = crossbeam_channel::bounded::<AnalyticsMsg>(1024);
    let shards = view.config.shards.max(1);
    let h = std::thread::Builder::new()
        .name("analytics".into())
        .spawn(move || run(merger, rx, shards, history_error))
        .map_err(|e| format!("cannot start the analytics thread: {e}"))?;
    Ok((tx, h, view))
}

fn run(
    mut m: Merger,
    rx: Receiver<AnalyticsMsg>,
    shards: usize,
    history_error: Arc<Mutex<Option<String>>>,
) -> Result<AnalyticsReport, String> {
    let mut done = vec![false; shards];
    let mut last_acks: Vec<Sender<()>> = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(msg) => {
                m.add(msg.shard, msg.reports);
                if msg.last {
                    m.shard_done(msg.shard);
                    if let Some(d) = done.get_mut(msg.shard) {
                        *d = true;
                    }
                }
                match (msg.ack, msg.last) {
                    (Some(ack), false) => {
                        let _ = ack.send(());
                    }
                    (Some(ack), true) => last_acks.push(ack),
                    (None, _) => {}
                }
                if done.iter().all(|&d| d) {
                    // Every shard is done: the run's last detections are out.
                    for ack in last_acks.drain(..) {
                        let _ = ack.send(());
                    }
                }
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        }
    }
    m.finish();
    let live = m.live.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = history_error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
    {
        return Err(e);
    }
    Ok(AnalyticsReport {
        detections: live.detections_total.clone(),
        intervals: live.intervals_merged,
        seconds: live.seconds_merged,
        late_reports: live.late_reports,
    })
}
