//! The context economy: sessions whose one request takes a chain of
//! Orchestrator generations, each ending with a handoff packet that goes to
//! its successor verbatim. Measured in one run: how much the Arbiter's
//! context grows per generation (its requests' size, as a share of its
//! budget), the handoff gap (the predecessor's report handed back → the
//! successor's first model request), and the tokens a packet carries past
//! the Arbiter.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::ctx::Ctx;
use crate::hist::Latency;
use crate::load;

pub struct Handoff {
    pub sessions: u32,
    pub generations: u64,
    /// Mean growth of the Arbiter's requests per generation, in tokens
    /// (bytes / 4, as the Arbiter's own estimate counts them).
    pub growth_tokens: f64,
    /// The Arbiter's context budget, in tokens.
    pub budget: u64,
    pub gap: Latency,
    /// Mean tokens (bytes / 4) of a packet.
    pub packet_tokens: f64,
}

impl Handoff {
    /// Growth per generation as a percentage of the Arbiter's budget.
    pub fn growth_pct(&self) -> f64 {
        self.growth_tokens / self.budget.max(1) as f64 * 100.0
    }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Handoff> {
    let sessions = ctx.opts.handoff_sessions.max(1);
    let generations = ctx.opts.handoff_generations.max(2);
    let mut system = ctx.system("handoff", ctx.opts.workers, 8).await?;
    ctx.recorder
        .chain_generations
        .store(generations, Ordering::SeqCst);
    tracing::info!(sessions, generations, "handoff: chains of Orchestrators");
    load::send_paced(
        &system.bus,
        load::openings("chain", "ho", 0..sessions),
        20.0,
    )
    .await?;
    let recorder = &ctx.recorder;
    let limit = Duration::from_secs(30 + 10 * generations);
    load::wait_for(&mut system, "every chain to finish", limit, || {
        recorder.finished.load(Ordering::SeqCst) >= u64::from(sessions)
    })
    .await?;
    let measured = ctx.recorder.take()?;
    system.stop().await;
    let growth: Vec<f64> = measured
        .arbiter_sizes
        .values()
        .filter_map(|sizes| {
            let (first, last) = (sizes.first()?, sizes.last()?);
            Some(last.saturating_sub(*first) as f64 / 4.0 / generations as f64)
        })
        .collect();
    let packets = &measured.packet_bytes;
    Ok(Handoff {
        sessions,
        generations,
        growth_tokens: growth.iter().sum::<f64>() / growth.len().max(1) as f64,
        budget: arbiter_coordinator::Config::default().context_budget,
        gap: measured.handoff_gap,
        packet_tokens: packets.iter().sum::<usize>() as f64 / 4.0 / packets.len().max(1) as f64,
    })
}
