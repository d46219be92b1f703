//! One Orchestrator on this worker, from its summons to its end: claim it
//! (start it, or take it over from its stored state), hold its lease, run the
//! agent loop between its inputs, its status heartbeat and its
//! outbox, and finish according to why it stopped:
//!
//! - released or cancelled: the end is stored, then the summons is
//!   acknowledged;
//! - failed: the failure is stored and published, then the same;
//! - fenced (another worker took it over): nothing more is written,
//!   published or acknowledged;
//! - the worker is shutting down: the summons goes back to the pool at once.
//!
//! In every case its slot is freed as soon as the agent loop stops. While it
//! waits for the Arbiter it may park: give the slot back for a while (see
//! `slots.rs`); its lease and its inputs stay.

use std::sync::Arc;

use arbiter_protocol::{
    ControlAction, OrchestratorEvent, OrchestratorFailed, OrchestratorState, OrchestratorStatus,
    Summon, VERSION, WireError,
};
use chrono::Utc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::Shared;
use crate::agent::{Agent, Start, Stop};
use crate::evidence::{self, Baseline};
use crate::inputs;
use crate::lease::{Lease, Registered};
use crate::outbox::Outbox;
use crate::slots::{Seat, Slot};
use crate::state::{self, Claim, EndReason, Phase, Snapshot, StateStore};
use crate::status::StatusHandle;
use crate::stop::{Cause, Stopper};
use crate::tools::ToolContext;
use crate::workspace::{OpenError, Workspace};

/// Inputs buffered between the reader and the agent loop.
const INPUT_BUFFER: usize = 64;

/// What a summons hands the runner: the Orchestrator, its lease, its slot.
pub(crate) struct Summoned {
    pub summon: Summon,
    pub lease: Arc<Lease>,
    pub registered: Registered,
    pub slot: Slot,
    /// The context the summons came with: its first turn continues that trace.
    pub trace: arbiter_bus::TraceContext,
}

/// Runs one Orchestrator in its slot until it ends, is taken over, or the
/// worker shuts down (`shutdown`).
pub(crate) async fn run(shared: Arc<Shared>, summoned: Summoned, shutdown: CancellationToken) {
    let summon = &summoned.summon;
    let span = tracing::info_span!("orchestrator", orch.id = %summon.orch_id, session.id = %summon.session_id, number = summon.number);
    arbiter_bus::metrics::orchestrator_live(1);
    run_inner(shared, summoned, shutdown).instrument(span).await;
    arbiter_bus::metrics::orchestrator_live(-1);
}

async fn run_inner(shared: Arc<Shared>, summoned: Summoned, shutdown: CancellationToken) {
    let Summoned {
        summon,
        lease,
        registered,
        slot,
        trace,
    } = summoned;
    let stopper = Stopper::new(&shutdown);
    // The workspace is opened (a directory made, for a team member a git
    // worktree or a copy) and walked off the runtime's threads, while the
    // claim makes its round trips to the server.
    let prepared = tokio::task::spawn_blocking({
        let root = shared.config.workspace_root.clone();
        let session = summon.session_id.clone();
        let member = summon.member;
        move || prepare_workspace(&root, &session, member)
    });
    let claimed = match claim(&shared, &summon, &lease, &stopper).await {
        Ok(claimed) => claimed,
        Err(how) => return let_go(registered, slot, &lease, how).await,
    };
    let opened = open(
        &shared, &summon, &lease, &stopper, claimed, prepared, &shutdown,
    )
    .await;
    let Opened {
        claimed,
        baseline,
        workspace,
        status,
        heartbeat,
        outbox,
        inputs,
        reader,
    } = match opened {
        Ok(opened) => opened,
        Err(how) => return let_go(registered, slot, &lease, how).await,
    };

    let mcp = start_mcp(&shared, &summon, &workspace, &stopper, &status).await;
    let ctx = ToolContext {
        workspace,
        cancel: stopper.token().clone(),
        sandbox: shared.sandbox.clone(),
        mcp,
    };
    let checkpoints =
        crate::checkpoint::Checkpoints::open(shared.sandbox.clone(), ctx.workspace.root(), &summon);
    let mut claimed = claimed;
    let fresh = claimed.snapshot.tool_count == 0 && claimed.snapshot.out_seq == 0;
    if let (Some(commit), true) = (&summon.start_from, fresh) {
        // The human rewound the workspace: restored before the first step,
        // and the first request says so; one that cannot be restored fails
        // the Orchestrator with why, the workspace as it was.
        let restored = match &checkpoints {
            Ok(checkpoints) => checkpoints.rewind_to(commit).await,
            Err(why) => Err(why.clone()),
        };
        match restored {
            Ok(line) => {
                tracing::info!(checkpoint = %commit, "workspace rewound before the first step");
                claimed.snapshot.inbox.push(line);
            }
            Err(why) => {
                let short: String = commit.chars().take(12).collect();
                let message =
                    format!("workspace: the rewind to checkpoint {short} was not done: {why}");
                tracing::warn!(%message, "the Orchestrator cannot start");
                let start = (claimed, &outbox, summon.number);
                let how = refuse(start, message, &status, heartbeat, &shutdown).await;
                return let_go(registered, slot, &lease, how).await;
            }
        }
    }
    match &checkpoints {
        // An Orchestrator that has done nothing yet: the workspace as it
        // finds it, first (the human's state, the first time).
        Ok(checkpoints) if fresh && summon.start_from.is_none() => {
            match checkpoints.make_start().await {
                Ok(Some(made)) => {
                    tracing::info!(commit = %made.commit, files = made.files, "checkpoint of the workspace as found")
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "the checkpoint of the workspace as found could not be made")
                }
            }
        }
        Ok(_) => {}
        Err(why) => tracing::info!(%why, "no checkpoints"),
    }
    let start = Start {
        transcript: claimed.transcript,
        snapshot: claimed.snapshot,
        store: claimed.store,
        seat: Seat::new(slot),
        baseline,
        cli_transcript: claimed.cli_transcript,
        checkpoints,
    };
    let mut agent = Agent::new(
        shared.clone(),
        ctx,
        stopper.clone(),
        start,
        inputs,
        status.clone(),
    );
    agent.begin_turn(&trace);
    let stopped = agent.run().await;
    // The runtime's process (the CLI) ends with the loop, whatever ended it.
    agent.close_runtime().await;
    let end = end_of(stopped, &mut agent, &stopper, &shutdown).await;
    // Whatever ended the loop, nothing of it may keep running: tool
    // processes and subagents watch this token.
    stopper.token().cancel();
    if matches!(end, End::Done) {
        // Its end stored, before its last status: the fence still holds.
        agent.hand_over().await;
    }
    let how = wind_down(&shared, &summon.orch_id, end, &status, heartbeat, &reader).await;
    drop(registered);
    agent.leave_seat();
    if matches!(how, LetGo::Release) {
        // Before the summons (the lease) goes: the fence still holds.
        agent.roll_up().await;
    }
    how.apply(&lease).await;
    reader.abort();
    let _ = reader.await;
}

/// What a claim hands the run: the Orchestrator's store and what its
/// records hold (nothing yet for a fresh one).
struct Claimed {
    store: StateStore,
    transcript: Vec<arbiter_llm::Message>,
    snapshot: Snapshot,
    baseline: Option<Baseline>,
    cli_transcript: Option<String>,
}

/// Claims the Orchestrator: starts it, or takes it over from its records.
/// `Err`: it is not to run here, and how its summons goes.
async fn claim(
    shared: &Shared,
    summon: &Summon,
    lease: &Lease,
    stopper: &Stopper,
) -> Result<Claimed, LetGo> {
    let worker_id = &shared.config.worker_id;
    let claim = state::claim(
        &shared.state,
        summon,
        lease.seq(),
        worker_id,
        stopper.token(),
    )
    .await;
    match claim {
        Ok(Some(Claim::Fresh(store, transcript))) => {
            tracing::info!("Orchestrator starting");
            Ok(Claimed {
                store,
                transcript,
                snapshot: Snapshot::new(),
                baseline: None,
                cli_transcript: None,
            })
        }
        Ok(Some(Claim::Resumed(store, restored))) => {
            tracing::info!(from = %restored.worker_id, rev = restored.rev, messages = restored.transcript.len(), "Orchestrator resumed from its stored state");
            Ok(Claimed {
                store,
                transcript: restored.transcript,
                snapshot: restored.snapshot,
                baseline: restored.baseline,
                cli_transcript: restored.cli_transcript,
            })
        }
        Ok(Some(Claim::Ended)) => {
            tracing::info!("Orchestrator already ended; summons acknowledged");
            Err(LetGo::Release)
        }
        Ok(Some(Claim::Duplicate { holder })) => {
            // Its inputs belong to the holder: only this summons goes.
            tracing::warn!(%holder, "a second summons of an Orchestrator that is held; dropped as a duplicate");
            Err(LetGo::Release)
        }
        Ok(None) => {
            tracing::warn!("could not claim the Orchestrator; handing its summons back");
            Err(LetGo::HandBack(Some(shared.lease)))
        }
        Err(e) => {
            tracing::error!(error = %e, "the Orchestrator's state is unreadable; handing its summons back");
            Err(LetGo::HandBack(Some(shared.lease)))
        }
    }
}

/// A claimed Orchestrator with its status going out, its workspace open
/// and its inputs being read: what its agent loop starts from.
struct Opened {
    claimed: Claimed,
    baseline: Baseline,
    workspace: Workspace,
    status: StatusHandle,
    heartbeat: JoinHandle<()>,
    outbox: Outbox,
    inputs: mpsc::Receiver<inputs::Input>,
    reader: JoinHandle<()>,
}

/// Starts the claimed Orchestrator's status and heartbeat, and opens its
/// workspace (`prepared`) and its inputs. `Err`: it cannot run, and how its
/// summons goes (a workspace that cannot be opened is stored as its
/// failure first).
async fn open(
    shared: &Shared,
    summon: &Summon,
    lease: &Lease,
    stopper: &Stopper,
    mut claimed: Claimed,
    prepared: JoinHandle<Result<(Workspace, evidence::Walk), OpenError>>,
    shutdown: &CancellationToken,
) -> Result<Opened, LetGo> {
    if claimed.snapshot.budget.is_none() {
        // Stored with its next record; an input may change it later.
        claimed.snapshot.budget = summon.budget;
    }
    let status = StatusHandle::new(
        initial_status(shared, summon, &claimed.snapshot),
        Some(shared.bus.clone()),
    );
    lease.watch(claimed.store.fence(), stopper.clone(), status.clone());
    status.publish().await;
    let heartbeat = status.spawn_heartbeat();
    let outbox = Outbox::new(&summon.session_id, &summon.orch_id);

    // The session id alone decides the workspace: a summons naming a
    // directory could otherwise open another session's files.
    if let Some(named) = summon
        .workspace
        .as_deref()
        .filter(|named| *named != summon.session_id)
    {
        tracing::warn!(
            workspace = named,
            "the summons names another workspace; ignored, the session's own is used"
        );
    }
    let opened = match prepared.await {
        Ok(opened) => opened.map_err(|e| e.to_string()),
        Err(e) => Err(format!("opening it failed: {e}")),
    };
    let (workspace, walk) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            let message = format!("workspace: {e}");
            let start = (claimed, &outbox, summon.number);
            return Err(refuse(start, message, &status, heartbeat, shutdown).await);
        }
    };
    // Its policy: the layers its records hold, else this worker's floor
    // under the session's; refused when that would loosen the floor, or
    // when the runtime cannot hold it to them (approval.rs).
    let stored = claimed.snapshot.layers.take();
    let layers = crate::approval::layers_for(&shared.config.policy, summon.layers(), stored)
        .and_then(|layers| {
            crate::runtime::policy::map(shared.config.runtime, &layers)?;
            Ok(layers)
        });
    match layers {
        // Stored with its next record, before any tool runs.
        Ok(layers) => claimed.snapshot.layers = Some(layers),
        Err(message) => {
            let start = (claimed, &outbox, summon.number);
            return Err(refuse(start, message, &status, heartbeat, shutdown).await);
        }
    }
    let baseline = match claimed.baseline.take() {
        Some(baseline) => baseline,
        None => {
            // Walked before the agent runs, stored with its next record
            // (which comes before any tool runs).
            let baseline = Baseline {
                walk,
                // Found none after work was done: count from here, and say so.
                at_takeover: claimed.snapshot.tool_count > 0,
            };
            claimed.store.keep_baseline(baseline.clone());
            baseline
        }
    };
    let feed = match inputs::open(&shared.bus, &summon.session_id, &summon.orch_id).await {
        Ok(feed) => feed,
        Err(e) => {
            tracing::error!(error = %e, "cannot read the inputs; handing the summons back");
            heartbeat.abort();
            return Err(LetGo::HandBack(Some(shared.lease)));
        }
    };
    let (inputs_tx, inputs) = mpsc::channel(INPUT_BUFFER);
    let reader = tokio::spawn(inputs::read(
        feed,
        claimed.snapshot.in_seq,
        inputs_tx,
        stopper.clone(),
    ));
    Ok(Opened {
        claimed,
        baseline,
        workspace,
        status,
        heartbeat,
        outbox,
        inputs,
        reader,
    })
}

/// How the run ends, from why the agent loop stopped: a release or cancel
/// is stored as the Orchestrator's end here.
async fn end_of(
    stopped: Stop,
    agent: &mut Agent,
    stopper: &Stopper,
    shutdown: &CancellationToken,
) -> End {
    match stopped {
        Stop::Failed => End::Done,
        Stop::Fenced => End::Fenced,
        Stop::Interrupted => match stopper.take_cause() {
            Cause::Control { action } => {
                let reason = match action {
                    ControlAction::Release => EndReason::Released,
                    ControlAction::Cancel => EndReason::Cancelled,
                };
                tracing::info!(?reason, "Orchestrator stopping");
                // Whatever runs must stop before the end is stored.
                stopper.token().cancel();
                match agent.end(reason, shutdown).await {
                    Ok(()) => End::Done,
                    Err(arbiter_bus::steplog::AppendError::Fenced) => End::Fenced,
                    Err(_) => End::Shutdown,
                }
            }
            Cause::Fenced => End::Fenced,
            Cause::Shutdown => End::Shutdown,
        },
    }
}

/// Says the end in its status (or, taken over or shutting down, says
/// nothing more) and how its summons goes.
async fn wind_down(
    shared: &Shared,
    orch_id: &str,
    end: End,
    status: &StatusHandle,
    heartbeat: JoinHandle<()>,
    reader: &JoinHandle<()>,
) -> LetGo {
    match end {
        End::Done => {
            tracing::info!("Orchestrator ended");
            // The CLIs' homes (claude-code, codex runtimes): their sessions
            // and threads are in the records.
            for homes in [
                crate::runtime::claude::HOMES_DIR,
                crate::runtime::codex::HOMES_DIR,
            ] {
                let home = shared.config.workspace_root.join(homes).join(orch_id);
                let _ = tokio::fs::remove_dir_all(home).await;
            }
            // The stopped status goes out before the slot is taken by
            // another, so status never shows more Orchestrators than slots.
            stop_status(status, heartbeat).await;
            LetGo::Release
        }
        End::Fenced => {
            tracing::warn!(
                "Orchestrator taken over by another worker; stopped here without a trace"
            );
            heartbeat.abort();
            reader.abort();
            LetGo::Abandon
        }
        End::Shutdown => {
            tracing::info!("worker shutting down; the Orchestrator goes back to the pool");
            heartbeat.abort();
            reader.abort();
            LetGo::HandBack(None)
        }
    }
}

/// How an Orchestrator's summons is let go of, the last thing this worker
/// does with it.
enum LetGo {
    /// Its end is stored: acknowledged, the lease is over.
    Release,
    /// Not ended here (a claim that failed, the worker shutting down): back
    /// to the pool, for any worker after the delay.
    HandBack(Option<std::time::Duration>),
    /// Another worker holds it: touched no more.
    Abandon,
}

impl LetGo {
    async fn apply(self, lease: &Lease) {
        match self {
            Self::Release => lease.release().await,
            Self::HandBack(delay) => lease.hand_back(delay).await,
            Self::Abandon => lease.abandon(),
        }
    }
}

/// Lets go of an Orchestrator whose agent never ran: out of the registry (a
/// summons delivered again is no longer its), the slot freed, then the
/// summons as `how` says.
async fn let_go(registered: Registered, slot: Slot, lease: &Lease, how: LetGo) {
    drop(registered);
    drop(slot);
    how.apply(lease).await;
}

/// Opens the session's workspace and walks it (the baseline its evidence is
/// measured from, if its records hold none yet). A member of a team works in
/// a workspace of its own (see `workspace.rs`). Blocking: file system work.
fn prepare_workspace(
    root: &std::path::Path,
    session: &str,
    member: Option<u32>,
) -> Result<(Workspace, evidence::Walk), OpenError> {
    let opened = match member {
        Some(member) => Workspace::open_member(root, session, member),
        None => Workspace::open(root, session),
    }?;
    let walk = evidence::walk(opened.root(), evidence::MAX_WALK_ENTRIES);
    Ok((opened, walk))
}

/// How an Orchestrator's run ended on this worker.
enum End {
    /// Ended for good and stored.
    Done,
    Fenced,
    Shutdown,
}

/// Its status as it starts or resumes: number and id from the summons, this
/// worker's id, the counters from its stored state.
fn initial_status(shared: &Shared, summon: &Summon, snapshot: &Snapshot) -> OrchestratorStatus {
    let budget = shared.config.context_budget;
    OrchestratorStatus {
        v: VERSION,
        session_id: summon.session_id.clone(),
        orch_id: summon.orch_id.clone(),
        number: summon.number,
        worker_id: shared.config.worker_id.clone(),
        state: match snapshot.phase {
            Phase::Waiting => OrchestratorState::Waiting,
            _ if snapshot.approval.is_some() => OrchestratorState::WaitingApproval,
            _ => OrchestratorState::Working,
        },
        context_pct: crate::context::percent(snapshot.context_tokens, budget),
        context_tokens: snapshot.context_tokens,
        context_budget: budget,
        current_tool: None,
        tool_count: snapshot.tool_count,
        parked: false,
        spend: snapshot.spend,
        mcp_failures: Vec::new(),
        branch: None,
        at: Utc::now(),
    }
}

/// The claimed Orchestrator cannot run (`message` says why): its failure
/// is stored and its status stopped; how its summons goes then.
async fn refuse(
    (claimed, outbox, number): (Claimed, &Outbox, u32),
    message: String,
    status: &StatusHandle,
    heartbeat: JoinHandle<()>,
    shutdown: &CancellationToken,
) -> LetGo {
    let Claimed {
        store, snapshot, ..
    } = claimed;
    match fail_early(store, snapshot, outbox, number, message, shutdown).await {
        Ok(()) => {
            stop_status(status, heartbeat).await;
            LetGo::Release
        }
        Err(_) => {
            heartbeat.abort();
            LetGo::Abandon
        }
    }
}

/// The Orchestrator cannot start: the failure is stored (as the output).
async fn fail_early(
    mut store: StateStore,
    mut snapshot: Snapshot,
    outbox: &Outbox,
    number: u32,
    message: String,
    until: &CancellationToken,
) -> Result<(), arbiter_bus::steplog::AppendError> {
    tracing::error!(%message, "Orchestrator cannot start");
    snapshot.out_seq += 1;
    snapshot.phase = Phase::Ended {
        reason: EndReason::Failed,
    };
    let error = WireError::OrchestratorFailed { number, message };
    let event = outbox.message(
        snapshot.out_seq,
        OrchestratorEvent::Failed(OrchestratorFailed { error }),
        None,
    );
    store
        .write(Vec::new(), &snapshot, vec![event], until)
        .await?;
    Ok(())
}

/// Publishes the final, stopped status and ends the heartbeat.
async fn stop_status(status: &StatusHandle, heartbeat: JoinHandle<()>) {
    heartbeat.abort();
    status
        .update(|s| {
            s.state = OrchestratorState::Stopped;
            s.current_tool = None;
            s.parked = false;
        })
        .await;
}

/// The Orchestrator's MCP servers, started and listed by the native
/// runtime; a CLI runtime is given them in its own configuration and starts
/// them itself. Those that cannot be used are named in its status, with why.
async fn start_mcp(
    shared: &Shared,
    summon: &Summon,
    workspace: &Workspace,
    stopper: &Stopper,
    status: &StatusHandle,
) -> Arc<crate::mcp::Servers> {
    let configs = &shared.config.mcp_servers;
    if configs.is_empty() {
        return Arc::default();
    }
    let servers = if shared.config.runtime == crate::Runtime::Native {
        crate::mcp::Servers::start(configs, &shared.sandbox, workspace.root(), stopper.token())
            .await
    } else {
        let read_only = std::iter::once(&shared.config.policy)
            .chain(&summon.layers())
            .any(|p| p.mode == arbiter_protocol::approval::Mode::ReadOnly);
        crate::mcp::Servers::for_cli(configs, &shared.sandbox, workspace.root(), read_only)
    };
    let failures: Vec<String> = servers.failures().iter().map(ToString::to_string).collect();
    if !failures.is_empty() {
        status.update(|s| s.mcp_failures = failures).await;
    }
    tracing::info!(
        servers = configs.len() - servers.failures().len(),
        tools = servers.specs().len(),
        failed = servers.failures().len(),
        "MCP servers started"
    );
    Arc::new(servers)
}
