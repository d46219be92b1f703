//! Resident memory per session, from process RSS deltas: the coordinator per
//! Arbiter session, the worker per idle Orchestrator (waiting for the
//! Arbiter) and per active one (its model call open, held by the mock).
//! Each figure is the slope between two equal steps, so fixed costs that
//! come with the first sessions (pools, buffers, arenas) are left out.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::ctx::Ctx;
use crate::load::{self, openings, send_paced, to_each};
use crate::system::System;

/// Time for freed memory and background tasks to settle before a reading.
const SETTLE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy)]
pub struct Readings {
    pub coordinator: u64,
    pub worker: u64,
    pub nats: u64,
}

pub struct Memory {
    pub arbiters: u32,
    pub orchestrators: u32,
    pub empty: Readings,
    /// After each step of Arbiter-only sessions (two turns each).
    pub arbiter_steps: [Readings; 2],
    /// After each step of sessions with an idle Orchestrator.
    pub idle_steps: [Readings; 2],
    /// With every Orchestrator's model call open.
    pub active: Readings,
}

impl Memory {
    fn slope(after: u64, before: u64, n: u32) -> f64 {
        (after as f64 - before as f64) / f64::from(n.max(1))
    }

    pub fn per_arbiter(&self) -> f64 {
        let [a, b] = self.arbiter_steps;
        Self::slope(b.coordinator, a.coordinator, self.arbiters)
    }

    /// Coordinator memory per session that has an Orchestrator.
    pub fn per_arbiter_with_orchestrator(&self) -> f64 {
        let [a, b] = self.idle_steps;
        Self::slope(b.coordinator, a.coordinator, self.orchestrators)
    }

    pub fn per_idle_orchestrator(&self) -> f64 {
        let [a, b] = self.idle_steps;
        Self::slope(b.worker, a.worker, self.orchestrators)
    }

    pub fn per_active_orchestrator(&self) -> f64 {
        let [_, b] = self.idle_steps;
        self.per_idle_orchestrator()
            + Self::slope(self.active.worker, b.worker, 2 * self.orchestrators)
    }

    /// nats-server memory per Orchestrator session (its durable consumer, its subjects).
    pub fn nats_per_orchestrator(&self) -> f64 {
        let [a, b] = self.idle_steps;
        Self::slope(b.nats, a.nats, self.orchestrators)
    }
}

pub async fn read(system: &System) -> anyhow::Result<Readings> {
    tokio::time::sleep(SETTLE).await;
    Ok(Readings {
        coordinator: system.coordinator.rss()?,
        worker: match system.workers.first() {
            Some(w) => w.rss()?,
            None => 0,
        },
        nats: system.nats_rss().unwrap_or(0),
    })
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Memory> {
    let arbiters = ctx.opts.memory_arbiters;
    let orchestrators = ctx.opts.memory_orchestrators;
    let slots = usize::try_from(2 * orchestrators).unwrap_or(usize::MAX) + 16;
    // One worker, so that all Orchestrators land in the process measured.
    let mut system = ctx.system("memory", 1, slots).await?;
    let rate = ctx.opts.setup_rate;
    let recorder = ctx.recorder.clone();
    let empty = read(&system).await?;

    let mut arbiter_steps = [empty; 2];
    for (step, reading) in arbiter_steps.iter_mut().enumerate() {
        let range = arbiters * step as u32..arbiters * (step as u32 + 1);
        tracing::info!(step, arbiters, "memory: Arbiter sessions");
        let target = recorder.arbiter_requests.load(Ordering::SeqCst) + 2 * u64::from(arbiters);
        send_paced(&system.bus, openings("chat", "ma", range.clone()), rate).await?;
        send_paced(&system.bus, to_each("ma", range, "more"), rate).await?;
        load::wait_for(
            &mut system,
            "two turns per session",
            Duration::from_secs(60),
            || recorder.arbiter_requests.load(Ordering::SeqCst) >= target,
        )
        .await?;
        *reading = read(&system).await?;
    }

    let mut idle_steps = [empty; 2];
    for (step, reading) in idle_steps.iter_mut().enumerate() {
        let range = orchestrators * step as u32..orchestrators * (step as u32 + 1);
        tracing::info!(step, orchestrators, "memory: idle Orchestrators");
        load::start_sessions(&mut system, &recorder, "start", "mo", range, rate).await?;
        *reading = read(&system).await?;
    }

    tracing::info!("memory: active Orchestrators");
    let target = recorder.held.load(Ordering::SeqCst) + 2 * u64::from(orchestrators);
    send_paced(
        &system.bus,
        to_each("mo", 0..2 * orchestrators, "work"),
        rate,
    )
    .await?;
    load::wait_for(
        &mut system,
        "model calls held open",
        Duration::from_secs(60),
        || recorder.held.load(Ordering::SeqCst) >= target,
    )
    .await?;
    let active = read(&system).await?;
    recorder.open_gate();
    system.check()?;
    system.stop().await;
    Ok(Memory {
        arbiters,
        orchestrators,
        empty,
        arbiter_steps,
        idle_steps,
        active,
    })
}
