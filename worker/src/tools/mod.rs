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
    /// The Orchestrator's MCP servers (`crate::mcp`): their tools are
    /// called as `mcp__<server>__<tool>`, by its subagents too.
    pub mcp: Arc<crate::mcp::Servers>,
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

/// The specs of the tools every agent of `ctx` has: [`specs`], then its MCP servers' tools.
pub fn specs_with(ctx: &ToolContext) -> Vec<ToolSpec> {
    specs()
        .into_iter()
        .chain(ctx.mcp.specs().iter().cloned())
        .collect()
}

/// The name a status shows for a tool: `Read`, `Edit`, `Task`; an MCP
/// tool as it is offered (`mcp__git__git_status`).
pub fn display_name(name: &str) -> String {
    if name.starts_with(crate::mcp::PREFIX) {
        return name.to_owned();
    }
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
/// child of `parent`. Its input and result stay out of it. An MCP tool's
/// also says `mcp.method.name` (`tools/call`, the MCP conventions') and its
/// server (`arbiter.mcp.server`), and its type is `extension`.
pub(crate) fn span(parent: &tracing::Span, name: &str, call_id: &str) -> tracing::Span {
    let span = tracing::info_span!(
        parent: parent,
        "execute_tool",
        otel.name = %format_args!("execute_tool {name}"),
        otel.status_code = tracing::field::Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %name,
        gen_ai.tool.call.id = %call_id,
        gen_ai.tool.type = tracing::field::Empty,
        mcp.method.name = tracing::field::Empty,
        arbiter.mcp.server = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    match crate::mcp::named_server(name) {
        Some(server) => {
            span.record("gen_ai.tool.type", "extension");
            span.record("mcp.method.name", "tools/call");
            span.record("arbiter.mcp.server", server);
        }
        None => {
            span.record("gen_ai.tool.type", "function");
        }
    }
    span
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
        mcp if ctx.mcp.server_of(mcp).is_some() => ctx.mcp.call(mcp, input, &ctx.cancel).await,
        mcp if mcp.starts_with(crate::mcp::PREFIX) => {
            let offered: Vec<&str> = ctx.mcp.specs().iter().map(|s| s.name.as_str()).collect();
            ToolOutcome::error(format!(
                "there is no MCP tool named {mcp:?}; the MCP tools are: {}",
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            ))
        }
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
            mcp: Arc::default(),
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
        // An MCP tool no server offers: the MCP tools that are offered.
        let gone = run(&ctx, "mcp__git__git_push", &json!({})).await;
        assert!(gone.is_error);
        assert_eq!(
            gone.content,
            "there is no MCP tool named \"mcp__git__git_push\"; the MCP tools are: none"
        );
    }

    #[test]
    fn specs_match_the_tool_names() {
        let names: Vec<String> = specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, BASIC_TOOLS);
        for spec in specs().into_iter().chain([task::spec()]) {
            assert_eq!(spec.input_schema["type"], "object", "{}", spec.name);
            assert_eq!(spec.input_schema["additionalProperties"], false);
        }
        assert_eq!(display_name("edit"), "Edit");
    }

    /// The input schemas come from the input types (schemars): every field
    /// the type takes is a property with the description the model reads,
    /// and exactly the fields without a default are required.
    #[test]
    fn input_schemas_come_from_the_input_types() {
        let schema = |name: &str| {
            specs()
                .into_iter()
                .chain([task::spec()])
                .find(|s| s.name == name)
                .map(|s| s.input_schema)
                .unwrap()
        };
        let cases = [
            ("read", vec!["path"], vec!["path", "offset", "limit"]),
            ("write", vec!["path", "content"], vec!["path", "content"]),
            (
                "edit",
                vec!["path", "old_string", "new_string"],
                vec!["path", "old_string", "new_string", "replace_all"],
            ),
            ("bash", vec!["command"], vec!["command", "timeout_ms"]),
            ("glob", vec![], vec!["pattern", "path"]),
            (
                "grep",
                vec!["pattern"],
                vec!["pattern", "path", "glob", "case_insensitive", "max_matches"],
            ),
            ("task", vec!["prompt"], vec!["description", "prompt"]),
        ];
        for (name, required, all) in cases {
            let schema = schema(name);
            let mut got_required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            got_required.sort_unstable();
            let mut want = required.clone();
            want.sort_unstable();
            assert_eq!(got_required, want, "{name}: {schema}");
            let props = schema["properties"].as_object().unwrap();
            let mut names: Vec<&str> = props.keys().map(String::as_str).collect();
            names.sort_unstable();
            let mut want = all.clone();
            want.sort_unstable();
            assert_eq!(names, want, "{name}");
            for (prop, body) in props {
                let description = body["description"].as_str().unwrap_or_default();
                assert!(!description.is_empty(), "{name}.{prop} has no description");
            }
        }
        // Descriptions built at run time carry over.
        let read = schema("read");
        assert!(
            read["properties"]["limit"]["description"]
                .as_str()
                .unwrap()
                .contains(&files::READ_DEFAULT_LINES.to_string())
        );
        // A call the schema allows parses into the type.
        assert!(parse::<files::ReadInput>("read", &json!({"path": "a.txt", "offset": 2})).is_ok());
    }

    #[test]
    fn long_results_are_cut_with_a_marker() {
        let text = cap("é".repeat(MAX_RESULT_BYTES), MAX_RESULT_BYTES);
        assert!(text.len() < MAX_RESULT_BYTES + 100);
        assert!(text.ends_with("more bytes not shown]"));
    }
}
