//! The Orchestrator runtimes side by side, in one run and on the same
//! machine: for each runtime, a fresh system whose worker runs it; the
//! Orchestrators' start (the Arbiter's summons reply → the Orchestrator's
//! first model request), the worker's resident memory per live Orchestrator
//! (the worker and every process under it, so a claude-code Orchestrator's
//! CLI counts; a codex one has a process only during a turn), and the
//! routing overhead per hop at one session.

use std::time::Duration;

use arbiter_worker::Runtime;

use crate::ctx::Ctx;
use crate::hist::{Latency, bytes, micros};
use crate::levels;
use crate::load;
use crate::procs;

/// One runtime's figures.
struct Figures {
    runtime: Runtime,
    start: Latency,
    per_orchestrator: f64,
    hops: [Latency; 3],
}

/// Human messages per second at the one-session routing level: slow
/// enough for a CLI turn, the same for every runtime.
const RATE: f64 = 2.0;
const MEASURE: Duration = Duration::from_secs(10);

pub async fn run(ctx: &Ctx) -> anyhow::Result<()> {
    let mut figures = Vec::new();
    for &runtime in &ctx.opts.runtimes {
        if runtime == Runtime::ClaudeCode && ctx.opts.claude_bin.is_none() {
            tracing::warn!(
                "runtimes: no CLAUDE_CLI_BIN (scripts/install-claude-cli); claude-code skipped"
            );
            continue;
        }
        if runtime == Runtime::Codex && ctx.opts.codex_bin.is_none() {
            tracing::warn!("runtimes: no CODEX_CLI_BIN (scripts/install-codex-cli); codex skipped");
            continue;
        }
        *ctx.runtime
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = runtime;
        figures.push(one(ctx, runtime).await?);
    }
    *ctx.runtime
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Runtime::Native;
    print(ctx.opts.runtime_sessions, &figures);
    Ok(())
}

async fn one(ctx: &Ctx, runtime: Runtime) -> anyhow::Result<Figures> {
    let sessions = ctx.opts.runtime_sessions.max(1);
    tracing::info!(%runtime, sessions, "runtimes: starting Orchestrators");
    let slots = usize::try_from(sessions).unwrap_or(usize::MAX) + 1;
    let mut system = ctx.system(&format!("runtime-{runtime}"), 1, slots).await?;
    let worker = system.workers.first().map(|w| w.pid).unwrap_or_default();
    let before = tree_rss(worker);
    load::start_sessions(
        &mut system,
        &ctx.recorder,
        "start",
        &format!("rt{}", runtime.name().replace('-', "")),
        0..sessions,
        1.0,
    )
    .await?;
    let after = tree_rss(worker);
    let start = ctx.recorder.take()?.start_from_reply;
    system.stop().await;
    tracing::info!(%runtime, "runtimes: routing at one session");
    let level = levels::run(ctx, 1, RATE, MEASURE, false).await?;
    Ok(Figures {
        runtime,
        start,
        per_orchestrator: after.saturating_sub(before) as f64 / f64::from(sessions),
        hops: level.hops,
    })
}

/// Resident memory of `pid` and every process under it.
fn tree_rss(pid: u32) -> u64 {
    let mut total = 0;
    let mut todo = vec![pid];
    while let Some(pid) = todo.pop() {
        total += procs::rss(pid).unwrap_or(0);
        todo.extend(children(pid));
    }
    total
}

fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

fn print(sessions: u32, figures: &[Figures]) {
    println!();
    println!(
        "Runtimes side by side ({sessions} Orchestrators each; routing at 1 session, {RATE:.0} msgs/s; no targets set, native is the reference)"
    );
    println!(
        "  {:<14}{:>12}{:>12}{:>16}{:>12}{:>12}{:>12}",
        "runtime", "start p50", "start max", "RSS per Orch", "hop1 p50", "hop2 p50", "hop3 p50"
    );
    for f in figures {
        println!(
            "  {:<14}{:>12}{:>12}{:>16}{:>12}{:>12}{:>12}",
            f.runtime.name(),
            micros(f.start.p50()),
            micros(f.start.max()),
            bytes(f.per_orchestrator),
            micros(f.hops[0].p50()),
            micros(f.hops[1].p50()),
            micros(f.hops[2].p50()),
        );
    }
}
