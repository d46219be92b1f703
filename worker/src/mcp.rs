//! The user's own tools, from MCP servers (the Model Context Protocol),
//! through `rmcp`, the official Rust SDK. A worker's config file declares
//! them (`[mcp_servers.<name>]`, see `docs/mcp.md`): a command the worker
//! runs over stdio, inside its sandbox, or a streamable HTTP address with
//! headers whose values come from named environment variables.
//!
//! Each Orchestrator starts its own connections when it starts (a stdio
//! server in the session's workspace), lists every server's tools and
//! offers them to its model as `mcp__<server>__<tool>` with the server's
//! input schema; its subagents get them too. A server that cannot be
//! started, or does not answer within its start-up timeout, is named with
//! the reason in the Orchestrator's status and the worker's log, and the
//! others still work. A call is a tool call like the others: its result is
//! cut to [`crate::tools::MAX_RESULT_BYTES`], stored with the step (a
//! takeover does not call it again), counted by server in the evidence and
//! traced; a server's error, or no answer within the tool timeout, is an
//! error result the model reads.

mod config;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use arbiter_llm::ToolSpec;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    ClientConfig, ContentBlock, GetTaskParams, Implementation, TaskPayload,
};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::Value;
use tokio::io::AsyncReadExt as _;
use tokio_util::sync::CancellationToken;

use crate::sandbox::Sandbox;
use crate::tools::ToolOutcome;

pub use config::{ServerConfig, Transport, parse_servers};

/// The prefix of every MCP tool's name as the model sees it.
pub const PREFIX: &str = "mcp__";
/// Most characters of a tool name providers take (OpenAI's limit; Anthropic's is larger).
const MAX_NAME: usize = 64;
/// Most characters of a tool's description kept.
const MAX_DESCRIPTION: usize = 2_000;
/// Most bytes of a failing server's standard error kept for its reason.
const STDERR_KEPT: usize = 2_048;

/// An Orchestrator's connections to its worker's MCP servers.
#[derive(Default)]
pub struct Servers {
    connected: Vec<Connected>,
    /// The tools offered, in server then listing order.
    specs: Vec<ToolSpec>,
    /// By offered name: the server's index and the tool's own name.
    tools: HashMap<String, (usize, String)>,
    /// The servers that could not be used, and why.
    failed: Vec<Failure>,
    /// A CLI runtime's: the servers it is given to start itself.
    cli: Vec<CliServer>,
}

impl std::fmt::Debug for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Servers")
            .field(
                "connected",
                &self.connected.iter().map(|c| &c.name).collect::<Vec<_>>(),
            )
            .field("tools", &self.specs.len())
            .field("failed", &self.failed)
            .finish()
    }
}

struct Connected {
    name: String,
    service: RunningService<RoleClient, ClientConfig>,
    tool_timeout: Duration,
}

/// A server that could not be used: its name and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub server: String,
    pub reason: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.server, self.reason)
    }
}

impl Servers {
    /// Starts and lists every server of `configs` at once, each within its
    /// start-up timeout; stdio servers run in `sandbox`, in `workspace`.
    /// Never fails: a server that cannot be used is a [`Failure`].
    pub async fn start(
        configs: &[ServerConfig],
        sandbox: &Sandbox,
        workspace: &Path,
        cancel: &CancellationToken,
    ) -> Self {
        let starts = configs.iter().map(|config| async move {
            let started = tokio::select! {
                () = cancel.cancelled() => Err("the Orchestrator stopped while it started".to_owned()),
                started = tokio::time::timeout(config.startup_timeout, connect(config, sandbox, workspace)) => {
                    started.unwrap_or_else(|_| Err(format!(
                        "no answer to initialize and tools/list within {}",
                        secs(config.startup_timeout)
                    )))
                }
            };
            (config, started)
        });
        let mut servers = Self::default();
        for (config, started) in futures::future::join_all(starts).await {
            match started {
                Ok((service, listed)) => {
                    let index = servers.connected.len();
                    for tool in listed {
                        let name = offered_name(&config.name, &tool.name);
                        if servers.tools.contains_key(&name) {
                            tracing::warn!(server = %config.name, tool = %tool.name, offered = %name, "two MCP tools have the same name once made fit for a model: the second is not offered");
                            continue;
                        }
                        servers.specs.push(ToolSpec {
                            name: name.clone(),
                            description: describe(&config.name, &tool),
                            input_schema: Value::Object((*tool.input_schema).clone()),
                        });
                        servers.tools.insert(name, (index, tool.name.into_owned()));
                    }
                    servers.connected.push(Connected {
                        name: config.name.clone(),
                        service,
                        tool_timeout: config.tool_timeout,
                    });
                }
                Err(reason) => {
                    tracing::warn!(server = %config.name, %reason, "an MCP server cannot be used; its tools are not offered");
                    servers.failed.push(Failure {
                        server: config.name.clone(),
                        reason,
                    });
                }
            }
        }
        servers
    }

    /// A CLI runtime's servers ([`for_cli`]): it starts and calls them
    /// itself; those it cannot be given are failures.
    pub(crate) fn for_cli(
        configs: &[ServerConfig],
        sandbox: &Sandbox,
        workspace: &Path,
        read_only: bool,
    ) -> Self {
        let (cli, failed) = for_cli(configs, sandbox, workspace, read_only);
        Self {
            cli,
            failed,
            ..Self::default()
        }
    }

    /// What a CLI runtime is given to start itself.
    pub(crate) fn cli(&self) -> &[CliServer] {
        &self.cli
    }

    /// The tools offered to the model.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// The servers that could not be used.
    pub fn failures(&self) -> &[Failure] {
        &self.failed
    }

    /// The server an offered tool name belongs to, if it is one of them.
    pub fn server_of(&self, name: &str) -> Option<&str> {
        let (index, _) = self.tools.get(name)?;
        Some(self.connected[*index].name.as_str())
    }

    /// Calls the tool offered as `name`, within its server's tool timeout;
    /// cancelled with `cancel`. Every failure is an error outcome.
    pub async fn call(&self, name: &str, input: &Value, cancel: &CancellationToken) -> ToolOutcome {
        let Some((index, tool)) = self.tools.get(name) else {
            return ToolOutcome::error(format!("there is no MCP tool named {name:?}"));
        };
        let server = &self.connected[*index];
        let arguments = match input {
            Value::Object(map) => Some(map.clone()),
            Value::Null => None,
            other => {
                return ToolOutcome::error(format!(
                    "{name}: invalid input: the arguments are a JSON object, not {other}"
                ));
            }
        };
        let mut params = CallToolRequestParams::new(tool.clone());
        params.arguments = arguments;
        let task = std::sync::Mutex::new(None);
        let call = answer(&server.service, params, &task);
        let given_up = |why: String| {
            // A task the server runs on: told to stop (best effort).
            let pending = task
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(task_id) = pending {
                let peer = server.service.peer().clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(
                        Duration::from_secs(5),
                        peer.cancel_task(CancelTaskParams::new(task_id)),
                    )
                    .await;
                });
            }
            ToolOutcome::error(why)
        };
        tokio::select! {
            () = cancel.cancelled() => given_up(format!("{name}: cancelled")),
            answer = tokio::time::timeout(server.tool_timeout, call) => match answer {
                Err(_) => given_up(format!(
                    "{name}: the MCP server {:?} did not answer within {}; the call was given up",
                    server.name,
                    secs(server.tool_timeout)
                )),
                Ok(Err(e)) => ToolOutcome::error(format!(
                    "{name}: the MCP server {:?} failed the call: {e}",
                    server.name
                )),
                Ok(Ok(result)) => outcome(result),
            },
        }
    }

    /// Closes every connection (a stdio server's process ends with it).
    pub async fn close(self) {
        let closing = self.connected.into_iter().map(|c| async move {
            let _ = tokio::time::timeout(Duration::from_secs(2), c.service.cancel()).await;
        });
        futures::future::join_all(closing).await;
    }
}

/// A server as a CLI runtime (Claude Code, Codex) is given it: the CLI
/// starts and calls it itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CliServer {
    /// A command line, already wrapped in the worker's sandbox.
    Stdio {
        name: String,
        argv: Vec<String>,
    },
    Http {
        name: String,
        url: String,
    },
}

impl CliServer {
    pub(crate) fn name(&self) -> &str {
        match self {
            CliServer::Stdio { name, .. } | CliServer::Http { name, .. } => name,
        }
    }
}

/// The servers of `configs` a CLI runtime can be given, and those it
/// cannot, with why. A CLI passes its environment and its command line to
/// the tools its model runs, so a server that needs a secret (a named
/// variable, a bearer token, a header) is not given to it; nor is any
/// under a read-only policy (an MCP tool counts as one that changes things,
/// and the CLI's read-only switch does not cover them).
pub(crate) fn for_cli(
    configs: &[ServerConfig],
    sandbox: &Sandbox,
    workspace: &Path,
    read_only: bool,
) -> (Vec<CliServer>, Vec<Failure>) {
    let mut given = Vec::new();
    let mut failed = Vec::new();
    for config in configs {
        let refused = |reason: &str| Failure {
            server: config.name.clone(),
            reason: reason.to_owned(),
        };
        if read_only {
            failed.push(refused(
                "not given to the CLI runtime under a read-only policy: its tools count as ones that change things",
            ));
            continue;
        }
        match &config.transport {
            Transport::Stdio { env, .. } if !env.is_empty() => failed.push(refused(
                "not given to the CLI runtime: it needs variables (env), which the CLI's own tools could read; use the native runtime",
            )),
            Transport::Stdio { command, args, .. } => {
                let args: Vec<String> = args
                    .iter()
                    .map(|a| a.replace("{workspace}", &workspace.to_string_lossy()))
                    .collect();
                given.push(CliServer::Stdio {
                    name: config.name.clone(),
                    argv: sandbox.server_argv(workspace, command, &args),
                });
            }
            Transport::Http {
                bearer_token_env,
                headers_env,
                ..
            } if bearer_token_env.is_some() || !headers_env.is_empty() => failed.push(refused(
                "not given to the CLI runtime: its token or headers would be readable by the CLI's own tools; use the native runtime",
            )),
            Transport::Http { url, .. } => given.push(CliServer::Http {
                name: config.name.clone(),
                url: url.clone(),
            }),
        }
    }
    (given, failed)
}

/// Claude Code's `--mcp-config` for `servers`.
pub(crate) fn claude_config(servers: &[CliServer]) -> Value {
    let map: serde_json::Map<String, Value> = servers
        .iter()
        .map(|server| {
            let entry = match server {
                CliServer::Stdio { argv, .. } => serde_json::json!({
                    "type": "stdio",
                    "command": argv[0],
                    "args": &argv[1..],
                }),
                CliServer::Http { url, .. } => serde_json::json!({"type": "http", "url": url}),
            };
            (server.name().to_owned(), entry)
        })
        .collect();
    serde_json::json!({ "mcpServers": map })
}

/// Codex's `[mcp_servers.<name>]` tables for `servers`, as TOML.
pub(crate) fn codex_config(servers: &[CliServer], configs: &[ServerConfig]) -> String {
    let tool_timeout = |name: &str| {
        configs
            .iter()
            .find(|c| c.name == name)
            .map_or(config::DEFAULT_TOOL_TIMEOUT, |c| c.tool_timeout)
    };
    let mut text = String::new();
    for server in servers {
        let name = server.name();
        let _ = writeln!(text, "\n[mcp_servers.{name}]");
        match server {
            CliServer::Stdio { argv, .. } => {
                let _ = writeln!(text, "command = {}", Value::String(argv[0].clone()));
                let args: Vec<Value> = argv[1..].iter().cloned().map(Value::String).collect();
                let _ = writeln!(text, "args = {}", Value::Array(args));
            }
            CliServer::Http { url, .. } => {
                let _ = writeln!(text, "url = {}", Value::String(url.clone()));
            }
        }
        let _ = writeln!(
            text,
            "tool_timeout_sec = {:?}",
            tool_timeout(name).as_secs_f64()
        );
    }
    text
}

/// Polls of a task no sooner than this apart, and no later than [`POLL_MOST`].
const POLL_LEAST: Duration = Duration::from_millis(50);
const POLL_MOST: Duration = Duration::from_secs(5);
/// How often a task is polled when its server does not say.
const POLL_DEFAULT: Duration = Duration::from_millis(500);

/// What the worker tells a server of itself: its name and version, and that
/// it takes task handles (the tasks extension, SEP-2663): a long call may
/// answer with a task, which [`answer`] polls.
fn client_info() -> ClientConfig {
    // Not the capabilities' builder: rmcp has it only with its server side.
    let mut capabilities = ClientCapabilities::default();
    capabilities.extensions = Some(
        [(
            rmcp::model::TASKS_EXTENSION_ID.to_owned(),
            rmcp::model::JsonObject::new(),
        )]
        .into_iter()
        .collect(),
    );
    ClientConfig::new(
        capabilities,
        Implementation::new("arbiter-worker", env!("CARGO_PKG_VERSION")),
    )
}

/// A call's final result: at once, or once the task it started is done
/// (polled as often as the server asks, within [`POLL_LEAST`] and
/// [`POLL_MOST`]). `task` holds the task's id while it runs, for the caller
/// to cancel it if it gives up.
async fn answer(
    service: &RunningService<RoleClient, ClientConfig>,
    params: CallToolRequestParams,
    task: &std::sync::Mutex<Option<String>>,
) -> Result<CallToolResult, String> {
    let interval = |ms: Option<u64>| {
        ms.map_or(POLL_DEFAULT, Duration::from_millis)
            .clamp(POLL_LEAST, POLL_MOST)
    };
    let created = match service
        .call_tool_once(params)
        .await
        .map_err(|e| e.to_string())?
    {
        CallToolResponse::Complete(result) => return Ok(result),
        CallToolResponse::Task(created) => created.task,
        CallToolResponse::InputRequired(_) => {
            return Err(
                "it asked for input from the client (elicitation), which the worker does not give"
                    .to_owned(),
            );
        }
        _ => return Err("it answered with a kind of result this worker does not read".to_owned()),
    };
    *task
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(created.task_id.clone());
    let mut wait = interval(created.poll_interval_ms);
    loop {
        tokio::time::sleep(wait).await;
        let got = service
            .get_task(GetTaskParams::new(created.task_id.clone()))
            .await
            .map_err(|e| format!("polling its task {}: {e}", created.task_id))?;
        let done = |outcome| {
            task.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            outcome
        };
        match got.task.payload {
            TaskPayload::Completed { result } => {
                return done(
                    serde_json::from_value(Value::Object(result))
                        .map_err(|e| format!("its task's result is not a tool's result: {e}")),
                );
            }
            TaskPayload::Failed { error } => {
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| Value::Object(error.clone()).to_string(), str::to_owned);
                return done(Err(format!("its task failed: {message}")));
            }
            TaskPayload::Cancelled => return done(Err("its task was cancelled".to_owned())),
            TaskPayload::InputRequired { .. } => {
                return Err("its task asked for input from the client (elicitation), which the worker does not give".to_owned());
            }
            _ => {}
        }
        wait = interval(got.task.task.poll_interval_ms);
    }
}

/// Connects to one server and lists its tools.
async fn connect(
    config: &ServerConfig,
    sandbox: &Sandbox,
    workspace: &Path,
) -> Result<
    (
        RunningService<RoleClient, ClientConfig>,
        Vec<rmcp::model::Tool>,
    ),
    String,
> {
    let service = match &config.transport {
        Transport::Stdio { command, args, env } => {
            let args: Vec<String> = args
                .iter()
                .map(|a| a.replace("{workspace}", &workspace.to_string_lossy()))
                .collect();
            let env: Vec<(String, String)> = env
                .iter()
                .filter_map(|name| std::env::var(name).ok().map(|v| (name.clone(), v)))
                .collect();
            let cmd = sandbox.server_command(workspace, command, &args, &env);
            let (process, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start {command:?}: {e}"))?;
            let secrets: Vec<String> = env.into_iter().map(|(_, v)| v).collect();
            let said = tokio::spawn(tail(stderr, secrets));
            match client_info().serve(process).await {
                Ok(service) => {
                    said.abort();
                    service
                }
                Err(e) => {
                    // Its last words, when it ended before answering.
                    let said = tokio::time::timeout(Duration::from_millis(500), said)
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .unwrap_or_default();
                    let mut reason =
                        format!("it ended or broke off before it answered initialize ({e})");
                    if let Some(line) = said.lines().rev().find(|l| !l.trim().is_empty()) {
                        let _ = write!(reason, "; its last words: {}", line.trim());
                    }
                    return Err(reason);
                }
            }
        }
        Transport::Http {
            url,
            bearer_token_env,
            headers_env,
        } => {
            use rmcp::transport::StreamableHttpClientTransport;
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let mut transport = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if let Some(name) = bearer_token_env {
                let token = std::env::var(name)
                    .map_err(|_| format!("its bearer token's variable {name} is not set"))?;
                transport = transport.auth_header(token);
            }
            let mut headers = HashMap::new();
            for (header, name) in headers_env {
                let value = std::env::var(name).map_err(|_| {
                    format!("the variable {name} of its header {header} is not set")
                })?;
                let header = http::HeaderName::try_from(header.as_str())
                    .map_err(|_| format!("{header:?} is not a header name"))?;
                let mut value = http::HeaderValue::try_from(value)
                    .map_err(|_| format!("the variable {name} does not hold a header value"))?;
                value.set_sensitive(true);
                headers.insert(header, value);
            }
            let transport =
                StreamableHttpClientTransport::from_config(transport.custom_headers(headers));
            client_info()
                .serve(transport)
                .await
                .map_err(|e| format!("{url} did not answer initialize: {e}"))?
        }
    };
    let tools = service
        .list_all_tools()
        .await
        .map_err(|e| format!("tools/list failed: {e}"))?;
    Ok((service, tools))
}

/// The last [`STDERR_KEPT`] bytes a server wrote to its standard error,
/// with the values it was given in its environment replaced by `***`.
async fn tail(stderr: Option<tokio::process::ChildStderr>, secrets: Vec<String>) -> String {
    let Some(mut stderr) = stderr else {
        return String::new();
    };
    let mut kept: Vec<u8> = Vec::new();
    let mut buf = [0u8; 1024];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > STDERR_KEPT {
            kept.drain(..kept.len() - STDERR_KEPT);
        }
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        text = text.replace(secret.as_str(), "***");
    }
    text
}

/// The name a tool is offered under: `mcp__<server>__<tool>`, with what a
/// provider does not take in a name made `_`, cut to [`MAX_NAME`].
pub fn offered_name(server: &str, tool: &str) -> String {
    let mut name: String = [PREFIX, server, "__", tool]
        .concat()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.truncate(MAX_NAME);
    name
}

/// The server an offered name says it belongs to (`mcp__git__git_status`:
/// `git`), whether or not there is such a server.
pub fn named_server(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(PREFIX)?;
    let (server, _) = rest.split_once("__")?;
    (!server.is_empty()).then_some(server)
}

pub(crate) fn describe(server: &str, tool: &rmcp::model::Tool) -> String {
    let mut text = format!("(MCP server {server}) ");
    match (&tool.description, &tool.title) {
        (Some(description), _) => text.push_str(description),
        (None, Some(title)) => text.push_str(title),
        (None, None) => text.push_str(&tool.name),
    }
    if text.chars().count() > MAX_DESCRIPTION {
        text = text.chars().take(MAX_DESCRIPTION).collect();
        text.push('…');
    }
    text
}

/// A call's result as the model reads it: its text blocks, others named;
/// the structured result where there is no content.
pub(crate) fn outcome(result: CallToolResult) -> ToolOutcome {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => format!("[an image ({}) not shown]", image.mime_type),
            ContentBlock::Audio(audio) => format!("[audio ({}) not shown]", audio.mime_type),
            ContentBlock::Resource(resource) => match &resource.resource {
                rmcp::model::ResourceContents::TextResourceContents { uri, text, .. } => {
                    format!("[resource {uri}]\n{text}")
                }
                rmcp::model::ResourceContents::BlobResourceContents { uri, .. } => {
                    format!("[resource {uri}: binary, not shown]")
                }
                _ => "[a resource of a kind this worker does not read]".to_owned(),
            },
            ContentBlock::ResourceLink(link) => format!("[resource link: {}]", link.uri),
            _ => "[content of a kind this worker does not read]".to_owned(),
        })
        .collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    if result.is_error == Some(true) {
        let text = if text.trim().is_empty() {
            "the tool failed and said nothing more".to_owned()
        } else {
            text
        };
        ToolOutcome::error(text)
    } else {
        ToolOutcome::ok(text)
    }
}

fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_a_model_and_say_their_server() {
        assert_eq!(offered_name("git", "git_status"), "mcp__git__git_status");
        assert_eq!(offered_name("t", "get.time/now"), "mcp__t__get_time_now");
        assert_eq!(offered_name("s", &"x".repeat(100)).len(), MAX_NAME);
        assert_eq!(named_server("mcp__git__git_status"), Some("git"));
        assert_eq!(named_server("mcp____x"), None);
        assert_eq!(named_server("bash"), None);
    }
}
