//! Routing overhead per hop at a given number of concurrent sessions, under
//! an open-loop load well below saturation, with the server's own latencies
//! probed alongside on the same server.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use arbiter_protocol::subjects;
use futures::StreamExt as _;

use crate::baseline::{Baseline, Probe};
use crate::ctx::Ctx;
use crate::hist::Latency;
use crate::load::{self, Driven};
use crate::memory::{self, Readings};
use crate::model::{CREW, HopSample, Schedule, session_id};
use crate::system::System;
use crate::timeline::{Event, Tap};

/// How long the set-up sessions are watched doing nothing.
const IDLE: Duration = Duration::from_secs(5);
/// How long a takeover may take before the level gives up waiting (and
/// reports how many sessions had moved by then).
const TAKEOVER_LIMIT: Duration = Duration::from_secs(180);
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
    /// Of them, the sessions the load is spread over; the others stay idle.
    pub active: u32,
    /// Seconds measured (`cpu` is over this window).
    pub measure_secs: f64,
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
    /// Team sessions beside the sessions, each of [`CREW`] Orchestrators.
    pub crews: u32,
    /// Resident memory with the system ready and empty, then with every
    /// session set up and idle.
    pub memory: [Readings; 2],
    /// Orchestrators the workers held, and of them parked, as the idle
    /// CPU was read.
    pub orchestrators: u64,
    pub parked: u64,
    /// The coordinator killed and a new one started in its place.
    pub takeover: Option<Takeover>,
}

impl Level {
    /// Every session of the level: those sending ticks (each slot's
    /// generations) and the team sessions.
    pub fn all_sessions(&self) -> u64 {
        u64::from(self.active) * self.generations
            + u64::from(self.sessions - self.active)
            + u64::from(self.crews)
    }

    /// Every Orchestrator summoned: one per session, [`CREW`] per team session.
    pub fn all_orchestrators(&self) -> u64 {
        self.all_sessions() + u64::from(self.crews) * u64::from(CREW - 1)
    }
}

/// A new coordinator taking over a dead one's sessions.
pub struct Takeover {
    /// Sessions the dead coordinator owned.
    pub sessions: u64,
    /// Of them, owned by the new one when the wait ended.
    pub taken: u64,
    /// The kill → the new coordinator owning its first, and its last, session.
    pub first: Option<Duration>,
    pub all: Option<Duration>,
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
    // The load goes to the first `active` sessions; the others stay idle.
    let active = sessions.min(ctx.opts.level_active.max(1));
    let period = Duration::from_secs_f64(f64::from(active) / rate);
    let delayed = ModelDelay::set(ctx);
    let warmup = Duration::from_secs(ctx.opts.warmup);
    let plan = |t0: Instant| Schedule {
        t0,
        sessions: active,
        period,
        ticks_per_session: ctx.opts.ticks_per_session,
        record_from: t0 + warmup,
        record_until: t0 + warmup + measure,
    };
    let generations = plan(Instant::now()).generations();
    let total = u64::from(active) * generations + u64::from(sessions - active);
    let slots = usize::try_from(total).unwrap_or(usize::MAX) + 16;
    let name = if tap {
        "anatomy".to_owned()
    } else {
        format!("level-{sessions}")
    };
    let park_after = Duration::from_secs(ctx.opts.level_park_after);
    let mut system = ctx
        .system_parking(&name, ctx.opts.workers, slots, Some(park_after))
        .await?;
    let empty = memory::read(&system).await?;
    let tap_on = tap;
    let tap = if tap {
        ctx.recorder.keep_samples();
        Some(Tap::start(system.nats.url()).await?)
    } else {
        None
    };
    let prefix = format!("l{sessions}");
    let crews = match ctx.opts.level_team_every {
        0 => 0,
        every => sessions / every,
    };
    tracing::info!(sessions, generations, crews, "setting up the sessions");
    let began = Instant::now();
    let mut openings: Vec<(String, String)> = (0..generations)
        .flat_map(|g| {
            let prefix = &prefix;
            (0..active).map(move |i| {
                let id = session_id(prefix, g, i);
                (id.clone(), format!("start {id}"))
            })
        })
        .chain((active..sessions).map(|i| {
            let id = format!("{prefix}-idle-{i}");
            (id.clone(), format!("start {id}"))
        }))
        .collect();
    // The teams among the sessions, spread through the set-up.
    let step = openings.len() / (crews as usize).max(1);
    for j in (0..crews).rev() {
        let id = format!("{prefix}-crew-{j}");
        openings.insert(step * j as usize, (id.clone(), format!("crew {id}")));
    }
    // The anatomy starts its sessions one at a time, so their starts do not overlap.
    let setup_rate = if tap.is_some() {
        5.0
    } else {
        ctx.opts.setup_rate
    };
    load::start_these(&mut system, &ctx.recorder, openings, setup_rate).await?;
    let setup_secs = began.elapsed().as_secs_f64();
    let setup = ctx.recorder.take()?;
    // Every Orchestrator parks once it has waited `park_after`.
    tokio::time::sleep(park_after + Duration::from_secs(1)).await;
    let idle_memory = memory::read(&system).await?;
    let (orchestrators, parked) = presence(&system).await?;
    // What the sessions cost while nobody speaks: heartbeats, leases, timers.
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
    let takeover = if tap_on {
        None
    } else {
        Some(takeover(&mut system, &format!("c-takeover-{sessions}")).await?)
    };
    system.check()?;
    system.stop().await;
    Ok(Level {
        sessions,
        active,
        measure_secs: measure.as_secs_f64(),
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
        crews,
        memory: [empty, idle_memory],
        orchestrators,
        parked,
        takeover,
    })
}

/// Orchestrators the workers hold, and how many of them are parked (from
/// each worker's presence endpoint).
async fn presence(system: &System) -> anyhow::Result<(u64, u64)> {
    let (mut held, mut parked) = (0, 0);
    for i in 0..system.workers.len() {
        let subject = subjects::worker_presence(&format!("bench-worker-{i}"));
        let reply = tokio::time::timeout(
            Duration::from_secs(10),
            system.bus.client.request(subject, bytes::Bytes::new()),
        )
        .await
        .context("a worker's presence did not answer within 10 s")??;
        let presence: arbiter_worker::WorkerPresence = serde_json::from_slice(&reply.payload)
            .context("a worker's presence answered something else")?;
        held += (presence.orchestrators.len() + presence.parked.len()) as u64;
        parked += presence.parked.len() as u64;
    }
    Ok((held, parked))
}

/// Kills the coordinator (SIGKILL) and starts a new one, `id`, in its
/// place; times it taking over every session the dead one owned, from the
/// kill, as the lease bucket shows it (a session is taken when its key
/// names the new owner; the session's actor starts right after).
async fn takeover(system: &mut System, id: &str) -> anyhow::Result<Takeover> {
    let kv = system
        .bus
        .js
        .get_key_value(subjects::COORDINATOR_LEASES_BUCKET)
        .await
        .context("opening the lease bucket")?;
    let mut watch = kv.watch_with_history("session.>").await?;
    // The bucket as it is: every session and its owner.
    let mut owners: HashMap<String, Vec<u8>> = HashMap::new();
    if let Ok(Some(Ok(entry))) = tokio::time::timeout(Duration::from_secs(5), watch.next()).await {
        let mut pending = entry.delta;
        owners.insert(entry.key, entry.value.to_vec());
        while pending > 0 {
            let entry = tokio::time::timeout(Duration::from_secs(10), watch.next())
                .await
                .context("reading the lease bucket")?
                .context("the lease bucket's watch ended")??;
            pending = entry.delta;
            owners.insert(entry.key, entry.value.to_vec());
        }
    }
    let sessions = owners.values().filter(|v| !v.is_empty()).count() as u64;
    tracing::info!(sessions, "takeover: killing the coordinator");
    let killed = system.replace_coordinator(id).await?;
    let (mut first, mut all) = (None, None);
    let mut taken = 0u64;
    let deadline = killed + TAKEOVER_LIMIT;
    while taken < sessions {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(next) = tokio::time::timeout(left, watch.next()).await else {
            break;
        };
        let entry = next.context("the lease bucket's watch ended")??;
        let was_taken = owners.get(&entry.key).is_some_and(|v| v == id.as_bytes());
        let is_taken = entry.value.as_ref() == id.as_bytes();
        if is_taken && !was_taken {
            taken += 1;
            first.get_or_insert_with(|| killed.elapsed());
            if taken == sessions {
                all = Some(killed.elapsed());
            }
        }
        owners.insert(entry.key, entry.value.to_vec());
    }
    system.check()?;
    Ok(Takeover {
        sessions,
        taken,
        first,
        all,
    })
}
