//! The native loop's side of tool-call approvals (see `approval.rs`): the
//! policy's decision on each call before it runs, and for an `ask`, the
//! request stored as an output and the wait for its answer, which comes as
//! the Orchestrator's next input.
//!
//! The order is what makes it safe across a takeover: the request is
//! stored (the step on `.out` that is the `approval_needed` output) before
//! anything else; the answer is stored with its `in_seq` before the call
//! runs or its denial reaches the model; the call's result is stored as
//! any other, which clears the approval. A worker that takes over in
//! between finds the approval in the snapshot: it asks nothing again, and
//! waits for the answer (reading on from the stored `in_seq`, so an answer
//! that came meanwhile is read from the stream), or acts on the one stored.
//!
//! While it waits the Orchestrator keeps its slot and its lease (renewed as
//! always) and is not parked: the answer usually comes within minutes, and
//! the call runs at once when it does. Inputs from the Arbiter that come
//! meanwhile go to the stored inbox, as while a tool runs.

use arbiter_protocol::approval::Action;
use arbiter_protocol::{
    ApprovalAnsweredEntry, ApprovalDecision, ApprovalRequest, OrchestratorEvent,
    OrchestratorMessage,
};
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::Core;
use crate::approval::{self, Pending};
use crate::tools::ToolOutcome;

/// Longest string argument an approval request carries whole (a `write`'s
/// content may be megabytes; the request is one NATS message).
const SHOWN_ARGUMENT_BYTES: usize = 16 * 1024;

/// The policy's word on a call.
#[derive(Debug)]
pub(crate) enum Gate {
    /// It runs.
    Run,
    /// It does not: the model reads this error instead.
    Refused(ToolOutcome),
    /// The human is asked: this request is stored (the step whose record
    /// is the `approval_needed` output) before anything else, then the
    /// answer awaited.
    Ask(Box<OrchestratorMessage>),
    /// It asked before (a takeover): the answer is awaited, not asked again.
    Await,
}

impl Core {
    /// The policy's word on call `id`, at `now`.
    pub(crate) fn gate(&mut self, id: &str, name: &str, input: &Value, now: DateTime<Utc>) -> Gate {
        if self.snap.approval.as_ref().is_some_and(|p| p.call_id == id) {
            tracing::info!(tool = %name, call = %id, "the call asked for approval before: its answer is awaited, not asked again");
            return Gate::Await;
        }
        if let Some(other) = self.snap.approval.take() {
            tracing::warn!(call = %other.call_id, "a stored approval of another call dropped");
        }
        let decision = approval::decide(self.snap.layers.as_ref(), name, input);
        match decision.action {
            Action::Allow => Gate::Run,
            Action::Deny => {
                tracing::info!(tool = %name, rule = %decision.by, "tool call denied by the policy");
                Gate::Refused(ToolOutcome::error(approval::denied(name, &decision.by)))
            }
            Action::Ask => Gate::Ask(Box::new(self.ask(id, name, input, decision.by, now))),
        }
    }

    /// The request for the human's approval, the call pending.
    fn ask(
        &mut self,
        id: &str,
        name: &str,
        input: &Value,
        rule: String,
        now: DateTime<Utc>,
    ) -> OrchestratorMessage {
        tracing::info!(tool = %name, %rule, "tool call waits for the human's approval");
        self.snap.approval = Some(Pending {
            call_id: id.to_owned(),
            tool: name.to_owned(),
            rule: rule.clone(),
            answer: None,
        });
        self.snap.out_seq += 1;
        let request = ApprovalRequest {
            call_id: id.to_owned(),
            tool: name.to_owned(),
            input: shown(input),
            rule,
        };
        let mut message = self.message(
            self.snap.out_seq,
            OrchestratorEvent::ApprovalNeeded(request),
            None,
            now,
        );
        message.spend = Some(self.snap.spend);
        message
    }

    /// The answer to the pending approval, once it is taken: `None` runs
    /// the call, `Some` is the error the model reads instead.
    pub(crate) fn answered(&self, name: &str) -> Option<Option<ToolOutcome>> {
        let answer = self.snap.approval.as_ref()?.answer.as_ref()?;
        if answer.decision.allows() {
            tracing::info!(tool = %name, by = %answer.by, "tool call approved");
            Some(None)
        } else {
            tracing::info!(tool = %name, by = %answer.by, "tool call denied by the human");
            Some(Some(ToolOutcome::error(approval::refused(answer))))
        }
    }

    /// Input `seq` is an approval's answer: taken with the approval it
    /// answers, to be stored before anything acts on it (`true`); one that
    /// answers no waiting call (a late one, another Orchestrator's number
    /// reused) is passed over.
    pub(crate) fn take_answer(&mut self, seq: u64, answer: ApprovalAnsweredEntry) -> bool {
        self.snap.in_seq = seq;
        let Some(pending) = self
            .snap
            .approval
            .as_mut()
            .filter(|p| p.call_id == answer.call_id && p.answer.is_none())
        else {
            tracing::warn!(seq, call = %answer.call_id, approval = answer.approval, "an approval's answer that no call waits for; passed over");
            return false;
        };
        tracing::info!(seq, call = %answer.call_id, decision = ?answer.decision, by = %answer.by, "approval answered");
        if answer.decision == ApprovalDecision::AllowSession
            && let Some(rule) = &answer.rule
            && let Some(layers) = self.snap.layers.as_mut()
        {
            // The same call runs without asking for the rest of its life.
            layers.allowed.push(rule.clone());
        }
        pending.answer = Some(answer);
        true
    }
}

/// A call's arguments as a request carries them: a string argument longer
/// than [`SHOWN_ARGUMENT_BYTES`] is cut, with a marker (the command or path
/// a rule matches is never that long).
fn shown(input: &Value) -> Value {
    let Some(object) = input.as_object() else {
        return input.clone();
    };
    let cut = object
        .iter()
        .map(|(key, value)| {
            let value = match value.as_str() {
                Some(text) if text.len() > SHOWN_ARGUMENT_BYTES => {
                    let mut end = SHOWN_ARGUMENT_BYTES;
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    Value::String(format!(
                        "{}[… {} more bytes not shown]",
                        &text[..end],
                        text.len() - end
                    ))
                }
                _ => value.clone(),
            };
            (key.clone(), value)
        })
        .collect();
    Value::Object(cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_carries_a_large_argument_cut_and_the_path_whole() {
        let content = "é".repeat(SHOWN_ARGUMENT_BYTES);
        let input = json!({"path": "src/big.rs", "content": content});
        let shown = shown(&input);
        assert_eq!(shown["path"], "src/big.rs");
        let text = shown["content"].as_str().unwrap();
        assert!(text.len() < SHOWN_ARGUMENT_BYTES + 100);
        assert!(
            text.ends_with(&format!("[… {SHOWN_ARGUMENT_BYTES} more bytes not shown]")),
            "{}",
            &text[text.len() - 60..]
        );
        let small = json!({"command": "git push origin main"});
        assert_eq!(super::shown(&small), small);
    }
}
