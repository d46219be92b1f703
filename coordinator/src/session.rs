//! One Arbiter session's shell: an actor that owns the session's [`Core`]
//! and does its I/O. One loop takes an event (an input, a turn's or a
//! handoff's end, a deadline, an output seen early), hands it to the core,
//! and commits the step the core decided at one site: it is stored, then
//! its effects are published, then its inputs acknowledged, then its tasks
//! started (see `state.rs` for the records). Everything the session
//! decides is in the core (`rules.rs`); nothing here decides.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arbiter_bus::TraceContext;
use arbiter_llm::structured::{self, Progress, Structured};
use arbiter_llm::{LlmError, Message, Request};
use arbiter_protocol::{ArbiterDelta, ArbiterOutput, VERSION, subjects};
use chrono::Utc;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::Shared;
use crate::delta::MessageExtractor;
use crate::rules::turn::TurnStart;
use crate::rules::{Core, Now, Step, Task};
use crate::state;

mod foresee;
mod handoff;
mod status;
mod turn;

pub(crate) use crate::rules::Input;
use handoff::RunningHandoff;
use status::{STATUS_HEARTBEAT, StatusPublisher};
use turn::{RunningTurn, fleet_view, turn_call};

/// Inputs a session's inbox holds. When it is full the intake never waits
/// (that would stall every other session): it puts the message back on the
/// server, to come again after [`PUT_BACK_DELAY`], and the session's log
/// says so (see [`Handle::offer`]).
pub(crate) const INBOX_CAPACITY: usize = 256;
/// How long a message put back because its session's inbox was full waits
/// before the server delivers it again.
pub(crate) const PUT_BACK_DELAY: Duration = Duration::from_secs(1);
/// How long a console has to say it follows the session (see `Task::AskWatchers`).
const WATCHERS_WAIT: Duration = Duration::from_secs(2);

/// The time now, for the core's entry points (only the shell reads clocks).
fn now() -> Now {
    Now {
        wall: Utc::now(),
        mono: tokio::time::Instant::now(),
    }
}

/// Cloneable address of a session actor.
#[derive(Clone)]
pub(crate) struct Handle {
    tx: mpsc::Sender<Input>,
    /// Messages put back since the session last said so in its log.
    put_back: Arc<AtomicU64>,
    /// No turn running and nothing queued: it can be handed over now.
    idle: Arc<AtomicBool>,
    /// Stops the actor (at a step boundary).
    cancel: CancellationToken,
}

/// Why an input was not handed to its session.
pub(crate) enum Refused {
    /// The inbox is full: the input comes back to the caller, to put back.
    Full(Box<Input>),
    /// The session actor has stopped: the input comes back too.
    Stopped(Box<Input>),
}

impl Handle {
    /// Hands `input` to the session without waiting.
    pub(crate) fn offer(&self, input: Input) -> Result<(), Refused> {
        self.tx.try_send(input).map_err(|e| match e {
            mpsc::error::TrySendError::Full(input) => {
                self.put_back.fetch_add(1, Ordering::Relaxed);
                Refused::Full(Box::new(input))
            }
            mpsc::error::TrySendError::Closed(input) => Refused::Stopped(Box::new(input)),
        })
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.idle.load(Ordering::Relaxed)
    }

    /// Stops the actor after the step it is in, to hand the session over.
    pub(crate) fn stop(&self) {
        self.cancel.cancel();
    }
}

pub(crate) struct Session {
    core: Core,
    shared: Arc<Shared>,
    /// The session's own inbox, for what its tasks find.
    inbox: mpsc::WeakSender<Input>,
    /// Appends the session's records, fenced on the last one.
    writer: arbiter_bus::steplog::Writer,
    rev: u64,
    /// Transcript turns already stored.
    stored_turns: usize,
    status: StatusPublisher,
    /// Its solo Orchestrator's output, seen as it is published (see `foresee.rs`).
    watch: foresee::OutputWatch,
    /// The Arbiter call started on such an output, until its turn starts.
    early: foresee::Early,
    /// The span of the Arbiter turn in flight (none between turns).
    turn_span: tracing::Span,
    /// Counts the model requests of the turn in flight.
    meter: arbiter_llm::meter::Meter,
    cancel: CancellationToken,
    /// Messages the intake put back because the inbox was full.
    put_back: Arc<AtomicU64>,
    /// See [`Handle::is_idle`].
    idle: Arc<AtomicBool>,
}

/// Starts a session actor whose lease this coordinator holds, restored from
/// its stored records if it has any (on top of which it stores a claim
/// record, so that the coordinator that ran it before can store nothing
/// more). The actor stops at once, putting back what it was given, when
/// another coordinator claimed it in between or `cancel` fired first. Its
/// id is sent on `ended` when the actor stops.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    id: String,
    cancel: CancellationToken,
    tasks: &mut tokio::task::JoinSet<()>,
    ended: mpsc::UnboundedSender<String>,
) -> Handle {
    let (tx, rx) = mpsc::channel(INBOX_CAPACITY);
    let put_back = Arc::new(AtomicU64::new(0));
    let writer = state::writer(&shared.steps, &id, 0);
    let core = Core::new(id, shared.config.clone(), shared.form.current(), now());
    let session = Session {
        core,
        shared,
        inbox: tx.downgrade(),
        writer,
        rev: 0,
        stored_turns: 0,
        status: StatusPublisher::new(),
        watch: foresee::OutputWatch::default(),
        early: foresee::Early::default(),
        turn_span: tracing::Span::none(),
        meter: arbiter_llm::meter::Meter::default(),
        cancel,
        put_back: put_back.clone(),
        idle: Arc::new(AtomicBool::new(false)),
    };
    let idle = session.idle.clone();
    let stop = session.cancel.clone();
    // Restored in its own task, so the intake (and the messages other
    // coordinators forward to it) never waits on one session's records;
    // what arrives meanwhile waits in the inbox.
    tasks.spawn(async move {
        arbiter_bus::metrics::session_live(1);
        let id = session.core.id.clone();
        session.run(rx).await;
        arbiter_bus::metrics::session_live(-1);
        let _ = ended.send(id);
    });
    Handle {
        tx,
        put_back,
        idle,
        cancel: stop,
    }
}

impl Session {
    /// Loads the session's records, trying again while the server cannot be
    /// read: starting afresh on a passing error would lose the transcript.
    /// A session that has records is claimed: a record of this coordinator's
    /// own is stored on top of the last one (same snapshot, its outbox
    /// carried over), fenced on it. False if the claim was fenced out or the
    /// session cancelled.
    async fn restore(&mut self) -> bool {
        let bus = self.shared.bus.clone();
        let shared = self.shared.clone();
        let id = self.core.id.clone();
        let Some(loaded) =
            arbiter_bus::steplog::retry(&self.cancel, "read the session's state", || {
                state::load(&shared.steps, &shared.legacy_steps, &shared.sealer, &id)
            })
            .await
        else {
            return false;
        };
        self.writer = state::claim_writer(&self.shared.steps, &id, loaded.last_seq);
        match loaded.restored {
            Some(restored) => {
                self.core.transcript = restored.transcript;
                self.stored_turns = self.core.transcript.len();
                self.core.state = restored.snapshot;
                self.core.state.upgrade();
                self.rev = restored.rev + 1;
                let claim = state::record(&id, self.rev, &[], &self.core.state, &restored.outbox);
                // A claim shows nothing: it stands at the log's last entry.
                match state::persist(
                    &mut self.writer,
                    &self.shared.sealer,
                    &claim,
                    None,
                    loaded.shown_seq,
                    &self.core.trace,
                    &self.cancel,
                )
                .await
                {
                    Ok(()) => {}
                    Err(arbiter_bus::steplog::AppendError::Stopped) => return false,
                    Err(arbiter_bus::steplog::AppendError::Fenced) => {
                        tracing::warn!(session.id = %id, "another coordinator claimed this session first; not run here");
                        return false;
                    }
                }
                // From the claim on, the session's writes are fenced on `.log`.
                self.writer.fence_own();
                // The last step may have died between storing and publishing.
                if !state::replay(
                    &bus,
                    &mut self.writer,
                    &restored.outbox,
                    &self.core.trace,
                    &self.cancel,
                )
                .await
                {
                    return false;
                }
                self.core
                    .unreadable(restored.unreadable, loaded.shown_seq, now());
                tracing::info!(session.id = %id, rev = self.rev, turns = self.core.transcript.len(), in_flight = self.core.state.turn_in_flight, "session restored");
            }
            None => {
                // A session without records (new, or from before they existed)
                // continues its log after the last entry. It has no inputs
                // (they come with records), so the last read is `.log`'s.
                self.writer.fence_own();
                self.core.state.log_seq = loaded.shown_seq;
            }
        }
        true
    }

    /// Runs the session until it is stopped (shutdown, hand-over, lease
    /// lost, fenced out), then puts back what it had taken but not stored.
    async fn run(mut self, mut inbox: mpsc::Receiver<Input>) {
        if self.restore().await {
            self.steps(&mut inbox).await;
        }
        self.idle.store(false, Ordering::Relaxed);
        inbox.close();
        let mut pending: Vec<crate::cluster::forward::Delivery> = self.core.take_step().acks;
        while let Ok(input) = inbox.try_recv() {
            pending.extend(input.into_ack());
        }
        if !pending.is_empty() {
            tracing::info!(session.id = %self.core.id, messages = pending.len(), "session stopped: messages it had not stored go back to be routed again");
        }
        for delivery in pending {
            delivery
                .put_back(crate::cluster::forward::RETRY_DELAY)
                .await;
        }
        self.status.finish().await;
    }

    /// The session's one loop: what is due between events is decided, the
    /// step is committed (the one place that stores, publishes and
    /// acknowledges), then the next event is taken.
    #[tracing::instrument(name = "session", skip_all, fields(session.id = %self.core.id))]
    async fn steps(&mut self, inbox: &mut mpsc::Receiver<Input>) {
        let mut turn: Option<RunningTurn> = None;
        let mut handoff: Option<RunningHandoff> = None;
        let mut heartbeat = tokio::time::interval(STATUS_HEARTBEAT);
        loop {
            // The Arbiter's handoff runs between turns; input waits meanwhile.
            if turn.is_none() && handoff.is_none() && self.core.handoff_due() {
                handoff = Some(RunningHandoff::start(
                    &self.shared,
                    &self.core.id,
                    &self.core.trace,
                    self.core.handoff_ask(),
                ));
                self.status.touch();
            }
            // The model call starts while the step that asks it is stored,
            // and its reply is taken only once that step is: a restart
            // re-runs this turn, and a step that is not stored drops the
            // call (aborted with `starting`). This keeps a store round trip
            // off the way from an input to the model. It may have started
            // even earlier, on an Orchestrator's output as it was
            // published (`foresee.rs`).
            let starting = if turn.is_none() && self.core.turn_due() {
                self.begin_turn().await
            } else {
                None
            };
            if !self.commit().await {
                break;
            }
            if starting.is_some() {
                turn = starting;
                self.status.touch();
            }
            self.idle.store(
                turn.is_none() && handoff.is_none() && self.core.is_idle(),
                Ordering::Relaxed,
            );
            if self.status.is_dirty() {
                self.publish_status(turn.is_some() || handoff.is_some(), true)
                    .await;
            }
            self.watch
                .follow(&self.shared.bus.client, &self.core.state.team)
                .await;
            let gap_deadline = self.core.held.deadline();
            let team_deadline = self.core.gather_deadline(now());
            let approval_deadline = self.core.approval_deadline(now());
            let stall_deadline = self.core.stall_deadline(now());
            tokio::select! {
                _ = self.cancel.cancelled() => break,
                Some(seen) = self.watch.next() => {
                    if turn.is_none() && handoff.is_none() {
                        // The form the turn will send, so that the early
                        // call is the turn's (fleet.rs).
                        self.core.output_schema = self.shared.form.current();
                        self.early.foresee(&self.core, &self.shared, &self.meter, &seen);
                    }
                }
                input = inbox.recv() => match input {
                    Some(input) => {
                        self.take(input);
                        if std::mem::take(&mut self.core.step.abandon_turn) {
                            // The human's /stop: the model call is dropped.
                            turn = None;
                            self.status.touch();
                        }
                        // An input that starts a turn is stored with the
                        // turn's start, in one record (its ack waits for it).
                        if !(turn.is_none() && handoff.is_none() && self.core.turn_due()) {
                            // What was foreseen was not what came.
                            self.early.drop_call();
                        }
                    }
                    None => break,
                },
                result = async {
                    match turn.as_mut() {
                        Some(running) => running.finish().await,
                        None => std::future::pending().await,
                    }
                }, if turn.is_some() => {
                    turn = None;
                    // A directed summons is checked against the workers that
                    // are up before it is routed (the router does not wait).
                    let fleet = fleet_view(&self.shared, &result).await;
                    // The turn's span ends with this step.
                    let span = std::mem::replace(&mut self.turn_span, tracing::Span::none());
                    self.core
                        .turn_ended(result, self.meter.take(), &fleet, &span, now());
                    self.status.touch();
                }
                asked = async {
                    match handoff.as_mut() {
                        Some(running) => running.finish().await,
                        None => std::future::pending().await,
                    }
                }, if handoff.is_some() => {
                    if let Some(running) = handoff.take() {
                        self.core.handoff_ended(running.meter.take(), asked, now());
                    }
                    self.status.touch();
                }
                () = async {
                    match gap_deadline.into_iter().chain(team_deadline).chain(approval_deadline).chain(stall_deadline).min() {
                        Some(deadline) => tokio::time::sleep_until(deadline).await,
                        None => std::future::pending().await,
                    }
                }, if gap_deadline.is_some() || team_deadline.is_some() || approval_deadline.is_some() || stall_deadline.is_some() => {
                    self.core.tick(now());
                }
                _ = heartbeat.tick() => {
                    self.publish_status(turn.is_some() || handoff.is_some(), false).await;
                }
            }
        }
    }

    /// Hands an input to the core (with what the intake put back meanwhile).
    fn take(&mut self, input: Input) {
        let now = now();
        self.core
            .put_back(self.put_back.swap(0, Ordering::Relaxed), now);
        if matches!(input, Input::Human { .. }) {
            self.shared.caps.taken(&self.core.id);
        }
        self.core.on_input(input, now);
    }

    /// A turn is due: the core says whether it starts, and the workspace's
    /// memory is read for the first prompt of a generation. The running
    /// call, unless the turn is held.
    async fn begin_turn(&mut self) -> Option<RunningTurn> {
        match self.core.turn_start(now()) {
            TurnStart::Held => {
                self.early.drop_call();
                return None;
            }
            TurnStart::Resume => {}
            TurnStart::New { recall } => {
                let recalled = match recall {
                    Some(workspace) => {
                        let read = tokio::time::timeout(
                            crate::rules::memory::RECALL_TIMEOUT,
                            arbiter_bus::memory::entries(&self.shared.memory, &workspace),
                        )
                        .await;
                        let read = match read {
                            Ok(Ok(entries)) => Ok(entries),
                            Ok(Err(e)) => Err(e.to_string()),
                            Err(_) => Err(format!(
                                "no answer in {} s",
                                crate::rules::memory::RECALL_TIMEOUT.as_secs()
                            )),
                        };
                        Some((workspace, read))
                    }
                    None => None,
                };
                self.core.begin_turn(recalled, now());
            }
        }
        // The form as the fleet last showed it (fleet.rs), or the one an
        // early call of this turn was sent with.
        self.core.output_schema = self
            .early
            .schema()
            .unwrap_or_else(|| self.shared.form.current());
        let request = self.core.turn_request(None);
        let number = self.core.state.turns;
        if let Some((running, span)) = self.early.adopt(&self.core.id, number, &request) {
            self.turn_span = span;
            return Some(running);
        }
        let (call, span) = turn_call(
            &self.shared,
            &self.meter,
            &self.core.id,
            request,
            number,
            &self.core.trace,
            None,
        );
        self.turn_span = span;
        Some(RunningTurn::start(call))
    }

    async fn publish_status(&mut self, thinking: bool, changed: bool) {
        let status = self.core.status(thinking, now());
        let settled = self.core.settled(&status);
        self.status
            .publish(&self.shared.bus, &status, settled, changed)
            .await;
    }

    /// The one commit site: stores the step the core decided (if anything
    /// changed), then publishes its effects, acknowledges its inputs and
    /// starts its tasks. False when the session was cancelled or fenced out
    /// meanwhile (its inputs then go back to the server).
    async fn commit(&mut self) -> bool {
        let Step {
            mut effects,
            acks,
            tasks,
            changed,
            replace_transcript,
            abandon_turn: _,
        } = self.core.take_step();
        if changed || !effects.is_empty() {
            self.rev += 1;
            state::publish_order(&mut effects);
            // The step's first entry carries its record (see `state.rs`).
            let carrier = state::take_carrier(&mut effects);
            let from = if replace_transcript {
                0
            } else {
                self.stored_turns
            };
            let mut record = state::record(
                &self.core.id,
                self.rev,
                &self.core.transcript[from..],
                &self.core.state,
                &effects,
            );
            record.replace = replace_transcript;
            let stored = state::persist(
                &mut self.writer,
                &self.shared.sealer,
                &record,
                carrier.as_ref(),
                self.core.state.log_seq,
                &self.core.trace,
                &self.cancel,
            )
            .await;
            if let Err(e) = stored {
                if matches!(e, arbiter_bus::steplog::AppendError::Fenced) {
                    tracing::warn!(session.id = %self.core.id, rev = self.rev, "another coordinator took this session over: it stops here at once (its inputs of this step go back to the server)");
                }
                self.core.step.acks = acks;
                return false;
            }
            self.stored_turns = self.core.transcript.len();
            for effect in effects {
                if !state::publish(
                    &self.shared.bus,
                    &mut self.writer,
                    &effect,
                    &self.core.trace,
                    &self.cancel,
                )
                .await
                {
                    self.core.step.acks = acks;
                    return false;
                }
            }
            self.status.touch();
        }
        for delivery in acks {
            delivery.ack().await;
        }
        self.run_tasks(tasks);
        let owner = self
            .core
            .state
            .owner
            .as_deref()
            .unwrap_or(subjects::ANONYMOUS_CONSOLE);
        self.shared
            .caps
            .settle(&self.core.id, self.core.at_work().then_some(owner));
        true
    }

    /// Starts the tasks the step decided, each off the session's path; what
    /// one finds comes back through the inbox.
    fn run_tasks(&self, tasks: Vec<Task>) {
        for task in tasks {
            let (shared, inbox) = (self.shared.clone(), self.inbox.clone());
            match task {
                Task::AskWatchers { seq, summary } => {
                    let subject = subjects::session_watchers(&self.core.id);
                    tokio::spawn(async move {
                        // No responders comes back at once; a console that
                        // follows answers within a round trip.
                        let asked = shared.bus.client.request(subject, bytes::Bytes::new());
                        let watched =
                            matches!(tokio::time::timeout(WATCHERS_WAIT, asked).await, Ok(Ok(_)));
                        if !watched && let Some(inbox) = inbox.upgrade() {
                            let _ = inbox.send(Input::Unwatched { seq, summary }).await;
                        }
                    });
                }
                Task::CheckPool { orch_id, pool } => {
                    tokio::spawn(async move {
                        if !shared.fleet.pool_served(&shared.bus.client, &pool).await
                            && let Some(inbox) = inbox.upgrade()
                        {
                            let _ = inbox.send(Input::NoWorker { orch_id, pool }).await;
                        }
                    });
                }
            }
        }
    }
}
