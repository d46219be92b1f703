//! Teams of Orchestrators: sessions whose Arbiter summons a parallel team of
//! N members at once. Measured in one run, for each team size: the parallel
//! summons handed back → the last member's first model request, and then,
//! with the whole team live, the Arbiter's words to one member → that
//! member's request (a solo Orchestrator, N = 1, beside them).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::ctx::Ctx;
use crate::hist::Latency;
use crate::load;

/// The team sizes measured (1: a solo Orchestrator, for comparison).
pub const SIZES: [u32; 3] = [1, 3, 10];

pub struct Teams {
    /// Teams started per size.
    pub teams: u32,
    /// Summons → all N members' first request, by N.
    pub start: Vec<(u32, Latency)>,
    /// The Arbiter's words to member 1 → its request, the team live, by N.
    pub hop: Vec<(u32, Latency)>,
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Teams> {
    let teams = ctx.opts.team_sessions.max(1);
    let mut start = Vec::new();
    let mut hop = Vec::new();
    for size in SIZES {
        // Slots for every member of one team at a time, and then some.
        let slots = (size as usize).div_ceil(ctx.opts.workers.max(1)) + 2;
        let mut system = ctx
            .system(&format!("teams-{size}"), ctx.opts.workers, slots)
            .await?;
        tracing::info!(teams, size, "teams: parallel summonses");
        let recorder = &ctx.recorder;
        for i in 0..teams {
            // One team at a time: the figure is a team's start, not a queue's.
            let before = recorder.finished.load(Ordering::SeqCst);
            load::send_paced(
                &system.bus,
                load::openings("team", &format!("tm{size}"), i..i + 1),
                20.0,
            )
            .await?;
            load::wait_for(
                &mut system,
                "the team to report",
                Duration::from_secs(30),
                || recorder.finished.load(Ordering::SeqCst) > before,
            )
            .await?;
        }
        let mut measured = ctx.recorder.take()?;
        system.stop().await;
        let latency = measured
            .team_start
            .remove(&size)
            .map_or_else(Latency::new, Ok)?;
        start.push((size, latency));
        let latency = measured
            .team_hop
            .remove(&size)
            .map_or_else(Latency::new, Ok)?;
        hop.push((size, latency));
    }
    Ok(Teams { teams, start, hop })
}
