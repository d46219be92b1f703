//! Routed messages per second per coordinator at saturation: many sessions
//! whose Arbiter and Orchestrator answer each other at once (closed loop),
//! each answer routed by the coordinator, for a fixed time.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use std::sync::Arc;

use anyhow::bail;

use crate::ctx::Ctx;
use crate::load;
use crate::model::Recorder;
use crate::system::send_human;

pub struct Saturation {
    pub sessions: u32,
    pub seconds: f64,
    /// Messages routed per second: each model request is the delivery of
    /// one (an Arbiter output or a summons to an Orchestrator, an
    /// Orchestrator output or a human message to the Arbiter).
    pub routed_per_sec: f64,
    /// Sessions that ended (and were replaced) per second.
    pub starts_per_sec: f64,
    /// Exchanges per session before it ends.
    pub exchanges: u64,
    /// JetStream messages stored per routed message (records, log, status, …).
    pub writes_per_routed: f64,
    /// New messages per stream in the window.
    pub per_stream: Vec<(String, u64)>,
    /// Messages published per subject pattern (with `--subjects`).
    pub per_subject: Vec<(String, u64)>,
    /// Messages routed in the window.
    pub routed: u64,
    /// Growth of the streams' stored bytes (`STREAM.INFO` state bytes, every
    /// stream and bucket) per routed message, and per session started.
    pub disk_per_routed: f64,
    pub disk_per_session: f64,
    /// The streams' stored bytes at the end of the measurement.
    pub disk_bytes: u64,
    pub cpu: Vec<(String, f64)>,
}

impl Saturation {
    /// CPU time a process spent per routed message.
    pub fn cost(&self, process: &str) -> Option<Duration> {
        let share = self.cpu.iter().find(|(n, _)| n == process)?.1;
        (self.routed_per_sec > 0.0).then(|| Duration::from_secs_f64(share / self.routed_per_sec))
    }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Saturation> {
    let sessions = ctx.opts.saturation_sessions;
    let slots = 2 * usize::try_from(sessions).unwrap_or(usize::MAX) + 16;
    let mut system = ctx.system("saturation", ctx.opts.workers, slots).await?;
    ctx.recorder.looping.store(true, Ordering::SeqCst);
    ctx.recorder
        .exchanges
        .store(ctx.opts.exchanges, Ordering::SeqCst);
    tracing::info!(sessions, "saturation: starting the sessions");
    load::start_sessions(
        &mut system,
        &ctx.recorder,
        "loop",
        "sat",
        0..sessions,
        ctx.opts.setup_rate,
    )
    .await?;
    // Each session that ends is replaced at once by a fresh one.
    let replacer = tokio::spawn(replace_finished(
        system.bus.clone(),
        ctx.recorder.clone(),
        sessions,
    ));
    tokio::time::sleep(Duration::from_secs(ctx.opts.warmup)).await;
    let measure = Duration::from_secs(ctx.opts.saturation_duration);
    tracing::info!(?measure, "saturation: measuring");
    let writes_before = system.js_writes().await?;
    let seqs_before = crate::writes::stream_seqs(&system.bus).await?;
    let counter = if ctx.opts.subjects {
        Some(crate::writes::SubjectCounter::start(&system.bus.client).await?)
    } else {
        None
    };
    let disk_before = disk_bytes(&system.bus).await?;
    let before = (
        ctx.recorder.requests(),
        system.cpu(),
        Instant::now(),
        ctx.recorder.finished.load(Ordering::SeqCst),
    );
    tokio::time::sleep(measure).await;
    let after = (
        ctx.recorder.requests(),
        system.cpu(),
        Instant::now(),
        ctx.recorder.finished.load(Ordering::SeqCst),
    );
    let writes = system.js_writes().await? - writes_before;
    let per_subject = counter
        .map(crate::writes::SubjectCounter::take)
        .unwrap_or_default();
    let per_stream = crate::writes::grown(
        &seqs_before,
        &crate::writes::stream_seqs(&system.bus).await?,
    );
    let disk_after = disk_bytes(&system.bus).await?;
    let disk_grown = disk_after as f64 - disk_before as f64;
    ctx.recorder.looping.store(false, Ordering::SeqCst);
    replacer.abort();
    system.check()?;
    load::settle(
        &ctx.recorder,
        Duration::from_millis(500),
        Duration::from_secs(20),
    )
    .await;
    system.stop().await;
    let seconds = after.2.duration_since(before.2).as_secs_f64();
    if after.0 == before.0 {
        bail!(
            "saturation: no message was routed in {seconds:.0} s: the {sessions} sessions \
             stopped answering each other (held by a guard, or stalled; see the logs \
             with --keep)"
        );
    }
    Ok(Saturation {
        sessions,
        seconds,
        routed_per_sec: (after.0 - before.0) as f64 / seconds,
        routed: after.0 - before.0,
        per_stream,
        per_subject,
        starts_per_sec: (after.3 - before.3) as f64 / seconds,
        writes_per_routed: writes as f64 / (after.0 - before.0).max(1) as f64,
        disk_per_routed: disk_grown / (after.0 - before.0).max(1) as f64,
        // Sessions take longer than the window at this scale: one session's
        // routed messages (the human line, the summons, then an Arbiter and
        // an Orchestrator turn per exchange) times the bytes each stored.
        disk_per_session: disk_grown / (after.0 - before.0).max(1) as f64
            * (2 * ctx.opts.exchanges + 2) as f64,
        disk_bytes: disk_after,
        exchanges: ctx.opts.exchanges,
        cpu: after.1.since(&before.1),
    })
}

/// Bytes every stream and bucket stores now.
async fn disk_bytes(bus: &arbiter_bus::Bus) -> anyhow::Result<u64> {
    Ok(arbiter_bus::retention::stream_bytes(&bus.js)
        .await?
        .iter()
        .map(|(_, bytes, _)| bytes)
        .sum())
}

/// Starts a fresh `loop` session for each one that has ended.
async fn replace_finished(bus: arbiter_bus::Bus, recorder: Arc<Recorder>, first: u32) {
    let mut next = u64::from(first);
    let mut replaced = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    loop {
        tick.tick().await;
        let finished = recorder.finished.load(Ordering::SeqCst);
        while replaced < finished {
            replaced += 1;
            let session = format!("sat-{next}");
            next += 1;
            let bus = bus.clone();
            tokio::spawn(async move {
                let text = format!("loop {session}");
                if let Err(e) = send_human(&bus, &session, &text).await {
                    tracing::warn!(error = %e, "a replacement session could not start");
                }
            });
        }
    }
}
