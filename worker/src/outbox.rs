//! Builds an Orchestrator's outputs. Each output is decided by a stored
//! step and carries the seq that step gave it; the step's record, stored on
//! `orch.<orch_id>.out`, is the output (see `state.rs`), so nothing here
//! publishes.

use arbiter_protocol::{Evidence, OrchestratorEvent, OrchestratorMessage, VERSION};
use chrono::Utc;

pub(crate) struct Outbox {
    session_id: String,
    orch_id: String,
}

impl Outbox {
    pub(crate) fn new(session_id: &str, orch_id: &str) -> Self {
        Self {
            session_id: session_id.to_owned(),
            orch_id: orch_id.to_owned(),
        }
    }

    /// The output numbered `seq`, with the worker's evidence (outputs only).
    pub(crate) fn message(
        &self,
        seq: u64,
        event: OrchestratorEvent,
        evidence: Option<Evidence>,
    ) -> OrchestratorMessage {
        OrchestratorMessage {
            v: VERSION,
            session_id: self.session_id.clone(),
            orch_id: self.orch_id.clone(),
            seq,
            event,
            evidence,
            handoff: None,
            spend: None,
            // It reads its inputs from the session's log (`inputs.rs`).
            session_inputs: true,
            sent_at: Utc::now(),
        }
    }
}
