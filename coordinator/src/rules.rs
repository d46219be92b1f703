//! The session's core: its state and every decision over it, with no I/O
//! (issue #40). A [`Core`] holds what a session is (its id, settings,
//! transcript, [`Snapshot`] and held output) and, for the step being
//! decided, what that step does: its log entries and effects, the inputs
//! it acknowledges and the I/O it asks for ([`Step`]). Its entry points
//! take the time they decide at; none awaits, spawns, reads the clock or
//! touches the bus, the model or a bucket. The session's shell
//! (`session.rs`) feeds it events, takes the step, stores it, then
//! publishes its effects, acknowledges its inputs and starts its tasks; a
//! task's result comes back as an [`Input`].
//!
//! Each file here is one rule, a method of [`Core`] or a free function:
//! `route` (an Arbiter reply by intent), `summons` (where a summons goes),
//! `team` (gathering, chains), `consensus` (the tally), `budget` (caps,
//! holds, notes), `guard` (the turn cap, the echo stop, `/stop`), `outputs`
//! (Orchestrator output in `seq` order), `memory`, `notify` (the
//! webhooks' `completed`), `arbiter_handoff`,
//! `turn` (what a turn is asked, what its reply does), `foresee` (whether
//! an output would start a turn at once) and `status`.

use std::sync::Arc;

use arbiter_bus::TraceContext;
use arbiter_protocol::{
    ErrorEntry, HumanEntry, HumanMessage, LogBody, LogEntry, OrchestratorMessage, SystemEntry,
    VERSION, WireError, member_name,
};
use chrono::{DateTime, Utc};

use crate::Config;
use crate::caps::Refusal;
use crate::state::{Effect, Pending, Snapshot, Turn};

pub(crate) mod approval;
pub mod arbiter_handoff;
pub(crate) mod budget;
pub(crate) mod consensus;
pub(crate) mod foresee;
pub(crate) mod form;
pub(crate) mod guard;
pub(crate) mod memory;
pub(crate) mod notify;
pub(crate) mod outputs;
pub(crate) mod rewind;
pub(crate) mod route;
pub(crate) mod status;
pub(crate) mod summons;
pub(crate) mod team;
pub(crate) mod turn;

#[cfg(test)]
mod tests;

/// Human message ids remembered to drop redeliveries.
const SEEN_IDS: usize = 256;

/// The message an input came in (pulled, or forwarded by another
/// coordinator), acknowledged once its step is stored. The core only
/// carries it into the step.
pub(crate) type Ack = Option<crate::cluster::forward::Delivery>;

/// The time a decision is made at: the wall clock (what entries and
/// messages say) and the monotonic one (deadlines).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    pub wall: DateTime<Utc>,
    pub mono: tokio::time::Instant,
}

/// What the shell hands the core.
pub(crate) enum Input {
    /// A human message, from console `console` (see `caps.rs`).
    Human {
        /// Boxed: it is large next to the other inputs.
        message: Box<HumanMessage>,
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
    /// No worker of `pool` answered after this Orchestrator was summoned
    /// (what [`Task::CheckPool`] found).
    NoWorker {
        orch_id: String,
        pool: String,
    },
    /// No console followed the session when the Arbiter wrote to the human
    /// in entry `seq` (what [`Task::AskWatchers`] found).
    Unwatched {
        seq: u64,
        summary: String,
    },
}

impl Input {
    /// The JetStream message the input came in, if any.
    pub(crate) fn into_ack(self) -> Ack {
        match self {
            Input::Human { ack, .. } | Input::Refused { ack, .. } => ack,
            Input::Orchestrator(_, _, ack) | Input::Malformed(_, ack) => ack,
            Input::NoWorker { .. } | Input::Unwatched { .. } => None,
        }
    }
}

/// I/O that a decision asks for, as data: the shell runs it once the step
/// that decided it is stored, and its result comes back as an [`Input`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Task {
    /// Ask whether a worker of `pool` is up: [`Input::NoWorker`] when none
    /// answers.
    CheckPool { orch_id: String, pool: String },
    /// Ask whether a console follows the session: [`Input::Unwatched`]
    /// (with the `needs_input` event's `summary` about entry `seq`) when none answers.
    AskWatchers { seq: u64, summary: String },
}

/// What one step does, in the order the shell carries it out: store the
/// record (when `changed`), publish `effects`, acknowledge `acks`, start
/// `tasks`.
#[derive(Default)]
pub(crate) struct Step {
    /// Published once the step is stored (log entries among them).
    pub effects: Vec<Effect>,
    /// Acknowledged once the step is stored.
    pub acks: Vec<crate::cluster::forward::Delivery>,
    /// Started once the step is stored.
    pub tasks: Vec<Task>,
    /// The snapshot or transcript changed: the step is stored even with
    /// nothing to publish.
    pub changed: bool,
    /// The transcript was replaced (an Arbiter handoff): the record stores
    /// all of it, to replace what the records held.
    pub replace_transcript: bool,
    /// The running turn is to be abandoned (the human's `/stop`).
    pub abandon_turn: bool,
}

/// A session's state and decisions (see the module).
pub(crate) struct Core {
    pub id: String,
    pub config: Arc<Config>,
    /// `ArbiterOutput`'s model-facing schema (every turn carries it).
    pub output_schema: Arc<serde_json::Value>,
    pub transcript: Vec<Turn>,
    pub state: Snapshot,
    /// Orchestrator output that came ahead of its turn (see `outputs.rs`).
    pub held: outputs::HeldOutputs,
    /// The context of what the session last took (a human line, an
    /// Orchestrator's output) or decided (a routing): what it publishes and
    /// the spans of its next turn are children of it.
    pub trace: TraceContext,
    /// The time of the decision being made (set by each entry point).
    pub now: Now,
    /// What the step being decided does.
    pub step: Step,
}

impl Core {
    pub(crate) fn new(
        id: String,
        config: Arc<Config>,
        output_schema: Arc<serde_json::Value>,
        now: Now,
    ) -> Self {
        let held = outputs::HeldOutputs::new(config.output_gap_wait);
        Self {
            id,
            config,
            output_schema,
            transcript: Vec::new(),
            state: Snapshot::new(now.wall),
            held,
            trace: TraceContext::none(),
            now,
            step: Step::default(),
        }
    }

    /// The step decided so far, leaving an empty one.
    pub(crate) fn take_step(&mut self) -> Step {
        std::mem::take(&mut self.step)
    }

    /// Queues a log entry with the next seq; it is published when the step is stored.
    pub(crate) fn log(&mut self, body: LogBody) {
        self.state.log_seq += 1;
        // Something new: the stall watch starts again (`notify.rs`).
        self.state.progress_at = Some(self.now.wall);
        self.state.stall_told = false;
        self.step.effects.push(Effect::Log(LogEntry {
            v: VERSION,
            session_id: self.id.clone(),
            seq: self.state.log_seq,
            at: self.now.wall,
            body,
        }));
        self.step.changed = true;
    }

    /// Queues a webhook event about the entry logged last (its id is fixed
    /// by that entry, so a restart that publishes it again adds nothing).
    pub(crate) fn notify(&mut self, kind: arbiter_protocol::NotificationKind, summary: String) {
        self.notify_with(kind, summary, None);
    }

    pub(crate) fn notify_with(
        &mut self,
        kind: arbiter_protocol::NotificationKind,
        summary: String,
        approval: Option<arbiter_protocol::WaitingApproval>,
    ) {
        self.notify_about(self.state.log_seq, kind, summary, approval);
    }

    /// Queues a webhook event about log entry `seq`.
    pub(crate) fn notify_about(
        &mut self,
        seq: u64,
        kind: arbiter_protocol::NotificationKind,
        summary: String,
        approval: Option<arbiter_protocol::WaitingApproval>,
    ) {
        // The status says it whether or not a webhook hears it (an
        // approval is in the status already).
        use arbiter_protocol::NotificationKind as K;
        if approval.is_none() && matches!(kind, K::NeedsInput | K::Failed | K::Stalled | K::Budget)
        {
            self.state.attention = Some(arbiter_protocol::Attention {
                kind,
                summary: summary.clone(),
                seq,
            });
        }
        if !self.config.notifies(kind) {
            return;
        }
        self.effect(Effect::Notify {
            event: arbiter_protocol::Notification {
                v: VERSION,
                id: arbiter_protocol::Notification::id_of(&self.id, seq, kind),
                kind,
                session_id: self.id.clone(),
                seq,
                summary,
                approval,
                at: self.now.wall,
            },
        });
    }

    pub(crate) fn effect(&mut self, effect: Effect) {
        self.step.effects.push(effect);
        self.step.changed = true;
    }

    pub(crate) fn keep_ack(&mut self, ack: Ack) {
        if let Some(msg) = ack {
            self.step.acks.push(msg);
        }
    }

    /// Whether an Arbiter turn is to start (or go on after a restart), no
    /// turn running: one is in flight or input is queued, and neither an
    /// Arbiter handoff nor a hold stands in the way.
    pub(crate) fn turn_due(&self) -> bool {
        self.state.arbiter.pending.is_none()
            && self.state.hold.is_none()
            && (self.state.turn_in_flight || !self.state.queue.is_empty())
    }

    /// Whether the session is at work: its Arbiter is thinking or has input
    /// queued, or an Orchestrator is active. A session at work counts
    /// against its owner's limit (see `caps.rs`).
    pub(crate) fn at_work(&self) -> bool {
        self.state.turn_in_flight || !self.state.queue.is_empty() || !self.state.team.is_empty()
    }

    /// No turn due or in flight, nothing queued, no handoff asked for: the
    /// session can be handed over now (with no turn running).
    pub(crate) fn is_idle(&self) -> bool {
        !self.state.turn_in_flight
            && self.state.queue.is_empty()
            && self.state.arbiter.pending.is_none()
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

    /// Messages to this session the intake put back because its inbox was
    /// full: the log says so (they come again, maybe after later ones).
    pub(crate) fn put_back(&mut self, count: u64, now: Now) {
        if count == 0 {
            return;
        }
        self.now = now;
        self.log(LogBody::System(SystemEntry {
            text: format!(
                "{count} message(s) to this session came faster than it could take \
                 them: they were put back and come again, so they may arrive after \
                 later ones. Nothing was lost."
            ),
        }));
    }

    /// Takes one input.
    pub(crate) fn on_input(&mut self, input: Input, now: Now) {
        self.now = now;
        match input {
            Input::Human {
                message,
                console,
                trace,
                ack,
            } => {
                self.keep_ack(ack);
                let message = *message;
                if !self.remember(&message.message_id) {
                    return;
                }
                if let Some(reply) = message.approval {
                    self.approval_reply(reply, &console);
                    return;
                }
                if let Some(policy) = message.policy {
                    self.log(LogBody::Human(HumanEntry {
                        message_id: message.message_id,
                        text: message.text,
                    }));
                    self.change_policy(policy, &console);
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
                if let Some(rewind) = message.rewind {
                    self.log(LogBody::Human(HumanEntry {
                        message_id: message.message_id,
                        text: message.text,
                    }));
                    let stop = message.command == Some(arbiter_protocol::HumanCommand::Stop);
                    self.step.abandon_turn = self.rewind(rewind, stop, &console);
                    return;
                }
                if message.command == Some(arbiter_protocol::HumanCommand::Stop) {
                    self.log(LogBody::Human(HumanEntry {
                        message_id: message.message_id,
                        text: message.text,
                    }));
                    self.step.abandon_turn = self.stop(&console);
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
                    self.log(LogBody::System(SystemEntry {
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
            Input::Unwatched { seq, summary } => {
                self.notify_about(
                    seq,
                    arbiter_protocol::NotificationKind::NeedsInput,
                    summary,
                    None,
                );
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
                self.log(LogBody::System(SystemEntry { text }));
            }
        }
    }

    /// Time passed: output held for a gap that never filled is given up
    /// on, and a team whose wait ran out goes to the Arbiter as it is.
    pub(crate) fn tick(&mut self, now: Now) {
        self.now = now;
        self.expire_held();
        self.expire_gather();
        self.expire_approvals();
        self.check_stall();
    }

    /// Errors found restoring the records (an unreadable step), shown
    /// first; the log goes on after the last entry shown.
    pub(crate) fn unreadable(&mut self, errors: Vec<WireError>, shown_seq: u64, now: Now) {
        if errors.is_empty() {
            return;
        }
        self.now = now;
        // A skipped step may have logged entries: go on after them.
        self.state.log_seq = self.state.log_seq.max(shown_seq);
        for error in errors {
            self.log(LogBody::Error(ErrorEntry { error }));
        }
    }
}
