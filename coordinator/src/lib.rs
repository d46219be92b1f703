//! The Arbiter coordinator: one Arbiter session per conversation, many at once.
//! It reads human messages and Orchestrator output from JetStream, runs the
//! Arbiter's turns against the model, and routes each turn by its intent.

#![deny(clippy::print_stdout, clippy::print_stderr)]

mod caps;
mod cluster;
mod delta;
mod fleet;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzz;
pub mod notify;
pub mod prompt;
pub use cluster::retention;
pub use rules::arbiter_handoff;
pub(crate) mod rules;
mod session;
mod state;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arbiter_bus::{Bus, Reach};
use arbiter_llm::{Model, ModelConfig};
use arbiter_protocol::Role;
use arbiter_protocol::roles::NatsRole;

/// The JSON Schemas of what the coordinator stores, by file stem in
/// `docs/schemas/`: a session's state records and the pointer that stands
/// for one too large for a message.
pub fn schemas() -> Vec<(&'static str, schemars::Schema)> {
    vec![
        ("session_state_record", schemars::schema_for!(state::Record)),
        (
            "session_state_pointer",
            schemars::schema_for!(state::Pointer),
        ),
    ]
}

pub use caps::{ConsoleCaps, DEFAULT_CONSOLE_RATE, DEFAULT_MAX_SESSIONS_PER_CONSOLE, Rate};

/// Everything the coordinator needs to run; built by `main` from flags, env and defaults.
#[derive(Debug, Clone)]
pub struct Config {
    /// This coordinator's id among those sharing the sessions (letters,
    /// digits, - or _): its session leases and its forwarding subject carry
    /// it. Unique per running process; [`new_id`] makes one.
    pub id: String,
    /// How to reach NATS, and the coordinator's credential.
    pub nats: arbiter_bus::NatsOptions,
    /// The worker pool summons go to.
    pub pool: String,
    /// The runtime summoned Orchestrators must run on (`native`,
    /// `claude-code`, `codex`), written into each summons; `None`: any
    /// runtime the pool's workers run.
    pub orchestrator_runtime: Option<String>,
    /// The Arbiter's model and how to reach it.
    pub model: ModelConfig,
    /// Tokens of context the Arbiter may use; what its context % is measured
    /// against (lowered to the model's window if that is smaller).
    pub context_budget: u64,
    /// The share of its context budget, in percent, past which the Arbiter
    /// hands off to a new generation (0: never); see `arbiter_handoff.rs`.
    pub arbiter_handoff_pct: u8,
    /// Times a reply that does not match the schema is sent back for repair.
    pub schema_repairs: u32,
    /// Times in a row an intent that cannot be carried out is sent back.
    pub intent_retries: u32,
    /// How long Orchestrator output that came ahead of its turn (a `seq`
    /// past the next one) is held for the output before it; see
    /// [`DEFAULT_OUTPUT_GAP_WAIT`].
    pub output_gap_wait: Duration,
    /// Limits per console identity: sessions at work at once, and messages
    /// per minute. A refused message never reaches the Arbiter.
    pub console_caps: ConsoleCaps,
    /// Rounds in a row without progress (the same words both ways, no tool
    /// call between) before an Arbiter–Orchestrator exchange is stopped; 0: never.
    pub loop_rounds: u32,
    /// Arbiter turns for one human message before the session holds; 0: no limit.
    pub max_turns_per_message: u32,
    /// What each model's tokens cost (the built-in table unless the config
    /// file's `[prices]` say otherwise).
    pub prices: arbiter_llm::price::PriceTable,
    /// Stream limits, and when idle sessions are archived or deleted.
    pub retention: retention::Retention,
    /// The caps every session starts with (none unless the config file's
    /// `[budget.*]` set them); a console's `/budget` changes a session's own.
    pub budget: arbiter_protocol::Budget,
    /// Tokens of a workspace's memory put in a new session's first prompt
    /// (the newest entries that fit); 0: none.
    pub memory_tokens: u64,
    /// Orchestrators one session may run at once: a team larger than this
    /// is refused back to the Arbiter, and nothing starts.
    pub team_cap: u32,
    /// How long a parallel team's reports are gathered before what came in
    /// goes to the Arbiter without the members still at work.
    pub team_wait: Duration,
    /// A solo summons whose risk is at least this becomes a consensus of 3
    /// (unless the human said to skip it); 0 turns it off.
    pub escalate_risk: u8,
    /// How long a tool call waits for the human's approval before it is
    /// denied (see `rules/approval.rs`).
    pub approval_timeout: Duration,
    /// How long a session at work may show nothing new in its log before
    /// the webhooks hear `stalled` (0: never); see `rules/notify.rs`.
    pub stall_after: Duration,
    /// The webhooks: sessions store the events some hook wants, and each
    /// hook's delivery POSTs them (see `notify.rs`). None: no event is stored.
    pub hooks: Vec<notify::Hook>,
}

impl Config {
    /// Whether some hook wants events of this type (so sessions store them).
    pub(crate) fn notifies(&self, kind: arbiter_protocol::NotificationKind) -> bool {
        self.hooks.iter().any(|h| h.wants(kind))
    }
}

/// See [`Config::stall_after`].
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(30 * 60);

/// See [`Config::approval_timeout`].
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// See [`Config::escalate_risk`].
pub const DEFAULT_ESCALATE_RISK: u8 = 8;

/// See [`Config::team_cap`].
pub const DEFAULT_TEAM_CAP: u32 = 4;
/// See [`Config::team_wait`].
pub const DEFAULT_TEAM_WAIT: Duration = Duration::from_secs(30 * 60);

impl Default for Config {
    fn default() -> Self {
        Self {
            id: new_id(),
            nats: arbiter_bus::NatsOptions::default(),
            pool: arbiter_protocol::subjects::DEFAULT_POOL.into(),
            orchestrator_runtime: None,
            model: default_model(),
            context_budget: arbiter_llm::config::DEFAULT_CONTEXT_BUDGET,
            arbiter_handoff_pct: arbiter_handoff::DEFAULT_HANDOFF_PCT,
            schema_repairs: arbiter_llm::config::DEFAULT_SCHEMA_REPAIRS,
            intent_retries: 2,
            output_gap_wait: DEFAULT_OUTPUT_GAP_WAIT,
            console_caps: ConsoleCaps::default(),
            loop_rounds: rules::guard::DEFAULT_LOOP_ROUNDS,
            max_turns_per_message: rules::guard::DEFAULT_MAX_TURNS_PER_MESSAGE,
            prices: arbiter_llm::price::PriceTable::defaults(),
            retention: retention::Retention::default(),
            budget: arbiter_protocol::Budget::default(),
            memory_tokens: arbiter_protocol::memory::DEFAULT_MEMORY_TOKENS,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            stall_after: DEFAULT_STALL_AFTER,
            hooks: Vec::new(),
            team_cap: DEFAULT_TEAM_CAP,
            team_wait: DEFAULT_TEAM_WAIT,
            escalate_risk: DEFAULT_ESCALATE_RISK,
        }
    }
}

/// A new coordinator id: `c-` and 12 random hex digits.
pub fn new_id() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("c-{}", &id[..12])
}

/// How long a gap in an Orchestrator's output `seq`s may stay open: three
/// times the output consumer's ack wait (10 s), so that output the server
/// delivers again (its first delivery was taken but not stored by a
/// coordinator that died) arrives in time to fill it.
pub const DEFAULT_OUTPUT_GAP_WAIT: Duration = Duration::from_secs(30);

/// The Arbiter's default model, with default settings.
fn default_model() -> ModelConfig {
    let spec = arbiter_llm::config::default_model(Role::Arbiter);
    ModelConfig::from_spec(spec)
        .unwrap_or_else(|_| ModelConfig::new(arbiter_llm::Provider::Anthropic, "claude-haiku-5-5"))
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
}

/// What each session shares: the bus, the model and the settings.
pub(crate) struct Shared {
    pub bus: Bus,
    /// The sessions' step records, carried by their logs (`session.<id>.log`).
    pub steps: arbiter_bus::steplog::StepLog,
    /// The records of sessions stored before protocol v2 (`session.<id>.state`),
    /// read once when such a session is restored.
    pub legacy_steps: arbiter_bus::steplog::StepLog,
    pub model: Arc<dyn Model>,
    pub config: Arc<Config>,
    pub fleet: fleet::Fleet,
    /// The per-console limits and what they count.
    pub caps: caps::Caps,
    /// `ArbiterOutput`'s model-facing schema, as the fleet last showed it:
    /// every turn carries the current one.
    pub form: fleet::Form,
    /// Sessions archived (the sweeper keeps it): their human lines are dropped.
    pub archived: retention::Archived,
    /// The workspaces' memory (the bucket `arbiter_memory`).
    pub memory: async_nats::jetstream::kv::Store,
    /// Seals the step records that ride on inputs (see `arbiter_bus::seal`).
    pub sealer: arbiter_bus::seal::Sealer,
}

/// Runs the coordinator until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<()> {
    if !arbiter_protocol::subjects::is_valid_token(&config.id) {
        return Err(Error::Config(format!(
            "coordinator id {:?} must be letters, digits, - or _",
            config.id
        )));
    }
    if !arbiter_protocol::subjects::is_valid_token(&config.pool) {
        return Err(Error::Config(format!(
            "pool name {:?} must be letters, digits, - or _",
            config.pool
        )));
    }
    let model = arbiter_llm::client_for_role(&config.model, Some(arbiter_protocol::Role::Arbiter))?;
    let mut config = config;
    config.context_budget =
        arbiter_llm::context_budget(model.as_ref(), config.context_budget).await;
    let conn = arbiter_bus::connect_with(&config.nats, "arbiter-coordinator", Reach::Wait).await?;
    let bus = Bus::open(conn, NatsRole::Coordinator, Reach::Wait).await?;
    // The pool's queue exists before any worker does, so its lag can be read
    // (an autoscaler that starts workers from zero reads it).
    arbiter_bus::setup::guarded(
        &bus.alarms,
        NatsRole::Coordinator,
        arbiter_bus::setup::ensure_pool_consumer(&bus.js, &config.pool),
    )
    .await?;
    // Limits are applied by an explicit update: declaring never changes them.
    arbiter_bus::setup::guarded(
        &bus.alarms,
        NatsRole::Coordinator,
        arbiter_bus::retention::apply_limits(&bus.js, &config.retention.limits),
    )
    .await?;
    // The webhooks' stream and durables exist before any session can store an event.
    let mut hook_consumers = Vec::new();
    if !config.hooks.is_empty() {
        match notify::prepare(&bus, &config.hooks, config.nats.replicas).await {
            Ok(consumers) => hook_consumers = consumers,
            Err(arbiter_bus::BusError::Denied { denied, .. }) => {
                tracing::error!(
                    denied,
                    "NATS denied this coordinator the webhooks' stream: its credential was signed before the webhooks' grant, so webhooks are off and sessions are routed without them (arbiter-admin revoke, then issue coordinator, gives it the current grants)"
                );
                config.hooks.clear();
            }
            Err(e) => return Err(e.into()),
        }
    }
    tracing::info!(nats = %arbiter_bus::redact_url(&config.nats.url), model = %config.model.spec(), budget = config.context_budget, "coordinator ready");
    let steps = arbiter_bus::steplog::StepLog::open(
        &bus,
        arbiter_protocol::subjects::SESSIONS_STREAM,
        arbiter_protocol::subjects::SESSION_BLOBS_BUCKET,
    )
    .await?;
    let legacy_steps = arbiter_bus::steplog::StepLog::open(
        &bus,
        arbiter_protocol::subjects::STATE_STREAM,
        arbiter_protocol::subjects::SESSION_BLOBS_BUCKET,
    )
    .await?;
    let memory = arbiter_bus::setup::riding_out("opening the memory bucket", || {
        arbiter_bus::setup::guarded(
            &bus.alarms,
            NatsRole::Coordinator,
            arbiter_bus::memory::open(&bus.js),
        )
    })
    .await?;
    let sealer = arbiter_bus::setup::riding_out("reading the sealing key", || {
        arbiter_bus::setup::guarded(
            &bus.alarms,
            NatsRole::Coordinator,
            arbiter_bus::seal::Sealer::load_or_create(&bus.js),
        )
    })
    .await?;
    // The Arbiter's reply form: what this deployment offers (`rules/form.rs`).
    let output_schema = rules::form::arbiter_schema(&rules::form::Offer::of(&config));
    let shared = Arc::new(Shared {
        sealer,
        memory,
        steps,
        legacy_steps,
        bus,
        model,
        fleet: fleet::Fleet::default(),
        caps: caps::Caps::new(config.console_caps.clone()),
        config: Arc::new(config),
        form: fleet::Form::new(output_schema),
        archived: retention::Archived::default(),
    });
    let alarms = shared.bus.alarms.clone();
    let sweeper = tokio::spawn(retention::sweep(shared.clone()));
    let form_keeper = tokio::spawn(fleet::keep_form(shared.clone()));
    let hooks_stop = tokio_util::sync::CancellationToken::new();
    let mut hooks = notify::start(
        &shared.bus,
        shared.config.hooks.clone(),
        hook_consumers,
        &hooks_stop,
    );
    let result = tokio::select! {
        result = cluster::intake::run(shared, shutdown) => result,
        refused = alarms.fatal() => Err(refused.into()),
    };
    sweeper.abort();
    form_keeper.abort();
    hooks_stop.cancel();
    while hooks.join_next().await.is_some() {}
    result
}
