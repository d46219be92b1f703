//! What the worker saw an Orchestrator do, kept for its outputs' evidence
//! (`docs/protocol.md`, "Evidence"): its tool calls by tool with failures and
//! the commands `bash` ran (a [`Tally`], stored in every state record), and
//! the workspace's files against the walk taken at its summons (a
//! [`Baseline`], stored once with its state). The model writes none of it.

mod files;

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;

use arbiter_protocol::evidence::{MAX_COMMANDS_LISTED, MAX_TOOLS_LISTED, UNKNOWN_TOOL, clip_item};
use arbiter_protocol::{CommandRun, Evidence, FileChanges, ToolCalls};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) use files::{Baseline, MAX_WALK_ENTRIES, Walk, diff, walk};

use crate::tools::{BASIC_TOOLS, ToolOutcome, is_secret_env, task};

/// What replaces a secret in a command.
const MASK: &str = "***";
/// Values of the worker's secret variables shorter than this are not
/// masked: too likely to be ordinary words.
const MIN_SECRET_LEN: usize = 8;

/// Calls of one tool so far.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub(crate) struct Calls {
    pub calls: u64,
    pub failed: u64,
}

/// Tool calls and commands since the summons; part of the stored snapshot,
/// so a worker that takes over goes on counting.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Tally {
    #[serde(default)]
    pub tools: BTreeMap<String, Calls>,
    /// The most recent commands, oldest first.
    #[serde(default)]
    pub commands: VecDeque<CommandRun>,
    /// Commands run before those kept.
    #[serde(default)]
    pub commands_more: u64,
}

impl Tally {
    /// Counts one finished tool call. A call fails when its result is an
    /// error, or, for `bash`, when its command did not exit 0.
    pub(crate) fn record(&mut self, name: &str, input: &Value, outcome: &ToolOutcome) {
        let is_bash = name == "bash";
        let failed = outcome.is_error || (is_bash && outcome.exit_code != Some(0));
        let known = BASIC_TOOLS.contains(&name) || name == task::NAME;
        // An MCP tool counts by its server: `mcp__git`.
        let server = crate::mcp::named_server(name).map(|s| format!("{}{s}", crate::mcp::PREFIX));
        let key = match &server {
            Some(server) => server.as_str(),
            None if known => name,
            None => UNKNOWN_TOOL,
        };
        let calls = self.tools.entry(key.to_owned()).or_default();
        calls.calls += 1;
        calls.failed += u64::from(failed);
        if is_bash
            && let Some(command) = input.get("command").and_then(Value::as_str)
            && !command.trim().is_empty()
        {
            self.commands.push_back(CommandRun {
                command: clip_item(&redact(command, &secret_values())),
                exit_code: outcome.exit_code,
            });
            while self.commands.len() > MAX_COMMANDS_LISTED {
                self.commands.pop_front();
                self.commands_more += 1;
            }
        }
    }

    /// The evidence for an output, with the files changed.
    pub(crate) fn evidence(&self, files: FileChanges) -> Evidence {
        Evidence {
            tools: self
                .tools
                .iter()
                .take(MAX_TOOLS_LISTED)
                .map(|(tool, c)| ToolCalls {
                    tool: tool.clone(),
                    calls: c.calls,
                    failed: c.failed,
                })
                .collect(),
            files,
            commands: self.commands.iter().cloned().collect(),
            commands_more: self.commands_more,
            checkpoint: None,
            no_checkpoint: None,
        }
    }
}

/// Walks the workspace without holding up the runtime's other tasks. On a
/// multi-threaded runtime (the worker's) the walk runs right here, the
/// thread's other tasks moved to another thread meanwhile
/// (`block_in_place`): an output then waits for no hand-over to the
/// blocking pool and back, which on a busy machine costs more than walking
/// a small workspace. Elsewhere it goes to the blocking pool.
pub(crate) async fn walk_workspace(root: &Path) -> Walk {
    let multi_thread = matches!(
        tokio::runtime::Handle::current().runtime_flavor(),
        tokio::runtime::RuntimeFlavor::MultiThread
    );
    if multi_thread {
        return tokio::task::block_in_place(|| walk(root, MAX_WALK_ENTRIES));
    }
    let root = root.to_path_buf();
    tokio::task::spawn_blocking(move || walk(&root, MAX_WALK_ENTRIES))
        .await
        .unwrap_or_else(|_| Walk {
            partial: true,
            ..Walk::default()
        })
}

/// The values of the worker's own secret variables (API keys, NATS
/// credentials…), to be kept out of what it reports.
fn secret_values() -> Vec<String> {
    std::env::vars()
        .filter(|(name, value)| is_secret_env(name) && value.len() >= MIN_SECRET_LEN)
        .map(|(_, value)| value)
        .collect()
}

/// `command` with secrets masked: every occurrence of one of `secrets`, and
/// the value of an assignment to a secret-looking variable
/// (`API_KEY=…`, `export GITHUB_TOKEN="…"`), up to the next space outside quotes.
pub(crate) fn redact(command: &str, secrets: &[String]) -> String {
    let mut text = command.to_owned();
    for secret in secrets {
        text = text.replace(secret.as_str(), MASK);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(eq) = rest.find('=') {
        let (before, after) = rest.split_at(eq);
        let name_start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let name = &before[name_start..];
        out.push_str(before);
        out.push('=');
        let after = &after[1..];
        if name.is_empty() || !is_secret_env(name) {
            rest = after;
            continue;
        }
        let end = value_end(after);
        if end > 0 {
            out.push_str(MASK);
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Where a shell word starting at the beginning of `text` ends: the first
/// whitespace or `;`, `&`, `|` outside single or double quotes.
fn value_end(text: &str) -> usize {
    let mut quote: Option<char> = None;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, c) if c.is_whitespace() || matches!(c, ';' | '&' | '|') => return i,
            (None, _) => {}
        }
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn outcome(is_error: bool, exit_code: Option<i32>) -> ToolOutcome {
        ToolOutcome {
            content: String::new(),
            is_error,
            exit_code,
            spend: Default::default(),
        }
    }

    #[test]
    fn calls_are_counted_by_tool_with_failures_and_commands_with_exit_codes() {
        let mut tally = Tally::default();
        tally.record("write", &json!({"path": "a"}), &outcome(false, None));
        tally.record("write", &json!({"path": "/etc/x"}), &outcome(true, None));
        tally.record(
            "bash",
            &json!({"command": "python3 a.py"}),
            &outcome(false, Some(0)),
        );
        // A command that exits non-zero is a failed call, though the tool ran.
        tally.record(
            "bash",
            &json!({"command": "false"}),
            &outcome(false, Some(1)),
        );
        tally.record(
            "bash",
            &json!({"command": "sleep 99"}),
            &outcome(true, None),
        );
        tally.record("fly", &json!({}), &outcome(true, None));
        tally.record("launch", &json!({}), &outcome(true, None));
        // MCP tools count by their server, whichever of its tools.
        tally.record("mcp__git__git_status", &json!({}), &outcome(false, None));
        tally.record("mcp__git__git_log", &json!({}), &outcome(true, None));
        let evidence = tally.evidence(FileChanges::default());
        assert_eq!(
            evidence.tools,
            [
                ToolCalls {
                    tool: UNKNOWN_TOOL.into(),
                    calls: 2,
                    failed: 2
                },
                ToolCalls {
                    tool: "bash".into(),
                    calls: 3,
                    failed: 2
                },
                ToolCalls {
                    tool: "mcp__git".into(),
                    calls: 2,
                    failed: 1
                },
                ToolCalls {
                    tool: "write".into(),
                    calls: 2,
                    failed: 1
                },
            ]
        );
        let runs: Vec<(&str, Option<i32>)> = evidence
            .commands
            .iter()
            .map(|c| (c.command.as_str(), c.exit_code))
            .collect();
        assert_eq!(
            runs,
            [
                ("python3 a.py", Some(0)),
                ("false", Some(1)),
                ("sleep 99", None)
            ]
        );
    }

    #[test]
    fn only_the_last_commands_are_kept_and_the_rest_counted() {
        let mut tally = Tally::default();
        let n = MAX_COMMANDS_LISTED + 3;
        for i in 0..n {
            tally.record(
                "bash",
                &json!({"command": format!("echo {i}")}),
                &outcome(false, Some(0)),
            );
        }
        let evidence = tally.evidence(FileChanges::default());
        assert_eq!(evidence.commands.len(), MAX_COMMANDS_LISTED);
        assert_eq!(evidence.commands[0].command, "echo 3");
        assert_eq!(evidence.commands_more, 3);
        assert_eq!(evidence.tool_calls(), n as u64);
        // Long commands are cut, and kept on one line.
        tally.record(
            "bash",
            &json!({"command": format!("echo {}\necho two", "x".repeat(500))}),
            &outcome(false, Some(0)),
        );
        let last = tally.commands.back().unwrap();
        assert!(last.command.chars().count() <= 160 && !last.command.contains('\n'));
    }

    #[test]
    fn secrets_never_reach_a_command_line() {
        let secrets = vec!["sk-ant-worker-secret-123".to_owned()];
        assert_eq!(
            redact(
                "curl -H 'x-api-key: sk-ant-worker-secret-123' https://x",
                &secrets
            ),
            "curl -H 'x-api-key: ***' https://x"
        );
        assert_eq!(
            redact(
                "API_KEY=abc123 run; export GITHUB_TOKEN=\"a b\" && echo $PATH X=1",
                &[]
            ),
            "API_KEY=*** run; export GITHUB_TOKEN=*** && echo $PATH X=1"
        );
        assert_eq!(
            redact("a == b; k=v; PASSWORD=", &[]),
            "a == b; k=v; PASSWORD="
        );
    }
}
