//! A session's durable state. Every step of a session stores one record on
//! the session's own log, `arbiter.v1.session.<id>.log` (protocol v2): the
//! transcript turns it added, a snapshot of the small state, and the outbox
//! of effects it decided (log entries, summons, inputs, releases). The record
//! rides on the first entry the step shows (its `step` field), or on an
//! empty `step` entry when it shows nothing, so a step costs the server one
//! stored message plus its other effects, not a record plus a copy of each.
//! Effects are published only after their record is stored, each under a
//! message id derived from it, so a coordinator that dies at any point is
//! restored by replaying the log and republishing the last outbox: nothing
//! lost, nothing done twice. The log is written through the step log of
//! `arbiter_bus::steplog`, every message fenced on the one before: a
//! coordinator that another one took the session from cannot store another
//! step or show another entry.

use std::collections::VecDeque;

use arbiter_bus::seal::Sealer;
use arbiter_bus::steplog::{self, AppendError, StepLog, Writer};
use arbiter_bus::{Bus, TraceContext};
use arbiter_protocol::{
    ArbiterToOrchestratorEntry, Control, ControlAction, LogBody, LogEntry, OrchestratorInput,
    StepEntry, Summon, VERSION, WireError, subjects,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// One message of the Arbiter's transcript. The Arbiter has no tools, so text suffices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Turn {
    pub role: TurnRole,
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TurnRole {
    User,
    Assistant,
}

/// Something waiting to be said to the Arbiter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Pending {
    Human {
        text: String,
        tagged: bool,
    },
    Orchestrator {
        number: u32,
        /// Its member number within a team (II.1, II.2…); absent for a solo Orchestrator.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        member: Option<u32>,
        text: String,
        /// The worker's evidence that came with the report (boxed: it is
        /// the largest part of a pending input).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evidence: Option<Box<arbiter_protocol::Evidence>>,
        /// The one line the Arbiter reads of the handoff packet that came with it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        handoff: Option<String>,
    },
    System {
        text: String,
    },
    /// A parallel team's reports, delivered together in one input: when
    /// every member has reported, or the team wait ran out.
    Team {
        number: u32,
        /// Members summoned.
        members: u32,
        /// Each member's report as the Arbiter reads it (see `outputs::report`).
        reports: Vec<(u32, String)>,
        /// Seconds waited before delivering without the missing members (none: all reported).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        waited_secs: Option<u64>,
        /// A sequential chain's reports, rather than a parallel team's.
        #[serde(default)]
        sequential: bool,
        /// A consensus team's tally in one line (`ConsensusEntry::summary`),
        /// read first; each report then starts with its member's verdict.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        consensus: Option<String>,
    },
}

/// A parallel team whose reports are gathered before the Arbiter reads them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Gather {
    /// The team's generation number (II for II.1, II.2…).
    pub number: u32,
    /// Members summoned.
    pub members: u32,
    /// The reports in so far, by member number.
    pub reports: Vec<(u32, String)>,
    /// When the reports go to the Arbiter, whoever is missing.
    pub deadline: DateTime<Utc>,
    /// A sequential chain: its links are summoned one after another.
    #[serde(default)]
    pub sequential: bool,
    /// The chain's links not summoned yet, the next first.
    #[serde(default)]
    pub links: VecDeque<String>,
    /// The chain's purpose (the summons' message), and where its links run.
    #[serde(default)]
    pub purpose: String,
    #[serde(default)]
    pub pool: String,
    #[serde(default)]
    pub runtime: Option<String>,
    /// The MCP servers its links need.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    /// A consensus team: its members' verdicts are tallied when the reports go on.
    #[serde(default)]
    pub consensus: bool,
    /// A consensus team's verdicts in so far (a member that failed has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<arbiter_protocol::MemberVerdict>,
}

/// The Orchestrator the Arbiter is speaking with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Active {
    pub orch_id: String,
    pub number: u32,
    /// Its member number within a team (II.1, II.2…); absent for a solo Orchestrator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    /// It has reported (an output that expects a response) since its summons.
    #[serde(default)]
    pub reported: bool,
    /// The seq of the last input sent to it.
    pub inputs_sent: u64,
    /// The seq of the last output taken from it.
    pub outputs_seen: u64,
    /// Its worker said (on an output) that it reads its inputs from the
    /// session's log (protocol v3): inputs to it are stored once, there.
    /// Until then each input also goes on `orch.<id>.in`, for a worker
    /// that reads them there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub session_inputs: bool,
    /// Its last report asked a question the Arbiter has not answered yet.
    #[serde(default)]
    pub asked: bool,
    /// The Arbiter was reminded of that question once (after a turn that
    /// ended in `musings`).
    #[serde(default)]
    pub reminded: bool,
}

/// Everything about a session except its transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "SessionSnapshot")]
pub(crate) struct Snapshot {
    /// Records from before teams hold their one Orchestrator here; it is
    /// moved into `team` when they are read (see [`Snapshot::upgrade`]).
    #[serde(default, skip_serializing)]
    pub active: Option<Active>,
    /// The live Orchestrators: one for a solo summons, every member of a
    /// team (the Arbiter speaks to the first when it names no member).
    #[serde(default)]
    pub team: Vec<Active>,
    /// A parallel team's reports being gathered into one input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gather: Option<Gather>,
    pub summoned: u32,
    pub log_seq: u64,
    pub queue: VecDeque<Pending>,
    pub notes: Vec<(u32, String)>,
    /// The human's last words, as written: under the `small` profile a
    /// summons' brief carries them (`rules/route.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_human: Option<String>,
    /// The last report of an Orchestrator, with the worker's evidence, under
    /// the `small` profile: the Arbiter's closing words carry it
    /// (`rules/route.rs`), as a small model's own are "release all".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_report: Option<String>,
    /// Why the session waits for the human (the status says it), until the
    /// human next writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<arbiter_protocol::Attention>,
    pub rejections: u32,
    pub context_tokens: u64,
    /// The last transcript turn is a user message the Arbiter has not answered yet.
    pub turn_in_flight: bool,
    /// Arbiter turns started so far.
    pub turns: u64,
    /// Recent human message ids, to drop redeliveries.
    pub seen_ids: VecDeque<String>,
    pub created_at: DateTime<Utc>,
    /// The console whose message put the session to work: its limits
    /// count the session (see `caps.rs`).
    #[serde(default)]
    pub owner: Option<String>,
    /// Set while no Arbiter turn may start until the human writes (see `guard.rs`).
    #[serde(default)]
    pub hold: Option<crate::rules::guard::Hold>,
    /// Arbiter turns started since the human's last message.
    #[serde(default)]
    pub turns_since_human: u32,
    /// The exchange with the active Orchestrator, as the loop guard sees it.
    #[serde(default)]
    pub exchange: crate::rules::guard::Exchange,
    /// The last handoff packet of an active Orchestrator, until a summons
    /// carries it to the successor.
    #[serde(default)]
    pub handoff: Option<arbiter_protocol::PriorHandoff>,
    /// The checkpoint the human rewound the workspace to, until a summons
    /// carries it (see `rules/rewind.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewind: Option<String>,
    /// The Arbiter's generations and a handoff in progress (see `arbiter_handoff.rs`).
    #[serde(default)]
    pub arbiter: crate::rules::arbiter_handoff::Generations,
    /// What the session's model requests cost so far: its Arbiter's, and
    /// each Orchestrator's as its last message said.
    #[serde(default)]
    pub spend: arbiter_protocol::SessionSpend,
    /// Its budget caps as a console set them, and the 80 % notes (see `budget.rs`).
    #[serde(default)]
    pub budget: crate::rules::budget::BudgetState,
    /// The workspace whose memory the session reads and writes (see
    /// `memory.rs`); none: it has no memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Tool calls waiting for the human's word, the calls the human allowed
    /// for the session, and the session's policy (see `approval.rs`).
    #[serde(
        default,
        skip_serializing_if = "crate::rules::approval::Approvals::is_empty"
    )]
    pub approvals: crate::rules::approval::Approvals,
    /// Orchestrators were released since the session last settled: when it
    /// settles, the webhooks hear `completed` (see `rules/notify.rs`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
    /// When the session last showed something new (its last log entry), and
    /// whether the webhooks were told it stalled since (see `rules/notify.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stall_told: bool,
}

impl Snapshot {
    /// Moves a record's one Orchestrator from before teams into `team`.
    pub(crate) fn upgrade(&mut self) {
        if let Some(active) = self.active.take() {
            self.team.push(active);
        }
    }

    /// The live Orchestrator `orch_id`, if it is one.
    pub(crate) fn member(&self, orch_id: &str) -> Option<&Active> {
        self.team.iter().find(|a| a.orch_id == orch_id)
    }

    pub(crate) fn member_mut(&mut self, orch_id: &str) -> Option<&mut Active> {
        self.team.iter_mut().find(|a| a.orch_id == orch_id)
    }

    /// A new session's snapshot, made at `created_at`.
    pub(crate) fn new(created_at: DateTime<Utc>) -> Self {
        Self {
            active: None,
            team: Vec::new(),
            gather: None,
            summoned: 0,
            log_seq: 0,
            queue: VecDeque::new(),
            notes: Vec::new(),
            last_human: None,
            last_report: None,
            attention: None,
            rejections: 0,
            context_tokens: 0,
            turn_in_flight: false,
            turns: 0,
            seen_ids: VecDeque::new(),
            created_at,
            owner: None,
            hold: None,
            turns_since_human: 0,
            exchange: crate::rules::guard::Exchange::default(),
            handoff: None,
            rewind: None,
            arbiter: crate::rules::arbiter_handoff::Generations::default(),
            spend: arbiter_protocol::SessionSpend::default(),
            budget: crate::rules::budget::BudgetState::default(),
            workspace: None,
            approvals: crate::rules::approval::Approvals::default(),
            released: false,
            progress_at: None,
            stall_told: false,
        }
    }
}

/// A message a step decided to publish.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Effect {
    Log(LogEntry),
    Summon(Summon),
    Input(OrchestratorInput),
    Control(Control),
    /// A memory entry to keep: a put in the memory bucket.
    Memory(arbiter_protocol::MemoryEntry),
    /// An event for the webhooks: stored in the notification stream, from
    /// which each hook's delivery takes it (see `notify.rs`). A struct
    /// variant: the event has a `type` of its own, which the effect's tag
    /// would collide with (a record with a newtype `Notify` did not read back).
    Notify {
        event: arbiter_protocol::Notification,
    },
}

impl Effect {
    /// Subject and message id: the id is fixed by the effect, so publishing
    /// it again is a no-op on the server.
    fn address(&self) -> (String, String) {
        match self {
            Effect::Log(e) => (
                entry_subject(e),
                subjects::log_entry_msg_id(&e.session_id, e.seq),
            ),
            Effect::Summon(s) if s.emergency => {
                (subjects::summon_urgent(&s.pool), s.orch_id.clone())
            }
            Effect::Summon(s) => (subjects::summon(&s.pool), s.orch_id.clone()),
            Effect::Input(i) => (
                subjects::orch_in(&i.orch_id),
                subjects::orch_in_msg_id(&i.orch_id, i.seq),
            ),
            Effect::Control(c) => (
                subjects::orch_ctl(&c.orch_id),
                subjects::orch_ctl_msg_id(
                    &c.orch_id,
                    match c.action {
                        ControlAction::Release => "release",
                        ControlAction::Cancel => "cancel",
                    },
                ),
            ),
            Effect::Memory(m) => {
                let key = subjects::memory_key(&m.workspace, &m.id);
                (
                    subjects::memory_put(&key),
                    subjects::memory_msg_id(&m.session_id, &key),
                )
            }
            Effect::Notify { event } => {
                (subjects::notification(&event.session_id), event.id.clone())
            }
        }
    }
}

/// One stored step of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "SessionStateRecord")]
pub(crate) struct Record {
    pub v: u32,
    pub session_id: String,
    /// 1, 2, 3… per session.
    pub rev: u64,
    pub append: Vec<Turn>,
    /// `append` replaces the transcript instead of extending it (a new
    /// Arbiter generation: see `arbiter_handoff.rs`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace: bool,
    pub snapshot: Snapshot,
    pub outbox: Vec<Effect>,
}

/// A step's record as it is written: the JSON of a [`Record`], borrowing
/// the session's transcript, state and effects rather than copying them for
/// every step.
#[derive(Serialize)]
pub(crate) struct StepRecord<'a> {
    pub v: u32,
    pub session_id: &'a str,
    pub rev: u64,
    pub append: &'a [Turn],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replace: bool,
    pub snapshot: &'a Snapshot,
    pub outbox: &'a [Effect],
}

/// Where a log entry is stored: an entry that is an Orchestrator's input
/// (protocol v3) on that input's own subject, `session.<id>.in.<orch>.<n>`,
/// where the worker reads it; every other one on `session.<id>.log`.
pub(crate) fn entry_subject(entry: &LogEntry) -> String {
    match &entry.body {
        LogBody::ArbiterToOrchestrator(ArbiterToOrchestratorEntry {
            orch_id,
            input_seq: Some(n),
            ..
        }) => subjects::session_input(&entry.session_id, orch_id, *n),
        LogBody::ApprovalAnswered(answer) => {
            subjects::session_input(&entry.session_id, &answer.orch_id, answer.input_seq)
        }
        _ => subjects::session_log(&entry.session_id),
    }
}

/// A session as its records left it.
pub(crate) struct Restored {
    pub transcript: Vec<Turn>,
    pub snapshot: Snapshot,
    pub rev: u64,
    pub outbox: Vec<Effect>,
    /// Records that could not be decoded and were skipped, as the log shows them.
    pub unreadable: Vec<WireError>,
}

/// What a session's log holds, read back on restore.
pub(crate) struct Loaded {
    /// Its state, if any step was ever stored (in the log, or before
    /// protocol v2 on the state subject).
    pub restored: Option<Restored>,
    /// Stream sequence of the log's last message: what the next step is fenced on.
    pub last_seq: u64,
    /// The `seq` of the log's last entry (0: none): where a step that shows
    /// nothing stands.
    pub shown_seq: u64,
}

/// What the log holds instead of a carrier too large for one message: the
/// entry as it is shown, and where in the object store the whole carrier
/// (entry and record) is.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "SessionStatePointer")]
pub(crate) struct Pointer {
    #[serde(flatten)]
    entry: LogEntry,
    /// The object's name in [`subjects::SESSION_BLOBS_BUCKET`].
    blob: String,
}

/// A stored step as the session's log carries it: the entry the step shows
/// (or an empty `step` entry when it shows nothing), its record beside it:
/// in the clear on `.log`, sealed on an input, which its worker reads
/// (see `arbiter_bus::seal`).
#[derive(Serialize)]
struct Carrier<'a> {
    #[serde(flatten)]
    entry: &'a LogEntry,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<&'a StepRecord<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sealed: Option<String>,
}

mod restore;
pub(crate) use restore::{load, unfinished};

/// The writer of a session's log: its records and entries on `.log`, its
/// inputs on `.in.<orch>.<n>`, every write fenced on the last message of
/// `.log`, where every claim is written: once another coordinator has
/// claimed the session, no entry, record or input of this one is stored.
/// `last_seq` is the stream sequence of `.log`'s last message.
pub(crate) fn writer(steps: &StepLog, session_id: &str, last_seq: u64) -> Writer {
    steps.writer(subjects::session_log(session_id), session_id, last_seq)
}

/// The writer of a restored session, for its claim: fenced over the whole
/// session (`session.<id>.>`) on `last_seq`, the last message of `.log` and
/// its inputs as they were read, so that a step another coordinator stored
/// after that read, an input included, refuses the claim (a claim built on a
/// state without it would fork the session). The human's lines that fall
/// under the wildcard too (in a session stream made before the human
/// intake), are stepped over. After the claim,
/// [`Writer::fence_own`] fences the writer on `.log` alone.
pub(crate) fn claim_writer(steps: &StepLog, session_id: &str, last_seq: u64) -> Writer {
    writer(steps, session_id, last_seq)
        .fenced_over(subjects::session_fence(session_id))
        .stepping_over(
            |subject| subjects::human_of(subject).is_some(),
            subjects::session_log_filters(session_id),
        )
}

/// Puts the log entries of an outbox after everything else, keeping order
/// within each kind: once a step's last log entry is out, all of it is.
pub(crate) fn publish_order(outbox: &mut [Effect]) {
    outbox.sort_by_key(|e| matches!(e, Effect::Log(_)));
}

/// Takes out of a step's effects the log entry that will carry its record:
/// the first one (the step's first message on the log), if it has any.
pub(crate) fn take_carrier(effects: &mut Vec<Effect>) -> Option<LogEntry> {
    let at = effects.iter().position(|e| matches!(e, Effect::Log(_)))?;
    match effects.remove(at) {
        Effect::Log(entry) => Some(entry),
        _ => None,
    }
}

/// Stores a record on the session's log, fenced on the log's last message,
/// retrying until it is stored, fenced (another coordinator took the session)
/// or the session is cancelled. It rides on `carrier`, the first entry the
/// step shows; a step that shows nothing is stored in an empty `step` entry
/// whose `seq` is `shown_seq`, the log's last entry's.
pub(crate) async fn persist(
    writer: &mut Writer,
    sealer: &Sealer,
    record: &StepRecord<'_>,
    carrier: Option<&LogEntry>,
    shown_seq: u64,
    trace: &TraceContext,
    cancel: &CancellationToken,
) -> Result<(), AppendError> {
    let step_only;
    let entry = match carrier {
        Some(entry) => entry,
        None => {
            step_only = LogEntry {
                v: VERSION,
                session_id: record.session_id.to_owned(),
                seq: shown_seq,
                at: Utc::now(),
                body: LogBody::Step(StepEntry::default()),
            };
            &step_only
        }
    };
    let subject = entry_subject(entry);
    let carrier = if subject == writer.subject() {
        serde_json::to_vec(&Carrier {
            entry,
            step: Some(record),
            sealed: None,
        })
    } else {
        serde_json::to_vec(record).and_then(|plain| {
            serde_json::to_vec(&Carrier {
                entry,
                step: None,
                sealed: Some(sealer.seal(record.session_id, &plain)),
            })
        })
    };
    let bytes = match carrier {
        Ok(bytes) => bytes::Bytes::from(bytes),
        Err(e) => {
            // Only a bug can get here (every field serialises); retrying cannot help.
            tracing::error!(session.id = %record.session_id, error = %e, "could not encode the session state");
            return Err(AppendError::Stopped);
        }
    };
    let pointer = |blob: &str| {
        let pointer = Pointer {
            entry: entry.clone(),
            blob: blob.to_owned(),
        };
        // A pointer is plain data: encoding cannot fail.
        bytes::Bytes::from(serde_json::to_vec(&pointer).unwrap_or_default())
    };
    let step = steplog::Step {
        rev: record.rev,
        record: bytes,
        pointer: &pointer,
        blob: subjects::session_blob(record.session_id, record.rev, writer.lease()),
        trace: Some(trace),
    };
    writer.append_on(&subject, step, cancel).await.map(|_| ())
}

/// Publishes one effect, retrying until it is published or the session is
/// cancelled. Log entries are appended through the session's writer, fenced
/// like its records (the log is the step log); false when that fails.
pub(crate) async fn publish(
    bus: &Bus,
    writer: &mut Writer,
    effect: &Effect,
    trace: &TraceContext,
    cancel: &CancellationToken,
) -> bool {
    let (subject, msg_id) = effect.address();
    if let Effect::Log(entry) = effect {
        let Ok(bytes) = serde_json::to_vec(entry) else {
            return false;
        };
        let msg_id = format!("{msg_id}:{}", writer.lease());
        return match writer
            .append_message_on(&subject, &msg_id, bytes.into(), Some(trace), cancel)
            .await
        {
            Ok(_) => true,
            Err(AppendError::Fenced) => {
                tracing::warn!(session.id = %entry.session_id, seq = entry.seq, "another coordinator took this session over: its log entry is left to it");
                false
            }
            Err(AppendError::Stopped) => false,
        };
    }
    if let Effect::Notify { event } = effect {
        return publish_notification(bus, subject, &msg_id, trace, event, cancel).await;
    }
    steplog::retry(cancel, "publish an effect", || async {
        match effect {
            Effect::Log(e) => bus.publish_js(subject.clone(), &msg_id, trace, e).await,
            Effect::Summon(s) => bus.publish_js(subject.clone(), &msg_id, trace, s).await,
            Effect::Input(i) => bus.publish_js(subject.clone(), &msg_id, trace, i).await,
            Effect::Control(c) => bus.publish_js(subject.clone(), &msg_id, trace, c).await,
            Effect::Memory(m) => bus.publish_js(subject.clone(), &msg_id, trace, m).await,
            Effect::Notify { .. } => Ok(()),
        }
    })
    .await
    .is_some()
}

/// Stores a webhook event, retrying like any effect, except that one the
/// server refuses for this credential's permissions (one signed before the
/// webhooks' grant) is said once and dropped: no session waits on an event
/// it may never store.
async fn publish_notification(
    bus: &Bus,
    subject: String,
    msg_id: &str,
    trace: &TraceContext,
    event: &arbiter_protocol::Notification,
    cancel: &CancellationToken,
) -> bool {
    steplog::retry(cancel, "store a webhook event", || async {
        let sent = arbiter_bus::setup::guarded(
            &bus.alarms,
            arbiter_protocol::roles::NatsRole::Coordinator,
            bus.publish_js(subject.clone(), msg_id, trace, event),
        )
        .await;
        match sent {
            Err(arbiter_bus::BusError::Denied { denied, .. }) if denied.contains(&subject) => {
                crate::notify::refused(&denied);
                Ok(())
            }
            other => other,
        }
    })
    .await
    .is_some()
}

/// Republishes a restored outbox. Log entries and inputs already in their
/// stream are skipped by seq (the server's duplicate window is only minutes),
/// and a summons once a worker has taken it (its Orchestrator has state).
pub(crate) async fn replay(
    bus: &Bus,
    writer: &mut Writer,
    outbox: &[Effect],
    trace: &TraceContext,
    cancel: &CancellationToken,
) -> bool {
    for effect in outbox {
        let published = match effect {
            // A seq the subject is known to hold is never published again:
            // the log must not show one twice. When the server cannot say,
            // it is asked again rather than guessed.
            Effect::Log(e) => match entry_published(bus, e, cancel).await {
                Some(published) => published,
                None => return false,
            },
            Effect::Input(i) => {
                let subject = subjects::orch_in(&i.orch_id);
                match read_last_seq(bus, subjects::ORCH_STREAM, &subject, cancel).await {
                    Some(last) => last.is_some_and(|seq| seq >= i.seq),
                    None => return false,
                }
            }
            Effect::Summon(s) => {
                has_message(
                    bus,
                    subjects::ORCH_STATE_STREAM,
                    &subjects::orch_state(&s.orch_id),
                )
                .await
            }
            // A put of the same entry again changes nothing.
            // An event stored again within the server's duplicate window is
            // dropped; later, a hook may get it twice, under the same id.
            Effect::Control(_) | Effect::Memory(_) | Effect::Notify { .. } => false,
        };
        if !published && !publish(bus, writer, effect, trace, cancel).await {
            return false;
        }
    }
    true
}

/// Whether a log entry is stored (`None`: the session was cancelled before
/// the server could say). An input has a subject of its own; any other
/// entry is on `.log`, where entries are stored in `seq` order.
async fn entry_published(bus: &Bus, entry: &LogEntry, cancel: &CancellationToken) -> Option<bool> {
    let subject = entry_subject(entry);
    let last = read_last_seq(bus, subjects::SESSIONS_STREAM, &subject, cancel).await?;
    Some(last.is_some_and(|seq| seq >= entry.seq))
}

/// The `seq` of the last message on a subject (`Some(None)`: it has none),
/// asked until the server answers; `None` if the session was cancelled first.
async fn read_last_seq(
    bus: &Bus,
    stream: &str,
    subject: &str,
    cancel: &CancellationToken,
) -> Option<Option<u64>> {
    steplog::retry(cancel, "read the last message", || {
        try_last_seq(bus, stream, subject)
    })
    .await
}

/// Whether a subject holds any message (false when the server cannot say).
async fn has_message(bus: &Bus, stream: &str, subject: &str) -> bool {
    match bus.js.get_stream(stream).await {
        Ok(stream) => stream
            .get_last_raw_message_by_subject(subject)
            .await
            .is_ok(),
        Err(_) => false,
    }
}

/// The `seq` field of the last message on a subject, if any (and if the
/// server could be read).
pub(crate) async fn last_seq(bus: &Bus, stream: &str, subject: &str) -> Option<u64> {
    try_last_seq(bus, stream, subject).await.ok().flatten()
}

/// The `seq` field of the last message on a subject: `Ok(None)` when the
/// subject holds none (or its last message has no readable `seq`), `Err`
/// when the server could not be read.
async fn try_last_seq(bus: &Bus, stream: &str, subject: &str) -> Result<Option<u64>, String> {
    #[derive(Deserialize)]
    struct Seq {
        seq: u64,
    }
    let stream = bus.js.get_stream(stream).await.map_err(|e| e.to_string())?;
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(last) => Ok(serde_json::from_slice::<Seq>(&last.payload)
            .ok()
            .map(|m| m.seq)),
        Err(e)
            if e.kind()
                == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound =>
        {
            Ok(None)
        }
        Err(e) => Err(e.to_string()),
    }
}

pub(crate) fn record<'a>(
    session_id: &'a str,
    rev: u64,
    append: &'a [Turn],
    snapshot: &'a Snapshot,
    outbox: &'a [Effect],
) -> StepRecord<'a> {
    StepRecord {
        v: VERSION,
        session_id,
        rev,
        append,
        replace: false,
        snapshot,
        outbox,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a step writes (borrowed) is what a restore reads (owned), byte
    /// for byte.
    #[test]
    fn a_written_record_reads_back_as_the_record() {
        let append = vec![
            Turn {
                role: TurnRole::User,
                text: "Ship it?".into(),
            },
            Turn {
                role: TurnRole::Assistant,
                text: "{\"intent\":\"address_human\"}".into(),
            },
        ];
        let snapshot = Snapshot::new(Utc::now());
        let kind = arbiter_protocol::NotificationKind::Completed;
        let outbox = vec![
            Effect::Control(Control {
                v: VERSION,
                orch_id: "o1".into(),
                action: arbiter_protocol::ControlAction::Release,
                sent_at: Utc::now(),
            }),
            // An event has a `type` of its own, beside the effect's tag.
            Effect::Notify {
                event: arbiter_protocol::Notification {
                    v: VERSION,
                    id: arbiter_protocol::Notification::id_of("s1", 4, kind),
                    kind,
                    session_id: "s1".into(),
                    seq: 4,
                    summary: "Done.".into(),
                    approval: None,
                    at: Utc::now(),
                },
            },
        ];
        for replace in [false, true] {
            let mut written = record("s1", 7, &append, &snapshot, &outbox);
            written.replace = replace;
            let owned = Record {
                v: VERSION,
                session_id: "s1".into(),
                rev: 7,
                append: append.clone(),
                replace,
                snapshot: snapshot.clone(),
                outbox: outbox.clone(),
            };
            let bytes = serde_json::to_string(&written).unwrap();
            assert_eq!(bytes, serde_json::to_string(&owned).unwrap());
            assert_eq!(serde_json::from_str::<Record>(&bytes).unwrap(), owned);
        }
    }
}
