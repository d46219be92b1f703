//! The Arbiter's turn: what it is asked (the queue, with a digest of the
//! notes) and what its reply does (routed, charged, or a question left
//! unanswered told to the human). The call itself is the shell's
//! (`session/turn.rs`).

use std::sync::Arc;

use arbiter_bus::TraceContext;
use arbiter_llm::structured::Structured;
use arbiter_llm::{LlmError, Message, Request, Usage};
use arbiter_protocol::{
    ArbiterIntent, ArbiterOutput, ErrorEntry, LogBody, MemoryEntry, NotificationKind, Role,
    SystemEntry, member_name, orchestrator_name,
};

use crate::rules::route::Routed;
use crate::rules::{Core, Now};
use crate::state::{Pending, Turn, TurnRole};

/// Notes carried in one digest; older ones are counted, not quoted.
const DIGEST_NOTES: usize = 10;
/// Characters of one note quoted in a digest.
const DIGEST_NOTE_CHARS: usize = 300;

/// Whether the turn that is due starts (see [`Core::turn_start`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TurnStart {
    /// Held: at the session's budget cap, or past the turn cap (the log says so).
    Held,
    /// The turn in flight goes on (after a restart): the same request again.
    Resume,
    /// A new turn on what is queued, once [`Core::begin_turn`] takes it;
    /// `recall`: the workspace whose memory opens its prompt (the first of
    /// an Arbiter generation).
    New { recall: Option<String> },
}

impl Core {
    /// A turn is due ([`Core::turn_due`]): whether it starts.
    pub(crate) fn turn_start(&mut self, now: Now) -> TurnStart {
        self.now = now;
        if self.hold_at_cap() {
            self.step.changed = true;
            return TurnStart::Held;
        }
        if self.state.turn_in_flight {
            return TurnStart::Resume;
        }
        if !self.may_start_turn() {
            self.step.changed = true;
            return TurnStart::Held;
        }
        // The workspace's memory opens the first prompt of every Arbiter
        // generation (a handoff keeps only the packet and the last
        // exchanges), read afresh each time.
        let first = self.state.turns == self.state.arbiter.since_turn;
        TurnStart::New {
            recall: first.then(|| self.recall_wanted()).flatten(),
        }
    }

    /// Starts the new turn: what is queued becomes its user message, after
    /// the memory block that `recalled` (the workspace and what reading its
    /// entries gave) makes, if any.
    pub(crate) fn begin_turn(
        &mut self,
        recalled: Option<(String, Result<Vec<MemoryEntry>, String>)>,
        now: Now,
    ) {
        self.now = now;
        let mut user = self.take_queue();
        if let Some((workspace, read)) = recalled
            && let Some(block) = self.recalled(&workspace, read)
        {
            user = format!("{block}\n\n{user}");
        }
        self.transcript.push(Turn {
            role: TurnRole::User,
            text: user,
        });
        self.state.turn_in_flight = true;
        self.state.turns += 1;
        self.step.changed = true;
    }

    /// Everything queued, in arrival order, as one user message; the notes
    /// gathered since the last delivery go first, as a digest.
    pub(crate) fn take_queue(&mut self) -> String {
        let notes = std::mem::take(&mut self.state.notes);
        let budget = self.take_budget_notes();
        let queue: Vec<Pending> = self.state.queue.drain(..).collect();
        if let Some(text) = queue.iter().rev().find_map(|p| match p {
            Pending::Human { text, .. } => Some(text.clone()),
            _ => None,
        }) {
            self.state.last_human = Some(text);
        }
        queue_text(&notes, budget, &queue)
    }

    /// The request of the Arbiter's turn: its transcript, and `next` (a
    /// user message not in it yet) when given.
    pub(crate) fn turn_request(&self, next: Option<String>) -> Request {
        let mut messages: Vec<Message> = self
            .transcript
            .iter()
            .map(|turn| match turn.role {
                TurnRole::User => Message::user(turn.text.clone()),
                TurnRole::Assistant => Message::assistant(turn.text.clone()),
            })
            .collect();
        messages.extend(next.map(Message::user));
        Request {
            system: crate::prompt::arbiter_system_prompt(self.config.model.profile).to_owned(),
            messages: Arc::new(messages),
            tools: Arc::default(),
            output_schema: Some(self.output_schema.clone()),
            max_output_tokens: None,
        }
    }

    /// The turn in flight ended with `result`, after the model requests in
    /// `usage` (charged to the Arbiter); `fleet` is what the workers offer
    /// when the reply directs a summons, and `turn_span` the turn's span
    /// (its routing is a child of it). Then a handoff may be asked for.
    pub(crate) fn turn_ended(
        &mut self,
        result: Result<Structured<ArbiterOutput>, LlmError>,
        usage: Vec<Option<Usage>>,
        fleet: &crate::rules::summons::FleetView,
        turn_span: &tracing::Span,
        now: Now,
    ) {
        self.now = now;
        self.state.turn_in_flight = false;
        self.step.changed = true;
        self.charge_arbiter(usage);
        self.check_budget();
        match result {
            Ok(reply) => {
                // Unknown usage (some OpenAI-compatible servers) keeps the last figure.
                if let Some(tokens) = reply.response.context_tokens() {
                    self.state.context_tokens = tokens;
                }
                self.transcript.push(Turn {
                    role: TurnRole::Assistant,
                    text: reply.raw,
                });
                let intent = reply.value.intent;
                let span = tracing::info_span!(
                    parent: turn_span,
                    "route",
                    otel.name = "arbiter route",
                    session.id = %self.id,
                    arbiter.intent = reply.value.intent.as_str(),
                );
                // What the decision publishes continues the trace from here.
                self.trace = TraceContext::of(&span);
                let _in_route = span.enter();
                let routed = self.route(reply.value, fleet);
                match (intent, routed) {
                    // The human was spoken to: their answer goes on.
                    (ArbiterIntent::AddressHuman, Routed::Carried) => {}
                    (ArbiterIntent::Musings, _) => self.question_left(Ending::Musings),
                    (_, Routed::Rejected) => self.question_left(Ending::Rejected),
                    // Carried out, to someone else: the question still waits.
                    (_, Routed::Carried) => self.question_left(Ending::Elsewhere),
                }
            }
            Err(e) => {
                // The user turn stays: it reaches the Arbiter with the next message.
                tracing::error!(error = %e, "Arbiter turn failed");
                let error = e.to_wire(Role::Arbiter);
                let summary = format!("The Arbiter's turn failed: {error}");
                self.log(LogBody::Error(ErrorEntry { error }));
                self.notify(NotificationKind::Failed, summary);
                self.question_left(Ending::Failed);
            }
        }
        self.maybe_hand_off();
        self.notify_settled();
    }

    /// After a turn: an Orchestrator that asked a question must not wait
    /// for an answer that no turn is coming to give. When nothing is queued
    /// for the Arbiter and its turn did not answer, a turn that only mused is
    /// reminded once (a new turn); otherwise the human is told, once.
    fn question_left(&mut self, ending: Ending) {
        if !self.state.queue.is_empty() || self.state.hold.is_some() {
            return;
        }
        // The first member still waiting on an answer (one note at a time).
        let Some(active) = self.state.team.iter_mut().find(|a| a.asked) else {
            return;
        };
        let name = member_name(active.number, active.member);
        if ending == Ending::Musings && !active.reminded {
            active.reminded = true;
            let text = format!(
                "{name} asked you a question and is waiting for your answer; musings reach \
                 nobody. Answer it (address_orchestrator), or ask the human (address_human)."
            );
            self.log(LogBody::System(SystemEntry { text: text.clone() }));
            self.enqueue(Pending::System { text });
            return;
        }
        active.asked = false;
        let why = match ending {
            Ending::Musings => "ended in musings again",
            Ending::Rejected => "could not be carried out",
            Ending::Elsewhere => "went to someone else",
            Ending::Failed => "failed",
        };
        let text = format!(
            "{name} asked a question and is waiting for an answer, but the Arbiter's \
             turn {why}. Write to go on, or /stop."
        );
        self.log(LogBody::System(SystemEntry { text: text.clone() }));
        self.notify(NotificationKind::NeedsInput, text);
    }

    /// Adds model requests of the Arbiter's (a turn's, those of an
    /// abandoned turn once they are known, a handoff's) to its spend,
    /// stored with the step.
    pub(crate) fn charge_arbiter(&mut self, usage: Vec<Option<Usage>>) {
        let model = &self.config.model.model;
        for usage in usage {
            self.config
                .prices
                .charge(&mut self.state.spend.arbiter, model, usage.as_ref());
        }
        self.state.spend.sum();
    }
}

/// How an Arbiter turn that did not answer an Orchestrator's question ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Musings,
    Rejected,
    /// Carried out, without answering the one who asked.
    Elsewhere,
    Failed,
}

impl Pending {
    /// What the Arbiter reads of it in its turn's user message.
    pub(crate) fn words(&self) -> String {
        match self {
            Pending::Human { text, tagged: true } => format!("Human: {text}"),
            Pending::Human {
                text,
                tagged: false,
            } => text.clone(),
            Pending::Orchestrator {
                number,
                member,
                text,
                evidence,
                handoff,
            } => crate::rules::outputs::report(
                *number,
                *member,
                text,
                evidence.as_deref(),
                handoff.as_deref(),
            ),
            Pending::System { text } => format!("System: {text}"),
            Pending::Team {
                number,
                members,
                reports,
                waited_secs,
                sequential,
                consensus,
            } => crate::rules::team::team_input(
                *number,
                *members,
                reports,
                *waited_secs,
                *sequential,
                consensus.as_deref(),
            ),
        }
    }
}

/// The user message of a turn: the notes' digest, the budget notes, then
/// what is queued, in arrival order.
pub(crate) fn queue_text(
    notes: &[(u32, String)],
    budget: Vec<String>,
    queue: &[Pending],
) -> String {
    let mut parts = Vec::new();
    if !notes.is_empty() {
        parts.push(digest(notes));
    }
    parts.extend(budget);
    parts.extend(queue.iter().map(Pending::words));
    parts.join("\n\n")
}

fn digest(notes: &[(u32, String)]) -> String {
    let skipped = notes.len().saturating_sub(DIGEST_NOTES);
    let mut lines = vec!["Notes sent while working:".to_owned()];
    if skipped > 0 {
        lines.push(format!("- ({skipped} earlier notes not shown)"));
    }
    for (number, text) in &notes[skipped..] {
        let quoted: String = text.chars().take(DIGEST_NOTE_CHARS).collect();
        let cut = if text.chars().count() > DIGEST_NOTE_CHARS {
            "…"
        } else {
            ""
        };
        lines.push(format!("- {}: {quoted}{cut}", orchestrator_name(*number)));
    }
    lines.join("\n")
}
