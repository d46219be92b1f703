//! A model reply, and what it leads to: a reply cut off at its output cap
//! is asked again once with a larger cap; one with tool calls is stored
//! before any of them runs; the final one is the turn's output, parsed
//! against the schema, asked again while repairs remain, then a failure.

use arbiter_llm::{Message, MessageRole, Response, StopReason, structured};
use arbiter_protocol::{OrchestratorOutput, Role, WireError};

use super::Core;
use crate::context;

/// What a model reply leads to.
#[derive(Debug)]
pub(crate) enum Replied {
    /// It asks for tools: the step is stored before any of them runs (a
    /// worker that lost its lease runs none).
    Tools,
    /// The turn's output, or why it is not one.
    Output(Result<OrchestratorOutput, String>),
}

/// What the turn's output, parsed, leads to.
#[derive(Debug)]
pub(crate) enum Taken {
    /// A valid output: it goes out (`core/output.rs`).
    Output(OrchestratorOutput),
    /// Invalid, and repairs remain: the model is told why and asked again
    /// (the step is stored, then the next call made).
    Repair,
    /// Invalid, with no repair left: the Orchestrator fails.
    Fail(WireError),
}

/// A reply cut off at its output cap: the same call is to be made again
/// with a larger one, found for a prompt of `prompt` tokens.
#[derive(Debug, PartialEq)]
pub(crate) struct CutOff {
    pub prompt: Option<u64>,
}

/// What the shell notes in the status after a model call.
#[derive(Debug, PartialEq)]
pub(crate) struct Charged {
    pub spend: arbiter_protocol::Spend,
    /// The context's tokens as the reply's usage measured them.
    pub tokens: Option<u64>,
}

impl Core {
    /// A model call's reply came, on a request of `sent` messages: its
    /// usage is charged and its context measured.
    pub(crate) fn charge(&mut self, sent: usize, response: &Response) -> Charged {
        let before = self.snap.spend;
        self.settings.prices.charge(
            &mut self.snap.spend,
            &self.settings.model,
            response.usage.as_ref(),
        );
        self.note_budget(&before);
        let tokens = context::tokens_of(response);
        if let Some(tokens) = tokens {
            self.snap.context_tokens = tokens;
            self.measured = Some((sent, tokens));
        }
        Charged {
            spend: self.snap.spend,
            tokens,
        }
    }

    /// A reply cut off at its cap with no tool call: the first time in a
    /// turn, the shell finds a larger cap and the same call is made again
    /// with it ([`Core::grow`]). A reply not cut off
    /// starts the turn's count over.
    pub(crate) fn cut_off(&mut self, response: &Response) -> Option<CutOff> {
        let has_tools = response.tool_uses().next().is_some();
        if response.stop_reason == StopReason::MaxTokens && !has_tools && !self.grown {
            self.grown = true;
            return Some(CutOff {
                prompt: response.context_tokens(),
            });
        }
        if response.stop_reason != StopReason::MaxTokens {
            self.grown = false;
            self.cap = None;
        }
        None
    }

    /// The next call is made with the larger cap `cap`.
    pub(crate) fn grow(&mut self, cap: u64) {
        self.cap = Some(cap);
    }

    /// Takes a reply into the transcript (measured by its output tokens,
    /// not an estimate of its text, `core/window.rs`): tool calls to run,
    /// or the turn's output.
    pub(crate) fn take_reply(&mut self, response: Response) -> Replied {
        let has_tools = response.tool_uses().next().is_some();
        let parsed = (!has_tools).then(|| match structured::cut_short(&response.stop_reason) {
            Some(detail) => Err(detail.to_owned()),
            None => structured::parse_with::<OrchestratorOutput>(
                &response.text(),
                &self.settings.output_schema,
            )
            .and_then(|output| self.check_handoff(output)),
        });
        self.transcript.push(Message {
            role: MessageRole::Assistant,
            content: response.content,
        });
        if let (Some((_, input)), Some(usage)) = (self.measured, response.usage) {
            self.measured = Some((
                self.transcript.messages().len(),
                input + usage.output_tokens,
            ));
        }
        match parsed {
            None => Replied::Tools,
            Some(parsed) => Replied::Output(parsed),
        }
    }

    /// A turn's output, whichever runtime produced it: a valid one goes
    /// out; an invalid one is asked again while repairs remain, and then
    /// the Orchestrator fails with `schema_violation`.
    pub(crate) fn take_output(&mut self, parsed: Result<OrchestratorOutput, String>) -> Taken {
        match parsed {
            Ok(output) => Taken::Output(output),
            Err(detail) if self.snap.repairs < self.settings.schema_repairs => {
                tracing::warn!(%detail, "Orchestrator reply rejected; asking again");
                self.snap.repairs += 1;
                self.transcript
                    .push(Message::user(structured::repair_message(&detail)));
                Taken::Repair
            }
            Err(detail) => Taken::Fail(WireError::SchemaViolation {
                role: Role::Orchestrator,
                attempts: self.snap.repairs + 1,
                detail,
            }),
        }
    }

    /// What the schema cannot say of a valid output: past the critical
    /// threshold every output carries a handoff packet, and a packet's ids
    /// and next step make sense. The error goes back for repair.
    pub(crate) fn check_handoff(
        &self,
        output: OrchestratorOutput,
    ) -> Result<OrchestratorOutput, String> {
        let pct = self.context_pct();
        match &output.handoff {
            Some(packet) => packet.check().map(|()| output),
            None if pct >= context::CRITICAL_PCT => Err(format!(
                "{pct:.0}% of your context is used, so this reply must carry your `handoff` \
                 packet (done, open, decisions, questions, next_step) for the next Orchestrator"
            )),
            None => Ok(output),
        }
    }
}
