//! The two internal subcommands: this binary running the coordinator or a
//! worker library with the benchmark's settings. Each runs until its stdin
//! closes (the parent stops it) or Ctrl-C. This file is the only one that
//! builds the coordinator's and worker's configuration.

use anyhow::Context as _;
use arbiter_llm::{ApiKey, ModelConfig, Provider};
use tokio::io::AsyncReadExt as _;

use crate::cli::RoleArgs;
use crate::model::{ARBITER_MODEL, ORCH_MODEL};

/// The mock model: no retries (it never fails), its limits given so no
/// call is made to look them up.
fn model(args: &RoleArgs, name: &str) -> ModelConfig {
    let mut model = ModelConfig::new(Provider::Anthropic, name);
    model.base_url = args.llm_url.clone();
    model.api_key = Some(ApiKey::new("sk-ant-bench"));
    model.retry.max_retries = 0;
    model.limits.context_window = Some(200_000);
    model.limits.max_output_tokens = Some(16_000);
    model
}

pub async fn coordinator(args: RoleArgs) -> anyhow::Result<()> {
    let config = arbiter_coordinator::Config {
        id: args
            .coordinator_id
            .clone()
            .unwrap_or_else(arbiter_coordinator::new_id),
        nats: arbiter_bus::NatsOptions::url(args.nats_url.clone()),
        model: model(&args, ARBITER_MODEL),
        // The benchmark is one console opening sessions as fast as it can.
        console_caps: arbiter_coordinator::ConsoleCaps::off(),
        // The teams part runs teams of 10.
        team_cap: 16,
        // A saturation session is an Arbiter and an Orchestrator echoing
        // each other (`relay k`, `done k`) with no tool call, 50 exchanges
        // without the human: the guard that holds such a loop after 3
        // rounds (and a turn cap after 100 turns) would stop every one
        // of them in the warm-up and leave nothing to measure.
        loop_rounds: 0,
        max_turns_per_message: 0,
        hooks: match &args.hook_url {
            Some(url) => {
                let secret = arbiter_coordinator::notify::Secret::parse("bench-secret")
                    .map_err(anyhow::Error::msg)?;
                vec![arbiter_coordinator::notify::Hook::new(
                    "bench", url, secret,
                )?]
            }
            None => Vec::new(),
        },
        ..arbiter_coordinator::Config::default()
    };
    arbiter_coordinator::run(config, stopped())
        .await
        .context("the coordinator stopped")
}

pub async fn worker(args: RoleArgs) -> anyhow::Result<()> {
    let config = arbiter_worker::Config {
        nats: arbiter_bus::NatsOptions::url(args.nats_url.clone()),
        max_orchestrators: args.max_orchestrators,
        workspace_root: args.workspace_root.clone(),
        model: if args.runtime == arbiter_worker::Runtime::Codex {
            // Codex speaks the Responses API, which the mock serves under /v1.
            let mut model = model(&args, ORCH_MODEL);
            model.provider = Provider::OpenAi;
            model.base_url = format!("{}/v1", args.llm_url);
            model
        } else {
            model(&args, ORCH_MODEL)
        },
        worker_id: args.worker_id.clone(),
        park_after: match args.park_after_ms {
            Some(ms) => Some(std::time::Duration::from_millis(ms)),
            None => arbiter_worker::Config::default().park_after,
        },
        runtime: args.runtime,
        claude_code: arbiter_worker::ClaudeCodeConfig {
            bin: args.claude_bin.clone().unwrap_or_else(|| "claude".into()),
            // The hook is the worker binary's; it sits beside this one.
            hook_bin: std::env::current_exe()
                .ok()
                .and_then(|exe| Some(exe.parent()?.join("arbiter-worker"))),
            allow: Vec::new(),
        },
        codex: arbiter_worker::CodexConfig {
            bin: args.codex_bin.clone().unwrap_or_else(|| "codex".into()),
        },
        ..arbiter_worker::Config::default()
    };
    arbiter_worker::run(config, stopped())
        .await
        .context("the worker stopped")
}

/// Resolves when stdin closes or on Ctrl-C.
async fn stopped() {
    let eof = async {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 64];
        while let Ok(n) = stdin.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    tokio::select! {
        () = eof => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// The agent CLIs a worker of the claude-code or codex runtime runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct CliBins<'a> {
    pub claude: Option<&'a std::path::Path>,
    pub codex: Option<&'a std::path::Path>,
}

/// The command line that starts a coordinator (`id`: its coordinator id).
pub fn coordinator_args(
    nats_url: &str,
    llm_url: &str,
    hook_url: Option<&str>,
    id: Option<&str>,
) -> Vec<String> {
    let mut args = vec![
        "coordinator".into(),
        "--nats-url".into(),
        nats_url.into(),
        "--llm-url".into(),
        llm_url.into(),
    ];
    if let Some(url) = hook_url {
        args.extend(["--hook-url".into(), url.into()]);
    }
    if let Some(id) = id {
        args.extend(["--coordinator-id".into(), id.into()]);
    }
    args
}

/// How a worker of the benchmark runs, beside where it connects.
pub struct WorkerShape<'a> {
    pub slots: usize,
    pub workspace_root: &'a std::path::Path,
    pub worker_id: &'a str,
    pub runtime: arbiter_worker::Runtime,
    pub clis: CliBins<'a>,
    /// How long an Orchestrator waits before it parks; `None`: the worker's default.
    pub park_after: Option<std::time::Duration>,
}

/// The command line that starts a worker.
pub fn worker_args(nats_url: &str, llm_url: &str, worker: &WorkerShape<'_>) -> Vec<String> {
    let mut args = vec![
        "worker".into(),
        "--nats-url".into(),
        nats_url.into(),
        "--llm-url".into(),
        llm_url.into(),
        "--max-orchestrators".into(),
        worker.slots.to_string(),
        "--workspace-root".into(),
        worker.workspace_root.display().to_string(),
        "--worker-id".into(),
        worker.worker_id.into(),
        "--runtime".into(),
        worker.runtime.name().into(),
    ];
    if let Some(bin) = worker.clis.claude {
        args.extend(["--claude-bin".into(), bin.display().to_string()]);
    }
    if let Some(bin) = worker.clis.codex {
        args.extend(["--codex-bin".into(), bin.display().to_string()]);
    }
    if let Some(after) = worker.park_after {
        args.extend(["--park-after-ms".into(), after.as_millis().to_string()]);
    }
    args
}
