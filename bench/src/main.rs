//! `arbiter-bench`: measures what Arbiter adds around the model. It starts a
//! nats-server, a zero-latency mock model, and the coordinator and workers
//! (as child processes of itself, so their memory can be read), then prints
//! routing overhead per hop, throughput, session start and memory per session.
//!
//! A tool binary, not a library: its modules use `anyhow` throughout.

/// mimalloc: about a third less CPU per routed message than the system
/// allocator in the benchmark, for a few MiB more resident memory.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod baseline;
mod checkpoints;
mod cli;
mod ctx;
mod handoff;
mod hist;
mod hooks;
mod levels;
mod load;
mod machine;
mod memory;
mod model;
mod procs;
mod report;
mod roles;
mod run;
mod runtimes;
mod saturation;
mod scale;
mod start;
mod system;
mod teams;
mod timeline;
mod validate;
mod web;
mod writes;

use std::io::IsTerminal as _;

use clap::Parser;

use crate::cli::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let default_filter = match cli.command {
        // The children log as the real binaries do.
        Some(Command::Coordinator(_) | Command::Worker(_)) => "info,async_nats=warn",
        _ => "arbiter_bench=info,arbiter_bus=error,warn",
    };
    // The children export when the benchmark gives them an OTLP endpoint
    // (the otel phase), as the real binaries do.
    let service = match cli.command {
        Some(Command::Coordinator(_)) => "arbiter-coordinator",
        Some(Command::Worker(_)) => "arbiter-worker",
        _ => "arbiter-bench",
    };
    let telemetry = arbiter_bus::telemetry::init(
        service,
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| default_filter.into()),
        std::io::stderr,
        std::io::stderr().is_terminal(),
    );
    let result = match cli.command {
        Some(Command::Coordinator(args)) => roles::coordinator(args).await,
        Some(Command::Worker(args)) => roles::worker(args).await,
        Some(Command::Run(options)) => run::run(options).await,
        Some(Command::Validate) => validate::run(),
        None => run::run(cli.run).await,
    };
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    result
}
