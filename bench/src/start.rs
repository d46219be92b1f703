//! Orchestrator start: summons after summons at a steady pace, each timed
//! from the Arbiter's summons reply (and from the summons on NATS) to the
//! new Orchestrator's first model request.

use std::time::Duration;

use crate::ctx::Ctx;
use crate::hist::Latency;
use crate::load;

pub struct Start {
    pub sessions: u32,
    pub rate: f64,
    pub from_reply: Latency,
    pub from_publish: Latency,
    /// Process start → consuming, per child (from this phase's system).
    pub ready_after: Vec<(String, Duration)>,
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Start> {
    let sessions = ctx.opts.start_sessions;
    let slots = usize::try_from(sessions).unwrap_or(usize::MAX) + 16;
    let mut system = ctx.system("start", ctx.opts.workers, slots).await?;
    let rate = ctx.opts.start_rate;
    tracing::info!(sessions, rate, "session start: summoning");
    load::start_sessions(&mut system, &ctx.recorder, "start", "st", 0..sessions, rate).await?;
    let measured = ctx.recorder.take()?;
    let ready_after = system.ready_after.clone();
    system.stop().await;
    Ok(Start {
        sessions,
        rate,
        from_reply: measured.start_from_reply,
        from_publish: measured.start_from_publish,
        ready_after,
    })
}
