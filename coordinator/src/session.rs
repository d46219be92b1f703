//! One Arbiter session: an actor that owns the transcript, queues what
//! arrives while the Arbiter is mid-turn, and runs one turn at a time. Every
//! step is stored (see `state.rs`) before its effects are published and its
//! inputs acknowledged.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arbiter_bus::TraceContext;
use arbiter_llm::structured::{self, Progress, Structured};
use arbiter_llm::{LlmError, Message, Request};
use arbiter_protocol::{
    ArbiterDelta, ArbiterIntent, ArbiterOutput, ErrorEntry, HumanEntry, HumanMessage, LogBody,
    LogEntry, OrchestratorMessage, Role, SessionStatus, SystemEntry, VERSION, WireError,
    member_name, orchestrator_name, subjects,
};
use chrono::Utc;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::Shared;
use crate::caps::Refusal;
use crate::delta::MessageExtractor;
use crate::outputs::HeldOutputs;
use crate::state::{self, Effect, Pending, Snapshot, Turn, TurnRole};

mod foresee;
mod status;
mod turn;

use status::STATUS_HEARTBEAT;
use turn::RunningTurn;

/// Inputs a session's inbox holds. When it is full the intake never waits
/// (that would stall every other session): it puts the message back on the
/// server, to come again after [`PUT_BACK_DELAY`], and the session's log
/// says so (see [`SessionHandle::offer`]).
pub(crate) const INBOX_CAPACITY: usize = 256;
/// How long a message put back because its session's inbox was full waits
/// before the server delivers it again.
pub(crate) const PUT_BACK_DELAY: Duration = Duration::from_secs(1);
/// Human message ids remembered to drop redeliveries.
const SEEN_IDS: usize = 256;

/// The message an input came in (pulled, or forwarded by another
/// coordinator), acknowledged once its step is stored.
pub(crate) type Ack = Option<crate::forward::Delivery>;

/// What the intake hands a session.
pub(crate) enum Input {
    /// A human message, from console `console` (see `caps.rs`).
    Human {
        message: HumanMessage,
        console: String,
        trace: TraceContext,
        ack: Ack,
    },
    /// A human message a console limit refused, the first of a run of
    /// them (see `caps.rs`): logged, never queued. Its id, when it decoded.
    Refused {
        message_id: Option<String>,
        refusal: Refusal,
        ack: Ack,
    },
    /// The outputs of one message on `orch.<id>.out`, in `seq` order (one,
    /// or a state record's outbox); the message is acknowledged with the
    /// last of them.
    Orchestrator(Vec<OrchestratorMessage>, TraceContext, Ack),
    Malformed(WireError, Ack),
    /// No worker of `pool` answered after this Orchestrator was summoned.
    NoWorker {
        orch_id: String,
        pool: String,
    },
}

impl Input {
    /// The JetStream message the input came in, if any.
    pub(crate) fn into_ack(self) -> Ack {
        match self {
            Input::Human { ack, .. } | Input::Refused { ack, .. } => ack,
            Input::Orchestrator(_, _, ack) | Input::Malformed(_, ack) => ack,
            Input::NoWorker { .. } => None,
        }
    }
}

/// I/O that a decision asks for, as data: the session's loop runs it once
/// the step that decided it is stored, and its result comes back as an
/// [`Input`] (issue #40: decisions do no I/O).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Task {
    /// Ask whether a worker of `pool` is up: [`Input::NoWorker`] when none
    /// answers.
    CheckPool { orch_id: String, pool: String },
}

/// Cloneable address of a session actor.
#[derive(Clone)]
pub(crate) struct SessionHandle {
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

impl SessionHandle {
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
    pub shared: Arc<Shared>,
    pub id: String,
    pub transcript: Vec<Turn>,
    pub state: Snapshot,
    /// The context of what the session last took (a human line, an
    /// Orchestrator's output) or decided (a routing): what it publishes and
    /// the spans of its next turn are children of it.
    pub trace: TraceContext,
    /// The span of the Arbiter turn in flight (none between turns).
    turn_span: tracing::Span,
    /// Counts the model requests of the turn in flight.
    meter: arbiter_llm::meter::Meter,
    /// The session's own inbox, for what its background checks find.
    pub inbox: mpsc::WeakSender<Input>,
    /// Effects decided in the current step, published after it is stored.
    effects: Vec<Effect>,
    /// Inputs of the current step, acknowledged after it is stored.
    acks: Vec<crate::forward::Delivery>,
    /// I/O decided in the current step, started after it is stored.
    pub(crate) tasks: Vec<Task>,
    /// Transcript turns already stored.
    stored_turns: usize,
    rev: u64,
    /// Appends the session's records, fenced on the last one.
    writer: arbiter_bus::steplog::Writer,
    pub changed: bool,
    /// The status changed since it was last published.
    status_dirty: bool,
    /// The status changed since it was last put in the bucket (see `status.rs`).
    status_unstored: bool,
    /// When the bucket last got the status.
    status_stored_at: Option<std::time::Instant>,
    /// The status last put in the bucket was settled.
    stored_settled: bool,
    /// Its active Orchestrator, number summoned and budget (see `status.rs`).
    stored_shape: Option<(Option<String>, u32, String)>,
    /// Puts the status in the bucket (started with the first put).
    status_writer: Option<status::StatusWriter>,
    /// Orchestrator output that came ahead of its turn (see `outputs.rs`).
    pub held: HeldOutputs,
    cancel: CancellationToken,
    /// The running turn is to be abandoned (the human's `/stop`).
    abandon_turn: bool,
    /// Messages the intake put back because the inbox was full.
    put_back: Arc<AtomicU64>,
    /// See [`SessionHandle::is_idle`].
    idle: Arc<AtomicBool>,
    /// The transcript was replaced (an Arbiter handoff): the next record
    /// stores all of it, to replace what the records held.
    pub(crate) replace_transcript: bool,
    /// Its solo Orchestrator's output, seen as it is published (see `foresee.rs`).
    watch: foresee::OutputWatch,
    /// The Arbiter call started on such an output, until its turn starts.
    foreseen: Option<foresee::Foreseen>,
    /// The turn number an early call was last started for: one per turn.
    foreseen_turn: u64,
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
) -> SessionHandle {
    let (tx, rx) = mpsc::channel(INBOX_CAPACITY);
    let put_back = Arc::new(AtomicU64::new(0));
    let shared_gap_wait = shared.config.output_gap_wait;
    let writer = state::writer(&shared.steps, &id, 0);
    let session = Session {
        shared,
        id,
        transcript: Vec::new(),
        state: Snapshot::new(),
        trace: TraceContext::none(),
        turn_span: tracing::Span::none(),
        meter: arbiter_llm::meter::Meter::default(),
        inbox: tx.downgrade(),
        effects: Vec::new(),
        acks: Vec::new(),
        tasks: Vec::new(),
        stored_turns: 0,
        rev: 0,
        writer,
        changed: false,
        status_dirty: true,
        status_unstored: false,
        status_stored_at: None,
        stored_settled: false,
        stored_shape: None,
        status_writer: None,
        held: HeldOutputs::new(shared_gap_wait),
        cancel,
        abandon_turn: false,
        put_back: put_back.clone(),
        idle: Arc::new(AtomicBool::new(false)),
        replace_transcript: false,
        watch: foresee::OutputWatch::default(),
        foreseen: None,
        foreseen_turn: 0,
    };
    let idle = session.idle.clone();
    let stop = session.cancel.clone();
    // Restored in its own task, so the intake (and the messages other
    // coordinators forward to it) never waits on one session's records;
    // what arrives meanwhile waits in the inbox.
    tasks.spawn(async move {
        arbiter_bus::metrics::session_live(1);
        let id = session.id.clone();
        session.run(rx).await;
        arbiter_bus::metrics::session_live(-1);
        let _ = ended.send(id);
    });
    SessionHandle {
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
        let mut delay = Duration::from_millis(50);
        let loaded = loop {
            match state::load(
                &self.shared.steps,
                &self.shared.legacy_steps,
                &self.shared.sealer,
                &self.id,
            )
            .await
            {
                Ok(loaded) => break loaded,
                Err(e) => {
                    tracing::warn!(session.id = %self.id, error = %e, ?delay, "could not read the session's state; retrying");
                    tokio::select! {
                        _ = self.cancel.cancelled() => return false,
                        _ = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
            }
        };
        self.writer = state::claim_writer(&self.shared.steps, &self.id, loaded.last_seq);
        match loaded.restored {
            Some(restored) => {
                self.transcript = restored.transcript;
                self.stored_turns = self.transcript.len();
                self.state = restored.snapshot;
                self.state.upgrade();
                self.rev = restored.rev;
                self.rev += 1;
                let claim = state::record(&self.id, self.rev, &[], &self.state, &restored.outbox);
                // A claim shows nothing: it stands at the log's last entry.
                match state::persist(
                    &mut self.writer,
                    &self.shared.sealer,
                    &claim,
                    None,
                    loaded.shown_seq,
                    &self.trace,
                    &self.cancel,
                )
                .await
                {
                    Ok(()) => {}
                    Err(arbiter_bus::steplog::AppendError::Stopped) => return false,
                    Err(arbiter_bus::steplog::AppendError::Fenced) => {
                        tracing::warn!(session.id = %self.id, "another coordinator claimed this session first; not run here");
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
                    &self.trace,
                    &self.cancel,
                )
                .await
                {
                    return false;
                }
                if !restored.unreadable.is_empty() {
                    // A skipped step may have logged entries: go on after them.
                    self.state.log_seq = self.state.log_seq.max(loaded.shown_seq);
                    for error in restored.unreadable {
                        self.log(LogBody::Error(ErrorEntry { error }));
                    }
                }
                tracing::info!(session.id = %self.id, rev = self.rev, turns = self.transcript.len(), in_flight = self.state.turn_in_flight, "session restored");
            }
            None => {
                // A session without records (new, or from before they existed)
                // continues its log after the last entry. It has no inputs
                // (they come with records), so the last read is `.log`'s.
                self.writer.fence_own();
                self.state.log_seq = loaded.shown_seq;
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
        let mut pending: Vec<crate::forward::Delivery> = std::mem::take(&mut self.acks);
        while let Ok(input) = inbox.try_recv() {
            pending.extend(input.into_ack());
        }
        if !pending.is_empty() {
            tracing::info!(session.id = %self.id, messages = pending.len(), "session stopped: messages it had not stored go back to be routed again");
        }
        for delivery in pending {
            delivery.put_back(crate::forward::RETRY_DELAY).await;
        }
        if let Some(writer) = self.status_writer.take() {
            writer.finish().await;
        }
    }

    #[tracing::instrument(name = "session", skip_all, fields(session.id = %self.id))]
    async fn steps(&mut self, inbox: &mut mpsc::Receiver<Input>) {
        let mut turn: Option<RunningTurn> = None;
        let mut handoff: Option<crate::arbiter_handoff::RunningHandoff> = None;
        let mut heartbeat = tokio::time::interval(STATUS_HEARTBEAT);
        // What restoring found (an unreadable step) is stored and shown first.
        if !self.commit().await {
            return;
        }
        loop {
            self.idle.store(
                turn.is_none()
                    && !self.state.turn_in_flight
                    && self.state.queue.is_empty()
                    && self.state.arbiter.pending.is_none(),
                Ordering::Relaxed,
            );
            // The Arbiter's handoff runs between turns; input waits meanwhile.
            if turn.is_none() && handoff.is_none() && self.handoff_due() {
                handoff = Some(crate::arbiter_handoff::RunningHandoff::start(
                    self.handoff_call(),
                ));
                self.status_dirty = true;
            }
            if turn.is_none() && self.turn_due() {
                if self.hold_at_cap() {
                    // At the session's budget cap (the log says so).
                    self.foreseen = None;
                    self.changed = true;
                    if !self.commit().await {
                        break;
                    }
                    continue;
                }
                if !self.state.turn_in_flight && !self.may_start_turn() {
                    // Held: past the turn cap (the log says so).
                    self.foreseen = None;
                    self.changed = true;
                    if !self.commit().await {
                        break;
                    }
                    continue;
                }
                if !self.state.turn_in_flight {
                    let mut user = self.take_queue();
                    // The workspace's memory opens the first prompt of every
                    // Arbiter generation (a handoff keeps only the packet and
                    // the last exchanges), read afresh each time.
                    if self.state.turns == self.state.arbiter.since_turn
                        && let Some(block) = self.recall().await
                    {
                        user = format!("{block}\n\n{user}");
                    }
                    self.transcript.push(Turn {
                        role: TurnRole::User,
                        text: user,
                    });
                    self.state.turn_in_flight = true;
                    self.state.turns += 1;
                    self.changed = true;
                }
                // The model call starts while the step that asks it is
                // stored, and its reply is taken only once that step is
                // (below, after `commit`): a restart re-runs this turn, and
                // a step that is not stored drops the call (aborted with
                // `started`). This keeps a store round trip off the way
                // from an input to the model. It may have started even
                // earlier, on an Orchestrator's output as it was published
                // (`foresee.rs`).
                let started = self.start_turn();
                if !self.commit().await {
                    break;
                }
                turn = Some(started);
                self.status_dirty = true;
            }
            // What an input left unstored because a turn looked due (a
            // handoff or a hold came first, say) is stored here.
            if (self.changed || !self.effects.is_empty() || !self.acks.is_empty())
                && !self.commit().await
            {
                break;
            }
            if self.status_dirty {
                self.publish_status(turn.is_some() || handoff.is_some(), true)
                    .await;
            }
            self.watch_outputs().await;
            let gap_deadline = self.held.deadline();
            let team_deadline = self.gather_deadline();
            tokio::select! {
                _ = self.cancel.cancelled() => break,
                Some(seen) = self.watch.next() => {
                    if turn.is_none() && handoff.is_none() {
                        self.foresee(&seen);
                    }
                }
                input = inbox.recv() => match input {
                    Some(input) => {
                        self.on_input(input).await;
                        if std::mem::take(&mut self.abandon_turn) {
                            // The human's /stop: the model call is dropped.
                            turn = None;
                            self.status_dirty = true;
                        }
                        // An input that starts a turn is stored with the
                        // turn's start, in one record, at the top of the
                        // loop (its ack waits for that record).
                        let starts_turn =
                            turn.is_none() && handoff.is_none() && self.turn_due();
                        if !starts_turn {
                            // What was foreseen was not what came.
                            self.foreseen = None;
                            if !self.commit().await {
                                break;
                            }
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
                    let fleet = self.fleet_view(&result).await;
                    self.state.turn_in_flight = false;
                    self.changed = true;
                    self.status_dirty = true;
                    self.finish_turn(result, &fleet);
                    self.maybe_hand_off();
                    if !self.commit().await {
                        break;
                    }
                }
                asked = async {
                    match handoff.as_mut() {
                        Some(running) => running.finish().await,
                        None => std::future::pending().await,
                    }
                }, if handoff.is_some() => {
                    if let Some(running) = handoff.take() {
                        self.finish_handoff(&running, asked);
                    }
                    self.status_dirty = true;
                    if !self.commit().await {
                        break;
                    }
                }
                () = async {
                    match gap_deadline {
                        Some(deadline) => tokio::time::sleep_until(deadline).await,
                        None => std::future::pending().await,
                    }
                }, if gap_deadline.is_some() => {
                    self.expire_held();
                    if !self.commit().await {
                        break;
                    }
                }
                () = async {
                    match team_deadline {
                        Some(deadline) => tokio::time::sleep_until(deadline).await,
                        None => std::future::pending().await,
                    }
                }, if team_deadline.is_some() => {
                    self.expire_gather();
                    if !self.commit().await {
                        break;
                    }
                }
                _ = heartbeat.tick() => {
                    self.publish_status(turn.is_some() || handoff.is_some(), false).await;
                }
            }
        }
    }

    /// Stores the step (if anything changed), then publishes its effects and
    /// acknowledges its inputs. False when the session was cancelled meanwhile.
    async fn commit(&mut self) -> bool {
        if self.changed || !self.effects.is_empty() {
            self.rev += 1;
            state::publish_order(&mut self.effects);
            let mut effects = std::mem::take(&mut self.effects);
            // The step's first entry carries its record (see `state.rs`).
            let carrier = state::take_carrier(&mut effects);
            let replace = self.replace_transcript;
            let from = if replace { 0 } else { self.stored_turns };
            let mut record = state::record(
                &self.id,
                self.rev,
                &self.transcript[from..],
                &self.state,
                &effects,
            );
            record.replace = replace;
            match state::persist(
                &mut self.writer,
                &self.shared.sealer,
                &record,
                carrier.as_ref(),
                self.state.log_seq,
                &self.trace,
                &self.cancel,
            )
            .await
            {
                Ok(()) => {}
                Err(arbiter_bus::steplog::AppendError::Stopped) => return false,
                Err(arbiter_bus::steplog::AppendError::Fenced) => {
                    tracing::warn!(session.id = %self.id, rev = self.rev, "another coordinator took this session over: it stops here at once (its inputs of this step go back to the server)");
                    return false;
                }
            }
            self.stored_turns = self.transcript.len();
            self.replace_transcript = false;
            self.changed = false;
            for effect in effects {
                if !state::publish(
                    &self.shared.bus,
                    &mut self.writer,
                    &effect,
                    &self.trace,
                    &self.cancel,
                )
                .await
                {
                    return false;
                }
            }
            self.status_dirty = true;
        }
        for delivery in self.acks.drain(..) {
            delivery.ack().await;
        }
        self.run_tasks();
        let owner = self
            .state
            .owner
            .as_deref()
            .unwrap_or(subjects::ANONYMOUS_CONSOLE);
        self.shared
            .caps
            .settle(&self.id, self.at_work().then_some(owner));
        true
    }

    /// Starts the tasks the step decided, each off the session's path; what
    /// one finds comes back through the inbox.
    fn run_tasks(&mut self) {
        for task in self.tasks.drain(..) {
            let (shared, inbox) = (self.shared.clone(), self.inbox.clone());
            match task {
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

    /// Whether an Arbiter turn is to start (or go on after a restart), no
    /// turn running: one is in flight or input is queued, and neither an
    /// Arbiter handoff nor a hold stands in the way.
    fn turn_due(&self) -> bool {
        self.state.arbiter.pending.is_none()
            && self.state.hold.is_none()
            && (self.state.turn_in_flight || !self.state.queue.is_empty())
    }

    pub(crate) fn keep_ack(&mut self, ack: Ack) {
        if let Some(msg) = ack {
            self.acks.push(msg);
        }
    }

    /// Queues a log entry with the next seq; it is published when the step is stored.
    pub(crate) fn log(&mut self, body: LogBody) {
        self.state.log_seq += 1;
        self.effects.push(Effect::Log(LogEntry {
            v: VERSION,
            session_id: self.id.clone(),
            seq: self.state.log_seq,
            at: Utc::now(),
            body,
        }));
        self.changed = true;
    }

    pub(crate) fn effect(&mut self, effect: Effect) {
        self.effects.push(effect);
        self.changed = true;
    }

    /// Remembers a human message id; false if it was seen already (a
    /// message delivered again is dropped).
    fn remember(&mut self, message_id: &str) -> bool {
        if self.state.seen_ids.iter().any(|id| id == message_id) {
            tracing::info!(message.id = %message_id, "duplicate human message dropped");
            return false;
        }
        self.state.seen_ids.push_back(message_id.to_owned());
        if self.state.seen_ids.len() > SEEN_IDS {
            self.state.seen_ids.pop_front();
        }
        true
    }

    /// Whether the session is at work: its Arbiter is thinking or has input
    /// queued, or an Orchestrator is active. A session at work counts
    /// against its owner's limit (see `caps.rs`).
    fn at_work(&self) -> bool {
        self.state.turn_in_flight || !self.state.queue.is_empty() || !self.state.team.is_empty()
    }

    async fn on_input(&mut self, input: Input) {
        let put_back = self.put_back.swap(0, Ordering::Relaxed);
        if put_back > 0 {
            self.log(LogBody::System(SystemEntry {
                text: format!(
                    "{put_back} message(s) to this session came faster than it could take \
                     them: they were put back and come again, so they may arrive after \
                     later ones. Nothing was lost."
                ),
            }));
        }
        match input {
            Input::Human {
                message,
                console,
                trace,
                ack,
            } => {
                self.keep_ack(ack);
                self.shared.caps.taken(&self.id);
                if !self.remember(&message.message_id) {
                    return;
                }
                if let Some(change) = message.budget {
                    self.log(LogBody::Human(HumanEntry {
                        message_id: message.message_id,
                        text: message.text,
                    }));
                    self.change_budget(change, &console);
                    return;
                }
                if message.command == Some(arbiter_protocol::HumanCommand::Stop) {
                    self.log(LogBody::Human(HumanEntry {
                        message_id: message.message_id,
                        text: message.text,
                    }));
                    self.abandon_turn = self.stop(&console);
                    return;
                }
                self.human_spoke();
                if !self.at_work() {
                    // The console that puts it to work is the one it counts against.
                    self.state.owner = Some(console);
                }
                self.trace = trace;
                self.log(LogBody::Human(HumanEntry {
                    message_id: message.message_id,
                    text: message.text.clone(),
                }));
                self.take_workspace(message.workspace);
                let tagged = !self.state.team.is_empty();
                // Queued, or with a hold at the budget cap.
                self.enqueue(Pending::Human {
                    text: message.text,
                    tagged,
                });
            }
            Input::Refused {
                message_id,
                refusal,
                ack,
            } => {
                self.keep_ack(ack);
                // A message already taken (delivered again) stays taken.
                if message_id.is_none_or(|id| self.remember(&id)) {
                    self.log(LogBody::System(arbiter_protocol::SystemEntry {
                        text: refusal.to_string(),
                    }));
                }
            }
            Input::Orchestrator(messages, trace, mut ack) => {
                // The delivery goes with the last output: acknowledged once
                // that one is taken, a duplicate or given up on, and each
                // before it (held for an earlier gap, if need be) first.
                let last = messages.len().saturating_sub(1);
                for (i, message) in messages.into_iter().enumerate() {
                    let this = if i == last { ack.take() } else { None };
                    self.on_orchestrator(message, trace.clone(), this);
                }
                self.keep_ack(ack);
            }
            Input::Malformed(error, ack) => {
                self.keep_ack(ack);
                self.log(LogBody::Error(ErrorEntry { error }));
            }
            Input::NoWorker { orch_id, pool } => {
                // Gone, or heard from since (a worker took it after all).
                let Some(active) = self
                    .state
                    .member(&orch_id)
                    .filter(|active| active.outputs_seen == 0)
                else {
                    return;
                };
                let text = format!(
                    "No worker of pool {pool} answered: {} waits in the queue until \
                     one is up (arbiter-worker --pool {pool}).",
                    member_name(active.number, active.member)
                );
                self.log(LogBody::System(arbiter_protocol::SystemEntry { text }));
            }
        }
    }
}

/// Context used, as a percentage of the budget.
pub(crate) fn percent(tokens: u64, budget: u64) -> f32 {
    if budget == 0 {
        return 0.0;
    }
    ((tokens as f64 / budget as f64) * 100.0) as f32
}
