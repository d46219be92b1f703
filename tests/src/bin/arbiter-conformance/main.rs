//! `arbiter-conformance`: checks that a worker keeps the rules of
//! `docs/protocol.md`. It starts its own nats-server (loopback only, a fresh
//! JetStream store), plays the coordinator (summonses, inputs, control) and
//! the model (a mock Anthropic Messages server), runs the worker given as
//! `--worker-cmd` (through `sh -c`, once or twice: the takeover kills one with
//! SIGKILL), prints a pass/fail table and exits non-zero when a rule failed.
//!
//! The worker is told where everything is through its environment (see
//! `docs/protocol.md`, "Conformance kit"): `NATS_URL`, `ARBITER_POOL`,
//! `ARBITER_WORKER_ID`, `ARBITER_LEASE_SECS`, `ARBITER_MAX_ORCHESTRATORS`,
//! `ARBITER_WORKSPACE_ROOT`, `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`,
//! `ORCHESTRATOR_MODEL`, `ORCHESTRATOR_MODEL_RETRIES`,
//! `ORCHESTRATOR_SCHEMA_REPAIRS`, `ARBITER_PARK_AFTER_SECS`.
//!
//! The nats-server (≥ 2.12.3) is `NATS_SERVER_BIN`, else `nats-server` on `PATH`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod kit;
mod scenarios;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Checks a worker against the Arbiter wire protocol (docs/protocol.md).
#[derive(Parser, Debug)]
#[command(name = "arbiter-conformance", version)]
struct Cli {
    /// The command that starts one worker, run with `sh -c`; it reads its
    /// settings from the environment the kit gives it.
    #[arg(long)]
    worker_cmd: String,
    /// The lease the workers run with, in seconds (the pool consumer's ack wait).
    #[arg(long, default_value_t = 2.0)]
    lease_secs: f64,
    /// Where the workers' output goes (one file per worker); default: a temporary directory.
    #[arg(long)]
    log_dir: Option<PathBuf>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let kit = match kit::Kit::start(cli.worker_cmd, cli.lease_secs, cli.log_dir).await {
        Ok(kit) => kit,
        Err(e) => {
            eprintln!("arbiter-conformance: cannot start: {e}");
            return ExitCode::from(2);
        }
    };
    let rows = scenarios::run(&kit).await;
    kit.stop().await;
    let width = rows.iter().map(|r| r.rule.len()).max().unwrap_or(4).max(4);
    println!("{:<width$}  result", "rule");
    println!("{:-<width$}  ------", "");
    let mut failed = 0;
    for row in &rows {
        match &row.outcome {
            Ok(()) => println!("{:<width$}  PASS", row.rule),
            Err(why) => {
                failed += 1;
                println!("{:<width$}  FAIL  {why}", row.rule);
            }
        }
    }
    println!(
        "\n{} of {} rules passed; worker logs in {}",
        rows.len() - failed,
        rows.len(),
        kit.log_dir.display()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
