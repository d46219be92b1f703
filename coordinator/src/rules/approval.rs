//! Tool-call approvals (docs/approvals.md): an Orchestrator's call that its
//! policy says to ask about comes as an `approval_needed` output. The
//! session numbers it, logs it, lists it in its status and tells the
//! webhooks; the first answer (a console's `/allow`, `/deny`, the wait
//! running out, or an earlier "allow for this session" of the same call)
//! is logged as the Orchestrator's next input, which is how its worker
//! hears it. The session's own policy (`/policy`) rides on each summons.

use arbiter_protocol::{
    Answerer, ApprovalAnsweredEntry, ApprovalAskedEntry, ApprovalDecision, ApprovalReply,
    ApprovalRequest, LogBody, NotificationKind, Policy, SystemEntry, WaitingApproval,
    approval::Rule, member_name,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Core, Now};

/// Longest command or path a status or notification quotes.
const SUMMARY_CHARS: usize = 200;

/// A session's approvals, stored with its snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Approvals {
    /// The number of the last approval asked (1, 2, 3…).
    #[serde(default)]
    pub last: u32,
    /// Waiting, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<Waiting>,
    /// Calls the human allowed for the rest of the session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed: Vec<Rule>,
    /// The session's policy, from `/policy`: carried by every summons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// The Arbiter's policy of its last summons (its output's `policy`):
    /// carried by that summons' Orchestrators, a chain's later links too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summons_policy: Option<Policy>,
    /// Call ids answered lately, so that a request seen again (a worker
    /// that took the Orchestrator over asks once more) is not asked twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answered: Vec<String>,
}

/// Answered call ids remembered.
const ANSWERED: usize = 64;

impl Approvals {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Approvals::default()
    }
}

/// One approval waiting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Waiting {
    pub approval: u32,
    pub orch_id: String,
    pub number: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    pub request: ApprovalRequest,
    pub asked_at: DateTime<Utc>,
    pub deadline: DateTime<Utc>,
}

impl Waiting {
    pub(crate) fn status(&self) -> WaitingApproval {
        WaitingApproval {
            approval: self.approval,
            number: self.number,
            member: self.member,
            tool: self.request.tool.clone(),
            summary: summary(&self.request),
            asked_at: self.asked_at,
            deadline: self.deadline,
        }
    }
}

/// What a request's call does, in one line: its command or path, cut.
pub(crate) fn summary(request: &ApprovalRequest) -> String {
    let text = arbiter_protocol::approval::subject(&request.tool, &request.input)
        .unwrap_or_else(|| request.input.to_string());
    let mut cut: String = text.chars().take(SUMMARY_CHARS).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}

impl Core {
    /// Orchestrator `orch_id`'s call waits for the human (an
    /// `approval_needed` output).
    pub(crate) fn approval_asked(
        &mut self,
        orch_id: String,
        (number, member): (u32, Option<u32>),
        request: ApprovalRequest,
    ) {
        let approvals = &self.state.approvals;
        if approvals.answered.contains(&request.call_id)
            || approvals
                .waiting
                .iter()
                .any(|w| w.request.call_id == request.call_id)
        {
            // Asked again by a worker that took the Orchestrator over: the
            // answer is on its way, or waits as before.
            tracing::info!(orch.id = %orch_id, call = %request.call_id, "approval asked again");
            return;
        }
        self.state.approvals.last += 1;
        let waiting = Waiting {
            approval: self.state.approvals.last,
            orch_id,
            number,
            member,
            request,
            asked_at: self.now.wall,
            deadline: self.now.wall
                + chrono::Duration::from_std(self.config.approval_timeout)
                    .unwrap_or(chrono::Duration::MAX),
        };
        self.log(LogBody::ApprovalAsked(ApprovalAskedEntry {
            approval: waiting.approval,
            number,
            member,
            orch_id: waiting.orch_id.clone(),
            request: waiting.request.clone(),
            deadline: waiting.deadline,
        }));
        if let Some(rule) = self
            .state
            .approvals
            .allowed
            .iter()
            .find(|r| allows(r, &waiting.request))
            .cloned()
        {
            let by = Answerer::Session {
                rule: rule.to_string(),
            };
            self.answer(waiting, ApprovalDecision::AllowOnce, None, by);
            return;
        }
        let summary = format!(
            "{} asks to run {}: {}",
            member_name(number, member),
            waiting.request.tool,
            summary(&waiting.request)
        );
        let status = waiting.status();
        self.state.approvals.waiting.push(waiting);
        self.notify_with(NotificationKind::NeedsInput, summary, Some(status));
    }

    /// A console's answer.
    pub(crate) fn approval_reply(&mut self, reply: ApprovalReply, console: &str) {
        let Some(at) = self
            .state
            .approvals
            .waiting
            .iter()
            .position(|w| w.approval == reply.approval)
        else {
            let text = if reply.approval == 0 || reply.approval > self.state.approvals.last {
                format!("There is no approval {} in this session.", reply.approval)
            } else {
                format!(
                    "Approval {} is not waiting any more (answered already, or its \
                     Orchestrator ended): console {console}'s answer changed nothing.",
                    reply.approval
                )
            };
            self.log(LogBody::System(SystemEntry { text }));
            return;
        };
        let waiting = self.state.approvals.waiting.remove(at);
        let by = Answerer::Console {
            name: console.to_owned(),
        };
        let reason = reply.reason.filter(|r| !r.trim().is_empty());
        self.answer(waiting, reply.decision, reason, by);
    }

    /// The session's policy from now on (`/policy`).
    pub(crate) fn change_policy(&mut self, policy: Policy, console: &str) {
        let text = if policy == Policy::default() {
            format!(
                "Console {console} cleared the session's policy: Orchestrators summoned from \
                 now on follow their workers' own."
            )
        } else {
            format!(
                "Console {console} set the session's policy to `{policy}`: Orchestrators \
                 summoned from now on follow it (it can only tighten their workers' own)."
            )
        };
        self.state.approvals.policy = (policy != Policy::default()).then_some(policy);
        self.log(LogBody::System(SystemEntry { text }));
    }

    /// Approvals whose wait ran out are denied.
    pub(crate) fn expire_approvals(&mut self) {
        let now = self.now.wall;
        let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.state.approvals.waiting)
            .into_iter()
            .partition(|w| w.deadline <= now);
        self.state.approvals.waiting = waiting;
        for waiting in due {
            let secs = (waiting.deadline - waiting.asked_at).num_seconds().max(0);
            let wait = if secs < 120 {
                format!("{secs} s")
            } else {
                format!("{} min", (secs + 30) / 60)
            };
            let reason = format!(
                "nobody answered within {wait}; the call did not run. Go on without it, or ask \
                 the Arbiter to have the human approve it."
            );
            self.answer(
                waiting,
                ApprovalDecision::Deny,
                Some(reason),
                Answerer::Timeout,
            );
        }
    }

    /// When the first waiting approval runs out, on the monotonic clock.
    pub(crate) fn approval_deadline(&self, now: Now) -> Option<tokio::time::Instant> {
        let first = self
            .state
            .approvals
            .waiting
            .iter()
            .map(|w| w.deadline)
            .min()?;
        let left = (first - now.wall).to_std().unwrap_or_default();
        Some(now.mono + left)
    }

    /// Approvals of an Orchestrator that ended are withdrawn, each said in
    /// the log: nobody is asked about a call that will never run.
    pub(crate) fn withdraw_approvals(&mut self, orch_id: &str) {
        let (gone, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.state.approvals.waiting)
            .into_iter()
            .partition(|w| w.orch_id == orch_id);
        self.state.approvals.waiting = waiting;
        for w in gone {
            self.log(LogBody::System(SystemEntry {
                text: format!(
                    "Approval {} is withdrawn: {} ended, and its {} call never ran.",
                    w.approval,
                    member_name(w.number, w.member),
                    w.request.tool
                ),
            }));
        }
    }

    /// Logs the answer as the Orchestrator's next input (how its worker
    /// hears it); an "allow for this session" keeps a rule that answers
    /// the same call, now and later, without asking.
    fn answer(
        &mut self,
        waiting: Waiting,
        decision: ApprovalDecision,
        reason: Option<String>,
        by: Answerer,
    ) {
        let Some(active) = self.state.member_mut(&waiting.orch_id) else {
            return;
        };
        active.inputs_sent += 1;
        let input_seq = active.inputs_sent;
        let rule = (decision == ApprovalDecision::AllowSession)
            .then(|| Rule::exactly(&waiting.request.tool, &waiting.request.input));
        let answered = &mut self.state.approvals.answered;
        answered.push(waiting.request.call_id.clone());
        if answered.len() > ANSWERED {
            answered.remove(0);
        }
        self.log(LogBody::ApprovalAnswered(ApprovalAnsweredEntry {
            approval: waiting.approval,
            number: waiting.number,
            member: waiting.member,
            orch_id: waiting.orch_id,
            call_id: waiting.request.call_id,
            decision,
            reason,
            by,
            rule: rule.clone(),
            input_seq,
        }));
        if let Some(rule) = rule {
            self.state.approvals.allowed.push(rule.clone());
            // Others waiting on the same call are answered by it too.
            let (same, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.state.approvals.waiting)
                .into_iter()
                .partition(|w| allows(&rule, &w.request));
            self.state.approvals.waiting = rest;
            for waiting in same {
                let by = Answerer::Session {
                    rule: rule.to_string(),
                };
                self.answer(waiting, ApprovalDecision::AllowOnce, None, by);
            }
        }
    }
}

/// Whether `rule` (an "allow for this session") allows `request`'s call.
fn allows(rule: &Rule, request: &ApprovalRequest) -> bool {
    rule.covers(&request.tool, &request.input)
}
