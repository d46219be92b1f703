//! What a turn of a CLI runtime leaves (Claude Code, Codex): the tool calls
//! it showed counted under the native names, its context, tokens and price
//! recorded where a native Orchestrator's requests go (a turn counts as one
//! request), and its final message taken as the native loop takes a reply.

use arbiter_llm::{Block, Message, MessageRole, structured};
use arbiter_protocol::OrchestratorOutput;
use serde_json::{Value, json};

use super::Core;
use crate::runtime::{claude, codex};
use crate::state::CodexThread;
use crate::tools::ToolOutcome;

impl Core {
    /// A Claude Code turn ended with `done`: its output, parsed (the reply
    /// is in the transcript).
    pub(crate) fn claude_turn(
        &mut self,
        done: &claude::TurnDone,
    ) -> Result<OrchestratorOutput, String> {
        for call in &done.tools {
            // Counted under the native names (`Write` is `write`), so the
            // evidence reads the same whichever runtime ran the tools.
            let name = call.name.to_lowercase();
            let outcome = ToolOutcome {
                content: String::new(),
                is_error: call.is_error,
                exit_code: (!call.is_error).then_some(0),
                spend: Default::default(),
            };
            self.snap.tally.record(&name, &call.input, &outcome);
            self.snap.tool_count += 1;
        }
        if let Some(tokens) = done.context_tokens {
            self.snap.context_tokens = tokens;
        }
        self.snap.cost.add(done);
        let n = |key: &str| done.usage[key].as_u64().unwrap_or(0);
        self.snap.spend.record(
            Some([
                n("input_tokens"),
                n("output_tokens"),
                n("cache_creation_input_tokens"),
                n("cache_read_input_tokens"),
            ]),
            Some((done.cost_usd * 1e9).round() as u64),
        );
        let (text, parsed) = match &done.structured {
            Some(value) => (
                value.to_string(),
                serde_json::from_value::<OrchestratorOutput>(value.clone())
                    .map_err(|e| format!("the structured output does not match the schema: {e}"))
                    // The packet rules are the native loop's, whichever runtime.
                    .and_then(|output| self.check_handoff(output)),
            ),
            None => (
                done.text.clone(),
                Err(format!(
                    "the turn ended without a StructuredOutput call; its text was: {}",
                    done.text.chars().take(300).collect::<String>()
                )),
            ),
        };
        self.push_reply(text);
        parsed
    }

    /// A Codex turn ended with `done` on thread rollout `rollout` (under
    /// its home), whose last context the rollout's file showed (`context`):
    /// its output, parsed (the reply is in the transcript).
    pub(crate) fn codex_turn(
        &mut self,
        done: codex::TurnDone,
        rollout: String,
        context: Option<u64>,
    ) -> Result<OrchestratorOutput, String> {
        let before = match &self.snap.codex {
            Some(thread) if thread.thread_id == done.thread_id => thread.usage.clone(),
            _ => Value::Null,
        };
        for call in &done.tools {
            let outcome = ToolOutcome {
                content: String::new(),
                is_error: call.is_error,
                exit_code: call.exit_code,
                spend: Default::default(),
            };
            self.snap.tally.record(&call.name, &call.input, &outcome);
            self.snap.tool_count += 1;
        }
        if let Some(tokens) = context {
            self.snap.context_tokens = tokens;
        }
        // The turn's tokens (differences of the thread's cumulative usage)
        // and price.
        let usage = codex::turn_usage(&done.usage, &before);
        let model = &self.settings.model;
        let cost = self.settings.prices.cost(model, &usage);
        self.snap.spend.record(
            Some([
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_creation_input_tokens,
                usage.cache_read_input_tokens,
            ]),
            cost,
        );
        self.snap.cost.add_turn(
            &json!({
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                "cache_read_input_tokens": usage.cache_read_input_tokens,
            }),
            &json!({ model.clone(): {"cumulative": done.usage} }),
            cost.map_or(0.0, |nanos| nanos as f64 / 1e9),
        );
        self.snap.codex = Some(CodexThread {
            thread_id: done.thread_id,
            rollout,
            usage: done.usage,
        });
        let (text, parsed) = match done.text {
            Some(text) => {
                let parsed = structured::parse_with::<OrchestratorOutput>(
                    &text,
                    &self.settings.output_schema,
                )
                .and_then(|output| self.check_handoff(output));
                (text, parsed)
            }
            None => (
                String::new(),
                Err("the turn ended without a final message".to_owned()),
            ),
        };
        self.push_reply(text);
        parsed
    }

    /// A CLI turn's reply, as the transcript keeps it.
    fn push_reply(&mut self, text: String) {
        self.transcript.push(Message {
            role: MessageRole::Assistant,
            content: vec![Block::Text { text }],
        });
    }
}
