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
    ApprovalAnsweredEntry, ApprovalDecision, ApprovalRequest, OrchestratorEvent, OrchestratorState,
};
use serde_json::Value;

use super::waiting::until;
use super::{Agent, Stop};
use crate::approval::{self, Pending};
use crate::tools::{self, ToolOutcome};

/// Longest string argument an approval request carries whole (a `write`'s
/// content may be megabytes; the request is one NATS message).
const SHOWN_ARGUMENT_BYTES: usize = 16 * 1024;

impl Agent {
    /// The policy's word on call `id`: `None` runs it (allowed, or allowed
    /// by the human); `Some` is the error result the model reads instead.
    /// An `ask` waits here for the answer.
    pub(super) async fn gate(
        &mut self,
        id: &str,
        name: &str,
        input: &Value,
    ) -> Result<Option<ToolOutcome>, Stop> {
        let asked = self.snap.approval.as_ref().is_some_and(|p| p.call_id == id);
        if asked {
            tracing::info!(tool = %name, call = %id, "the call asked for approval before: its answer is awaited, not asked again");
        } else {
            if let Some(other) = self.snap.approval.take() {
                tracing::warn!(call = %other.call_id, "a stored approval of another call dropped");
            }
            let decision = approval::decide(self.snap.layers.as_ref(), name, input);
            match decision.action {
                Action::Allow => return Ok(None),
                Action::Deny => {
                    tracing::info!(tool = %name, rule = %decision.by, "tool call denied by the policy");
                    return Ok(Some(ToolOutcome::error(approval::denied(
                        name,
                        &decision.by,
                    ))));
                }
                Action::Ask => self.ask(id, name, input, decision.by).await?,
            }
        }
        let answer = self.await_answer(name).await?;
        if answer.decision.allows() {
            tracing::info!(tool = %name, by = %answer.by, "tool call approved");
            Ok(None)
        } else {
            tracing::info!(tool = %name, by = %answer.by, "tool call denied by the human");
            Ok(Some(ToolOutcome::error(approval::refused(&answer))))
        }
    }

    /// Stores the request, as the step whose record is the
    /// `approval_needed` output, before anything else.
    async fn ask(&mut self, id: &str, name: &str, input: &Value, rule: String) -> Result<(), Stop> {
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
        let mut message = self.outbox.message(
            self.snap.out_seq,
            OrchestratorEvent::ApprovalNeeded(request),
            None,
        );
        message.spend = Some(self.snap.spend);
        self.step(vec![message]).await
    }

    /// Waits, in its slot, until the answer to the stored approval is
    /// taken (and stored) from the inputs.
    async fn await_answer(&mut self, name: &str) -> Result<ApprovalAnsweredEntry, Stop> {
        let tool = tools::display_name(name);
        self.status
            .update(|s| {
                s.state = OrchestratorState::WaitingApproval;
                s.current_tool = Some(tool);
            })
            .await;
        let stop = self.stopper.token().clone();
        loop {
            if let Some(answer) = self.snap.approval.as_ref().and_then(|p| p.answer.clone()) {
                return Ok(answer);
            }
            let gap = self.ahead.deadline();
            tokio::select! {
                () = stop.cancelled() => return Err(Stop::Interrupted),
                input = self.inputs.recv() => {
                    // Words go to the stored inbox; the answer is taken by `take_answer`.
                    self.receive(input.ok_or(Stop::Interrupted)?, false).await?;
                }
                () = until(gap), if gap.is_some() => self.expire_ahead().await,
            }
        }
    }

    /// Input `seq` is an approval's answer: stored with the approval it
    /// answers before anything acts on it; one that answers no waiting call
    /// (a late one, another Orchestrator's number reused) is passed over.
    pub(super) async fn take_answer(
        &mut self,
        seq: u64,
        answer: ApprovalAnsweredEntry,
    ) -> Result<(), Stop> {
        self.snap.in_seq = seq;
        let Some(pending) = self
            .snap
            .approval
            .as_mut()
            .filter(|p| p.call_id == answer.call_id && p.answer.is_none())
        else {
            tracing::warn!(seq, call = %answer.call_id, approval = answer.approval, "an approval's answer that no call waits for; passed over");
            return Ok(());
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
        self.step(Vec::new()).await
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
