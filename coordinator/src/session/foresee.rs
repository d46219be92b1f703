//! An Arbiter turn started on an Orchestrator's output as it is published,
//! before the server's stored copy reaches the session.
//!
//! The session holds a core subscription on `orch.<orch_id>.out` of its solo
//! Orchestrator (members of a team gather their reports first, so none is
//! kept for them). A core subscriber gets a message as the server takes it
//! in, before the server has stored it and long before the stored copy comes
//! back through `coordinator-orch-out`. When that output is the next one and
//! would start a turn at once, the session starts the turn's model call then,
//! on the request taking it would make. The output is still taken only from
//! the stored copy: the turn that copy starts adopts the call only when the
//! request it makes itself is the same one; otherwise the call is aborted and
//! its reply never read. Its streamed words are shown only once it is
//! adopted. So what the session stores and does never rests on a message the
//! server did not store. The price of a wrong guess is one model request (an
//! output the server refused, or one that raced another input); it is
//! counted in the session's spend once known, like every request. At most
//! one is started per turn, so messages published there that are never
//! stored (a fenced-out or hostile worker's) cannot multiply requests.

use tokio_stream::{StreamExt as _, StreamMap};

use super::*;
use arbiter_protocol::{Evidence, OrchestratorEvent};
use turn::queue_text;

/// The model call of a turn that is not stored yet (see the module).
pub(super) struct Foreseen {
    /// The number the turn would have.
    turn: u64,
    request: Request,
    span: tracing::Span,
    /// Lets its streamed words out, once adopted.
    go: tokio::sync::oneshot::Sender<()>,
    /// Aborted when dropped.
    running: RunningTurn,
    /// Counted as taken or dropped (`arbiter.model.early_calls`).
    counted: arbiter_bus::metrics::EarlyCall,
}

/// Core subscriptions on the outputs of the session's solo Orchestrator, by
/// orch_id (unsubscribed when dropped).
#[derive(Default)]
pub(super) struct OutputWatch {
    subs: StreamMap<String, async_nats::Subscriber>,
}

impl OutputWatch {
    /// The next output seen, once one is watched.
    pub(super) async fn next(&mut self) -> Option<async_nats::Message> {
        if self.subs.is_empty() {
            return std::future::pending().await;
        }
        self.subs.next().await.map(|(_, message)| message)
    }
}

impl Session {
    /// Watches the output of the session's solo Orchestrator, and no other.
    /// The summons is stored and published before this runs, so the watch is
    /// in place long before the Orchestrator's first output.
    pub(super) async fn watch_outputs(&mut self) {
        // Run after every step: when nothing changed, it allocates nothing.
        let solo = || self.state.team.iter().filter(|a| a.member.is_none());
        if solo().count() == self.watch.subs.len()
            && solo().all(|a| self.watch.subs.contains_key(&a.orch_id))
        {
            return;
        }
        let want: Vec<&str> = self
            .state
            .team
            .iter()
            .filter(|a| a.member.is_none())
            .map(|a| a.orch_id.as_str())
            .collect();
        let gone: Vec<String> = self
            .watch
            .subs
            .keys()
            .filter(|id| !want.contains(&id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            self.watch.subs.remove(&id);
        }
        for id in want {
            if self.watch.subs.contains_key(id) {
                continue;
            }
            match self
                .shared
                .bus
                .client
                .subscribe(subjects::orch_out(id))
                .await
            {
                Ok(sub) => {
                    self.watch.subs.insert(id.to_owned(), sub);
                }
                // Only the early start is lost: the output comes all the same.
                Err(e) => {
                    tracing::debug!(orch.id = %id, error = %e, "not watching the Orchestrator's output")
                }
            }
        }
    }

    /// An output seen as it was published: starts the turn taking it would
    /// start, when it would start one at once (see the module).
    pub(super) fn foresee(&mut self, message: &async_nats::Message) {
        let turn = self.state.turns + 1;
        // One early call per turn at most, whatever else is published
        // there (the same output again, or messages the server refused).
        // Checked before the message is read: it costs nothing.
        if self.foreseen_turn == turn {
            return;
        }
        let Ok((session, outputs)) = crate::intake::outputs_of(&message.subject, &message.payload)
        else {
            return;
        };
        if session != self.id {
            return;
        }
        let Some(text) = self.foreseen_text(&outputs) else {
            return;
        };
        let request = self.turn_request(Some(text));
        self.foreseen_turn = turn;
        let trace = TraceContext::from_headers(message.headers.as_ref());
        let (go, gate) = tokio::sync::oneshot::channel();
        let (call, span) = self.turn_call(request.clone(), turn, &trace, Some(gate));
        self.foreseen = Some(Foreseen {
            turn,
            request,
            span,
            go,
            running: RunningTurn::start(call),
            counted: arbiter_bus::metrics::EarlyCall::new("arbiter"),
        });
    }

    /// The call started early for `request`, if it is this turn's: adopted
    /// (its span becomes the turn's, its words go out). Any other is dropped.
    pub(super) fn adopt_foreseen(&mut self, request: &Request) -> Option<RunningTurn> {
        let mut foreseen = self.foreseen.take()?;
        if foreseen.turn != self.state.turns || foreseen.request != *request {
            tracing::debug!(
                session.id = %self.id,
                "an Arbiter call started on an output as it was published was not this turn's: aborted unanswered"
            );
            return None;
        }
        foreseen.counted.adopt();
        let _ = foreseen.go.send(());
        self.turn_span = foreseen.span;
        Some(foreseen.running)
    }

    /// The user message of the turn that taking `outputs` (one message on
    /// `orch.<id>.out`) would start at once; `None` when taking them would
    /// start none, or anything but the plain case could come first or in
    /// between: a turn running or due, a hold, an Arbiter handoff, the
    /// workspace's memory (read when the turn starts), the turn cap, a
    /// team, a failure, the loop guard, or a budget note or hold (none is
    /// guessed past 80 % of a cap).
    fn foreseen_text(&self, outputs: &[OrchestratorMessage]) -> Option<String> {
        let state = &self.state;
        let cap = self.shared.config.max_turns_per_message;
        if state.turn_in_flight
            || !state.queue.is_empty()
            || state.hold.is_some()
            || state.arbiter.pending.is_some()
            || state.turns == state.arbiter.since_turn
            || (cap != 0 && state.turns_since_human >= cap)
        {
            return None;
        }
        let active = state.member(&outputs.first()?.orch_id)?;
        if active.member.is_some() {
            return None;
        }
        let number = active.number;
        let mut seen = active.outputs_seen;
        let mut spend = state.spend.clone();
        let mut exchange = state.exchange.clone();
        let mut notes = state.notes.clone();
        let mut queue = Vec::new();
        for message in outputs {
            if message.orch_id != active.orch_id || message.seq != seen.checked_add(1)? {
                return None;
            }
            seen = message.seq;
            if let Some(s) = message.spend {
                spend.set_orchestrator(&message.orch_id, number, s);
            }
            let OrchestratorEvent::Output(output) = &message.event else {
                return None;
            };
            if !output.expects_response {
                notes.push((number, output.message.clone()));
                continue;
            }
            let tool_calls = message.evidence.as_ref().map(Evidence::tool_calls);
            if exchange.round(&output.message, tool_calls, self.shared.config.loop_rounds) {
                return None;
            }
            let handoff = message.handoff.as_ref().or(output.handoff.as_ref());
            queue.push(Pending::Orchestrator {
                number,
                member: None,
                text: output.message.clone(),
                evidence: message.evidence.clone(),
                handoff: handoff.map(|h| h.compact_line(number)),
            });
        }
        if queue.is_empty() {
            return None;
        }
        let budget = self.budget();
        let at = arbiter_protocol::budget::NOTE_AT_PERCENT;
        if budget.held
            || !budget.session.past(&spend.total, at).is_empty()
            || state.team.iter().any(|a| {
                let spent = spend.orchestrator(&a.orch_id).copied().unwrap_or_default();
                !budget.orchestrator.past(&spent, at).is_empty()
            })
        {
            return None;
        }
        Some(queue_text(&notes, self.budget_notes(), &queue))
    }
}
