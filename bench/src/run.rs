//! One benchmark run: the mock model, then each phase on a fresh system,
//! printing each part of the report as soon as its phase is done.

use std::time::Duration;

use anyhow::Context as _;

use crate::baseline::{Baseline, Probe};
use crate::cli::{Phase, RunOptions};
use crate::ctx::Ctx;
use crate::levels::{self, Level};
use crate::memory::{self, Memory};
use crate::report::Report;
use crate::saturation;
use crate::start::{self, Start};
use crate::{machine, timeline};

pub async fn run(mut opts: RunOptions) -> anyhow::Result<()> {
    let nats_version = machine::check_nats()?;
    if let Some(config) = &opts.nats_config {
        let found = config
            .canonicalize()
            .with_context(|| format!("no nats-server config at {}", config.display()))?;
        opts.nats_config = Some(found);
    }
    if opts.has(Phase::Web) {
        // Before anything is measured: the binary is there, and up to date
        // when cargo started the benchmark.
        crate::web::build_under_cargo()?;
        crate::web::binary()?;
    }
    let ctx = Ctx::new(opts).await?;
    let profile = match &ctx.opts.nats_config {
        Some(path) => format!("nats-server config {}", path.display()),
        None => "nats-server defaults (no config file)".to_owned(),
    };
    let mut report = Report::new(
        format!("{}; {profile}", machine::describe(&nats_version)),
        machine::load(),
        ctx.opts.ticks_per_session,
    );
    report.print_header();

    if ctx.opts.has(Phase::Baseline) {
        report.baseline = Some(baseline(&ctx).await?);
        report.print_baseline();
    }
    if ctx.opts.has(Phase::Saturation) {
        report.saturation = Some(saturation::run(&ctx).await?);
        report.print_saturation();
    }
    if ctx.opts.has(Phase::Levels) {
        let measure = Duration::from_secs(ctx.opts.duration);
        for &sessions in &ctx.opts.levels.clone() {
            let rate = if sessions <= 1 {
                ctx.opts.single_rate
            } else {
                ctx.opts.rate
            };
            let level = levels::run(&ctx, sessions.max(1), rate, measure, false).await?;
            report.print_level(&level);
            report.levels.push(level);
        }
        crate::scale::print(&report.levels);
    }
    if ctx.opts.has(Phase::Start) {
        let start: Start = start::run(&ctx).await?;
        report.start = Some(start);
        report.print_start();
    }
    if ctx.opts.has(Phase::Memory) {
        let memory: Memory = memory::run(&ctx).await?;
        report.memory = Some(memory);
        report.print_memory();
    }
    if ctx.opts.has(Phase::Anatomy) {
        let rate = (ctx.opts.single_rate / 2.0).max(1.0);
        let measure = Duration::from_secs(ctx.opts.anatomy_duration.max(1));
        let level: Level = levels::run(&ctx, 1, rate, measure, true).await?;
        report.anatomy =
            timeline::explain(&level.samples, &level.events, ctx.opts.anatomy_quantile);
        report.print_anatomy();
    }
    if ctx.opts.has(Phase::Otel) {
        report.otel = Some(otel(&ctx).await?);
        report.print_otel();
    }
    if ctx.opts.has(Phase::Hooks) {
        report.hooks = Some(crate::hooks::run(&ctx).await?);
        report.print_hooks();
    }
    if ctx.opts.has(Phase::Handoff) {
        report.handoff = Some(crate::handoff::run(&ctx).await?);
        report.print_handoff();
    }
    if ctx.opts.has(Phase::Teams) {
        report.teams = Some(crate::teams::run(&ctx).await?);
        report.print_teams();
    }
    if ctx.opts.has(Phase::Web) {
        report.web = Some(crate::web::run(&ctx).await?);
        report.print_web();
    }
    if ctx.opts.has(Phase::Checkpoints) {
        report.checkpoints = Some(crate::checkpoints::run().await?);
        report.print_checkpoints();
    }
    if ctx.opts.has(Phase::Runtimes) {
        crate::runtimes::run(&ctx).await?;
    }
    report.load_after = machine::load();
    report.print_summary();
    Ok(())
}

/// Routing overhead at [`OTEL_SESSIONS`] sessions with export off and then
/// on, to a local OTLP receiver that decodes every export, back to back on
/// fresh systems so that both see the same machine. Also the spans received.
async fn otel(ctx: &Ctx) -> anyhow::Result<(Level, Level, u64)> {
    let measure = Duration::from_secs(ctx.opts.duration);
    let rate = ctx.opts.rate;
    tracing::info!("otel: {OTEL_SESSIONS} sessions, export off then on");
    let off = levels::run(ctx, OTEL_SESSIONS, rate, measure, false).await?;
    let receiver = arbiter_tests::OtlpReceiver::start().await;
    let set = |endpoint: Option<String>| {
        *ctx.otlp
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = endpoint;
    };
    set(Some(receiver.endpoint()));
    let on = levels::run(ctx, OTEL_SESSIONS, rate, measure, false).await;
    set(None);
    let on = on?;
    let spans = receiver.spans().len() as u64;
    Ok((off, on, spans))
}

/// The level the export-on figure is measured at.
pub const OTEL_SESSIONS: u32 = 100;

/// The server's own latencies, idle, on a server started for them alone.
async fn baseline(ctx: &Ctx) -> anyhow::Result<Baseline> {
    tracing::info!("baseline: core request-reply and JetStream publish-ack");
    ctx.recorder.reset()?;
    let nats = crate::system::start_nats(ctx.opts.nats_config.as_deref()).await;
    let probe = Probe::new(nats.url()).await?;
    let baseline = probe.idle(10_000, nats.pid()).await?;
    drop(probe);
    drop(nats);
    Ok(baseline)
}
