//! The Arbiter's handoff as I/O: the packet's request that the core decided
//! (`rules/arbiter_handoff.rs`), made as a task of its own, a reply that
//! fails the schema or the packet's check sent back with the reason.

use arbiter_llm::{Model, structured};
use arbiter_protocol::ArbiterPacket;

use super::*;
use crate::rules::arbiter_handoff::{Asked, HandoffAsk};

/// The request for the packet, running as its own task; aborted if the
/// session stops first.
pub(super) struct RunningHandoff {
    task: tokio::task::JoinHandle<Asked>,
    /// Counts its model requests, charged when it ends.
    pub(super) meter: arbiter_llm::meter::Meter,
}

impl RunningHandoff {
    /// Starts the request `ask`, its span the child of `parent`.
    pub(super) fn start(
        shared: &Shared,
        session_id: &str,
        parent: &TraceContext,
        ask: HandoffAsk,
    ) -> Self {
        let meter = arbiter_llm::meter::Meter::default();
        let model = arbiter_llm::meter::Metered::new(shared.model.clone(), meter.clone());
        let span = tracing::info_span!(
            parent: None,
            "invoke_agent",
            otel.name = "invoke_agent arbiter handoff",
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = "arbiter",
            session.id = %session_id,
        );
        parent.adopt(&span);
        let call = ask_packet(Arc::new(model), ask.request, ask.schema, ask.repairs);
        Self {
            task: tokio::spawn(call.instrument(span)),
            meter,
        }
    }

    pub(super) async fn finish(&mut self) -> Asked {
        match (&mut self.task).await {
            Ok(result) => result,
            Err(e) => Err(LlmError::Stream(format!("the handoff's task stopped: {e}"))),
        }
    }
}

impl Drop for RunningHandoff {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Calls the model until its packet is valid, at most `1 + repairs` times.
async fn ask_packet(
    model: Arc<dyn Model>,
    mut request: Request,
    schema: Arc<serde_json::Value>,
    repairs: u32,
) -> Asked {
    let mut attempt = 0;
    loop {
        let response = model.complete(request.clone()).await?;
        let raw = response.text();
        let checked = match structured::cut_short(&response.stop_reason) {
            Some(detail) => Err(detail.to_owned()),
            None => structured::parse_with::<ArbiterPacket>(&raw, &schema)
                .and_then(|packet| packet.check().map(|()| packet)),
        };
        match checked {
            Ok(packet) => return Ok(packet),
            Err(detail) if attempt < repairs => {
                tracing::warn!(attempt, %detail, "Arbiter packet rejected; asking again");
                let messages = Arc::make_mut(&mut request.messages);
                messages.push(Message::assistant(raw));
                messages.push(Message::user(structured::repair_message(&detail)));
                attempt += 1;
            }
            Err(detail) => {
                return Err(LlmError::SchemaViolation {
                    attempts: attempt + 1,
                    detail,
                });
            }
        }
    }
}
