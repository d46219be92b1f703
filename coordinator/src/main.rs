//! `arbiter-coordinator`: runs Arbiter sessions and routes their intents.

/// mimalloc: about a third less CPU per routed message than the system
/// allocator in the benchmark, for a few MiB more resident memory.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::IsTerminal as _;

use anyhow::Context as _;
use arbiter_bus::cli::NatsArgs;
use arbiter_llm::cli::ProviderArgs;
use arbiter_llm::{Provider, RoleOverrides};
use arbiter_protocol::Role;
use clap::Parser;

/// Runs Arbiter sessions: reads human messages and Orchestrator output from
/// NATS, asks the Arbiter model, and routes every turn by its intent.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(flatten)]
    nats: NatsArgs,
    /// This coordinator's id among those that share the sessions (default:
    /// a new random one at each start; two running at once must differ).
    #[arg(long, env = "ARBITER_COORDINATOR_ID")]
    id: Option<String>,
    /// Worker pool that summoned Orchestrators go to.
    #[arg(long, env = "ARBITER_POOL", default_value = arbiter_protocol::subjects::DEFAULT_POOL)]
    pool: String,
    /// The runtime summoned Orchestrators must run on: native, claude-code
    /// or codex (default: whatever the pool's workers run). A worker of
    /// another runtime leaves such a summons to one that runs it.
    #[arg(long, env = "ARBITER_ORCHESTRATOR_RUNTIME")]
    orchestrator_runtime: Option<String>,
    /// Arbiter model, written provider:model (default anthropic:claude-haiku-5-5).
    #[arg(long, env = "ARBITER_MODEL")]
    model: Option<String>,
    /// Tokens of context the Arbiter may use before it is considered full (default 200000).
    #[arg(long, env = "ARBITER_CONTEXT_TOKENS")]
    context_tokens: Option<u64>,
    /// Maximum output tokens per Arbiter reply (default 8000).
    #[arg(long, env = "ARBITER_MAX_TOKENS")]
    max_tokens: Option<u64>,
    /// Times a reply that does not match the schema is sent back for repair.
    #[arg(long, env = "ARBITER_SCHEMA_REPAIRS")]
    schema_repairs: Option<u32>,
    /// Times in a row an intent that cannot be carried out is sent back to the Arbiter.
    #[arg(long, env = "ARBITER_INTENT_RETRIES", default_value_t = 2)]
    intent_retries: u32,
    /// Rounds in a row in which the Arbiter and its Orchestrator repeat
    /// themselves with no tool call between before the exchange is stopped
    /// and the human asked (0: never).
    #[arg(long, env = "ARBITER_LOOP_ROUNDS", default_value_t = 3)]
    loop_rounds: u32,
    /// Arbiter turns for one human message before the session waits for the
    /// human (0: no limit).
    #[arg(long, env = "ARBITER_MAX_TURNS_PER_MESSAGE", default_value_t = 100)]
    max_turns_per_message: u32,
    /// Orchestrators one session may run at once (a larger team is refused to the Arbiter).
    #[arg(long, env = "ARBITER_TEAM_CAP", default_value_t = arbiter_coordinator::DEFAULT_TEAM_CAP)]
    team_cap: u32,
    /// A solo summons whose risk (1 to 10) is at least this becomes a
    /// consensus of 3, unless the human said to skip it; 0 turns it off.
    #[arg(long, env = "ARBITER_ESCALATE_RISK", default_value_t = arbiter_coordinator::DEFAULT_ESCALATE_RISK)]
    escalate_risk: u8,
    /// Seconds a parallel team's reports are gathered before what came in
    /// goes to the Arbiter without the members still at work.
    #[arg(long, env = "ARBITER_TEAM_WAIT_SECS", default_value_t = arbiter_coordinator::DEFAULT_TEAM_WAIT.as_secs())]
    team_wait_secs: u64,
    /// Seconds a tool call waits for the human's approval before it is
    /// denied (the Orchestrator is told, and goes on).
    #[arg(long, env = "ARBITER_APPROVAL_TIMEOUT_SECS", default_value_t = arbiter_coordinator::DEFAULT_APPROVAL_TIMEOUT.as_secs())]
    approval_timeout_secs: u64,
    /// Seconds a session at work may show nothing new in its log before the
    /// webhooks hear `stalled` (0: never).
    #[arg(long, env = "ARBITER_STALL_AFTER_SECS", default_value_t = arbiter_coordinator::DEFAULT_STALL_AFTER.as_secs())]
    stall_after_secs: u64,
    /// The share of its context budget, in percent, past which the Arbiter
    /// hands off to a new generation from a packet it writes (0: never).
    #[arg(long, env = "ARBITER_HANDOFF_PCT", default_value_t = arbiter_coordinator::arbiter_handoff::DEFAULT_HANDOFF_PCT,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    handoff_pct: u8,
    /// Retries of a failed model call (408, 409, 429, 5xx, 529, network; default 8).
    #[arg(long, env = "ARBITER_MODEL_RETRIES")]
    model_retries: Option<u32>,
    /// Sessions one console may have at work at once (its Arbiter thinking
    /// or an Orchestrator active); a message past it is refused. 0: no limit.
    #[arg(long, env = "ARBITER_MAX_SESSIONS_PER_CONSOLE", default_value_t = arbiter_coordinator::DEFAULT_MAX_SESSIONS_PER_CONSOLE)]
    max_sessions_per_console: usize,
    /// Messages one console may send, written <count>/<s|min|h>[,burst=<n>];
    /// a message past it is refused. `off`: no limit.
    #[arg(long, env = "ARBITER_CONSOLE_RATE", default_value = arbiter_coordinator::DEFAULT_CONSOLE_RATE)]
    console_rate: String,
    /// Sessions idle this long are archived: their log and records move into
    /// one compressed object, still readable by `arbiter-console`
    /// (<n>s|m|h|d, or off).
    #[arg(long, env = "ARBITER_ARCHIVE_AFTER", default_value = "30d")]
    archive_after: String,
    /// Archived sessions are deleted this long after their archive (<n>s|m|h|d, or off).
    #[arg(long, env = "ARBITER_DELETE_AFTER", default_value = "off")]
    delete_after: String,
    /// Bytes each stream and bucket may hold; a full record stream refuses
    /// new writes (applied to existing streams at start).
    #[arg(long, env = "ARBITER_STREAM_MAX_BYTES", default_value_t = arbiter_bus::retention::DEFAULT_STREAM_MAX_BYTES)]
    stream_max_bytes: i64,
    /// Seconds between two passes of the retention sweeper.
    #[arg(long, env = "ARBITER_RETENTION_SWEEP_SECS", default_value_t = 60)]
    retention_sweep_secs: u64,
    /// Tokens of the workspace's memory put in a new session's first
    /// Arbiter prompt, newest entries first (0: none).
    #[arg(long, env = "ARBITER_MEMORY_TOKENS", default_value_t = arbiter_protocol::memory::DEFAULT_MEMORY_TOKENS)]
    memory_tokens: u64,
    /// A webhook's URL (http or https): the events go there, signed (see
    /// docs/notifications.md; more hooks: [[hooks]] in the config file).
    #[arg(long, env = "ARBITER_HOOK_URL", hide_env_values = true)]
    hook_url: Option<String>,
    /// The webhook's signing secret (`whsec_<base64>`, or any text); never logged.
    #[arg(long, env = "ARBITER_HOOK_SECRET", hide_env_values = true)]
    hook_secret: Option<arbiter_coordinator::notify::Secret>,
    /// The event types the webhook gets, comma-separated (needs_input,
    /// completed, failed, budget, stalled; default: all).
    #[arg(long, env = "ARBITER_HOOK_EVENTS")]
    hook_events: Option<String>,
    /// The webhook's name (its durable is hook-<name>; default env).
    #[arg(long, env = "ARBITER_HOOK_NAME")]
    hook_name: Option<String>,
    #[command(flatten)]
    providers: ProviderArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match try_main().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line: the cause and its sources.
            eprintln!(
                "arbiter-coordinator: {}",
                arbiter_bus::error_chain(e.as_ref())
            );
            std::process::ExitCode::FAILURE
        }
    }
}

async fn try_main() -> anyhow::Result<()> {
    let telemetry = arbiter_bus::telemetry::init(
        "arbiter-coordinator",
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
    let arbiter = arbiter_llm::config::resolve(
        &file,
        Role::Arbiter,
        &cli.providers.overrides(),
        &RoleOverrides {
            model: cli.model,
            context_tokens: cli.context_tokens,
            max_output_tokens: cli.max_tokens,
            schema_repairs: cli.schema_repairs,
            max_retries: cli.model_retries,
        },
        &|name| std::env::var(name).ok(),
    )?;
    if arbiter.model.api_key.is_none() && arbiter.model.provider == Provider::Anthropic {
        tracing::warn!(
            "ANTHROPIC_API_KEY is not set; model calls will fail unless the base URL needs no key"
        );
    }
    let prices = file.price_table();
    let hooks = arbiter_coordinator::notify::hooks(
        &file.hooks,
        arbiter_coordinator::notify::HookArgs {
            name: cli.hook_name,
            url: cli.hook_url,
            secret: cli.hook_secret,
            events: cli.hook_events,
        },
        &|name| std::env::var(name).ok(),
    )?;
    let config = arbiter_coordinator::Config {
        id: cli.id.unwrap_or_else(arbiter_coordinator::new_id),
        prices,
        budget: file.budget.defaults_for(arbiter.model.profile),
        memory_tokens: cli.memory_tokens,
        nats: cli.nats.options(),
        pool: cli.pool,
        orchestrator_runtime: cli.orchestrator_runtime,
        model: arbiter.model,
        context_budget: arbiter.context_budget,
        schema_repairs: arbiter.schema_repairs,
        intent_retries: cli.intent_retries,
        loop_rounds: cli.loop_rounds,
        max_turns_per_message: cli.max_turns_per_message,
        arbiter_handoff_pct: cli.handoff_pct,
        output_gap_wait: arbiter_coordinator::DEFAULT_OUTPUT_GAP_WAIT,
        team_cap: cli.team_cap,
        escalate_risk: cli.escalate_risk,
        team_wait: std::time::Duration::from_secs(cli.team_wait_secs),
        approval_timeout: std::time::Duration::from_secs(cli.approval_timeout_secs.max(1)),
        stall_after: std::time::Duration::from_secs(cli.stall_after_secs),
        hooks,
        retention: arbiter_coordinator::retention::Retention {
            limits: arbiter_bus::retention::Limits {
                stream_max_bytes: cli.stream_max_bytes,
            },
            archive_after: arbiter_bus::retention::parse_age(&cli.archive_after)
                .map_err(anyhow::Error::msg)
                .context("--archive-after")?,
            delete_after: arbiter_bus::retention::parse_age(&cli.delete_after)
                .map_err(anyhow::Error::msg)
                .context("--delete-after")?,
            sweep_every: std::time::Duration::from_secs(cli.retention_sweep_secs.max(1)),
        },
        console_caps: arbiter_coordinator::ConsoleCaps {
            max_sessions: (cli.max_sessions_per_console > 0)
                .then_some(cli.max_sessions_per_console),
            rate: arbiter_coordinator::Rate::parse_setting(&cli.console_rate)
                .map_err(anyhow::Error::msg)
                .context("--console-rate")?,
        },
    };
    let shutdown = arbiter_bus::cli::shutdown_signal();
    arbiter_coordinator::run(config, shutdown)
        .await
        .context("the coordinator stopped")
}
