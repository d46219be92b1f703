//! Routing overhead per hop at a given number of concurrent sessions, under
//! an open-loop load well below saturation, with the server's own latencies
//! probed alongside on the same server.

use std::time::{Duration, Instant};

use crate::baseline::{Baseline, Probe};
use crate::ctx::Ctx;
use crate::hist::Latency;
use crate::load::{self, Driven};
use crate::model::{HopSample, Schedule, session_id};
use crate::timeline::{Event, Tap};

/// How long the set-up sessions are watched doing nothing.
const IDLE: Duration = Duration::from_secs(3);
/// How often the probe measures the server while a level runs.
const PROBE_EVERY: Duration = Duration::from_millis(10);

/// The model delay of `--model-delay-ms` while a level runs; the other
/// parts run with a zero-latency model.
struct ModelDelay<'a>(&'a Ctx, f64);

impl<'a> ModelDelay<'a> {
    fn set(ctx: &'a Ctx) -> Self {
        let ms = ctx.opts.model_delay_ms.max(0.0);
        ctx.recorder
            .set_model_delay(Duration::from_secs_f64(ms / 1000.0));
        Self(ctx, ms)
    }
}

impl Drop for ModelDelay<'_> {
    fn drop(&mut self) {
        self.0.recorder.set_model_delay(Duration::ZERO);
    }
}

pub struct Level {
    pub sessions: u32,
    /// How long each model reply was held (`--model-delay-ms`).
    pub model_delay_ms: f64,
    /// Human messages offered per second, all sessions together.
    pub rate: f64,
    pub hops: [Latency; 3],
    pub probe: Baseline,
    pub driven: Driven,
    pub coalesced: u64,
    pub cpu: Vec<(String, f64)>,
    /// CPU with every session set up and idle, before the load starts.
    pub idle_cpu: Vec<(String, f64)>,
    /// Orchestrator start while the level's sessions were being set up.
    pub setup_start: Latency,
    pub setup_secs: f64,
    /// Sessions set up per concurrent session (each takes `ticks_per_session` ticks).
    pub generations: u64,
    /// For the anatomy: each hop of each measured tick, and what NATS carried.
    pub samples: Vec<HopSample>,
    pub events: Vec<Event>,
}

/// Runs one level: `sessions` sessions, each with its Orchestrator, sending
/// `rate` human messages per second in total for the warm-up and the
/// measured duration.
pub async fn run(
    ctx: &Ctx,
    sessions: u32,
    rate: f64,
    measure: Duration,
    tap: bool,
) -> anyhow::Result<Level> {
    let period = Duration::from_secs_f64(f64::from(sessions) / rate);
    let delayed = ModelDelay::set(ctx);
    let warmup = Duration::from_secs(ctx.opts.warmup);
    let plan = |t0: Instant| Schedule {
        t0,
        sessions,
        period,
        ticks_per_session: ctx.opts.ticks_per_session,
        record_from: t0 + warmup,
        record_until: t0 + warmup + measure,
    };
    let generations = plan(Instant::now()).generations();
    let total = u64::from(sessions) * generations;
    let slots = usize::try_from(total).unwrap_or(usize::MAX) + 16;
    let name = if tap {
        "anatomy".to_owned()
    } else {
        format!("level-{sessions}")
    };
    let mut system = ctx.system(&name, ctx.opts.workers, slots).await?;
    let tap = if tap {
        ctx.recorder.keep_samples();
        Some(Tap::start(system.nats.url()).await?)
    } else {
        None
    };
    let prefix = format!("l{sessions}");
    tracing::info!(sessions, generations, "setting up the sessions");
    let began = Instant::now();
    let openings = (0..generations)
        .flat_map(|g| {
            let prefix = &prefix;
            (0..sessions).map(move |i| {
                let id = session_id(prefix, g, i);
                (id.clone(), format!("start {id}"))
            })
        })
        .collect();
    // The anatomy starts its sessions one at a time, so their starts do not overlap.
    let setup_rate = if tap.is_some() {
        5.0
    } else {
        ctx.opts.setup_rate
    };
    load::start_these(&mut system, &ctx.recorder, openings, setup_rate).await?;
    let setup_secs = began.elapsed().as_secs_f64();
    let setup = ctx.recorder.take()?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // What the sessions cost while nobody speaks: heartbeats, consumers, timers.
    let idle_before = system.cpu();
    tokio::time::sleep(IDLE).await;
    let idle_cpu = system.cpu().since(&idle_before);

    let t0 = Instant::now() + Duration::from_millis(100);
    let schedule = plan(t0);
    ctx.recorder.set_schedule(schedule);
    let probe = Probe::new(system.nats.url()).await?;
    tracing::info!(sessions, rate, "offering load");
    let driver = load::drive(schedule, prefix, system.nats.url().to_owned());
    tokio::time::sleep_until(schedule.record_from.into()).await;
    let cpu_before = system.cpu();
    let probed = probe.under_load(PROBE_EVERY, schedule.record_until).await?;
    let cpu = system.cpu().since(&cpu_before);
    let driven = tokio::task::spawn_blocking(move || driver.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the tick driver panicked"))??;
    load::settle(
        &ctx.recorder,
        Duration::from_millis(500),
        Duration::from_secs(20),
    )
    .await;
    system.check()?;
    let measured = ctx.recorder.take()?;
    let events = match tap {
        Some(tap) => tap.stop(),
        None => Vec::new(),
    };
    system.stop().await;
    Ok(Level {
        sessions,
        model_delay_ms: delayed.1,
        rate,
        hops: measured.hops,
        probe: probed,
        driven,
        coalesced: measured.coalesced,
        cpu,
        idle_cpu,
        setup_start: setup.start_from_reply,
        setup_secs,
        generations,
        samples: [setup.samples, measured.samples].concat(),
        events,
    })
}
