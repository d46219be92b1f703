//! The Arbiter worker: takes summons from its pool's work queue when a slot
//! is free and runs each Orchestrator's agent loop (model, tools, subagents,
//! context watch), publishing its outputs and status. Each worker is also a
//! NATS micro service, so the fleet can be seen.
//!
//! A summons is the Orchestrator's lease: it stays unacknowledged while the
//! Orchestrator runs and is renewed as it goes (`lease.rs`); every step is
//! stored first (`state.rs`), so when a worker dies another worker of the
//! pool gets the summons again and resumes the Orchestrator where it was.

#![deny(clippy::print_stdout, clippy::print_stderr)]

mod agent;
mod contain;
pub mod context;
mod evidence;
mod inputs;
mod lease;
mod orchestrator;
mod outbox;
pub mod presence;
pub mod prompt;
pub mod runtime;
pub mod sandbox;
mod slots;
mod state;
mod status;
mod stop;
mod subagent;
pub mod tools;
mod transcript;
pub mod workspace;

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

use arbiter_bus::{Bus, Reach};
use arbiter_llm::{Model, ModelConfig};
use arbiter_protocol::roles::NatsRole;
use arbiter_protocol::{Summon, subjects};
use async_nats::jetstream::AckKind;
use async_nats::jetstream::consumer::{PullConsumer, pull};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::sandbox::{Sandbox, SandboxConfig, SandboxMode};
use crate::slots::Slots;
use crate::subagent::SubagentRole;

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
}

impl Default for Config {
    fn default() -> Self {
        Self {
            nats: arbiter_bus::NatsOptions::default(),
            pool: "default".into(),
            max_orchestrators: 4,
            workspace_root: PathBuf::from("workspaces"),
            model: default_model(),
            context_budget: 200_000,
            subagent_model: None,
            subagent_context_budget: 200_000,
            subagent_max_calls: 100,
            schema_repairs: 2,
            max_consecutive_notes: 8,
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
        }
    }
}

/// How long a lease lasts without renewal, by default.
pub const DEFAULT_LEASE: Duration = arbiter_bus::setup::DEFAULT_LEASE;
use arbiter_bus::setup::POOL_MAX_ACK_PENDING;
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

/// How long a fetch waits for a summons before asking again.
const FETCH_EXPIRY: Duration = Duration::from_secs(5);
/// How long a look in the emergency lane made on a wake-up waits for the
/// emergency to be stored: a core subscriber gets a message before the
/// server has stored it, and a look that asks for no wait may find the lane
/// empty and leave the emergency to the next pool fetch's end (up to
/// [`FETCH_EXPIRY`]). The wait ends as soon as the emergency is there.
const URGENT_STORE_WAIT: Duration = Duration::from_millis(250);

/// Runs the worker until `shutdown` completes; running Orchestrators are
/// cancelled and awaited before it returns.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<()> {
    if !subjects::is_valid_token(&config.pool) {
        return Err(Error::Config(format!(
            "pool name {:?} must be letters, digits, - or _",
            config.pool
        )));
    }
    if config.max_orchestrators == 0 {
        return Err(Error::Config(
            "--max-orchestrators must be at least 1".into(),
        ));
    }
    if config.lease < Duration::from_millis(300) {
        return Err(Error::Config(
            "--lease-secs must be at least 0.3 seconds".into(),
        ));
    }
    if config.subagent_max_calls == 0 {
        return Err(Error::Config(
            "--subagent-max-calls must be at least 1".into(),
        ));
    }
    std::fs::create_dir_all(&config.workspace_root).map_err(|e| {
        Error::Workspace(format!(
            "cannot create {}: {e}",
            config.workspace_root.display()
        ))
    })?;
    if config.runtime == Runtime::ClaudeCode {
        runtime::claude::check_allow_rules(&config.claude_code.allow).map_err(Error::Runtime)?;
        let version = runtime::claude::probe(&config.claude_code.bin)
            .await
            .map_err(Error::Runtime)?;
        tracing::info!(cli = %config.claude_code.bin.display(), %version, "Orchestrators run on the Claude Code CLI");
    }
    if config.runtime == Runtime::Codex {
        let version = runtime::codex::probe(&config.codex.bin, &config.model)
            .await
            .map_err(Error::Runtime)?;
        tracing::info!(cli = %config.codex.bin.display(), %version, "Orchestrators run on the Codex CLI");
    }
    let sandbox = start_sandbox(&config).await?;
    let mut config = config;
    let model =
        arbiter_llm::client_for_role(&config.model, Some(arbiter_protocol::Role::Orchestrator))?;
    config.context_budget =
        arbiter_llm::context_budget(model.as_ref(), config.context_budget).await;
    let subagent_model = arbiter_llm::client_for_role(
        config.subagent_model.as_ref().unwrap_or(&config.model),
        Some(arbiter_protocol::Role::Subagent),
    )?;
    let subagent = SubagentRole {
        context_budget: arbiter_llm::context_budget(
            subagent_model.as_ref(),
            config.subagent_context_budget,
        )
        .await,
        model_name: config
            .subagent_model
            .as_ref()
            .unwrap_or(&config.model)
            .model
            .clone(),
        prices: config.prices.clone(),
        model: subagent_model,
        max_calls: config.subagent_max_calls,
    };
    let conn = arbiter_bus::connect_with(&config.nats, &config.worker_id, Reach::Wait).await?;
    let client = conn.client.clone();
    let bus = Bus::open(conn, NatsRole::Worker, Reach::Wait).await?;
    let state = state::StateBackend::setup(&bus)
        .await
        .map_err(|message| js_error("setting up the Orchestrator state", message))?;
    let (mut consumer, lease) = arbiter_bus::setup::guarded(
        &bus.alarms,
        NatsRole::Worker,
        pool_consumer(&bus, &config.pool, config.lease, Lane::Queued),
    )
    .await?;
    // Emergencies: their own consumer, taken from before the queue, and a
    // core subscription on their subject that wakes a worker waiting on it.
    // A credential issued before the lane existed may not read it: the
    // worker then serves the queue alone and does not announce the lane, so
    // emergencies reach it in turn.
    let mut urgent = match arbiter_bus::setup::guarded(
        &bus.alarms,
        NatsRole::Worker,
        pool_consumer(&bus, &config.pool, config.lease, Lane::Urgent),
    )
    .await
    {
        Ok((urgent, _)) => Some(urgent),
        Err(e) => {
            tracing::warn!(error = %e, pool = %config.pool, "the emergency lane cannot be read (a credential issued before it existed?): emergencies reach this worker in turn; issue the worker's credential again (arbiter-admin issue worker NAME) to serve them first");
            None
        }
    };
    let mut urgent_wake = client
        .subscribe(subjects::summon_urgent(&config.pool))
        .await
        .map_err(|e| js_error("subscribing to the emergency lane", e))?;
    // Whether the lane may hold an emergency: at start (a backlog), after a
    // wake-up or a quiet fetch; not after the lane was found empty, so that a
    // claim costs no extra round trip.
    let mut urgent_maybe = true;
    // Whether that look follows a wake-up (it then waits for the store).
    let mut urgent_woken = false;
    let max_parked = config
        .max_parked
        .unwrap_or(config.max_orchestrators.saturating_mul(PARKED_PER_SLOT));
    let slots = Slots::new(
        &config.worker_id,
        &config.pool,
        config.max_orchestrators,
        max_parked,
    );
    let presence =
        presence::start(&client, slots.clone(), config.runtime, urgent.is_some()).await?;
    tracing::info!(worker = %config.worker_id, pool = %config.pool, slots = config.max_orchestrators, max_parked, park_after = ?config.park_after, ?lease, runtime = %config.runtime, "worker ready");
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
        tools: tools::specs()
            .into_iter()
            .chain([tools::task::spec()])
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
    // Since when fetches fail: quiet for `RIDE_OUT` (a NATS leader election
    // fails them for 4–9 s), loud after.
    let mut failing_since: Option<std::time::Instant> = None;
    'outer: loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            permit = slots.free() => match permit {
                Some(permit) => permit,
                None => break,
            },
        };
        // A parked Orchestrator that has input goes before any new summons.
        let Some(mut permit) = slots.hand_over(permit) else {
            continue;
        };
        // Holding a free slot: ask for exactly one summons, an emergency first.
        let (summon, msg) = loop {
            let lane_first = match &urgent {
                Some(urgent) if urgent_maybe => {
                    let wait = std::mem::take(&mut urgent_woken).then_some(URGENT_STORE_WAIT);
                    fetch_one(urgent, wait).await
                }
                _ => Ok(None),
            };
            let fetched = match lane_first {
                Ok(Some(found)) => Ok(Some(found)),
                other => {
                    urgent_maybe = false;
                    if let Err(e) = other {
                        tracing::debug!(error = %e, "fetching from the emergency lane failed; the queue is served");
                        if pool_consumer_missing(
                            &shared.bus,
                            &subjects::urgent_consumer(&shared.config.pool),
                        )
                        .await
                            && let Ok((again, _)) = pool_consumer(
                                &shared.bus,
                                &shared.config.pool,
                                shared.lease,
                                Lane::Urgent,
                            )
                            .await
                        {
                            tracing::warn!(pool = %shared.config.pool, "the pool's emergency consumer was deleted; made it again");
                            urgent = Some(again);
                        }
                    }
                    tokio::select! {
                        _ = &mut shutdown => break 'outer,
                        // An emergency published meanwhile: ask again, lane first.
                        // (A summons the server was sending to this fetch just then
                        // comes again after the lease.)
                        Some(_) = urgent_wake.next() => {
                            urgent_maybe = true;
                            urgent_woken = true;
                            continue;
                        }
                        // A summons the server was sending just then comes again
                        // after the lease; a parked Orchestrator would wait up to
                        // a whole fetch otherwise.
                        () = slots.wanted() => match slots.hand_over(permit) {
                            Some(kept) => {
                                permit = kept;
                                continue;
                            }
                            None => continue 'outer,
                        },
                        fetched = fetch_one(&consumer, Some(FETCH_EXPIRY)) => fetched,
                    }
                }
            };
            if arbiter_bus::metrics::on()
                && let Ok(info) = consumer.get_info().await
            {
                // What waits in the pool after this fetch (exported only).
                arbiter_bus::metrics::summons_pending(&shared.config.pool, info.num_pending);
            }
            match fetched {
                Ok(Some((summon, msg))) => match leases.get(&summon.orch_id) {
                    // Its lease ran out while this worker still runs it (a
                    // server restart, a stall): go on under the new delivery.
                    Some(held) if held.seq() == lease::stream_seq(&msg) => {
                        tracing::info!(orch.id = %summon.orch_id, "summons delivered again to its holder; lease renewed");
                        held.adopt(msg);
                    }
                    // Another summons of an Orchestrator this worker runs:
                    // a duplicate (see `state::claim`).
                    Some(_) => {
                        tracing::warn!(orch.id = %summon.orch_id, "a second summons of an Orchestrator this worker runs; dropped as a duplicate");
                        if let Err(e) = msg.double_ack().await {
                            tracing::warn!(error = %e, "could not acknowledge the duplicate summons; it comes back and is dropped again");
                        }
                    }
                    None if !shared.config.runtime.offers(summon.runtime.as_deref()) => {
                        // Left for a worker of the runtime it asks for.
                        tracing::warn!(orch.id = %summon.orch_id, wanted = summon.runtime.as_deref().unwrap_or_default(), runtime = %shared.config.runtime, "a summons for another runtime; not claimed, handed back");
                        let _ = msg.ack_with(AckKind::Nak(Some(shared.lease))).await;
                    }
                    None => break (summon, msg),
                },
                Ok(None) => {
                    failing_since = None;
                    // A quiet fetch: look in the lane again, in case a
                    // wake-up was missed (a reconnect).
                    urgent_maybe = true;
                }
                Err(e) => {
                    let since = *failing_since.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() < arbiter_bus::RIDE_OUT {
                        tracing::debug!(error = %e, "fetching summons failed (a NATS leader election?); retrying");
                    } else {
                        tracing::warn!(error = %e, failing_for = ?since.elapsed(), "fetching summons failed; retrying");
                    }
                    // Deleted under us: never spin on it.
                    match arbiter_bus::setup::missing_stream(&shared.bus, NatsRole::Worker).await {
                        Ok(Some(stream)) => {
                            tracing::error!(%stream, "a stream this worker uses was deleted; stopping");
                            gone = Some(arbiter_bus::BusError::Deleted { stream });
                            break 'outer;
                        }
                        Ok(None)
                            if pool_consumer_missing(
                                &shared.bus,
                                &subjects::pool_consumer(&shared.config.pool),
                            )
                            .await =>
                        {
                            match pool_consumer(
                                &shared.bus,
                                &shared.config.pool,
                                shared.lease,
                                Lane::Queued,
                            )
                            .await
                            {
                                Ok((again, _)) => {
                                    tracing::warn!(pool = %shared.config.pool, "the pool's summons consumer was deleted; made it again");
                                    consumer = again;
                                }
                                Err(e) => {
                                    tracing::warn!(error = %e, "could not make the pool's summons consumer again")
                                }
                            }
                        }
                        _ => {}
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            while running.try_join_next().is_some() {}
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

/// Resolves the tools' sandbox and runs `true` through it once: a worker
/// whose sandbox does not work does not start.
async fn start_sandbox(config: &Config) -> Result<Sandbox> {
    let root = config.workspace_root.canonicalize().map_err(|e| {
        Error::Workspace(format!(
            "cannot resolve {}: {e}",
            config.workspace_root.display()
        ))
    })?;
    let sandbox = Sandbox::new(&config.sandbox, &root)?;
    match config.sandbox.mode {
        SandboxMode::None => {
            tracing::warn!(
                "--sandbox none: tools' commands run unconfined, as this worker's user; they can \
                 read its environment, its memory and its files (API keys included)"
            );
            match sandbox.containment() {
                Some(sandbox::Containment::ProcessGroup) | None => tracing::warn!(
                    "--sandbox none: no writable cgroup v2 and no PID namespace here; a timeout \
                     or cancel kills a command's process group only, so a process it started \
                     with setsid, nohup and disown, or a double fork survives it"
                ),
                Some(how) => tracing::info!(
                    "--sandbox none: tools' commands run in {how}; a timeout or cancel kills \
                     every process they started"
                ),
            }
        }
        SandboxMode::Bwrap => {
            sandbox.probe(&root).await?;
            for name in config
                .sandbox
                .env
                .iter()
                .filter(|n| sandbox::is_secret_env(n))
            {
                tracing::warn!(
                    name,
                    "--sandbox-env passes a variable that looks secret to every command"
                );
            }
            tracing::info!(
                network = !config.sandbox.unshare_net,
                "tools' commands run in a bwrap sandbox"
            );
        }
    }
    Ok(sandbox)
}

/// The pool's shared consumer, with `ack_wait` set to the lease; returns it
/// with the lease actually in force. A consumer made by an older worker (or
/// with another lease) is updated; if that fails, its own `ack_wait` is used.
async fn pool_consumer(
    bus: &Bus,
    pool: &str,
    lease: Duration,
    lane: Lane,
) -> Result<(PullConsumer, Duration)> {
    let (name, config) = match lane {
        Lane::Queued => (
            subjects::pool_consumer(pool),
            arbiter_bus::setup::pool_consumer_config(pool, lease),
        ),
        Lane::Urgent => (
            subjects::urgent_consumer(pool),
            arbiter_bus::setup::urgent_consumer_config(pool, lease),
        ),
    };
    let stream = bus
        .js
        .get_stream(subjects::SUMMONS_STREAM)
        .await
        .map_err(|e| js_error("opening the summons stream", e))?;
    let consumer: PullConsumer = match stream.get_consumer::<pull::Config>(&name).await {
        Ok(existing) => {
            let have = &existing.cached_info().config;
            if have.ack_wait == lease && have.max_ack_pending == POOL_MAX_ACK_PENDING {
                existing
            } else {
                match stream.update_consumer(config).await {
                    Ok(updated) => {
                        tracing::info!(?lease, "pool consumer updated to this worker's lease");
                        updated
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not update the pool consumer; using its lease as it is");
                        existing
                    }
                }
            }
        }
        Err(_) => stream
            .get_or_create_consumer(&name, config)
            .await
            .map_err(|e| js_error("creating the pool consumer", e))?,
    };
    let in_force = match consumer.cached_info().config.ack_wait {
        // Unset means the server's default.
        d if d.is_zero() => Duration::from_secs(30),
        d => d,
    };
    Ok((consumer, in_force))
}

/// A pool's two summons consumers: `pool-<pool>` for the queue,
/// `urgent-<pool>` for emergencies, which are taken first.
#[derive(Debug, Clone, Copy)]
enum Lane {
    Queued,
    Urgent,
}

/// Whether the summons consumer `name` is gone (the stream being there).
async fn pool_consumer_missing(bus: &Bus, name: &str) -> bool {
    let Ok(stream) = bus.js.get_stream(subjects::SUMMONS_STREAM).await else {
        return false;
    };
    stream
        .get_consumer::<pull::Config>(name)
        .await
        .is_err_and(|e| e.to_string().to_lowercase().contains("not found"))
}

fn js_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Bus(arbiter_bus::BusError::JetStream {
        what: what.into(),
        message: e.to_string(),
    })
}

/// One fetch of at most one summons, left unacknowledged: it becomes the
/// Orchestrator's lease. A malformed one is logged, terminated (never
/// redelivered) and skipped. `wait`: how long to wait for one; `None`:
/// only what is there now.
async fn fetch_one(
    consumer: &PullConsumer,
    wait: Option<Duration>,
) -> Result<Option<(Summon, async_nats::jetstream::Message)>> {
    let fetch = consumer.fetch().max_messages(1);
    let fetch = match wait {
        Some(wait) => fetch.expires(wait),
        None => fetch,
    };
    let mut batch = fetch
        .messages()
        .await
        .map_err(|e| js_error("fetching a summons", e))?;
    while let Some(next) = batch.next().await {
        let msg = next.map_err(|e| js_error("fetching a summons", e))?;
        let subject = msg.subject.to_string();
        match arbiter_bus::decode::<Summon>(&subject, &msg.payload) {
            Ok(summon)
                if subjects::is_valid_token(&summon.orch_id)
                    && subjects::is_valid_token(&summon.session_id) =>
            {
                return Ok(Some((summon, msg)));
            }
            Ok(_) => {
                tracing::error!(
                    subject,
                    "summons with an invalid orch or session id rejected"
                );
                let _ = msg.ack_with(AckKind::Term).await;
            }
            Err(error) => {
                tracing::error!(subject, %error, "malformed summons rejected");
                let _ = msg.ack_with(AckKind::Term).await;
            }
        }
    }
    Ok(None)
}
