//! What a session's status says: built from the core's state at a given
//! time. When and where it goes is the shell's (`session/status.rs`).

use arbiter_protocol::{ActiveOrchestrator, SessionState, SessionStatus, VERSION, percent};

use crate::rules::{Core, Now};

/// What a reader of the bucket acts on: which Orchestrator is active, how
/// many were summoned, the caps, the approvals waiting. The bucket gets a
/// change of it at once.
pub(crate) type Shape = (Option<String>, u32, String, Vec<u32>);

impl Core {
    /// The status at `now`; `thinking`: an Arbiter call (a turn or a
    /// handoff) is running.
    pub(crate) fn status(&self, thinking: bool, now: Now) -> SessionStatus {
        let team: Vec<ActiveOrchestrator> = self
            .state
            .team
            .iter()
            .map(|a| ActiveOrchestrator {
                orch_id: a.orch_id.clone(),
                number: a.number,
                member: a.member,
                reported: a.reported,
            })
            .collect();
        SessionStatus {
            v: VERSION,
            session_id: self.id.clone(),
            state: if thinking || !self.state.queue.is_empty() {
                SessionState::Thinking
            } else {
                SessionState::Idle
            },
            queued: u32::try_from(self.state.queue.len()).unwrap_or(u32::MAX),
            arbiter_context_pct: percent(self.state.context_tokens, self.config.context_budget),
            arbiter_context_tokens: self.state.context_tokens,
            active: team.first().cloned(),
            team,
            summoned: self.state.summoned,
            last_seq: self.state.log_seq,
            created_at: self.state.created_at,
            at: now.wall,
            spend: self.state.spend.clone(),
            archived_at: None,
            budget: self.budget(),
            approvals: self
                .state
                .approvals
                .waiting
                .iter()
                .map(|w| w.status())
                .collect(),
            attention: self.state.attention.clone(),
        }
    }

    /// Nothing happens until a human writes: the Arbiter idle, and no
    /// Orchestrator at work (every one waits on its question, or the
    /// session holds).
    pub(crate) fn settled(&self, status: &SessionStatus) -> bool {
        status.state == SessionState::Idle
            && (self.state.team.iter().all(|a| a.asked) || self.state.hold.is_some())
    }
}

/// The [`Shape`] of a status.
pub(crate) fn shape(status: &SessionStatus) -> Shape {
    (
        status.active.as_ref().map(|a| a.orch_id.clone()),
        status.summoned,
        serde_json::to_string(&status.budget).unwrap_or_default(),
        status.approvals.iter().map(|a| a.approval).collect(),
    )
}
