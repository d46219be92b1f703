//! Publishes an Orchestrator's outputs on `orch.<orch_id>.out`. Each output
//! is decided by a stored step, carries the seq that step gave it, and is
//! published under the message id `<orch_id>:out:<seq>` until the server
//! takes it; a worker that takes the Orchestrator over publishes the last
//! step's outputs again, skipping those already on the subject.

use std::time::Duration;

use arbiter_bus::{Bus, TraceContext};
use arbiter_protocol::{Evidence, OrchestratorEvent, OrchestratorMessage, VERSION, subjects};
use chrono::Utc;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

/// Longest wait between attempts to publish an output.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

pub(crate) struct Outbox {
    bus: Bus,
    session_id: String,
    orch_id: String,
    /// The context its outputs go with: the span of the turn that made them.
    pub(crate) trace: TraceContext,
}

impl Outbox {
    pub(crate) fn new(bus: Bus, session_id: &str, orch_id: &str) -> Self {
        Self {
            bus,
            session_id: session_id.to_owned(),
            orch_id: orch_id.to_owned(),
            trace: TraceContext::none(),
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
            sent_at: Utc::now(),
        }
    }

    /// Publishes `messages` in order, each retried until published; false if
    /// `until` fired first (the stored step keeps them for whoever goes on).
    pub(crate) async fn publish(
        &self,
        messages: &[OrchestratorMessage],
        until: &CancellationToken,
    ) -> bool {
        for message in messages {
            let msg_id = format!("{}:out:{}", self.orch_id, message.seq);
            let mut delay = Duration::from_millis(50);
            loop {
                match self
                    .bus
                    .publish_js(
                        subjects::orch_out(&self.orch_id),
                        &msg_id,
                        &self.trace,
                        message,
                    )
                    .await
                {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(seq = message.seq, error = %e, "publishing Orchestrator output failed; retrying");
                        tokio::select! {
                            () = until.cancelled() => return false,
                            () = tokio::time::sleep(delay) => {}
                        }
                        delay = (delay * 2).min(MAX_BACKOFF);
                    }
                }
            }
        }
        true
    }

    /// Publishes a restored step's outputs again, skipping those whose seq is
    /// already on the subject (the server's duplicate window is only minutes).
    pub(crate) async fn replay(&self, messages: &[OrchestratorMessage], until: &CancellationToken) {
        if messages.is_empty() {
            return;
        }
        let published = self.last_published().await.unwrap_or(0);
        let missing: Vec<OrchestratorMessage> = messages
            .iter()
            .filter(|m| m.seq > published)
            .cloned()
            .collect();
        if !missing.is_empty() {
            tracing::info!(
                count = missing.len(),
                "publishing outputs the previous holder may not have"
            );
            self.publish(&missing, until).await;
        }
    }

    /// The seq of the last output on the subject, if any.
    async fn last_published(&self) -> Option<u64> {
        #[derive(Deserialize)]
        struct Seq {
            seq: u64,
        }
        let stream = self.bus.js.get_stream(subjects::ORCH_STREAM).await.ok()?;
        let last = stream
            .get_last_raw_message_by_subject(&subjects::orch_out(&self.orch_id))
            .await
            .ok()?;
        serde_json::from_slice::<Seq>(&last.payload)
            .ok()
            .map(|m| m.seq)
    }
}
