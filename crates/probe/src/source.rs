//! What a shard reads from, and the one loop every shard runs.
//!
//! A shard's input is a [`ShardSource`]: a file it reads itself, a live capture handle, the
//! synthetic generator, or batches another thread prepared (decoded packets from a multi-shard
//! file reader, flow records from the collectors). A source only says how to feed the engine
//! what is ready now; [`run`] does the rest the same way for all of them: housekeeping (stats,
//! expired records to the sinks, snapshot requests), the idle clock, stopping, and the end.
//! A new input is a new source, not a new loop.

use crate::collect::CollectedBatch;
use crate::shard::{
    wall_ns, DecodedBatch, Filters, Pacer, ShardCtx, ShardOutput, HOUSEKEEPING_PACKETS,
};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use sonde_capture::{CaptureDrops, CaptureError, FileSource, LiveSource, SyntheticSource};
use sonde_flow::{PacketRef, Payloads};
use sonde_wire::LinkType;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one [`ShardSource::feed`] call did.
pub(crate) enum Fed {
    /// Gave the engine this much work (packets, or one batch).
    Work(u64),
    /// Nothing is ready now.
    Idle,
    /// The input is over (end of file, channel closed, capture error).
    End,
}

/// One shard's input. Implementations feed the engine in `feed` and may override the hooks
/// the loop calls around it.
pub(crate) trait ShardSource {
    /// Feeds the engine what is ready now (at most a few thousand packets, so housekeeping
    /// keeps its pace).
    fn feed(&mut self, ctx: &mut ShardCtx) -> Fed;

    /// Work between two housekeeping points.
    fn housekeeping_every(&self) -> u64 {
        HOUSEKEEPING_PACKETS
    }

    /// True when housekeeping must also run every 200 ms however little work came (live
    /// inputs: the console refreshes every second).
    fn timed(&self) -> bool {
        false
    }

    /// The engine's clock while the input is idle, so flows time out (None: time moves only
    /// with what is fed).
    fn idle_clock(&self, _ctx: &ShardCtx) -> Option<u64> {
        None
    }

    /// Waits a little for input after [`Fed::Idle`].
    fn wait(&mut self) {}

    /// At each housekeeping point: what the source publishes (progress, capture drops).
    fn report(&mut self, _ctx: &mut ShardCtx) {}

    /// Whether a stop request may end the loop now (false: work is still queued).
    fn may_stop(&self) -> bool {
        true
    }

    /// After the loop: feeds what the source still holds and ends the shard.
    fn end(&mut self, ctx: ShardCtx) -> ShardOutput {
        ctx.finish(CaptureDrops::default())
    }
}

/// The shard loop, the same for every source.
pub(crate) fn run(mut ctx: ShardCtx, mut src: impl ShardSource) -> ShardOutput {
    let every = src.housekeeping_every();
    let timed = src.timed();
    let mut since: u64 = 0;
    let mut last = Instant::now();
    loop {
        let fed = src.feed(&mut ctx);
        ctx.settle_egress();
        match fed {
            Fed::Work(n) => {
                since += n;
                if since >= every || (timed && last.elapsed() > Duration::from_millis(200)) {
                    since = 0;
                    ctx.engine.flush_batch();
                    ctx.housekeeping();
                    src.report(&mut ctx);
                    last = Instant::now();
                    if ctx.stopped() && src.may_stop() {
                        break;
                    }
                }
            }
            Fed::Idle => {
                // Account what we have and let flows time out by the source's clock. Sources
                // that publish with a system call (kernel drop counters) do it at this pace,
                // not at every wake-up (thousands a second under load).
                ctx.engine.flush_batch();
                if let Some(now) = src.idle_clock(&ctx) {
                    ctx.engine.tick_if_due(now);
                }
                if last.elapsed() > Duration::from_millis(50) {
                    ctx.housekeeping();
                    src.report(&mut ctx);
                    last = Instant::now();
                }
                if ctx.stopped() && src.may_stop() {
                    break;
                }
                src.wait();
            }
            Fed::End => break,
        }
    }
    src.end(ctx)
}

/// A captured frame as the engine takes it.
fn packet<'a>(f: &sonde_capture::Frame<'a>) -> PacketRef<'a> {
    PacketRef {
        ts_ns: f.ts_ns,
        wire_len: f.wire_len,
        data: f.data,
    }
}

/// A file one shard reads itself (single-shard runs), with the BPF filter and the
/// `--replay realtime` pacer.
pub(crate) struct FileInput {
    pub src: FileSource,
    pub filters: Filters,
    pub pacer: Option<Pacer>,
    pub progress: Arc<AtomicU64>,
    pub error: Arc<Mutex<Option<CaptureError>>>,
    /// With trigger capture: the packet time at which the shard next waits for the analytics
    /// (once per second of packet time).
    pub next_sync_ns: u64,
    /// The buffers of a batch's frames, kept empty between batches (see [`recycle`]).
    pub frames: Vec<sonde_capture::Frame<'static>>,
    pub refs: Vec<PacketRef<'static>>,
}

impl FileInput {
    /// [`ShardSource::feed`] with trigger capture: every packet also goes to the ring and the
    /// engaged captures, and at each new second of packet time the shard waits until the
    /// analytics merged the last one (a file read fast keeps to its alerts' pace). A loop of
    /// its own, so that without trigger capture the loop below is untouched.
    fn feed_trigger(&mut self, ctx: &mut ShardCtx) -> Fed {
        const SECOND: u64 = 1_000_000_000;
        let mut n = 0;
        if let Some(t) = ctx.trigger.as_mut() {
            t.batch();
        }
        while n < HOUSEKEEPING_PACKETS {
            let (link, f) = match self.src.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) if n > 0 => return Fed::Work(n),
                Ok(None) => return Fed::End,
                Err(e) => {
                    *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                    return Fed::End;
                }
            };
            if !self.filters.accepts(link, f.data, f.wire_len) {
                ctx.engine.count_filtered(f.wire_len);
                continue;
            }
            if let Some(wait) = self.pacer.as_mut().and_then(|p| p.due_in(f.ts_ns)) {
                ctx.engine.flush_batch();
                ctx.housekeeping();
                sleep_unless_stopped(wait, &ctx.stop);
            }
            if let Some(t) = ctx.trigger.as_mut() {
                t.packet(link, f.ts_ns, f.wire_len, f.data);
            }
            let ts = f.ts_ns;
            let in_flow = ctx.engine.push_frame(link, packet(&f));
            if let Some(e) = ctx.egress.as_mut() {
                e.offer(link, f.ts_ns, f.wire_len, f.data, in_flow);
            }
            n += 1;
            if ts >= self.next_sync_ns {
                self.next_sync_ns = (ts / SECOND + 1) * SECOND;
                ctx.sync_trigger(false);
            }
        }
        Fed::Work(n)
    }
}

impl FileInput {
    /// [`ShardSource::feed`] for a mapped file read as fast as possible, without egress: a
    /// batch of frames at a time, decoded and their payloads read where they lie in the file.
    fn feed_batches(&mut self, ctx: &mut ShardCtx) -> Fed {
        let mut n = 0;
        while n < HOUSEKEEPING_PACKETS {
            let mut frames = recycle(std::mem::take(&mut self.frames));
            let link = match self.src.next_batch(256, &mut frames) {
                Ok(Some(link)) => link,
                Ok(None) => return if n > 0 { Fed::Work(n) } else { Fed::End },
                Err(e) => {
                    *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                    return Fed::End;
                }
            };
            let mut refs = recycle(std::mem::take(&mut self.refs));
            for f in &frames {
                if self.filters.accepts(link, f.data, f.wire_len) {
                    refs.push(packet(f));
                } else {
                    ctx.engine.count_filtered(f.wire_len);
                }
            }
            ctx.engine.process_frames(link, &refs);
            n += frames.len() as u64;
            self.refs = recycle(refs);
            self.frames = recycle(frames);
        }
        Fed::Work(n)
    }
}

impl ShardSource for FileInput {
    fn feed(&mut self, ctx: &mut ShardCtx) -> Fed {
        if ctx.trigger.is_some() {
            return self.feed_trigger(ctx);
        }
        if self.src.is_mapped() && self.pacer.is_none() && ctx.egress.is_none() {
            return self.feed_batches(ctx);
        }
        let mut n = 0;
        while n < HOUSEKEEPING_PACKETS {
            let (link, f) = match self.src.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) if n > 0 => return Fed::Work(n),
                Ok(None) => return Fed::End,
                Err(e) => {
                    *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                    return Fed::End;
                }
            };
            if !self.filters.accepts(link, f.data, f.wire_len) {
                ctx.engine.count_filtered(f.wire_len);
                continue;
            }
            if let Some(wait) = self.pacer.as_mut().and_then(|p| p.due_in(f.ts_ns)) {
                // Flush first, so what was seen is visible while we wait.
                let (ts, wl, data) = (f.ts_ns, f.wire_len, f.data.to_vec());
                ctx.engine.flush_batch();
                ctx.housekeeping();
                sleep_unless_stopped(wait, &ctx.stop);
                let p = PacketRef {
                    ts_ns: ts,
                    wire_len: wl,
                    data: &data,
                };
                let in_flow = ctx.engine.push_frame(link, p);
                if let Some(e) = ctx.egress.as_mut() {
                    e.offer(link, ts, wl, &data, in_flow);
                }
                return Fed::Work(n + 1);
            }
            let in_flow = ctx.engine.push_frame(link, packet(&f));
            if let Some(e) = ctx.egress.as_mut() {
                e.offer(link, f.ts_ns, f.wire_len, f.data, in_flow);
            }
            n += 1;
        }
        Fed::Work(n)
    }

    /// A paced file is as slow as live traffic: housekeeping (and a stop request) on time.
    fn timed(&self) -> bool {
        self.pacer.is_some()
    }

    fn report(&mut self, _ctx: &mut ShardCtx) {
        self.progress
            .store(self.src.progress().0, Ordering::Relaxed);
    }

    fn end(&mut self, mut ctx: ShardCtx) -> ShardOutput {
        self.report(&mut ctx);
        ctx.finish(CaptureDrops::default())
    }
}

pub(crate) fn sleep_unless_stopped(total: Duration, stop: &AtomicBool) {
    let deadline = Instant::now() + total;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
}

/// Decoded packets the file reader hands this shard (multi-shard file runs). It ends when the
/// reader is done, stop or not: the reader stops reading, the shard takes what was sent.
pub(crate) struct DecodedInput {
    pub rx: Receiver<DecodedBatch>,
    pub recycle: Sender<DecodedBatch>,
}

impl ShardSource for DecodedInput {
    fn feed(&mut self, ctx: &mut ShardCtx) -> Fed {
        let Ok(mut batch) = self.rx.recv() else {
            return Fed::End;
        };
        let payloads = Payloads {
            bytes: &batch.payload_bytes,
            spans: &batch.spans,
            direct: &[],
            marks: &batch.marks,
            wire_lens: &batch.wire_lens,
        };
        ctx.engine.process_decoded(&batch.pkts, &batch.ts, payloads);
        for &(mask, wire_len) in &batch.unflowed {
            ctx.engine.count_filter_mask(mask, wire_len);
        }
        if batch.clock_ns != 0 {
            ctx.engine.tick_if_due(batch.clock_ns);
        }
        batch.clear();
        let _ = self.recycle.try_send(batch);
        Fed::Work(1)
    }

    /// Every batch.
    fn housekeeping_every(&self) -> u64 {
        1
    }

    fn may_stop(&self) -> bool {
        false
    }
}

/// A capture handle of this shard's own (a fanout member, or one receive queue, when there
/// are several).
pub(crate) struct LiveInput {
    pub src: LiveSource,
    pub link: LinkType,
    /// Where a capture error goes: the run ends with it (the binary prints it).
    pub error: Arc<Mutex<Option<CaptureError>>>,
    /// The capture filter, when the kernel could not apply it (AF_XDP; a `vlan` expression).
    pub filters: Option<Filters>,
    /// The buffers of a batch's frames, kept empty between batches (see [`recycle`]).
    pub frames: Vec<sonde_capture::Frame<'static>>,
    pub refs: Vec<PacketRef<'static>>,
}

impl LiveInput {
    pub fn new(
        src: LiveSource,
        error: Arc<Mutex<Option<CaptureError>>>,
        filters: Option<Filters>,
    ) -> LiveInput {
        LiveInput {
            link: src.link_type(),
            src,
            error,
            filters,
            frames: Vec::new(),
            refs: Vec::new(),
        }
    }
}

/// An empty vector of another element type in the same allocation: a batch's frames borrow
/// the capture ring only while the batch is processed, but the vector that holds them is
/// kept, so a block of thousands of frames costs no allocation (and no page faults) of its
/// own. (Collecting an emptied vector into one of an element of the same size and alignment
/// reuses its allocation.)
fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().map(|_| unreachable!("emptied")).collect()
}

impl ShardSource for LiveInput {
    fn feed(&mut self, ctx: &mut ShardCtx) -> Fed {
        // A ring block or AF_XDP batch at once, its payloads read in place, when nothing needs
        // the frames one by one (a filter in sonde, trigger capture, egress).
        if self.src.has_batches()
            && self.filters.is_none()
            && ctx.trigger.is_none()
            && ctx.egress.is_none()
        {
            let mut frames = recycle(std::mem::take(&mut self.frames));
            let fed = match self.src.next_batch(&mut frames) {
                Some(true) => {
                    let mut refs = recycle(std::mem::take(&mut self.refs));
                    refs.extend(frames.iter().map(packet));
                    ctx.engine.process_frames(self.link, &refs);
                    let n = refs.len().max(1) as u64;
                    self.refs = recycle(refs);
                    Fed::Work(n)
                }
                _ => Fed::Idle,
            };
            self.frames = recycle(frames);
            return fed;
        }
        let mut n = 0;
        if let Some(t) = ctx.trigger.as_mut() {
            t.batch();
        }
        while n < 64 {
            match self.src.next_frame() {
                Ok(Some(f)) => {
                    n += 1;
                    if let Some(fl) = self.filters.as_mut() {
                        if !fl.accepts(self.link, f.data, f.wire_len) {
                            ctx.engine.count_filtered(f.wire_len);
                            continue;
                        }
                    }
                    if let Some(t) = ctx.trigger.as_mut() {
                        t.packet(self.link, f.ts_ns, f.wire_len, f.data);
                    }
                    let in_flow = ctx.engine.push_frame(self.link, packet(&f));
                    if let Some(e) = ctx.egress.as_mut() {
                        e.offer(self.link, f.ts_ns, f.wire_len, f.data, in_flow);
                    }
                }
                // Idle link (or a burst drained).
                Ok(None) if n == 0 => return Fed::Idle,
                Ok(None) => break,
                Err(e) => {
                    let mut slot = self.error.lock().unwrap_or_else(|e| e.into_inner());
                    slot.get_or_insert(e);
                    return Fed::End;
                }
            }
        }
        Fed::Work(n)
    }

    fn timed(&self) -> bool {
        true
    }

    fn idle_clock(&self, _ctx: &ShardCtx) -> Option<u64> {
        Some(wall_ns())
    }

    fn wait(&mut self) {
        self.src.wait();
    }

    fn report(&mut self, ctx: &mut ShardCtx) {
        let drops = self.src.drops();
        ctx.engine.set_capture_dropped(drops.dropped);
        *ctx.shared.capture.lock().unwrap_or_else(|e| e.into_inner()) = drops;
    }

    fn end(&mut self, mut ctx: ShardCtx) -> ShardOutput {
        // What arrived before the stop but sits in a block the kernel has not handed over yet.
        let link = self.link;
        let (engine, trigger, egress) = (&mut ctx.engine, &mut ctx.trigger, &mut ctx.egress);
        let filters = &mut self.filters;
        self.src.drain(|f| {
            if let Some(fl) = filters.as_mut() {
                if !fl.accepts(link, f.data, f.wire_len) {
                    engine.count_filtered(f.wire_len);
                    return;
                }
            }
            if let Some(t) = trigger.as_mut() {
                t.packet(link, f.ts_ns, f.wire_len, f.data);
            }
            let in_flow = engine.push_frame(link, packet(&f));
            if let Some(e) = egress.as_mut() {
                e.offer(link, f.ts_ns, f.wire_len, f.data, in_flow);
            }
        });
        let drops = self.src.drops();
        ctx.engine.set_capture_dropped(drops.dropped);
        ctx.finish(drops)
    }
}

/// Synthetic traffic this shard generates itself (Cento's dummy interface).
pub(crate) struct SyntheticInput {
    pub src: SyntheticSource,
}

impl ShardSource for SyntheticInput {
    fn feed(&mut self, ctx: &mut ShardCtx) -> Fed {
        // One clock reading per 256 packets, like a NIC batch timestamp; the batch's frames
        // stay valid together, so the engine reads their payloads in place.
        let mut frames = Vec::with_capacity(256);
        self.src.next_batch(wall_ns(), 256, &mut frames);
        if frames.is_empty() {
            return Fed::End;
        }
        let refs: Vec<PacketRef> = frames.iter().map(packet).collect();
        ctx.engine.process_frames(LinkType::Ethernet, &refs);
        Fed::Work(refs.len() as u64)
    }

    fn housekeeping_every(&self) -> u64 {
        HOUSEKEEPING_PACKETS * 16
    }
}

/// Flow records and sFlow samples the collectors hand this shard; it stops once nothing is
/// queued. The shard's clock is the records' own time (like packet time for captures), moved
/// on by the wall clock while no record arrives: live exporters keep it near the wall clock,
/// and replayed old records expire by their own times rather than all at once.
pub(crate) struct CollectedInput {
    pub rx: Receiver<CollectedBatch>,
    pub recycle: Sender<CollectedBatch>,
    /// The engine's clock at the last batch and when that was (none before the first record:
    /// the wall clock would run ahead of replayed records).
    pub base: Option<(u64, Instant)>,
    /// Where this shard says how many records it is done with, and its index there.
    settlement: Arc<crate::collect::Settlement>,
    shard: usize,
    /// Records of the batches fed so far.
    fed: u64,
}

impl CollectedInput {
    pub fn new(
        rx: Receiver<CollectedBatch>,
        recycle: Sender<CollectedBatch>,
        settlement: Arc<crate::collect::Settlement>,
        shard: usize,
    ) -> CollectedInput {
        CollectedInput {
            rx,
            recycle,
            base: None,
            settlement,
            shard,
            fed: 0,
        }
    }

    fn clock(&self) -> Option<u64> {
        self.base
            .map(|(ns, at)| ns.saturating_add(at.elapsed().as_nanos() as u64))
    }
}

impl ShardSource for CollectedInput {
    fn feed(&mut self, ctx: &mut ShardCtx) -> Fed {
        // The loop ran housekeeping after the last batch (every batch): its ended flows are
        // with the sinks.
        self.settlement.handled[self.shard].store(self.fed, Ordering::Release);
        match self.rx.recv_timeout(Duration::from_millis(200)) {
            Ok(mut b) => {
                self.fed += (b.flows.len() + b.samples.len()) as u64;
                let now = self.clock().unwrap_or_else(wall_ns);
                ctx.engine.ingest_flows(&b.flows, now);
                for s in &b.samples {
                    ctx.engine.ingest_sample(s, now);
                }
                self.base = Some((ctx.engine.now_ns(), Instant::now()));
                b.flows.clear();
                b.samples.clear();
                let _ = self.recycle.try_send(b);
                if let Some(now) = self.clock() {
                    ctx.engine.tick_if_due(now);
                }
                Fed::Work(1)
            }
            Err(RecvTimeoutError::Timeout) => Fed::Idle,
            Err(RecvTimeoutError::Disconnected) => Fed::End,
        }
    }

    /// Every batch.
    fn housekeeping_every(&self) -> u64 {
        1
    }

    fn idle_clock(&self, _ctx: &ShardCtx) -> Option<u64> {
        self.clock()
    }

    fn may_stop(&self) -> bool {
        self.rx.is_empty()
    }
}
