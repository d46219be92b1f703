//! Whether an Orchestrator's output, seen as it is published, would start
//! an Arbiter turn at once, and on what words: the shell starts that turn's
//! model call early on them (`session/foresee.rs`), and the turn adopts it
//! only if it asks the same.

use arbiter_protocol::{Evidence, OrchestratorEvent, OrchestratorMessage};

use crate::rules::Core;
use crate::rules::turn::queue_text;
use crate::state::Pending;

impl Core {
    /// The user message of the turn that taking `outputs` (one message on
    /// `orch.<id>.out`) would start at once; `None` when taking them would
    /// start none, or anything but the plain case could come first or in
    /// between: a turn running or due, a hold, an Arbiter handoff, the
    /// workspace's memory (read when the turn starts), the turn cap, a
    /// team, a failure, the loop guard, or a budget note or hold (none is
    /// guessed past 80 % of a cap).
    pub(crate) fn foreseen_text(&self, outputs: &[OrchestratorMessage]) -> Option<String> {
        let state = &self.state;
        let cap = self.config.max_turns_per_message;
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
            if exchange.round(&output.message, tool_calls, self.config.loop_rounds) {
                return None;
            }
            let handoff = message.handoff.as_ref().or(output.handoff.as_ref());
            queue.push(Pending::Orchestrator {
                number,
                member: None,
                text: output.message.clone(),
                evidence: message.evidence.clone().map(Box::new),
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
