//! The session's status: published on every change and, while nothing
//! changes, every [`STATUS_HEARTBEAT`] (consoles take it as a heartbeat).

use super::*;

/// How often status is republished while nothing changes (consoles use it as a heartbeat).
pub(super) const STATUS_HEARTBEAT: Duration = Duration::from_secs(2);

impl Session {
    pub(super) async fn publish_status(&mut self, thinking: bool, changed: bool) {
        let team: Vec<arbiter_protocol::ActiveOrchestrator> = self
            .state
            .team
            .iter()
            .map(|a| arbiter_protocol::ActiveOrchestrator {
                orch_id: a.orch_id.clone(),
                number: a.number,
                member: a.member,
                reported: a.reported,
            })
            .collect();
        let status = SessionStatus {
            v: VERSION,
            session_id: self.id.clone(),
            state: if thinking || !self.state.queue.is_empty() {
                arbiter_protocol::SessionState::Thinking
            } else {
                arbiter_protocol::SessionState::Idle
            },
            queued: u32::try_from(self.state.queue.len()).unwrap_or(u32::MAX),
            arbiter_context_pct: percent(
                self.state.context_tokens,
                self.shared.config.context_budget,
            ),
            arbiter_context_tokens: self.state.context_tokens,
            active: team.first().cloned(),
            team,
            summoned: self.state.summoned,
            last_seq: self.state.log_seq,
            created_at: self.state.created_at,
            at: Utc::now(),
            spend: self.state.spend.clone(),
            archived_at: None,
            budget: self.budget(),
        };
        let bus = &self.shared.bus;
        if changed {
            match serde_json::to_vec(&status) {
                Ok(bytes) => {
                    if let Err(e) = bus.sessions_kv.put(&self.id, bytes.into()).await {
                        tracing::warn!(error = %e, "could not store the session status");
                    } else {
                        self.status_dirty = false;
                    }
                }
                Err(e) => tracing::error!(error = %e, "could not encode the session status"),
            }
        }
        if let Err(e) = bus
            .publish_core(subjects::session_status(&self.id), &status)
            .await
        {
            tracing::warn!(error = %e, "could not publish the session status");
        }
    }
}
