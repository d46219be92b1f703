//! The Arbiter worker: takes summons from its pool's work queue when a slot
//! is free and runs each Orchestrator's agent loop (model, tools, subagents,
//! context watch), publishing its outputs and status. Each worker is also a
//! NATS micro service, so the fleet can be seen.
//!
//! A summons (fetched by `summons.rs`, one per free slot) is the
//! Orchestrator's lease: it stays unacknowledged while the
//! Orchestrator runs and is renewed as it goes (`lease.rs`); every step is
//! stored first (`state.rs`), so when a worker dies another worker of the
//! pool gets the summons again and resumes the Orchestrator where it was.

#![deny(clippy::print_stdout, clippy::print_stderr)]

mod agent;
mod approval;
pub mod checkpoint;
mod contain;
pub mod context;
mod evidence;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzz;
mod inputs;
mod lease;
pub mod mcp;
mod orchestrator;
mod outbox;
pub mod presence;
pub mod prompt;
pub mod runtime;
pub mod sandbox;
mod slots;
mod start;
mod state;
mod status;
mod stop;
mod subagent;
mod summons;
pub mod tools;
mod transcript;
pub mod workspace;

pub use agent::{DEFAULT_REPEAT_STOP, DEFAULT_REPEAT_WARN, DEFAULT_STALE_STOP, DEFAULT_STALE_WARN};
pub use runtime::Runtime;
pub use runtime::claude::ClaudeCodeConfig;
pub use runtime::codex::CodexConfig;
pub use slots::WorkerPresence;

/// The JSON Schemas of what a worker stores and answers, by file stem in
/// `docs/schemas/`: its Orchestrators' state records (and the pointer that
/// stands for one too large for a message) and its presence.
pub fn schemas() -> Vec<(&'static str, schemars::Schema)> {
    vec![
        (
            "orchestrator_state_record",
            schemars::schema_for!(state::Record),
        ),
        (
            "orchestrator_state_pointer",
            schemars::schema_for!(state::Pointer),
        ),
        ("worker_presence", schemars::schema_for!(WorkerPresence)),
    ]
}

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What `summons.rs` names a JetStream failure with.
pub(crate) use arbiter_bus::js_error;
use arbiter_bus::{Bus, Reach};
use arbiter_llm::{Model, ModelConfig};
use arbiter_protocol::roles::NatsRole;
use tokio_util::sync::CancellationToken;

use crate::sandbox::{Sandbox, SandboxConfig};
use crate::slots::Slots;
use crate::subagent::SubagentRole;
use crate::summons::{Next, Summonses};

/// Everything a worker needs; built by `main` from flags, env and defaults.
#[derive(Debug, Clone)]
pub struct Config {
    /// How to reach NATS, and the worker's credential.
    pub nats: arbiter_bus::NatsOptions,
    /// The pool whose summons this worker takes.
    pub pool: String,
    /// Orchestrators run at once; a summons is taken only when a slot is free.
    pub max_orchestrators: usize,
    /// Each session's workspace is a directory under this root.
    pub workspace_root: PathBuf,
    /// The Orchestrators' model and how to reach it.
    pub model: ModelConfig,
    /// Tokens of context an Orchestrator may use; what its context % is measured
    /// against (lowered to the model's window if that is smaller).
    pub context_budget: u64,
    /// The subagents' model (the `task` tool); `None` means the Orchestrator's model.
    pub subagent_model: Option<ModelConfig>,
    /// Tokens of context a subagent may use; what its warnings are measured against.
    pub subagent_context_budget: u64,
    /// Model calls one subagent may make before it is stopped with an error result.
    pub subagent_max_calls: u32,
    /// Times a reply that does not match the schema is sent back for repair.
    pub schema_repairs: u32,
    /// Notes (expects_response: false) in a row before the Orchestrator must speak to the Arbiter.
    pub max_consecutive_notes: u32,
    /// The same tool call (tool and arguments) made this many times in a
    /// row: the model is told (0: never). See `agent/core/repeats.rs`.
    pub repeat_warn: u32,
    /// ... and at this many, the call is not run, the work stops and the
    /// Arbiter gets a report naming it (0: never).
    pub repeat_stop: u32,
    /// Tool calls in a row that brought nothing new (the call and its result
    /// seen before): the model is told (0: never).
    pub stale_warn: u32,
    /// ... and at this many the work stops, and the Arbiter is told (0: never).
    pub stale_stop: u32,
    /// This worker's name in status messages.
    pub worker_id: String,
    /// How long an Orchestrator's lease lasts without renewal: the pool
    /// consumer's `ack_wait`. A dead worker's Orchestrators are taken over
    /// this long after its last renewal. Every worker of a pool should use
    /// the same value (the last one to start sets it).
    pub lease: Duration,
    /// How the `bash` tool's commands are confined.
    pub sandbox: SandboxConfig,
    /// How long inputs that came ahead of their turn (a `seq` past the next
    /// one) wait for the input before them; see [`DEFAULT_INPUT_GAP_WAIT`].
    pub input_gap_wait: Duration,
    /// How long an Orchestrator waits for the Arbiter in its slot before it
    /// parks: gives the slot back, keeping its lease, and takes one again
    /// when input comes. `None`: never.
    pub park_after: Option<Duration>,
    /// Orchestrators parked at once, at most; past that, a waiting
    /// Orchestrator keeps its slot. `None`: [`PARKED_PER_SLOT`] per slot.
    pub max_parked: Option<usize>,
    /// What runs the Orchestrators' turns. A summons that asks for another
    /// runtime is left to a worker that runs it.
    pub runtime: Runtime,
    /// How the `claude-code` runtime runs the CLI.
    pub claude_code: ClaudeCodeConfig,
    /// How the `codex` runtime runs the CLI.
    pub codex: CodexConfig,
    /// What each model's tokens cost (the built-in table unless the config
    /// file's `[prices]` say otherwise).
    pub prices: arbiter_llm::price::PriceTable,
    /// The worker's own tool-call policy (`--policy`, `--policy-file`): the
    /// floor every Orchestrator's calls are held to, under which a
    /// session's policy may only tighten (docs/tools.md, "Approvals").
    /// Empty: mode auto, every call runs.
    pub policy: arbiter_protocol::Policy,
    /// The MCP servers whose tools its Orchestrators (and their subagents)
    /// get, from the config file's `[mcp_servers.<name>]` (see `mcp.rs`);
    /// their names are announced in its presence.
    pub mcp_servers: Vec<mcp::ServerConfig>,
    /// What is done with the branch an Orchestrator's work is handed over
    /// on, beyond making it: the config file's `[checkpoints]` (push it,
    /// open a pull request; docs/checkpoints.md).
    pub hand_over: checkpoint::HandOver,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            nats: arbiter_bus::NatsOptions::default(),
            pool: arbiter_protocol::subjects::DEFAULT_POOL.into(),
            max_orchestrators: 4,
            workspace_root: PathBuf::from("workspaces"),
            model: default_model(),
            context_budget: 200_000,
            subagent_model: None,
            subagent_context_budget: 200_000,
            subagent_max_calls: 100,
            schema_repairs: 2,
            max_consecutive_notes: 8,
            repeat_warn: agent::DEFAULT_REPEAT_WARN,
            repeat_stop: agent::DEFAULT_REPEAT_STOP,
            stale_warn: agent::DEFAULT_STALE_WARN,
            stale_stop: agent::DEFAULT_STALE_STOP,
            worker_id: format!("worker-{}", uuid::Uuid::new_v4().simple()),
            lease: DEFAULT_LEASE,
            sandbox: SandboxConfig::default(),
            input_gap_wait: DEFAULT_INPUT_GAP_WAIT,
            park_after: Some(DEFAULT_PARK_AFTER),
            max_parked: None,
            runtime: Runtime::Native,
            claude_code: ClaudeCodeConfig::default(),
            codex: CodexConfig::default(),
            prices: arbiter_llm::price::PriceTable::defaults(),
            policy: arbiter_protocol::Policy::default(),
            mcp_servers: Vec::new(),
            hand_over: checkpoint::HandOver::default(),
        }
    }
}

/// How long a lease lasts without renewal, by default.
pub const DEFAULT_LEASE: Duration = arbiter_bus::setup::DEFAULT_LEASE;
/// How long a gap in an Orchestrator's input `seq`s may stay open: twice
/// the input consumer's ack wait (30 s), so that an input the server delivers
/// again arrives in time to fill it.
pub const DEFAULT_INPUT_GAP_WAIT: Duration = Duration::from_secs(60);
/// How long an Orchestrator waits for the Arbiter in its slot before it
/// parks, by default: long enough that an answer the Arbiter has ready
/// finds it seated, short enough that summonses do not queue for long
/// behind Orchestrators that only wait.
pub const DEFAULT_PARK_AFTER: Duration = Duration::from_secs(120);
/// Orchestrators that may be parked per slot, by default. A parked one costs
/// memory (its transcript) and a consumer, not a model call.
pub const PARKED_PER_SLOT: usize = 16;

/// The Orchestrators' default model, with default settings.
fn default_model() -> ModelConfig {
    let spec = arbiter_llm::config::default_model(arbiter_protocol::Role::Orchestrator);
    ModelConfig::from_spec(spec)
        .unwrap_or_else(|_| ModelConfig::new(arbiter_llm::Provider::Anthropic, "claude-opus-5-5"))
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Bus(#[from] arbiter_bus::BusError),
    #[error(transparent)]
    Model(#[from] arbiter_llm::LlmError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("workspace: {0}")]
    Workspace(String),
    #[error("the presence service: {0}")]
    Presence(String),
    /// The tools' sandbox cannot be used; the message says what to do.
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
    /// The runtime cannot run here (its CLI is missing or too old); the
    /// message says what to install.
    #[error("{0}")]
    Runtime(String),
}

/// What every Orchestrator of this worker shares.
pub(crate) struct Shared {
    pub bus: Bus,
    pub state: state::StateBackend,
    /// The lease in force: the pool consumer's `ack_wait`.
    pub lease: Duration,
    pub model: Arc<dyn Model>,
    pub subagent: SubagentRole,
    pub config: Config,
    /// How the `bash` tool's commands are started.
    pub sandbox: Arc<Sandbox>,
    /// `OrchestratorOutput`'s model-facing schema, made once: every model
    /// call carries it.
    pub output_schema: Arc<serde_json::Value>,
    /// The native runtime's tools, made once: every model call carries them.
    pub tools: Arc<[arbiter_llm::ToolSpec]>,
}

/// Runs the worker until `shutdown` completes; running Orchestrators are
/// cancelled and awaited before it returns.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<()> {
    start::check(&config)?;
    start::probe_runtime(&config).await?;
    let sandbox = start::sandbox(&config).await?;
    let mut config = config;
    let model =
        arbiter_llm::client_for_role(&config.model, Some(arbiter_protocol::Role::Orchestrator))?;
    // The native loop sizes each request itself (`agent/core/window.rs`); a
    // CLI sizes its own, so only the window bounds its budget.
    config.context_budget = match config.runtime {
        Runtime::Native => arbiter_llm::context_budget(model.as_ref(), config.context_budget).await,
        Runtime::ClaudeCode | Runtime::Codex => {
            arbiter_llm::context_budget_of_window(model.as_ref(), config.context_budget).await
        }
    };
    let subagent = start::subagent_role(&config).await?;
    let conn = arbiter_bus::connect_with(&config.nats, &config.worker_id, Reach::Wait).await?;
    let client = conn.client.clone();
    let bus = Bus::open(conn, NatsRole::Worker, Reach::Wait).await?;
    let state = state::StateBackend::setup(&bus)
        .await
        .map_err(|message| js_error("setting up the Orchestrator state", message))?;
    let (mut summonses, lease) = Summonses::open(&bus, &config.pool, config.lease).await?;
    let max_parked = config
        .max_parked
        .unwrap_or(config.max_orchestrators.saturating_mul(PARKED_PER_SLOT));
    let slots = Slots::new(
        &config.worker_id,
        &config.pool,
        config.max_orchestrators,
        max_parked,
    );
    let presence = presence::start(
        &client,
        slots.clone(),
        config.runtime,
        summonses.serves_urgent(),
        &config.mcp_servers,
    )
    .await?;
    tracing::info!(worker = %config.worker_id, pool = %config.pool, slots = config.max_orchestrators, max_parked, park_after = ?config.park_after, ?lease, runtime = %config.runtime, "worker ready");
    let delegates = config.model.profile == arbiter_llm::Profile::Full;
    let shared = Arc::new(Shared {
        bus,
        state,
        lease,
        model,
        subagent,
        config,
        sandbox: Arc::new(sandbox),
        output_schema: Arc::new(arbiter_llm::schema::for_model::<
            arbiter_protocol::OrchestratorOutput,
        >()),
        // The `small` profile does not delegate: no `task` tool.
        tools: tools::specs()
            .into_iter()
            .chain(delegates.then(tools::task::spec))
            .collect(),
    });
    let leases = lease::Registry::default();
    let cancel = CancellationToken::new();
    let mut running = tokio::task::JoinSet::new();
    // Credentials refused on a reconnect (revoked): stop as on shutdown
    // (Orchestrators handed back), then fail with the reason.
    let refused = Arc::new(std::sync::Mutex::new(None));
    let shutdown = {
        let alarms = shared.bus.alarms.clone();
        let refused = refused.clone();
        async move {
            tokio::select! {
                () = shutdown => {}
                error = alarms.fatal() => {
                    *refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error);
                }
            }
        }
    };
    tokio::pin!(shutdown);
    // A stream deleted under the worker: it stops, saying which.
    let mut gone = None;
    loop {
        // Orchestrators that ended since (at most the slots and the parked
        // ones: each ending frees one) are let go of here.
        while running.try_join_next().is_some() {}
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = slots.free() => match permit {
                Some(permit) => permit,
                None => break,
            },
        };
        // A parked Orchestrator that has input goes before any new summons.
        let Some(permit) = slots.hand_over(permit) else {
            continue;
        };
        // Holding a free slot: exactly one summons, an emergency first.
        let summons::Claim {
            summon,
            msg,
            permit,
        } = match summonses
            .next(&shared, &slots, &leases, permit, &mut shutdown)
            .await
        {
            Next::Claim(claim) => *claim,
            Next::HandedOver => continue,
            Next::Shutdown => break,
            Next::Gone(error) => {
                gone = Some(error);
                break;
            }
        };
        if msg.info().is_ok_and(|info| info.delivered > 1) {
            tracing::info!(orch.id = %summon.orch_id, "summons delivered again: taking the Orchestrator over");
        }
        arbiter_bus::metrics::hop(&msg, "coordinator→worker");
        let trace = arbiter_bus::TraceContext::from_headers(msg.headers.as_ref());
        let held = lease::Lease::start(msg, shared.lease / 3, shared.bus.alarms.reconnects());
        let summoned = orchestrator::Summoned {
            trace,
            registered: leases.register(&summon.orch_id, held.clone()),
            slot: slots.occupy(permit, &summon.orch_id),
            lease: held,
            summon,
        };
        running.spawn(orchestrator::run(
            shared.clone(),
            summoned,
            cancel.child_token(),
        ));
    }
    tracing::info!("worker shutting down");
    cancel.cancel();
    while running.join_next().await.is_some() {}
    presence.stop().await;
    let refused = refused
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    match refused.or(gone) {
        Some(error) => Err(error.into()),
        None => Ok(()),
    }
}
