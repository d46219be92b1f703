//! `arbiter-worker`: runs Orchestrators for one pool.

/// mimalloc: about a third less CPU per routed message than the system
/// allocator in the benchmark, for a few MiB more resident memory.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::Context as _;
use arbiter_bus::cli::NatsArgs;
use arbiter_llm::cli::ProviderArgs;
use arbiter_llm::{Provider, RoleOverrides};
use arbiter_protocol::Role;
use arbiter_worker::sandbox::{SandboxConfig, SandboxMode};
use clap::Parser;

/// Runs Orchestrator sessions: takes summons from the pool's work queue,
/// runs each Orchestrator's agent loop, and reports back over NATS.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(flatten)]
    nats: NatsArgs,
    /// The pool whose summons this worker takes.
    #[arg(long, env = "ARBITER_POOL", default_value = arbiter_protocol::subjects::DEFAULT_POOL)]
    pool: String,
    /// Orchestrators run at once.
    #[arg(long, env = "ARBITER_MAX_ORCHESTRATORS", default_value_t = 4)]
    max_orchestrators: usize,
    /// Directory holding one workspace per session.
    #[arg(long, env = "ARBITER_WORKSPACE_ROOT", default_value = "workspaces")]
    workspace_root: PathBuf,
    /// Orchestrator model, written provider:model (default anthropic:claude-opus-5-5).
    #[arg(long, env = "ORCHESTRATOR_MODEL")]
    model: Option<String>,
    /// Tokens of context an Orchestrator may use before it is considered full (default 200000).
    #[arg(long, env = "ORCHESTRATOR_CONTEXT_TOKENS")]
    context_tokens: Option<u64>,
    /// Subagent (task tool) model, written provider:model (default anthropic:claude-sonnet-5-5).
    #[arg(long, env = "SUBAGENT_MODEL")]
    subagent_model: Option<String>,
    /// Tokens of context a subagent may use before it is considered full (default 200000).
    #[arg(long, env = "SUBAGENT_CONTEXT_TOKENS")]
    subagent_context_tokens: Option<u64>,
    /// Maximum output tokens per subagent reply (default 32000).
    #[arg(long, env = "SUBAGENT_MAX_TOKENS")]
    subagent_max_tokens: Option<u64>,
    /// Model calls one subagent may make before it is stopped.
    #[arg(long, env = "SUBAGENT_MAX_CALLS", default_value_t = 100)]
    subagent_max_calls: u32,
    /// Maximum output tokens per Orchestrator reply (default 32000).
    #[arg(long, env = "ORCHESTRATOR_MAX_TOKENS")]
    max_tokens: Option<u64>,
    /// Times a reply that does not match the schema is sent back for repair (default 2).
    #[arg(long, env = "ORCHESTRATOR_SCHEMA_REPAIRS")]
    schema_repairs: Option<u32>,
    /// Notes in a row before the Orchestrator must speak to the Arbiter.
    #[arg(long, env = "ORCHESTRATOR_MAX_NOTES", default_value_t = 8)]
    max_consecutive_notes: u32,
    /// The same tool call (tool and arguments) this many times in a row: the model is told (0: never).
    #[arg(long, env = "ORCHESTRATOR_REPEAT_WARN", default_value_t = arbiter_worker::DEFAULT_REPEAT_WARN)]
    repeat_warn: u32,
    /// The same tool call this many times in a row: it is not run, the work stops and the Arbiter is told (0: never).
    #[arg(long, env = "ORCHESTRATOR_REPEAT_STOP", default_value_t = arbiter_worker::DEFAULT_REPEAT_STOP)]
    repeat_stop: u32,
    /// Tool calls in a row that brought nothing new (call and result seen before): the model is told (0: never).
    #[arg(long, env = "ORCHESTRATOR_STALE_WARN", default_value_t = arbiter_worker::DEFAULT_STALE_WARN)]
    stale_warn: u32,
    /// Tool calls in a row that brought nothing new: the work stops and the Arbiter is told (0: never).
    #[arg(long, env = "ORCHESTRATOR_STALE_STOP", default_value_t = arbiter_worker::DEFAULT_STALE_STOP)]
    stale_stop: u32,
    /// Retries of a failed model call (408, 409, 429, 5xx, 529, network; default 8).
    #[arg(long, env = "ORCHESTRATOR_MODEL_RETRIES")]
    model_retries: Option<u32>,
    /// This worker's name; a random one by default.
    #[arg(long, env = "ARBITER_WORKER_ID")]
    worker_id: Option<String>,
    /// Seconds an Orchestrator's lease lasts without renewal: a dead worker's
    /// Orchestrators are taken over by another worker of the pool this long
    /// after its last renewal. Use the same value on every worker of a pool.
    #[arg(long, env = "ARBITER_LEASE_SECS", default_value_t = 6.0)]
    lease_secs: f64,
    /// How the bash tool's commands are confined: `bwrap` (bubblewrap
    /// namespaces: the worker's processes, environment and secrets hidden,
    /// only the workspace writable) or `none` (unconfined; not recommended).
    #[arg(
        long,
        env = "ARBITER_SANDBOX",
        default_value = "bwrap",
        value_name = "bwrap|none"
    )]
    sandbox: SandboxMode,
    /// A variable of the worker's environment to pass to the commands
    /// (repeatable; comma-separated in the environment variable).
    #[arg(
        long = "sandbox-env",
        env = "ARBITER_SANDBOX_ENV",
        value_name = "NAME",
        value_delimiter = ','
    )]
    sandbox_env: Vec<String>,
    /// A path to show the commands read-only, besides the system and
    /// toolchain directories (repeatable; comma-separated in the
    /// environment variable). The worker does not start if it holds a key
    /// or another credential of the deployment.
    #[arg(
        long = "sandbox-show",
        env = "ARBITER_SANDBOX_SHOW",
        value_name = "PATH",
        value_delimiter = ','
    )]
    sandbox_show: Vec<PathBuf>,
    /// A path to hide from the commands, besides the built-in ones
    /// (repeatable; comma-separated in the environment variable).
    #[arg(
        long = "sandbox-hide",
        env = "ARBITER_SANDBOX_HIDE",
        value_name = "PATH",
        value_delimiter = ','
    )]
    sandbox_hide: Vec<PathBuf>,
    /// Cut the commands off the network (they keep a loopback interface).
    #[arg(long, env = "ARBITER_SANDBOX_UNSHARE_NET")]
    sandbox_unshare_net: bool,
    /// Seconds an Orchestrator waits for the Arbiter in its slot before it
    /// parks: gives the slot back (keeping its lease) and takes one again
    /// when the Arbiter answers. 0 turns parking off.
    #[arg(long, env = "ARBITER_PARK_AFTER_SECS", default_value_t = 120.0)]
    park_after: f64,
    /// Orchestrators parked at once, at most (default 16 per slot); past
    /// that, a waiting Orchestrator keeps its slot.
    #[arg(long, env = "ARBITER_MAX_PARKED")]
    max_parked: Option<usize>,
    /// What runs the Orchestrators' turns: native (the project's own agent
    /// loop), claude-code (the Claude Code CLI, one process per
    /// Orchestrator) or codex (the Codex CLI, one `codex exec` per turn;
    /// the Orchestrator model must be openai:<model>). Summonses that ask
    /// for another runtime are left to workers that run it.
    #[arg(
        long,
        env = "ARBITER_RUNTIME",
        default_value = "native",
        value_name = "native|claude-code|codex"
    )]
    runtime: arbiter_worker::Runtime,
    /// The Claude Code CLI the claude-code runtime runs.
    #[arg(long, env = "CLAUDE_CLI_BIN", default_value = "claude")]
    claude_bin: PathBuf,
    /// A command or edit the claude-code runtime's CLI may run without
    /// asking, on top of file edits in the workspace: a permission rule
    /// such as 'Bash(cargo test:*)'. Repeat it, or give several separated
    /// by commas in the variable. A bare tool name is refused.
    #[arg(
        long = "claude-allow",
        env = "ARBITER_CLAUDE_ALLOW",
        value_delimiter = ',',
        value_name = "RULE"
    )]
    claude_allow: Vec<String>,
    /// The Codex CLI the codex runtime runs.
    #[arg(long, env = "CODEX_CLI_BIN", default_value = "codex")]
    codex_bin: PathBuf,
    /// The worker's tool-call policy, the floor a session's may only
    /// tighten: rules and a mode separated by `;` or new lines, e.g.
    /// 'mode auto; ask bash(git push*); deny write(**/.env)'
    /// (docs/approvals.md). Default: none (every call runs).
    #[arg(
        long,
        env = "ORCHESTRATOR_POLICY",
        value_name = "POLICY",
        conflicts_with = "policy_file"
    )]
    policy: Option<String>,
    /// A file holding the worker's tool-call policy (one rule per line, `#`
    /// comments), instead of --policy.
    #[arg(long, env = "ORCHESTRATOR_POLICY_FILE", value_name = "PATH")]
    policy_file: Option<PathBuf>,
    #[command(flatten)]
    providers: ProviderArgs,
}

/// `arbiter-worker hook post-tool-use`: what the Claude Code CLI runs after
/// each tool call (configured by the worker through `--settings`).
#[derive(Debug, Parser)]
#[command(name = "arbiter-worker hook")]
struct HookCli {
    /// The hook event: only post-tool-use.
    #[arg(value_parser = ["post-tool-use"])]
    event: String,
    /// Tokens of context the warnings are measured against.
    #[arg(long)]
    context_budget: u64,
}

/// Runs the hook: the CLI's hook input on stdin, the warning (if any) on stdout.
fn run_hook() -> std::process::ExitCode {
    use std::io::{Read as _, Write as _};
    let cli = HookCli::parse_from(std::env::args().skip(1));
    let mut input = String::new();
    if std::io::stdin().read_to_string(&mut input).is_err() {
        return std::process::ExitCode::SUCCESS;
    }
    if let Some(out) = arbiter_worker::runtime::claude::hook_output(&input, cli.context_budget) {
        let _ = writeln!(std::io::stdout(), "{out}");
    }
    std::process::ExitCode::SUCCESS
}

fn main() -> std::process::ExitCode {
    if std::env::args().nth(1).as_deref() == Some("hook") {
        return run_hook();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("arbiter-worker: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(try_main());
    // Every task ends first (a NATS connection still trying to reconnect
    // logs its refusals), so that the line below is the last one written.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line: the cause and its sources.
            eprintln!("arbiter-worker: {}", arbiter_bus::error_chain(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn try_main() -> anyhow::Result<()> {
    let telemetry = arbiter_bus::telemetry::init(
        "arbiter-worker",
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| "info,async_nats=warn".into()),
        std::io::stderr,
        std::io::stderr().is_terminal(),
    );
    let result = run_main().await;
    // Spans still buffered go out before the process ends.
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    result
}

async fn run_main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let file = cli.providers.load_file()?;
    let providers = cli.providers.overrides();
    let env = |name: &str| std::env::var(name).ok();
    let orchestrator = arbiter_llm::config::resolve(
        &file,
        Role::Orchestrator,
        &providers,
        &RoleOverrides {
            model: cli.model,
            context_tokens: cli.context_tokens,
            max_output_tokens: cli.max_tokens,
            schema_repairs: cli.schema_repairs,
            max_retries: cli.model_retries,
        },
        &env,
    )?;
    let subagent = arbiter_llm::config::resolve(
        &file,
        Role::Subagent,
        &providers,
        &RoleOverrides {
            model: cli.subagent_model,
            context_tokens: cli.subagent_context_tokens,
            max_output_tokens: cli.subagent_max_tokens,
            schema_repairs: None,
            max_retries: cli.model_retries,
        },
        &env,
    )?;
    for role in [&orchestrator, &subagent] {
        if role.model.api_key.is_none() && role.model.provider == Provider::Anthropic {
            tracing::warn!(model = %role.model.spec(), "ANTHROPIC_API_KEY is not set; model calls will fail unless the base URL needs no key");
        }
    }
    // The NATS credential, nkey and TLS key are added from the connection
    // settings, however they were given (arbiter_worker::run).
    let sandbox = SandboxConfig {
        mode: cli.sandbox,
        env: cli.sandbox_env,
        show: cli.sandbox_show,
        hide: cli.sandbox_hide,
        secret_files: cli.providers.config.clone().into_iter().collect(),
        unshare_net: cli.sandbox_unshare_net,
    };
    let policy = match (&cli.policy, &cli.policy_file) {
        (Some(text), _) => arbiter_protocol::Policy::parse(text).context("--policy")?,
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--policy-file {}", path.display()))?;
            arbiter_protocol::Policy::parse(&text)
                .with_context(|| format!("--policy-file {}", path.display()))?
        }
        (None, None) => arbiter_protocol::Policy::default(),
    };
    let defaults = arbiter_worker::Config::default();
    let prices = file.price_table();
    let mcp_servers = arbiter_worker::mcp::parse_servers(&file.mcp_servers)
        .map_err(|e| anyhow::anyhow!("the config file: {e}"))?;
    let hand_over = arbiter_worker::checkpoint::HandOver::parse(&file.checkpoints)
        .map_err(|e| anyhow::anyhow!("the config file: {e}"))?;
    let config = arbiter_worker::Config {
        prices,
        nats: cli.nats.options(),
        pool: cli.pool,
        max_orchestrators: cli.max_orchestrators,
        workspace_root: cli.workspace_root,
        model: orchestrator.model,
        context_budget: orchestrator.context_budget,
        subagent_model: Some(subagent.model),
        subagent_context_budget: subagent.context_budget,
        subagent_max_calls: cli.subagent_max_calls,
        schema_repairs: orchestrator.schema_repairs,
        max_consecutive_notes: cli.max_consecutive_notes,
        repeat_warn: cli.repeat_warn,
        repeat_stop: cli.repeat_stop,
        stale_warn: cli.stale_warn,
        stale_stop: cli.stale_stop,
        worker_id: cli.worker_id.unwrap_or(defaults.worker_id),
        lease: std::time::Duration::try_from_secs_f64(cli.lease_secs)
            .context("--lease-secs must be a positive number of seconds")?,
        sandbox,
        input_gap_wait: arbiter_worker::DEFAULT_INPUT_GAP_WAIT,
        park_after: match cli.park_after {
            0.0 => None,
            secs => Some(
                std::time::Duration::try_from_secs_f64(secs)
                    .context("--park-after must be a number of seconds, 0 or more")?,
            ),
        },
        max_parked: cli.max_parked,
        runtime: cli.runtime,
        claude_code: arbiter_worker::ClaudeCodeConfig {
            bin: cli.claude_bin,
            hook_bin: None,
            allow: cli.claude_allow,
        },
        codex: arbiter_worker::CodexConfig { bin: cli.codex_bin },
        policy,
        mcp_servers,
        hand_over,
    };
    let shutdown = arbiter_bus::cli::shutdown_signal();
    match arbiter_worker::run(config, shutdown).await {
        Ok(()) => Ok(()),
        // It says all there is to say, on one line.
        Err(e @ (arbiter_worker::Error::Sandbox(_) | arbiter_worker::Error::Runtime(_))) => {
            Err(e.into())
        }
        Err(e) => Err(e).context("the worker stopped"),
    }
}
