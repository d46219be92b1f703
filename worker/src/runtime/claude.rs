//! The Claude Code CLI as an Orchestrator's runtime: one long-lived
//! `claude -p --input-format stream-json --output-format stream-json
//! --verbose` process per Orchestrator. The Arbiter's inputs go in as user
//! lines; a turn ends at the `result` line, whose `structured_output` (from
//! `--json-schema`) is the turn's `OrchestratorOutput`.
//!
//! The process gets a clean environment (no inherited `CLAUDE_CODE_*`, no
//! NATS credentials): `HOME` and `CLAUDE_CONFIG_DIR` of its own, the model's
//! base URL and key (or the user's `CLAUDE_CODE_OAUTH_TOKEN`), no user
//! settings (`--setting-sources ""`), tools confined to the workspace (its
//! cwd) by `--permission-mode acceptEdits` with no tool pre-approved, so a
//! write outside the workspace is denied and nothing ever prompts.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The oldest CLI this runtime was built and tested against.
pub const MIN_VERSION: (u32, u32, u32) = (2, 1, 331);
/// What to install, said whenever the CLI is missing or unusable.
pub const INSTALL_HINT: &str = "install it with `pip install claude-agent-sdk==0.2.188` (the CLI is \
     claude_agent_sdk/_bundled/claude; scripts/install-claude-cli does this) and point \
     --claude-bin or CLAUDE_CLI_BIN at it";
/// The tools the CLI's model gets. `Task` is the CLI's own subagent tool.
pub const TOOLS: [&str; 7] = ["Read", "Write", "Edit", "Glob", "Grep", "Bash", "Task"];
/// The tool the CLI adds for `--json-schema`; not one of the work tools.
const STRUCTURED_OUTPUT_TOOL: &str = "StructuredOutput";
/// The directory under the workspace root that holds each Orchestrator's
/// `HOME` for the CLI (`<root>/.claude-code/<orch_id>`); not a session id,
/// which cannot start with a dot.
pub const HOMES_DIR: &str = ".claude-code";
/// Lines of the CLI's stderr kept to say why it stopped.
const STDERR_TAIL: usize = 20;
/// Variables of the worker's environment the CLI may see, besides the ones
/// set for it. Everything else (NATS credentials, `CLAUDE_CODE_*`) stays out.
const PASSED_ENV: [&str; 4] = ["PATH", "LANG", "LC_ALL", "TZ"];

/// How this worker runs the CLI (`--claude-bin`).
#[derive(Debug, Clone)]
pub struct ClaudeCodeConfig {
    /// The `claude` binary.
    pub bin: PathBuf,
    /// The `arbiter-worker` binary the CLI runs as its `PostToolUse` hook
    /// (`arbiter-worker hook post-tool-use`); `None`: this process's own.
    pub hook_bin: Option<PathBuf>,
    /// Permission rules the CLI pre-approves (`--allowedTools`), each a
    /// tool with what it may do: `Bash(cargo test:*)`. Checked by
    /// [`check_allow_rules`]: a bare tool name would approve it anywhere.
    pub allow: Vec<String>,
}

impl Default for ClaudeCodeConfig {
    fn default() -> Self {
        Self {
            bin: PathBuf::from("claude"),
            hook_bin: None,
            allow: Vec::new(),
        }
    }
}

/// Checks the user's permission rules (`--claude-allow`). In the CLI a bare
/// tool name (`Bash`, `Write`) or a rule for anything (`Bash(*)`)
/// pre-approves the tool everywhere, outside the workspace too (measured:
/// ECOSYSTEM §10), so only rules that name what they allow are taken:
/// `Bash(cargo test:*)`, `Bash(git status)`, `Edit(./src/**)`.
pub fn check_allow_rules(rules: &[String]) -> Result<(), String> {
    for rule in rules {
        let rule = rule.trim();
        let (tool, spec) = rule
            .strip_suffix(')')
            .and_then(|r| r.split_once('('))
            .unwrap_or((rule, ""));
        if !TOOLS.contains(&tool) || tool == "Task" {
            return Err(format!(
                "--claude-allow {rule:?}: the tool must be one of {} written as Tool(what), e.g. \
                 Bash(cargo test:*)",
                TOOLS[..TOOLS.len() - 1].join(", ")
            ));
        }
        let spec = spec.trim();
        if spec.is_empty() || spec.trim_start_matches(':').chars().all(|c| c == '*') {
            return Err(format!(
                "--claude-allow {rule:?} would let the CLI run {tool} on anything, outside the \
                 workspace too; name what it may do, e.g. {tool}({})",
                if tool == "Bash" {
                    "cargo test:*"
                } else {
                    "./src/**"
                }
            ));
        }
    }
    Ok(())
}

/// Checks that `bin` runs and is recent enough; the error is one line that
/// says what to install.
pub async fn probe(bin: &Path) -> Result<String, String> {
    let cli = super::Cli {
        runtime: "claude-code",
        name: "Claude Code CLI",
        hint: INSTALL_HINT,
        min: MIN_VERSION,
        // `2.1.331 (Claude Code)`
        version_of: |text| {
            text.contains("Claude Code").then(|| {
                text.split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            })
        },
    };
    super::probe_cli(bin, passed_env(), &cli).await
}

fn passed_env() -> Vec<(String, std::ffi::OsString)> {
    PASSED_ENV
        .iter()
        .filter_map(|name| std::env::var_os(name).map(|v| ((*name).to_owned(), v)))
        .collect()
}

/// What one Orchestrator's CLI process is started with.
pub(crate) struct Launch<'a> {
    pub config: &'a ClaudeCodeConfig,
    /// The session's workspace: the CLI's cwd.
    pub workspace: &'a Path,
    /// The Orchestrator's own `HOME` (its `CLAUDE_CONFIG_DIR` is `<home>/.claude`).
    pub home: &'a Path,
    /// The CLI session id (the Orchestrator's id, a UUID).
    pub session_id: &'a str,
    /// Go on with the stored session (`--resume`) rather than start one.
    pub resume: bool,
    pub model: &'a arbiter_llm::ModelConfig,
    pub system_prompt: &'a str,
    pub output_schema: &'a Value,
    /// The context budget the hook's warnings are measured against.
    pub context_budget: u64,
    /// Rules the CLI refuses (`--disallowedTools`): the Orchestrator's
    /// policy as far as it maps (see `runtime/policy.rs`).
    pub disallowed: &'a [String],
    /// The worker's MCP servers the CLI is given (`--mcp-config`, every
    /// one of their tools allowed); with `--strict-mcp-config` it reads no
    /// other MCP configuration.
    pub mcp: &'a [crate::mcp::CliServer],
}

/// Where the CLI keeps `home`'s config and sessions.
pub(crate) fn config_dir(home: &Path) -> PathBuf {
    home.join(".claude")
}

/// The CLI's transcript of `session_id` run from `cwd`:
/// `<config>/projects/<cwd with every non-alphanumeric character as ->/<session>.jsonl`.
pub(crate) fn transcript_path(home: &Path, cwd: &Path, session_id: &str) -> PathBuf {
    let slug: String = cwd
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    config_dir(home)
        .join("projects")
        .join(slug)
        .join(format!("{session_id}.jsonl"))
}

/// A running CLI process: one Orchestrator's session.
pub(crate) struct ClaudeProcess {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// The session's running `total_cost_usd` at the end of the last turn:
    /// a turn's cost is the difference.
    cost_so_far: f64,
}

/// A tool the CLI's model called in a turn, and whether it failed.
#[derive(Debug, Clone)]
pub(crate) struct ToolCall {
    pub name: String,
    pub input: Value,
    pub is_error: bool,
}

/// A turn that ended in a `result` line without `is_error`.
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnDone {
    /// `structured_output`; `None` when the model never gave one.
    pub structured: Option<Value>,
    /// `result`: the turn's final text.
    pub text: String,
    pub tools: Vec<ToolCall>,
    /// Input tokens of the turn's last request, cache included.
    pub context_tokens: Option<u64>,
    /// The model's window, when the CLI reported it.
    pub context_window: Option<u64>,
    /// The `result` line's `usage`, `modelUsage` and this turn's cost.
    pub usage: Value,
    pub model_usage: Value,
    pub cost_usd: f64,
}

/// What the turn reports while it runs, for the Orchestrator's status.
#[derive(Debug, Clone)]
pub(crate) enum Progress {
    /// The model called a tool (display name).
    Tool(String),
    /// A request filled this many tokens of context.
    Context(u64),
    /// Tool results came back to the CLI's model (how many, this line).
    Results(usize),
}

impl ClaudeProcess {
    /// Starts the CLI for one Orchestrator.
    pub(crate) fn start(launch: &Launch<'_>) -> Result<Self, String> {
        std::fs::create_dir_all(config_dir(launch.home)).map_err(|e| {
            format!(
                "cannot create the CLI's home {}: {e}",
                launch.home.display()
            )
        })?;
        let schema = serde_json::to_string(&without_schema_key(launch.output_schema))
            .map_err(|e| format!("the output schema: {e}"))?;
        let hook_bin = match &launch.config.hook_bin {
            Some(bin) => bin.clone(),
            None => std::env::current_exe()
                .map_err(|e| format!("cannot find arbiter-worker for the CLI's hook: {e}"))?,
        };
        let hook = format!(
            "{} hook post-tool-use --context-budget {}",
            shell_quote(&hook_bin.to_string_lossy()),
            launch.context_budget
        );
        let settings = json!({
            "hooks": {"PostToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": hook}]}]}
        });
        let mut command = Command::new(&launch.config.bin);
        command
            .args([
                "-p",
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "--verbose",
                "--setting-sources",
                "",
                "--permission-mode",
                "acceptEdits",
                "--tools",
                &TOOLS.join(","),
                "--model",
                &launch.model.model,
                "--system-prompt",
                launch.system_prompt,
                "--json-schema",
                &schema,
                "--settings",
                &settings.to_string(),
            ])
            // Only the worker's MCP servers, if any.
            .arg("--strict-mcp-config")
            .args(
                (!launch.mcp.is_empty())
                    .then(|| {
                        [
                            "--mcp-config".to_owned(),
                            crate::mcp::claude_config(launch.mcp).to_string(),
                        ]
                    })
                    .into_iter()
                    .flatten(),
            )
            // Each rule its own argument: rules hold spaces. An MCP
            // server's tools are allowed by its name (`mcp__git`).
            .args({
                let mcp: Vec<String> = launch
                    .mcp
                    .iter()
                    .map(|s| format!("{}{}", crate::mcp::PREFIX, s.name()))
                    .collect();
                let rules: Vec<String> = launch.config.allow.iter().cloned().chain(mcp).collect();
                (!rules.is_empty())
                    .then(|| "--allowedTools".to_owned())
                    .into_iter()
                    .chain(rules)
                    .collect::<Vec<String>>()
            })
            // Refused whatever is allowed: the CLI's deny rules win.
            .args(
                (!launch.disallowed.is_empty())
                    .then_some("--disallowedTools")
                    .into_iter()
                    .chain(launch.disallowed.iter().map(String::as_str)),
            )
            .args(if launch.resume {
                ["--resume", launch.session_id]
            } else {
                ["--session-id", launch.session_id]
            })
            .current_dir(launch.workspace)
            .env_clear()
            .envs(passed_env())
            .env("HOME", launch.home)
            .env("CLAUDE_CONFIG_DIR", config_dir(launch.home))
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            // The CLI retries on its own; 0 reads as unset there (10 retries).
            .env(
                "CLAUDE_CODE_MAX_RETRIES",
                launch.model.retry.max_retries.max(1).to_string(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if launch.model.provider == arbiter_llm::Provider::Anthropic {
            command.env("ANTHROPIC_BASE_URL", &launch.model.base_url);
            if let Some(key) = &launch.model.api_key {
                command.env("ANTHROPIC_API_KEY", key.expose());
            }
        }
        // A subscription user's own login, passed through as it is.
        if let Some(token) = std::env::var_os("CLAUDE_CODE_OAUTH_TOKEN") {
            command.env("CLAUDE_CODE_OAUTH_TOKEN", token);
        }
        let mut child = command.spawn().map_err(|e| {
            format!(
                "the Claude Code CLI {} does not start: {e}",
                launch.config.bin.display()
            )
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the Claude Code CLI's pipes were not opened".to_owned());
        };
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let sink = tail.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(target: "claude_cli", "{line}");
                let mut tail = sink.lock().unwrap_or_else(PoisonError::into_inner);
                if tail.len() == STDERR_TAIL {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
        Ok(Self {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            stderr: tail,
            cost_so_far: 0.0,
        })
    }

    /// Sends `text` as a user line and reads until the turn's `result`.
    /// `Err` says why the turn failed: the CLI stopped, printed something
    /// that is not JSON, or ended the turn with `is_error`.
    pub(crate) async fn turn(
        &mut self,
        text: &str,
        mut progress: impl FnMut(Progress),
    ) -> Result<TurnDone, TurnError> {
        let line = json!({
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": text}]},
        });
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        if let Err(e) = self.stdin.write_all(&bytes).await {
            return Err(self.stopped(&format!("writing to it failed ({e})")).await);
        }
        let _ = self.stdin.flush().await;
        let mut reading = Reading::new(self.cost_so_far);
        loop {
            let line = match self.lines.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => return Err(self.stopped("it closed its output").await),
                Err(e) => return Err(self.stopped(&format!("reading it failed ({e})")).await),
            };
            if let Some(end) = reading.line(&line, &mut progress) {
                self.cost_so_far = reading.cost_so_far;
                return end;
            }
        }
    }

    /// The CLI stopped mid-turn: why, with its exit status and the end of its stderr.
    async fn stopped(&mut self, what: &str) -> TurnError {
        let status = match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            _ => {
                let _ = self.child.start_kill();
                "still running; killed".to_owned()
            }
        };
        // The stderr reader may still be draining.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let tail: Vec<String> = self
            .stderr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .rev()
            .take(3)
            .rev()
            .cloned()
            .collect();
        let said = if tail.is_empty() {
            String::new()
        } else {
            format!("; it said: {}", tail.join(" | "))
        };
        TurnError::Stopped(format!(
            "the Claude Code CLI stopped mid-turn: {what} ({status}){said}"
        ))
    }

    /// Ends the process: closing stdin lets it exit; it is killed if it lingers.
    pub(crate) async fn close(mut self) {
        drop(self.stdin);
        if tokio::time::timeout(Duration::from_secs(2), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// A turn's output read so far: one JSON line at a time (the CLI's
/// `stream-json`), kept apart from the process so that it can be read
/// without one (the fuzz targets, `crate::fuzz`).
pub(crate) struct Reading {
    done: TurnDone,
    /// Tool-use ids, to the call they are in `done.tools`.
    names: HashMap<String, usize>,
    /// The session's cost so far (the CLI reports it cumulative).
    pub cost_so_far: f64,
}

impl Reading {
    pub(crate) fn new(cost_so_far: f64) -> Self {
        Self {
            done: TurnDone::default(),
            names: HashMap::new(),
            cost_so_far,
        }
    }

    /// Takes one line; `Some` ends the turn: its `result`, or why it failed
    /// (a line that is not JSON, a `result` with `is_error`).
    pub(crate) fn line(
        &mut self,
        line: &str,
        progress: &mut impl FnMut(Progress),
    ) -> Option<Result<TurnDone, TurnError>> {
        if line.trim().is_empty() {
            return None;
        }
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            let shown: String = line.chars().take(200).collect();
            return Some(Err(TurnError::Protocol(format!(
                "the Claude Code CLI printed a line that is not JSON: {shown}"
            ))));
        };
        match event["type"].as_str().unwrap_or_default() {
            "assistant" => {
                let message = &event["message"];
                if let Some(tokens) = context_tokens(&message["usage"]) {
                    self.done.context_tokens = Some(tokens);
                    progress(Progress::Context(tokens));
                }
                for block in message["content"].as_array().into_iter().flatten() {
                    if block["type"] != "tool_use" {
                        continue;
                    }
                    let name = block["name"].as_str().unwrap_or_default().to_owned();
                    if name == STRUCTURED_OUTPUT_TOOL {
                        continue;
                    }
                    progress(Progress::Tool(name.clone()));
                    if let Some(id) = block["id"].as_str() {
                        self.names.insert(id.to_owned(), self.done.tools.len());
                    }
                    self.done.tools.push(ToolCall {
                        name,
                        input: block["input"].clone(),
                        is_error: false,
                    });
                }
            }
            "user" => {
                let blocks = event["message"]["content"].as_array();
                let results = blocks
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == "tool_result")
                    .count();
                if results > 0 {
                    progress(Progress::Results(results));
                }
                for block in blocks.into_iter().flatten() {
                    if block["type"] == "tool_result"
                        && block["is_error"] == true
                        && let Some(i) = block["tool_use_id"]
                            .as_str()
                            .and_then(|id| self.names.get(id))
                        && let Some(call) = self.done.tools.get_mut(*i)
                    {
                        call.is_error = true;
                    }
                }
            }
            "result" => {
                let total = event["total_cost_usd"].as_f64().unwrap_or(self.cost_so_far);
                self.done.cost_usd = (total - self.cost_so_far).max(0.0);
                self.cost_so_far = total;
                self.done.usage = event["usage"].clone();
                self.done.model_usage = event["modelUsage"].clone();
                self.done.context_window = event["modelUsage"]
                    .as_object()
                    .and_then(|m| m.values().filter_map(|u| u["contextWindow"].as_u64()).max());
                if event["is_error"] == true {
                    return Some(Err(TurnError::Result {
                        status: event["api_error_status"].as_u64().map(|s| s as u16),
                        message: format!(
                            "the Claude Code CLI ended the turn in an error ({}, {}): {}",
                            event["subtype"].as_str().unwrap_or("error"),
                            event["terminal_reason"]
                                .as_str()
                                .unwrap_or("no reason given"),
                            event["result"].as_str().unwrap_or_default()
                        ),
                    }));
                }
                self.done.text = event["result"].as_str().unwrap_or_default().to_owned();
                self.done.structured = event
                    .get("structured_output")
                    .filter(|v| !v.is_null())
                    .cloned();
                return Some(Ok(std::mem::take(&mut self.done)));
            }
            _ => {}
        }
        None
    }
}

/// Why a turn on the CLI failed.
#[derive(Debug, Clone)]
pub(crate) enum TurnError {
    /// The process died, closed its output or could not be written to.
    Stopped(String),
    /// A line that is not JSON.
    Protocol(String),
    /// A `result` with `is_error: true` (`api_error_status`, when the API refused).
    Result {
        status: Option<u16>,
        message: String,
    },
}

/// The context a request filled, from an `assistant` line's usage (the
/// `message_start` figures): input plus cache reads and writes.
fn context_tokens(usage: &Value) -> Option<u64> {
    let input = usage["input_tokens"].as_u64()?;
    Some(
        input
            + usage["cache_read_input_tokens"].as_u64().unwrap_or(0)
            + usage["cache_creation_input_tokens"].as_u64().unwrap_or(0),
    )
}

/// The CLI refuses a schema that names its `$schema`.
fn without_schema_key(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
    }
    schema
}

/// `s` in single quotes for `sh -c`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The `PostToolUse` hook (`arbiter-worker hook post-tool-use`): reads the
/// hook's input from the CLI (`transcript_path`, `tool_use_id`), takes the
/// context that the request which asked for this tool call filled (its
/// usage, from the CLI's transcript), and returns the project's warning as
/// additional context when it is past 70 % or 85 % of `budget`. `None`:
/// nothing to say.
///
/// The CLI may write that request's entry to its transcript a moment after
/// the hook starts, so the hook waits for it up to [`HOOK_WAIT`], then
/// takes the last request it finds.
pub fn hook_output(input: &str, budget: u64) -> Option<String> {
    let input: Value = serde_json::from_str(input).ok()?;
    let path = input["transcript_path"].as_str()?;
    let tool_use_id = input["tool_use_id"].as_str().unwrap_or_default();
    let deadline = std::time::Instant::now() + HOOK_WAIT;
    let tokens = loop {
        let transcript = std::fs::read_to_string(path).unwrap_or_default();
        let entries: Vec<Value> = transcript
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|entry| entry["type"] == "assistant")
            .collect();
        let asked = entries.iter().rev().find(|entry| {
            entry["message"]["content"]
                .as_array()
                .is_some_and(|blocks| blocks.iter().any(|b| b["id"] == tool_use_id))
        });
        if let Some(tokens) = asked.and_then(|e| context_tokens(&e["message"]["usage"])) {
            break tokens;
        }
        if std::time::Instant::now() >= deadline {
            break entries
                .iter()
                .rev()
                .find_map(|e| context_tokens(&e["message"]["usage"]))?;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let warning = crate::context::orchestrator_warning(crate::context::percent(tokens, budget))?;
    Some(
        json!({"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": warning}})
            .to_string(),
    )
}

/// How long the hook waits for its tool call's request in the transcript.
const HOOK_WAIT: Duration = Duration::from_secs(3);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::parse_version;

    #[test]
    fn only_rules_that_name_what_they_allow_are_taken() {
        let ok = |r: &str| check_allow_rules(&[r.to_owned()]);
        assert!(ok("Bash(cargo test:*)").is_ok());
        assert!(ok("Bash(git status)").is_ok());
        assert!(ok("Edit(./src/**)").is_ok());
        for bare in ["Bash", "Write", "Edit", "Bash(*)", "Bash(:*)", "Read()"] {
            let said = ok(bare).unwrap_err();
            assert!(said.contains("name what it may do"), "{bare}: {said}");
        }
        for unknown in ["WebFetch(example.com)", "Task(x)", "bash(ls)"] {
            let said = ok(unknown).unwrap_err();
            assert!(
                said.contains("the tool must be one of"),
                "{unknown}: {said}"
            );
        }
    }

    #[test]
    fn versions_and_slugs() {
        assert_eq!(parse_version("2.1.331"), Some((2, 1, 331)));
        assert_eq!(parse_version("2.1"), None);
        assert!(parse_version("2.1.331").unwrap() >= MIN_VERSION);
        assert!(parse_version("2.0.999").unwrap() < MIN_VERSION);
        assert_eq!(
            transcript_path(Path::new("/h"), Path::new("/srv/ws.x_y z"), "abc"),
            PathBuf::from("/h/.claude/projects/-srv-ws-x-y-z/abc.jsonl")
        );
    }

    #[test]
    fn the_hook_warns_from_the_request_that_asked_for_the_tool() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let line = |id: &str, input: u64| {
            json!({"type": "assistant", "message": {
                "content": [{"type": "tool_use", "id": id, "name": "Write", "input": {}}],
                "usage": {"input_tokens": input, "cache_read_input_tokens": 10}}})
            .to_string()
        };
        let hook = |id: &str| {
            json!({"transcript_path": path, "hook_event_name": "PostToolUse", "tool_use_id": id})
                .to_string()
        };
        // The request that asked for the tool call counts, not a later one.
        std::fs::write(
            &path,
            format!(
                "{}\n{}\n{}\n",
                line("t1", 10),
                line("t2", 740),
                line("t3", 900)
            ),
        )
        .unwrap();
        let out = hook_output(&hook("t2"), 1000).unwrap();
        assert!(out.contains(crate::context::NOTICE_MARK), "{out}");
        assert!(out.contains("75%"), "{out}");
        assert_eq!(hook_output(&hook("t1"), 1000), None);
    }
}
