//! The tools Orchestrators and subagents work with: their model-facing specs,
//! input parsing and dispatch. `docs/tools.md` is the reference for models
//! and for anyone writing another worker.
//!
//! Every outcome, failures included, is a [`ToolOutcome`] the model reads;
//! a tool never panics and never fails the Orchestrator. The file tools
//! (`read`, `write`, `edit`, `glob`, `grep`) are confined to the workspace;
//! `bash` runs in it, inside the worker's sandbox (`crate::sandbox`). `task` is not dispatched here: it needs a model, so the
//! Orchestrator's agent loop runs it (see `crate::subagent`).

mod bash;
mod files;
mod search;
pub mod task;

use std::fmt::Write as _;
use std::sync::Arc;

use arbiter_llm::ToolSpec;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::sandbox::Sandbox;
use crate::workspace::Workspace;

pub use crate::sandbox::is_secret_env;
pub use bash::MAX_TIMEOUT as BASH_MAX_TIMEOUT;
pub use bash::{DEFAULT_TIMEOUT as BASH_DEFAULT_TIMEOUT, MAX_OUTPUT_BYTES as BASH_MAX_OUTPUT};

/// Most bytes a tool result may carry; the rest is cut with a marker.
pub const MAX_RESULT_BYTES: usize = 100_000;

/// What a tool call runs against.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub workspace: Workspace,
    /// Cancelled on release or cancel: running commands are killed, searches stop.
    pub cancel: CancellationToken,
    /// How `bash` starts its commands.
    pub sandbox: Arc<Sandbox>,
}

/// The outcome of one tool call, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    pub content: String,
    pub is_error: bool,
    /// For `bash`: the command's exit code, when it exited by itself. Not
    /// shown to the model apart from `content`; it goes into the evidence.
    pub exit_code: Option<i32>,
    /// For `task`: what the subagent's model requests cost.
    pub spend: arbiter_protocol::Spend,
}

impl ToolOutcome {
    /// A result, cut to [`MAX_RESULT_BYTES`] with a marker.
    pub fn ok(content: String) -> Self {
        Self {
            content: cap(content, MAX_RESULT_BYTES),
            is_error: false,
            exit_code: None,
            spend: arbiter_protocol::Spend::default(),
        }
    }

    /// An error the model should read and act on.
    pub fn error(content: String) -> Self {
        Self {
            content: cap(content, MAX_RESULT_BYTES),
            is_error: true,
            exit_code: None,
            spend: arbiter_protocol::Spend::default(),
        }
    }
}

/// Cuts `text` to at most `max` bytes (on a char boundary) and says how much was left out.
pub(crate) fn cap(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let dropped = text.len() - cut;
        text.truncate(cut);
        let _ = write!(text, "\n[… {dropped} more bytes not shown]");
    }
    text
}

/// The names of the tools every agent has, in the order they are offered.
pub const BASIC_TOOLS: [&str; 6] = ["read", "write", "edit", "glob", "grep", "bash"];

/// The specs of the tools every agent has (subagents get exactly these;
/// Orchestrators get these and `task`).
pub fn specs() -> Vec<ToolSpec> {
    vec![
        files::read_spec(),
        files::write_spec(),
        files::edit_spec(),
        search::glob_spec(),
        search::grep_spec(),
        bash::spec(),
    ]
}

/// The name a status shows for a tool: `Read`, `Edit`, `Task`.
pub fn display_name(name: &str) -> String {
    let mut chars = name.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Parses a tool's input; a bad one is an error outcome that names the tool.
pub(crate) fn parse<T: DeserializeOwned>(tool: &str, input: &Value) -> Result<T, ToolOutcome> {
    serde_json::from_value(input.clone())
        .map_err(|e| ToolOutcome::error(format!("{tool}: invalid input: {e}")))
}

/// The span of one tool call (the GenAI conventions' `execute_tool`), a
/// child of `parent`. Its input and result stay out of it.
pub(crate) fn span(parent: &tracing::Span, name: &str, call_id: &str) -> tracing::Span {
    tracing::info_span!(
        parent: parent,
        "execute_tool",
        otel.name = %format_args!("execute_tool {name}"),
        otel.status_code = tracing::field::Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %name,
        gen_ai.tool.call.id = %call_id,
        gen_ai.tool.type = "function",
        error.type = tracing::field::Empty,
    )
}

/// Marks a tool call's span failed when its outcome is an error.
pub(crate) fn record(span: &tracing::Span, outcome: &ToolOutcome) {
    if outcome.is_error {
        span.record("otel.status_code", "ERROR");
        span.record("error.type", "tool_error");
    }
}

/// Runs one call of a basic tool. Every failure is an error outcome.
pub async fn run(ctx: &ToolContext, name: &str, input: &Value) -> ToolOutcome {
    dispatch(ctx, name, input)
        .await
        .unwrap_or_else(|error| error)
}

async fn dispatch(
    ctx: &ToolContext,
    name: &str,
    input: &Value,
) -> Result<ToolOutcome, ToolOutcome> {
    let ws = &ctx.workspace;
    let outcome = match name {
        "read" => files::read(ws, parse(name, input)?).await,
        "write" => files::write(ws, parse(name, input)?).await,
        "edit" => files::edit(ws, parse(name, input)?).await,
        "glob" => search::glob(ctx, parse(name, input)?).await,
        "grep" => search::grep(ctx, parse(name, input)?).await,
        "bash" => bash::run(ctx, parse(name, input)?).await,
        other => ToolOutcome::error(format!(
            "there is no tool named {other:?}; the tools are: {}",
            BASIC_TOOLS.join(", ")
        )),
    };
    Ok(outcome)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A workspace `s` under a fresh root, with the default sandbox.
    pub(crate) fn context() -> (tempfile::TempDir, ToolContext) {
        context_with(&crate::sandbox::SandboxConfig::default())
    }

    pub(crate) fn context_with(
        config: &crate::sandbox::SandboxConfig,
    ) -> (tempfile::TempDir, ToolContext) {
        let base = tempfile::tempdir().unwrap();
        let workspace = Workspace::open(base.path(), "s").unwrap();
        let sandbox = Sandbox::new(config, &base.path().canonicalize().unwrap()).unwrap();
        let ctx = ToolContext {
            workspace,
            cancel: CancellationToken::new(),
            sandbox: Arc::new(sandbox),
        };
        (base, ctx)
    }

    #[tokio::test]
    async fn unknown_tools_and_bad_inputs_are_error_results() {
        let (_base, ctx) = context();
        let fly = run(&ctx, "fly", &json!({})).await;
        assert!(fly.is_error);
        assert!(fly.content.contains("no tool named \"fly\""), "{fly:?}");
        let task = run(&ctx, "task", &json!({"prompt": "x"})).await;
        assert!(task.is_error && task.content.contains("no tool named"));
        let bad = run(&ctx, "read", &json!({"file": "x"})).await;
        assert!(bad.is_error && bad.content.starts_with("read: invalid input"));
    }

    #[test]
    fn specs_match_the_tool_names() {
        let names: Vec<String> = specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, BASIC_TOOLS);
        for spec in specs() {
            assert_eq!(spec.input_schema["type"], "object", "{}", spec.name);
            assert_eq!(spec.input_schema["additionalProperties"], false);
        }
        assert_eq!(display_name("edit"), "Edit");
    }

    #[test]
    fn long_results_are_cut_with_a_marker() {
        let text = cap("é".repeat(MAX_RESULT_BYTES), MAX_RESULT_BYTES);
        assert!(text.len() < MAX_RESULT_BYTES + 100);
        assert!(text.ends_with("more bytes not shown]"));
    }
}
