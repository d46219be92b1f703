//! The OpenAI Codex CLI as an Orchestrator's runtime: one
//! `codex exec --json` process per turn. The first turn starts a thread;
//! later turns run `codex exec … resume <thread_id>`. The turn's input goes
//! in on stdin (`-`); its `OrchestratorOutput` is the final `agent_message`
//! text, which `--output-schema` asks the model to make JSON.
//!
//! Each Orchestrator has a `CODEX_HOME` of its own (`config.toml` with the
//! worker's OpenAI-compatible model as the `arbiter` provider on the
//! Responses API, the project's Orchestrator prompt as
//! `developer_instructions`, the key read from the environment variable
//! [`KEY_ENV`]), beside the workspaces. The process gets a clean environment
//! (no NATS credentials, no inherited `CODEX_*` or `OPENAI_*`), analytics
//! and plugins off, and Codex's own sandbox in `workspace-write` mode with
//! `/tmp` and `$TMPDIR` excluded and approvals `never`: its commands write
//! in the workspace (its cwd) and nowhere else, and a command that asks to
//! escalate is refused. Codex has no hook the worker can answer, so the
//! 70 %/85 % warnings ride in the next turn's input.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// The oldest CLI this runtime was built and tested against.
pub const MIN_VERSION: (u32, u32, u32) = (0, 163, 0);
/// What to install, said whenever the CLI is missing or unusable.
pub const INSTALL_HINT: &str = "install it with `pip install openai-codex-cli-bin==0.163.0` (the CLI is \
     codex_cli_bin/bin/codex; scripts/install-codex-cli does this) and point \
     --codex-bin or CODEX_CLI_BIN at it";
/// The tools Codex gives its model (named in the Orchestrator prompt).
pub const TOOLS: [&str; 3] = ["exec_command", "write_stdin", "multi_agent_v1"];
/// The directory under the workspace root that holds each Orchestrator's
/// `CODEX_HOME` (`<root>/.codex/<orch_id>`); not a session id, which cannot
/// start with a dot.
pub const HOMES_DIR: &str = ".codex";
/// The variable the CLI reads the model's API key from (`env_key`).
pub const KEY_ENV: &str = "ARBITER_CODEX_API_KEY";
/// The provider's name in the CLI's config.
const PROVIDER: &str = "arbiter";
/// Lines of the CLI's stderr kept to say why it stopped.
const STDERR_TAIL: usize = 20;
/// Variables of the worker's environment the CLI may see, besides the ones
/// set for it.
const PASSED_ENV: [&str; 4] = ["PATH", "LANG", "LC_ALL", "TZ"];

/// How this worker runs the CLI (`--codex-bin`).
#[derive(Debug, Clone)]
pub struct CodexConfig {
    /// The `codex` binary.
    pub bin: PathBuf,
}

impl Default for CodexConfig {
    fn default() -> Self {
        Self {
            bin: PathBuf::from("codex"),
        }
    }
}

/// Checks that `bin` runs and is recent enough, and that the model is one
/// Codex can talk to; the error is one line that says what to do.
pub async fn probe(bin: &Path, model: &arbiter_llm::ModelConfig) -> Result<String, String> {
    if model.provider != arbiter_llm::Provider::OpenAi {
        return Err(format!(
            "the codex runtime speaks the OpenAI Responses API, and the Orchestrator model is \
             {}:{}: set ORCHESTRATOR_MODEL to openai:<model> (its base URL is the server's, with /v1)",
            model.provider, model.model
        ));
    }
    let cli = super::Cli {
        runtime: "codex",
        name: "Codex CLI",
        hint: INSTALL_HINT,
        min: MIN_VERSION,
        // `codex-cli 0.163.0`
        version_of: |text| text.trim().strip_prefix("codex-cli ").map(str::to_owned),
    };
    super::probe_cli(bin, passed_env(), &cli).await
}

fn passed_env() -> Vec<(String, std::ffi::OsString)> {
    PASSED_ENV
        .iter()
        .filter_map(|name| std::env::var_os(name).map(|v| ((*name).to_owned(), v)))
        .collect()
}

/// A TOML basic string: JSON's escapes are TOML's (`\"`, `\\`, `\n`, `\uXXXX`).
fn toml_string(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// Writes `home`'s `config.toml` and the output schema the turns use.
pub(crate) fn write_home(
    home: &Path,
    bin: &Path,
    model: &arbiter_llm::ModelConfig,
    instructions: &str,
    output_schema: &Value,
    mcp_servers: &str,
) -> Result<(), String> {
    std::fs::create_dir_all(home)
        .map_err(|e| format!("cannot create the CLI's home {}: {e}", home.display()))?;
    let config = format!(
        "# Written by arbiter-worker for one Orchestrator.\n\
         model = {model}\n\
         model_provider = \"{PROVIDER}\"\n\
         developer_instructions = {instructions}\n\
         \n\
         [model_providers.{PROVIDER}]\n\
         name = \"Arbiter's model\"\n\
         base_url = {base_url}\n\
         wire_api = \"responses\"\n\
         env_key = \"{KEY_ENV}\"\n\
         request_max_retries = {retries}\n\
         stream_max_retries = {retries}\n\
         \n\
         # What the model's commands see: the core variables, never the key.\n\
         [shell_environment_policy]\n\
         inherit = \"core\"\n\
         ignore_default_excludes = false\n\
         exclude = [\"{KEY_ENV}\", \"*KEY*\", \"*SECRET*\", \"*TOKEN*\"]\n\
         {mcp_servers}",
        model = toml_string(&model.model),
        instructions = toml_string(instructions),
        base_url = toml_string(model.base_url.trim_end_matches('/')),
        retries = model.retry.max_retries,
    );
    sandbox_alias(home, bin)?;
    let mut schema = output_schema.clone();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
    }
    std::fs::write(home.join("config.toml"), config)
        .and_then(|()| std::fs::write(schema_path(home), schema.to_string()))
        .map_err(|e| format!("cannot write the CLI's config in {}: {e}", home.display()))
}

/// Codex's Linux sandbox runs `bwrap … codex-linux-sandbox …`, the CLI
/// itself under that name, found on `PATH`. The CLI makes that alias under
/// its home, but not when the home is under a temporary directory (it says
/// "Refusing to create helper binaries under temporary dir"), and then every
/// command fails with `bwrap: execvp codex-linux-sandbox`. So the worker
/// makes it: `<home>/bin/codex-linux-sandbox` → the CLI, first on the
/// CLI's `PATH` (see [`turn`]).
fn sandbox_alias(home: &Path, bin: &Path) -> Result<(), String> {
    let target = resolve(bin).ok_or_else(|| {
        format!(
            "the Codex CLI {} is not found on PATH: {INSTALL_HINT}",
            bin.display()
        )
    })?;
    let dir = home.join("bin");
    let alias = dir.join("codex-linux-sandbox");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if std::fs::read_link(&alias).ok().as_deref() == Some(target.as_path()) {
        return Ok(());
    }
    let _ = std::fs::remove_file(&alias);
    std::os::unix::fs::symlink(&target, &alias)
        .map_err(|e| format!("cannot make {}: {e}", alias.display()))
}

/// `bin` as an absolute path: looked up on `PATH` when it is a bare name.
fn resolve(bin: &Path) -> Option<PathBuf> {
    if bin.components().count() > 1 {
        return std::path::absolute(bin).ok();
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(bin))
        .find(|path| path.is_file())
}

/// The CLI's `PATH`: the sandbox alias first, then the worker's.
fn cli_path(home: &Path) -> std::ffi::OsString {
    let own = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(home.join("bin")).chain(std::env::split_paths(&own)))
        .unwrap_or(own)
}

fn schema_path(home: &Path) -> PathBuf {
    home.join("output-schema.json")
}

/// What one turn is run with.
pub(crate) struct Launch<'a> {
    pub config: &'a CodexConfig,
    /// The session's workspace: the CLI's cwd and the only place it writes.
    pub workspace: &'a Path,
    /// The Orchestrator's `CODEX_HOME` (see [`write_home`]).
    pub home: &'a Path,
    /// The thread to go on with; `None`: the first turn starts one.
    pub thread_id: Option<&'a str>,
    pub model: &'a arbiter_llm::ModelConfig,
    /// The Orchestrator's policy is mode read-only: the `read-only`
    /// sandbox instead of `workspace-write` (see `runtime/policy.rs`).
    pub read_only: bool,
}

/// A tool the CLI's model used in a turn, under the native loop's names
/// (`bash` for a command, `edit`/`write` for a file change).
#[derive(Debug, Clone)]
pub(crate) struct ToolCall {
    pub name: String,
    pub input: Value,
    pub exit_code: Option<i32>,
    pub is_error: bool,
}

/// A turn that ended in `turn.completed`.
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnDone {
    pub thread_id: String,
    /// The last `agent_message` text: the turn's output.
    pub text: Option<String>,
    pub tools: Vec<ToolCall>,
    /// `turn.completed.usage`: cumulative over the thread.
    pub usage: Value,
}

/// What the turn reports while it runs, for the Orchestrator's status.
#[derive(Debug, Clone)]
pub(crate) enum Progress {
    /// The model started a tool (display name).
    Tool(String),
}

/// Why a turn on the CLI failed.
#[derive(Debug, Clone)]
pub(crate) enum TurnError {
    /// The process did not start, or exited before the turn completed.
    Stopped(String),
    /// A line that is not JSON.
    Protocol(String),
    /// `turn.failed` or an `error` event: the CLI's message.
    Failed(String),
}

/// Runs one turn: `input` on stdin, the JSONL events read until the
/// process exits. Cancel-safe: dropping the future kills the process.
pub(crate) async fn turn(
    launch: &Launch<'_>,
    input: &str,
    mut progress: impl FnMut(Progress),
) -> Result<TurnDone, TurnError> {
    let mut command = Command::new(&launch.config.bin);
    command.arg("exec").args([
        "--json",
        "--skip-git-repo-check",
        "-c",
        "analytics.enabled=false",
        "--disable",
        "plugins",
        "-c",
        if launch.read_only {
            "sandbox_mode=\"read-only\""
        } else {
            "sandbox_mode=\"workspace-write\""
        },
        "-c",
        "approval_policy=\"never\"",
        "-c",
        "sandbox_workspace_write.exclude_slash_tmp=true",
        "-c",
        "sandbox_workspace_write.exclude_tmpdir_env_var=true",
        "-c",
        "sandbox_workspace_write.network_access=false",
    ]);
    command.arg("--output-schema").arg(schema_path(launch.home));
    if let Some(thread) = launch.thread_id {
        command.args(["resume", thread]);
    }
    command
        .arg("-")
        .current_dir(launch.workspace)
        .env_clear()
        .envs(passed_env())
        .env("PATH", cli_path(launch.home))
        .env("HOME", launch.home)
        .env("CODEX_HOME", launch.home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Local servers need no key; Codex still wants the variable set.
    match &launch.model.api_key {
        Some(key) => command.env(KEY_ENV, key.expose()),
        None => command.env(KEY_ENV, "none"),
    };
    let mut child = command.spawn().map_err(|e| {
        TurnError::Stopped(format!(
            "the Codex CLI {} does not start: {e}",
            launch.config.bin.display()
        ))
    })?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(TurnError::Stopped(
            "the Codex CLI's pipes were not opened".to_owned(),
        ));
    };
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let sink = tail.clone();
    let stderr_task = tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(target: "codex_cli", "{line}");
            let mut tail = sink.lock().unwrap_or_else(PoisonError::into_inner);
            if tail.len() == STDERR_TAIL {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    });
    let said = |tail: &Arc<Mutex<VecDeque<String>>>| {
        let tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
        let mut last: Vec<&str> = tail
            .iter()
            .rev()
            .filter(|l| !is_noise(l))
            .take(3)
            .map(String::as_str)
            .collect();
        last.reverse();
        if last.is_empty() {
            String::new()
        } else {
            format!("; it said: {}", last.join(" | "))
        }
    };
    // The input, then end of file: Codex reads the prompt to the end.
    let written = async {
        stdin.write_all(input.as_bytes()).await?;
        stdin.shutdown().await
    };
    if let Err(e) = written.await {
        let _ = child.start_kill();
        return Err(TurnError::Stopped(format!(
            "the Codex CLI did not take its input ({e})"
        )));
    }
    drop(stdin);
    let mut lines = BufReader::new(stdout).lines();
    let mut reading = Reading::default();
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                let _ = child.start_kill();
                return Err(TurnError::Stopped(format!(
                    "reading the Codex CLI's output failed ({e})"
                )));
            }
        };
        if let Err(e) = reading.line(&line, &mut progress) {
            let _ = child.start_kill();
            return Err(e);
        }
    }
    let status = match tokio::time::timeout(Duration::from_secs(10), child.wait()).await {
        Ok(Ok(status)) => status.to_string(),
        _ => {
            let _ = child.start_kill();
            "still running; killed".to_owned()
        }
    };
    // The stderr reader ends with the process.
    let _ = tokio::time::timeout(Duration::from_secs(2), stderr_task).await;
    let Reading {
        done,
        completed,
        failure,
    } = reading;
    if let Some(message) = failure {
        return Err(TurnError::Failed(format!(
            "the Codex CLI ended the turn in an error: {message}"
        )));
    }
    if !completed {
        return Err(TurnError::Stopped(format!(
            "the Codex CLI stopped before the turn completed ({status}){}",
            said(&tail)
        )));
    }
    if done.thread_id.is_empty() {
        return Err(TurnError::Protocol(
            "the Codex CLI never said which thread it ran (no thread.started)".to_owned(),
        ));
    }
    Ok(done)
}

/// A turn's JSONL events read so far, one line at a time, kept apart from
/// the process so that they can be read without one (the fuzz targets,
/// `crate::fuzz`).
#[derive(Debug, Default)]
pub(crate) struct Reading {
    pub done: TurnDone,
    /// `turn.completed` came.
    pub completed: bool,
    /// `turn.failed`'s message, or the first `error` event's.
    pub failure: Option<String>,
}

impl Reading {
    /// Takes one line of the CLI's output; `Err`: it is not JSON.
    pub(crate) fn line(
        &mut self,
        line: &str,
        progress: &mut impl FnMut(Progress),
    ) -> Result<(), TurnError> {
        if line.trim().is_empty() {
            return Ok(());
        }
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            let shown: String = line.chars().take(200).collect();
            return Err(TurnError::Protocol(format!(
                "the Codex CLI printed a line that is not JSON: {shown}"
            )));
        };
        let item = &event["item"];
        match event["type"].as_str().unwrap_or_default() {
            "thread.started" => {
                self.done.thread_id = event["thread_id"].as_str().unwrap_or_default().to_owned();
            }
            "item.started" => {
                if let Some(name) = display_name(item) {
                    progress(Progress::Tool(name));
                }
            }
            "item.completed" => match item["type"].as_str().unwrap_or_default() {
                "agent_message" => {
                    self.done.text = item["text"].as_str().map(str::to_owned);
                }
                "command_execution" => {
                    let exit_code = item["exit_code"].as_i64().map(|c| c as i32);
                    self.done.tools.push(ToolCall {
                        name: "bash".to_owned(),
                        input: serde_json::json!({"command": item["command"]}),
                        exit_code,
                        is_error: item["status"] == "failed" || item["status"] == "declined",
                    });
                }
                "file_change" => {
                    for change in item["changes"].as_array().into_iter().flatten() {
                        let name = if change["kind"] == "add" {
                            "write"
                        } else {
                            "edit"
                        };
                        self.done.tools.push(ToolCall {
                            name: name.to_owned(),
                            input: serde_json::json!({"path": change["path"]}),
                            exit_code: None,
                            is_error: item["status"] == "failed",
                        });
                    }
                }
                "mcp_tool_call" | "web_search" => {
                    self.done.tools.push(ToolCall {
                        name: item["type"].as_str().unwrap_or_default().to_owned(),
                        input: Value::Null,
                        exit_code: None,
                        is_error: item["status"] == "failed",
                    });
                }
                // `error` items are warnings (e.g. no metadata for the model).
                _ => {}
            },
            "turn.completed" => {
                self.done.usage = event["usage"].clone();
                self.completed = true;
            }
            "turn.failed" => {
                self.failure = Some(
                    event["error"]["message"]
                        .as_str()
                        .unwrap_or("no reason given")
                        .to_owned(),
                );
            }
            "error" => {
                self.failure.get_or_insert_with(|| {
                    event["message"]
                        .as_str()
                        .unwrap_or("no reason given")
                        .to_owned()
                });
            }
            _ => {}
        }
        Ok(())
    }
}

/// Lines of stderr that say nothing about a failure.
fn is_noise(line: &str) -> bool {
    line.starts_with("Reading additional input from stdin")
        || line.starts_with("Reading prompt from stdin")
        || line.contains("could not create PATH aliases")
}

/// What the console shows for an item that is a tool at work.
fn display_name(item: &Value) -> Option<String> {
    match item["type"].as_str()? {
        "command_execution" => Some("Bash".to_owned()),
        "file_change" => Some("Edit".to_owned()),
        "mcp_tool_call" => Some(format!("Mcp {}", item["tool"].as_str().unwrap_or_default())),
        "web_search" => Some("WebSearch".to_owned()),
        _ => None,
    }
}

/// The thread's rollout file under `home`
/// (`sessions/YYYY/MM/DD/rollout-<time>-<thread_id>.jsonl`), relative to it.
pub(crate) fn find_rollout(home: &Path, thread_id: &str) -> Option<PathBuf> {
    let suffix = format!("-{thread_id}.jsonl");
    let mut stack = vec![home.join("sessions")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("rollout-") && n.ends_with(&suffix))
            {
                return path.strip_prefix(home).ok().map(Path::to_path_buf);
            }
        }
    }
    None
}

/// Input tokens of the thread's last model request (its `token_count`
/// event's `last_token_usage`), from the rollout: what the context holds.
pub(crate) fn last_context(rollout: &str) -> Option<u64> {
    rollout.lines().rev().find_map(|line| {
        if !line.contains("\"token_count\"") {
            return None;
        }
        let entry: Value = serde_json::from_str(line).ok()?;
        entry["payload"]["info"]["last_token_usage"]["input_tokens"].as_u64()
    })
}

/// A turn's usage: the difference between the thread's cumulative usage
/// after it and before it, as Anthropic-style keys (input less cache reads).
pub(crate) fn turn_usage(after: &Value, before: &Value) -> arbiter_llm::Usage {
    let d = |key: &str| {
        after[key]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(before[key].as_u64().unwrap_or(0))
    };
    let cached = d("cached_input_tokens");
    arbiter_llm::Usage {
        input_tokens: d("input_tokens").saturating_sub(cached),
        output_tokens: d("output_tokens"),
        cache_creation_input_tokens: d("cache_write_input_tokens"),
        cache_read_input_tokens: cached,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::parse_version;
    use serde_json::json;

    #[test]
    fn usage_is_the_difference_of_the_cumulative_figures() {
        let before = json!({"input_tokens": 123, "cached_input_tokens": 20, "output_tokens": 10});
        let after = json!({"input_tokens": 246, "cached_input_tokens": 50, "output_tokens": 30,
                           "cache_write_input_tokens": 4});
        let u = turn_usage(&after, &before);
        assert_eq!(
            (
                u.input_tokens,
                u.cache_read_input_tokens,
                u.output_tokens,
                u.cache_creation_input_tokens
            ),
            (93, 30, 20, 4)
        );
        // A first turn: everything so far.
        assert_eq!(turn_usage(&after, &Value::Null).input_tokens, 196);
    }

    #[test]
    fn the_context_is_the_last_requests_input() {
        let rollout = [
            json!({"type": "event_msg", "payload": {"type": "token_count", "info":
                {"last_token_usage": {"input_tokens": 100}}}}),
            json!({"type": "event_msg", "payload": {"type": "token_count", "info":
                {"last_token_usage": {"input_tokens": 250}}}}),
            json!({"type": "response_item", "payload": {"type": "message"}}),
        ]
        .map(|v| v.to_string())
        .join("\n");
        assert_eq!(last_context(&rollout), Some(250));
        assert_eq!(last_context(""), None);
        assert_eq!(parse_version("0.163.0"), Some((0, 163, 0)));
        assert_eq!(
            toml_string("a \"b\"\n\\"),
            r#""a \"b\"\n\\""#,
            "a TOML basic string"
        );
    }

    #[test]
    fn the_rollout_is_found_by_its_thread() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("sessions/2026/11/26");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("rollout-2026-11-26T14-25-46-abc-1.jsonl"), "").unwrap();
        assert_eq!(
            find_rollout(home.path(), "abc-1"),
            Some(PathBuf::from(
                "sessions/2026/11/26/rollout-2026-11-26T14-25-46-abc-1.jsonl"
            ))
        );
        assert_eq!(find_rollout(home.path(), "abc-2"), None);
    }
}
