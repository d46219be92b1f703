//! Orchestrator output reaching a session: only its live Orchestrators',
//! and only in `seq` order. The next `seq` is taken; one at or below the last
//! taken is a duplicate; one further ahead is held aside, unacknowledged, for
//! up to the gap wait (longer than the consumer's ack wait, so a message
//! delivered again can fill the gap). Held output is taken in order when the
//! gap fills; if it never does, it is dropped and acknowledged, and the log
//! says which `seq` never arrived. The last `seq` taken (stored with the
//! session) never moves past one that was not taken, so a forged `seq` cannot
//! silence the real Orchestrator.

use arbiter_bus::TraceContext;
use arbiter_bus::seq::{self, Expired, Gaps, Hold, Order};
use arbiter_protocol::{
    ErrorEntry, Evidence, LogBody, NotificationKind, OrchestratorEntry, OrchestratorEvent,
    OrchestratorMessage, PriorHandoff, WireError, member_name, subjects,
};
use tokio::time::Instant;

use crate::rules::{Ack, Core};
use crate::state::Pending;

/// Output held aside per live Orchestrator, at most (so per session, at
/// most this times the team cap); more is dropped at once (and counted in
/// the gap's report). Bounds what a flood of forged `seq`s keeps
/// unacknowledged on the coordinator's consumer.
pub(crate) const MAX_HELD_OUTPUTS: usize = 64;

/// One Orchestrator output as it came, not yet acknowledged.
pub(crate) struct Held {
    message: OrchestratorMessage,
    trace: TraceContext,
    ack: Ack,
}

/// The output held aside for a session's live Orchestrators, each its own
/// (the members of a team open and fill their gaps independently).
pub(crate) struct HeldOutputs {
    wait: std::time::Duration,
    /// Held output by orch_id.
    by_orch: std::collections::HashMap<String, Gaps<Held>>,
}

impl HeldOutputs {
    pub(crate) fn new(wait: std::time::Duration) -> Self {
        Self {
            wait,
            by_orch: std::collections::HashMap::new(),
        }
    }

    /// When the first open gap times out, if output is held.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.by_orch.values().filter_map(Gaps::deadline).min()
    }
}

impl Core {
    pub(crate) fn on_orchestrator(
        &mut self,
        message: OrchestratorMessage,
        trace: TraceContext,
        ack: Ack,
    ) {
        let Some(active) = self.state.member(&message.orch_id) else {
            tracing::info!(orch.id = %message.orch_id, "output from an Orchestrator that is no longer active; ignored");
            self.keep_ack(ack);
            return;
        };
        match seq::order(active.outputs_seen, message.seq) {
            Order::Duplicate => {
                tracing::info!(orch.id = %message.orch_id, seq = message.seq, "duplicate Orchestrator output dropped");
                self.keep_ack(ack);
            }
            Order::Ahead => self.hold_output(Held {
                message,
                trace,
                ack,
            }),
            Order::Next => {
                let mut next = Some(Held {
                    message,
                    trace,
                    ack,
                });
                while let Some(held) = next {
                    let orch_id = held.message.orch_id.clone();
                    self.keep_ack(held.ack);
                    self.take_output(held.message, held.trace);
                    next = match self.state.member(&orch_id) {
                        Some(active) => {
                            let last = active.outputs_seen;
                            self.held
                                .by_orch
                                .get_mut(&orch_id)
                                .and_then(|gaps| gaps.next_after(last, self.now.mono))
                                .map(|(_, held)| held)
                        }
                        // It failed: whatever it sent after is not wanted.
                        None => {
                            self.drop_held(&orch_id);
                            None
                        }
                    };
                }
            }
        }
    }

    /// Output that came ahead of its turn waits, unacknowledged, for the
    /// output before it.
    fn hold_output(&mut self, held: Held) {
        let seq = held.message.seq;
        let orch_id = held.message.orch_id.clone();
        // What Orchestrators no longer live left held is not wanted any more.
        let gone: Vec<String> = self
            .held
            .by_orch
            .keys()
            .filter(|id| self.state.member(id).is_none())
            .cloned()
            .collect();
        for id in gone {
            self.drop_held(&id);
        }
        let wait = self.held.wait;
        let gaps = self
            .held
            .by_orch
            .entry(orch_id.clone())
            .or_insert_with(|| Gaps::new(wait, MAX_HELD_OUTPUTS));
        match gaps.hold(seq, held, self.now.mono) {
            Hold::Held => {
                tracing::warn!(orch.id = %orch_id, seq, "Orchestrator output ahead of its turn; held until the output before it arrives");
            }
            Hold::AlreadyHeld(again) => {
                let same = gaps
                    .get(seq)
                    .is_some_and(|first| stream_seq(&first.ack) == stream_seq(&again.ack));
                if same {
                    // Delivered again (the ack wait ran out): this delivery is the one to ack.
                    gaps.replace(seq, again);
                } else {
                    tracing::warn!(orch.id = %orch_id, seq, "a second output with a seq already held; dropped");
                    self.keep_ack(again.ack);
                }
            }
            Hold::Full(turned_away) => {
                tracing::warn!(orch.id = %orch_id, seq, "too much Orchestrator output held; dropped");
                self.keep_ack(turned_away.ack);
            }
        }
    }

    /// Drops the held output once its gap has stayed open for the whole
    /// wait, and says so in the log if its Orchestrator is still active.
    pub(crate) fn expire_held(&mut self) {
        let now = self.now.mono;
        let expired: Vec<(String, Expired<Held>)> = self
            .held
            .by_orch
            .iter_mut()
            .filter_map(|(id, gaps)| gaps.expire(now).map(|e| (id.clone(), e)))
            .collect();
        self.held.by_orch.retain(|_, gaps| !gaps.is_empty());
        for (orch_id, expired) in expired {
            self.expired(&orch_id, expired);
        }
    }

    /// One Orchestrator's gap that never filled.
    fn expired(&mut self, orch_id: &str, expired: Expired<Held>) {
        let dropped: Vec<u64> = expired.dropped.iter().map(|(seq, _)| *seq).collect();
        let turned_away = expired.turned_away;
        self.ack_dropped(expired);
        let Some(active) = self.state.member(orch_id) else {
            return;
        };
        let missing = active.outputs_seen.saturating_add(1);
        let list: Vec<String> = dropped.iter().map(u64::to_string).collect();
        let mut detail = format!(
            "output seq {missing} of {} never arrived within {} s; the output held after it \
             was dropped: seq {}",
            member_name(active.number, active.member),
            self.held.wait.as_secs_f64(),
            list.join(", ")
        );
        if turned_away > 0 {
            detail.push_str(&format!(
                " (and {turned_away} more turned away, past {MAX_HELD_OUTPUTS} held)"
            ));
        }
        tracing::error!(orch.id = %active.orch_id, missing, ?dropped, "a gap in Orchestrator output never filled; held output dropped");
        let subject = subjects::orch_out(&active.orch_id);
        self.log(LogBody::Error(ErrorEntry {
            error: WireError::MalformedMessage { subject, detail },
        }));
    }

    /// Drops whatever is held for `orch_id`, acknowledged without a word.
    fn drop_held(&mut self, orch_id: &str) {
        if let Some(mut gaps) = self.held.by_orch.remove(orch_id) {
            let expired = gaps.drain();
            self.ack_dropped(expired);
        }
    }

    fn ack_dropped(&mut self, expired: Expired<Held>) {
        for (_, held) in expired.dropped {
            self.keep_ack(held.ack);
        }
    }

    /// Takes the active Orchestrator's next output.
    fn take_output(&mut self, message: OrchestratorMessage, trace: TraceContext) {
        let Some(active) = self.state.member_mut(&message.orch_id) else {
            return;
        };
        active.outputs_seen = message.seq;
        // Its worker reads inputs where v3 stores them: no copy on `.in` any more.
        active.session_inputs |= message.session_inputs;
        let (number, member) = (active.number, active.member);
        if let Some(spend) = message.spend {
            self.state
                .spend
                .set_orchestrator(&message.orch_id, number, spend);
        }
        self.trace = trace;
        self.step.changed = true;
        match message.event {
            OrchestratorEvent::Output(mut output) => {
                // From this worker the packet is on the message; take it from
                // the event too, in case a writer put it there.
                let handoff = message.handoff.or_else(|| output.handoff.take());
                let line = handoff.as_ref().map(|h| h.compact_line(number));
                let decisions = handoff.as_ref().map(|h| h.decisions.clone());
                let verdict = output.verdict.take();
                if let Some(packet) = handoff.as_ref().filter(|_| member.is_none()) {
                    self.state.arbiter.note_packet(number, packet);
                    // Stored with this step: the next summons carries it.
                    self.state.handoff = Some(PriorHandoff {
                        number,
                        orch_id: message.orch_id.clone(),
                        packet: packet.as_ref().clone(),
                    });
                }
                self.log(LogBody::Orchestrator(OrchestratorEntry {
                    number,
                    member,
                    orch_id: message.orch_id.clone(),
                    expects_response: output.expects_response,
                    text: output.message.clone(),
                    evidence: message.evidence.clone(),
                    handoff,
                }));
                self.remember_decisions(number, &decisions.unwrap_or_default());
                if output.expects_response {
                    let first = match self.state.member_mut(&message.orch_id) {
                        Some(active) => {
                            active.asked = true;
                            active.reminded = false;
                            !std::mem::replace(&mut active.reported, true)
                        }
                        None => false,
                    };
                    let report = output.message.clone();
                    let tool_calls = message.evidence.as_ref().map(Evidence::tool_calls);
                    if self.config.model.profile == arbiter_llm::Profile::Small {
                        self.state.last_report = Some(report_words(
                            number,
                            member,
                            &report,
                            message.evidence.as_ref(),
                        ));
                    }
                    let pending = Pending::Orchestrator {
                        number,
                        member,
                        text: output.message,
                        evidence: message.evidence.map(Box::new),
                        handoff: line,
                    };
                    // A parallel member's first report waits for its team's.
                    if let (true, Some(m)) = (first, member)
                        && self.gathers(number)
                    {
                        // A report gathered for the team's one input is not a
                        // question left waiting: the Arbiter may answer the
                        // team as a whole (or one member of it).
                        if let Some(active) = self.state.member_mut(&message.orch_id) {
                            active.asked = false;
                        }
                        self.gathered(m, pending, verdict);
                    } else {
                        self.enqueue(pending);
                        self.check_round(number, &report, tool_calls);
                    }
                } else {
                    // A note that claims work done with nothing to show is
                    // flagged as a report is; first, so that the digest's
                    // cut never drops it.
                    let flag = message
                        .evidence
                        .as_ref()
                        .and_then(|e| e.flag(number, member, &output.message));
                    let text = match flag {
                        Some(flag) => format!(
                            "[Check: {flag}. Nothing of it shows in the workspace.] {}",
                            output.message
                        ),
                        None => output.message,
                    };
                    self.state.notes.push((number, text));
                }
            }
            OrchestratorEvent::ApprovalNeeded(request) => {
                self.approval_asked(message.orch_id.clone(), (number, member), request);
            }
            OrchestratorEvent::Failed(failed) => {
                self.state.team.retain(|a| a.orch_id != message.orch_id);
                self.withdraw_approvals(&message.orch_id);
                let error = match failed.error {
                    already @ WireError::OrchestratorFailed { .. } => already,
                    cause => WireError::OrchestratorFailed {
                        number,
                        message: cause.to_string(),
                    },
                };
                let text = format!(
                    "{} has stopped and is no longer active: {}",
                    member_name(number, member),
                    error
                );
                self.log(LogBody::Error(ErrorEntry { error }));
                self.notify(NotificationKind::Failed, text.clone());
                // A member that failed before reporting: its failure is its report.
                if let Some(m) = member
                    && self.gathers(number)
                    && !self
                        .state
                        .gather
                        .as_ref()
                        .is_some_and(|g| g.reports.iter().any(|(r, _)| *r == m))
                {
                    self.gathered(m, Pending::System { text }, None);
                } else {
                    self.enqueue(Pending::System { text });
                }
            }
        }
        self.check_budget();
    }
}

/// A report as the Arbiter reads it: `Orchestrator I: <text>`, then the
/// worker's evidence on a line of its own, then, for a claim of work done
/// with nothing to show for it, a line that says so; last, the one line of
/// its handoff packet, if it sent one (the packet itself bypasses the Arbiter).
pub(crate) fn report(
    number: u32,
    member: Option<u32>,
    text: &str,
    evidence: Option<&Evidence>,
    handoff: Option<&str>,
) -> String {
    let mut out = report_words(number, member, text, evidence);
    if let Some(line) = handoff {
        out.push('\n');
        out.push_str(line);
    }
    out
}

fn report_words(
    number: u32,
    member: Option<u32>,
    text: &str,
    evidence: Option<&Evidence>,
) -> String {
    let name = member_name(number, member);
    let mut out = format!("{name}: {text}");
    if let Some(evidence) = evidence {
        out.push_str(&format!(
            "\n[Evidence from the worker, not written by {name}: {}]",
            evidence.summary()
        ));
        if let Some(flag) = evidence.flag(number, member, text) {
            out.push_str(&format!(
                "\n[Check: {flag}. Nothing of it shows in the workspace.]"
            ));
        }
    }
    out
}

/// The stream sequence of a delivery: the same for every delivery of one message.
fn stream_seq(ack: &Ack) -> Option<u64> {
    ack.as_ref().and_then(|delivery| delivery.stream_seq())
}

#[cfg(test)]
mod tests {
    use arbiter_protocol::{FileChanges, ToolCalls};

    use super::*;

    #[test]
    fn a_report_shows_its_evidence_and_a_claim_without_work_is_flagged() {
        let none = Evidence::default();
        assert_eq!(
            report(1, None, "hello.py is created.", Some(&none), None),
            "Orchestrator I: hello.py is created.\n\
             [Evidence from the worker, not written by Orchestrator I: 0 tool calls, 0 files \
             changed]\n\
             [Check: Orchestrator I reports done: 0 tool calls, 0 files changed. Nothing of it \
             shows in the workspace.]"
        );
        // A question with no work yet is not a claim.
        assert_eq!(
            report(1, None, "TOML or YAML?", Some(&none), None),
            "Orchestrator I: TOML or YAML?\n\
             [Evidence from the worker, not written by Orchestrator I: 0 tool calls, 0 files \
             changed]"
        );
        let worked = Evidence {
            tools: vec![ToolCalls {
                tool: "write".into(),
                calls: 1,
                failed: 0,
            }],
            files: FileChanges {
                created: vec!["hello.py".into()],
                ..FileChanges::default()
            },
            ..Evidence::default()
        };
        assert_eq!(
            report(2, None, "Done.", Some(&worked), None),
            "Orchestrator II: Done.\n\
             [Evidence from the worker, not written by Orchestrator II: 1 tool call (write 1), \
             1 file changed (created: hello.py)]"
        );
        // From an older worker: the words alone.
        assert_eq!(
            report(3, None, "Done.", None, None),
            "Orchestrator III: Done."
        );
    }
}
