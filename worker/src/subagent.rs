//! Subagents, the work behind the `task` tool. A subagent starts with a fresh
//! context (its prompt alone), has the basic tools (no `task`), its own model
//! and context budget, and runs until it answers without calling a tool: that
//! last text is its report, the only part of it the Orchestrator ever sees.
//! Its transcript lives in memory for the length of the call; nothing of it
//! is published. It is bounded by a number of model calls.

use std::sync::Arc;
use tracing::Instrument as _;

use arbiter_llm::window::{self, Room};
use arbiter_llm::{Block, Message, MessageRole, Model, Request, StopReason};

use crate::context;
use crate::prompt;
use crate::status::StatusHandle;
use crate::tools::task::TaskInput;
use crate::tools::{self, ToolContext, ToolOutcome};

/// The subagent role: what every subagent of this worker runs with.
pub(crate) struct SubagentRole {
    pub model: Arc<dyn Model>,
    /// The model's name, for its price.
    pub model_name: String,
    pub prices: arbiter_llm::price::PriceTable,
    /// Tokens of context a subagent may use; what its warnings are measured against.
    pub context_budget: u64,
    /// Model calls one subagent may make before it is stopped.
    pub max_calls: u32,
}

/// The status line while the subagent thinks; `Task › Edit` while it uses a tool.
const TASK: &str = "Task";

/// Runs one subagent to its report. Every failure is an error outcome for
/// the Orchestrator; cancellation (release) stops the model call and tools.
pub(crate) async fn run(
    role: &SubagentRole,
    ctx: &ToolContext,
    input: TaskInput,
    status: &StatusHandle,
    limits: Limits<'_>,
) -> ToolOutcome {
    let mut spend = arbiter_protocol::Spend::default();
    let mut outcome = work(role, ctx, input, status, limits, &mut spend).await;
    outcome.spend = spend;
    outcome
}

/// What holds a subagent besides its role: its Orchestrator's allowance
/// (what is left of it) and policy layers (its calls are decided by them;
/// what would ask is denied, see `approval.rs`).
#[derive(Clone, Copy, Default)]
pub(crate) struct Limits<'a> {
    pub allowance: Option<arbiter_protocol::Cap>,
    pub layers: Option<&'a arbiter_protocol::Layers>,
}

/// [`run`], counting what its model requests cost in `spend`.
async fn work(
    role: &SubagentRole,
    ctx: &ToolContext,
    input: TaskInput,
    status: &StatusHandle,
    Limits { allowance, layers }: Limits<'_>,
    spend: &mut arbiter_protocol::Spend,
) -> ToolOutcome {
    if input.prompt.trim().is_empty() {
        return ToolOutcome::error(
            "task: the prompt is empty; give the subagent a complete instruction".into(),
        );
    }
    let title = input.description.clone().unwrap_or_default();
    tracing::info!(task = %title, model = role.model.name(), "subagent starting");
    // The basic tools and the Orchestrator's MCP servers' tools.
    let specs: Arc<[arbiter_llm::ToolSpec]> = tools::specs_with(ctx).into();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    let system = prompt::subagent_system_prompt(&names);
    let mut transcript = Arc::new(vec![Message::user(input.prompt)]);
    let mut pct = 0.0;
    let mut last_words = String::new();
    // The last call's message count and input tokens (arbiter_llm::window).
    let mut measured = None;
    for call in 1..=role.max_calls {
        if let Some((unit, limit)) = allowance.and_then(|cap| cap.reached(spend)) {
            tracing::warn!(task = %title, call, "subagent stopped: the Orchestrator's budget is spent");
            return ToolOutcome::error(format!(
                "task: the subagent was stopped before its model call {call}: the \
                 Orchestrator's budget is spent (the subagent had {} left). Check the \
                 workspace for what it did before relying on it.",
                unit.amount(limit)
            ));
        }
        status
            .update(|s| s.current_tool = Some(TASK.to_owned()))
            .await;
        let mut request = Request {
            system: system.clone(),
            messages: transcript.clone(),
            tools: specs.clone(),
            output_schema: None,
            max_output_tokens: None,
        };
        if let Room::Full { prompt, window } =
            window::fit(role.model.as_ref(), &mut request, measured).await
        {
            tracing::warn!(
                prompt,
                window,
                call,
                "subagent's context window full: stopped"
            );
            return ToolOutcome::error(format!(
                "task: the subagent stopped after {} calls: its next request (about {prompt} \
                 tokens) leaves no room for a reply in its {window}-token context window. Its \
                 last words: {}",
                call - 1,
                if last_words.trim().is_empty() {
                    "(none)"
                } else {
                    last_words.trim()
                }
            ));
        }
        let sent = request.messages.len();
        let response = tokio::select! {
            () = ctx.cancel.cancelled() => {
                return ToolOutcome::error("task: cancelled".into());
            }
            response = role.model.complete(request) => response,
        };
        let response = match response {
            Ok(response) => {
                role.prices
                    .charge(spend, &role.model_name, response.usage.as_ref());
                response
            }
            Err(e) => {
                tracing::warn!(error = %e, call, "subagent model call failed");
                return ToolOutcome::error(format!(
                    "task: the subagent's model call failed after {} of its calls: {e}",
                    call - 1
                ));
            }
        };
        if let Some(tokens) = context::tokens_of(&response) {
            pct = context::percent(tokens, role.context_budget);
            measured = Some((sent, tokens));
        }
        let text = response.text();
        if !text.trim().is_empty() {
            last_words = text.clone();
        }
        let uses: Vec<(String, String, serde_json::Value)> = response
            .tool_uses()
            .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input.clone()))
            .collect();
        Arc::make_mut(&mut transcript).push(Message {
            role: MessageRole::Assistant,
            content: response.content.clone(),
        });
        if let (Some((_, input)), Some(usage)) = (measured, response.usage) {
            measured = Some((transcript.len(), input + usage.output_tokens));
        }
        if uses.is_empty() {
            tracing::info!(task = %title, calls = call, "subagent reported");
            return report(text, &response.stop_reason);
        }
        let mut results = Vec::with_capacity(uses.len() + 2);
        for (id, name, input) in uses {
            status
                .update(|s| {
                    s.current_tool = Some(format!("{TASK} › {}", tools::display_name(&name)));
                })
                .await;
            if let Some(refusal) = crate::approval::subagent_gate(layers, &name, &input) {
                tracing::info!(task = %title, tool = %name, "subagent's tool call refused by the policy");
                results.push(Block::ToolResult {
                    tool_use_id: id,
                    content: refusal.content,
                    is_error: true,
                });
                continue;
            }
            let span = tools::span(&tracing::Span::current(), &name, &id);
            let outcome = tools::run(ctx, &name, &input)
                .instrument(span.clone())
                .await;
            tools::record(&span, &outcome);
            arbiter_bus::metrics::tool_call(&name, outcome.is_error);
            results.push(Block::ToolResult {
                tool_use_id: id,
                content: outcome.content,
                is_error: outcome.is_error,
            });
        }
        if let Some(warning) = context::subagent_warning(pct) {
            results.push(Block::Text { text: warning });
        }
        if call + 1 == role.max_calls {
            results.push(Block::Text {
                text: "[system] You have one model call left: write your final report now, \
                       without calling a tool."
                    .into(),
            });
        }
        Arc::make_mut(&mut transcript).push(Message {
            role: MessageRole::User,
            content: results,
        });
    }
    tracing::warn!(task = %title, calls = role.max_calls, "subagent stopped at its call limit");
    let mut message = format!(
        "task: the subagent was stopped after {} model calls without a final report (the \
         limit). Check the workspace for what it did before relying on it.",
        role.max_calls
    );
    if !last_words.trim().is_empty() {
        message.push_str("\nIts last words: ");
        message.push_str(&last_words);
    }
    ToolOutcome::error(message)
}

fn report(text: String, stop: &StopReason) -> ToolOutcome {
    if text.trim().is_empty() {
        return ToolOutcome::error(
            "task: the subagent ended without a report; check the workspace for what it did".into(),
        );
    }
    match stop {
        StopReason::MaxTokens => ToolOutcome::ok(format!(
            "{text}\n[… the report was cut off at the output token limit]"
        )),
        _ => ToolOutcome::ok(text),
    }
}

#[cfg(test)]
mod tests;
