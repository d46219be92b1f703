//! Entry points of the fuzz targets (issue #39; `fuzz/`, `docs/fuzzing.md`):
//! plain functions over bytes that call this crate's real decoders and
//! panic when an invariant does not hold, so that libFuzzer reports it.
//! Built with the `fuzzing` feature (and in this crate's unit tests, which
//! replay the checked-in seed corpus).

use arbiter_protocol::approval::{Action, Rule, subject};
use arbiter_protocol::{Layers, Policy};
use serde_json::Value;

/// `protocol_records` (the worker's part): an Orchestrator's state record
/// as `state::claim` reads it back from `.state`/`.out` (a record, or the
/// pointer that stands for one too large), its transcript folded as a
/// restore folds it. What decodes round-trips.
pub fn orchestrator_records(data: &[u8]) {
    if let Ok(record) = serde_json::from_slice::<crate::state::Record>(data) {
        let encoded = serde_json::to_value(&record).unwrap_or_default();
        let again = serde_json::from_value::<crate::state::Record>(encoded.clone());
        assert_eq!(
            again.as_ref().ok(),
            Some(&record),
            "a state record reads back otherwise: {encoded}"
        );
        let mut messages = Vec::new();
        let appended = record.append.len();
        for message in record.append {
            crate::transcript::push(&mut messages, message);
        }
        assert!(messages.len() <= appended);
        assert!(
            messages.windows(2).all(|w| w[0].role != w[1].role),
            "two messages of one role in a row after the fold"
        );
    }
    if let Ok(pointer) = serde_json::from_slice::<crate::state::Pointer>(data) {
        let encoded = serde_json::to_value(&pointer).unwrap_or_default();
        let again = serde_json::from_value::<crate::state::Pointer>(encoded);
        assert_eq!(again.ok(), Some(pointer), "a pointer reads back otherwise");
    }
}

/// The tools a `tool_args` input may name, by its first byte.
const TOOLS: [&str; 10] = [
    "bash",
    "read",
    "write",
    "edit",
    "glob",
    "grep",
    "task",
    "mcp__git__git_status",
    "mcp__github__create_issue",
    "Bash",
];

/// The policies the approval layers are made of (docs/approvals.md).
const POLICIES: [&str; 4] = [
    "mode auto",
    "mode ask; allow read; allow glob; allow grep; deny bash(rm -rf*); ask bash(git push*)",
    "mode read-only; deny write(**/.env); allow bash(cargo test*)",
    "ask mcp__github__*; deny edit(secrets/**); allow bash(ls*)",
];

/// `tool_args`: a model's tool call, the first byte picking the tool and
/// the rest its arguments (JSON, as the model wrote them). They are read
/// as the worker reads them before running anything: the `task` tool's
/// input parsed as it is parsed (`tools::parse`), the call's subject, the
/// approval layers' decision, the "allow for this session" rule of the
/// call, and the name a status shows. Nothing is run.
///
/// What must hold: the session rule of a call covers that call; no layer
/// on top of the floor decides a call more loosely than the floor does;
/// a call the human allowed for the session is never turned from a deny
/// into a run.
pub fn tool_args(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let tool = TOOLS[usize::from(pick) % TOOLS.len()];
    let Ok(input) = serde_json::from_slice::<Value>(rest) else {
        return;
    };
    if tool == crate::tools::task::NAME {
        let _ = crate::tools::parse::<crate::tools::task::TaskInput>(tool, &input);
    }
    let _ = crate::tools::display_name(tool);
    let _ = subject(tool, &input);
    let exactly = Rule::exactly(tool, &input);
    assert!(
        exactly.covers(tool, &input),
        "the session rule {exactly} does not cover the call it was made of: {tool} {input}"
    );
    let policies: Vec<Policy> = POLICIES
        .iter()
        .filter_map(|text| Policy::parse(text).ok())
        .collect();
    assert_eq!(
        policies.len(),
        POLICIES.len(),
        "a policy of the list does not parse"
    );
    for floor in &policies {
        let alone = crate::approval::decide(
            Some(&Layers {
                floor: floor.clone(),
                tighter: Vec::new(),
                allowed: Vec::new(),
            }),
            tool,
            &input,
        );
        for tighter in &policies {
            let Ok(mut layers) = Layers::new(floor.clone(), vec![tighter.clone()]) else {
                continue;
            };
            let decided = crate::approval::decide(Some(&layers), tool, &input);
            assert!(
                decided.action >= alone.action,
                "{tool} {input}: the layers decide {:?} ({}), the floor alone {:?} ({})",
                decided.action,
                decided.by,
                alone.action,
                alone.by
            );
            layers.allowed.push(exactly.clone());
            let allowed = crate::approval::decide(Some(&layers), tool, &input);
            let expected = match decided.action {
                Action::Ask => Action::Allow,
                other => other,
            };
            assert_eq!(allowed.action, expected, "{tool} {input}: {}", allowed.by);
        }
    }
    let _ = crate::approval::decide(None, tool, &input);
}

/// `claude_lines`: what the Claude Code CLI prints (`stream-json`), one
/// JSON line per line, read as a turn reads it (`runtime::claude::Reading`)
/// until the turn ends. What must hold: the structured-output tool is
/// never taken for a tool call; each tool call was reported once as
/// progress; a turn's cost is a number, never negative.
pub fn claude_lines(data: &[u8]) {
    use crate::runtime::claude::{Progress, Reading};
    let text = String::from_utf8_lossy(data);
    let mut reading = Reading::new(0.25);
    let tools = std::cell::Cell::new(0usize);
    let mut progress = |p: Progress| {
        if let Progress::Tool(_) = p {
            tools.set(tools.get() + 1);
        }
    };
    for line in text.lines() {
        let Some(end) = reading.line(line, &mut progress) else {
            continue;
        };
        if let Ok(done) = end {
            assert!(
                done.tools.iter().all(|t| t.name != "StructuredOutput"),
                "the structured output was taken for a tool call"
            );
            assert_eq!(
                done.tools.len(),
                tools.get(),
                "tool calls and their progress differ"
            );
            assert!(
                done.cost_usd.is_finite() && done.cost_usd >= 0.0,
                "a turn cost {}",
                done.cost_usd
            );
        }
        return;
    }
}

/// `codex_lines`: what the Codex CLI prints (`exec --json`), one JSON line
/// per line, read as a turn reads it (`runtime::codex::Reading`); the same
/// text as a rollout file, for the context of its last request; the usage
/// of a turn from two of its `turn.completed` lines. What must hold: a
/// command is a `bash` call whose input is its command, a file change an
/// `edit` or `write` of its path; a turn's usage is never more than the
/// thread's figures after it.
pub fn codex_lines(data: &[u8]) {
    use crate::runtime::codex::{Progress, Reading, last_context, turn_usage};
    let text = String::from_utf8_lossy(data);
    let mut reading = Reading::default();
    let mut progress = |_: Progress| {};
    let mut usages = Vec::new();
    for line in text.lines() {
        if reading.line(line, &mut progress).is_err() {
            break;
        }
        if reading.completed {
            usages.push(reading.done.usage.clone());
        }
    }
    for call in &reading.done.tools {
        match call.name.as_str() {
            "bash" => assert!(call.input.get("command").is_some(), "{call:?}"),
            "edit" | "write" => assert!(call.input.get("path").is_some(), "{call:?}"),
            "mcp_tool_call" | "web_search" => assert!(call.input.is_null(), "{call:?}"),
            other => panic!("a tool call named {other:?}"),
        }
    }
    let _ = last_context(&text);
    if let (Some(before), Some(after)) = (usages.first(), usages.last()) {
        let usage = turn_usage(after, before);
        let most = |key: &str| after[key].as_u64().unwrap_or(0);
        assert!(usage.input_tokens <= most("input_tokens"));
        assert!(usage.output_tokens <= most("output_tokens"));
        assert!(usage.cache_read_input_tokens <= most("cached_input_tokens"));
        let _ = turn_usage(before, after);
    }
}

/// `mcp_inputs` (the worker's part): what an MCP server sends the worker's
/// client, the first byte picking which: its tool list (`tools/list`: each
/// tool offered under a name fit for a model, its description cut), or a
/// call's result, turned into what the model reads. What must hold: an
/// offered name is `mcp__…`, at most 64 characters a provider takes, and
/// says its server when it has room to; a description is at most 2,000
/// characters and a mark; a result is at most the tools' cap and a note.
pub fn mcp_client(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    if pick % 2 == 0 {
        let Ok(listed) = serde_json::from_slice::<rmcp::model::ListToolsResult>(rest) else {
            return;
        };
        for tool in &listed.tools {
            for server in ["git", "a-server_with.dots", tool.name.as_ref()] {
                let name = crate::mcp::offered_name(server, &tool.name);
                offered_name_holds(server, &name);
                let described = crate::mcp::describe(server, tool);
                assert!(
                    described.chars().count() <= 2_001,
                    "a description of {} characters",
                    described.chars().count()
                );
            }
        }
    } else {
        let Ok(result) = serde_json::from_slice::<rmcp::model::CallToolResult>(rest) else {
            return;
        };
        let failed = result.is_error == Some(true);
        let outcome = crate::mcp::outcome(result);
        assert_eq!(outcome.is_error, failed);
        assert!(
            outcome.content.len() <= crate::tools::MAX_RESULT_BYTES + 64,
            "a result of {} bytes",
            outcome.content.len()
        );
        assert!(
            !failed || !outcome.content.trim().is_empty(),
            "a failure that says nothing"
        );
    }
}

/// An offered name is `mcp__…`, of at most 64 letters, digits, `_` and
/// `-`; when the server's name fits whole and stays one token, the name
/// says that server.
fn offered_name_holds(server: &str, name: &str) {
    assert!(name.starts_with(crate::mcp::PREFIX), "{name}");
    assert!(name.len() <= 64, "{name}: {} bytes", name.len());
    assert!(
        name.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
        "{name}"
    );
    let fit: String = server
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !fit.is_empty()
        && !fit.contains("__")
        && !fit.starts_with('_')
        && !fit.ends_with('_')
        && crate::mcp::PREFIX.len() + fit.len() + 2 <= 64
    {
        assert_eq!(crate::mcp::named_server(name), Some(fit.as_str()), "{name}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus")
            .join(target);
        let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Some((name, std::fs::read(e.path()).ok()?))
            })
            .collect();
        out.sort();
        out
    }

    /// The seed `name` of `target` is `data`, its JSON compared as JSON
    /// after the first byte. With `ARBITER_WRITE_SEEDS` set it is written
    /// instead (fuzz/seeds.py writes the other seeds).
    fn seed_is(target: &str, name: &str, data: &[u8]) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus")
            .join(target)
            .join(name);
        if std::env::var_os("ARBITER_WRITE_SEEDS").is_some() {
            assert!(std::fs::write(&path, data).is_ok(), "{}", path.display());
            return;
        }
        let json = |d: &[u8]| serde_json::from_slice::<serde_json::Value>(d.get(1..)?).ok();
        let seed = std::fs::read(&path).unwrap_or_default();
        assert!(
            seed.first() == data.first() && json(&seed).is_some() && json(&seed) == json(data),
            "{} is not the record written today: write the seeds again \
             (ARBITER_WRITE_SEEDS=1, see this test's comment)",
            path.display()
        );
    }

    #[test]
    fn the_seed_corpus_replays_cleanly() {
        for target in [
            "protocol_records",
            "tool_args",
            "claude_lines",
            "codex_lines",
            "mcp_inputs",
        ] {
            let seeds = seeds(target);
            assert!(seeds.len() >= 3, "{target}: {} seeds", seeds.len());
            for (name, data) in seeds {
                let replayed = std::panic::catch_unwind(|| {
                    let rest = data.get(1..).unwrap_or_default();
                    orchestrator_records(rest);
                    tool_args(&data);
                    claude_lines(&data);
                    codex_lines(&data);
                    mcp_client(&data);
                    mcp_client(rest);
                });
                assert!(replayed.is_ok(), "{target}/{name} panicked");
            }
        }
    }

    /// The recorded lines of a whole turn read as one.
    #[test]
    fn the_recorded_turns_end_as_turns() {
        use crate::runtime::{claude, codex};
        for (name, data) in seeds("claude_lines") {
            if !name.starts_with("turn-") {
                continue;
            }
            let mut reading = claude::Reading::new(0.0);
            let text = String::from_utf8_lossy(&data).into_owned();
            let end = text.lines().find_map(|l| reading.line(l, &mut |_| {}));
            assert!(matches!(end, Some(Ok(_))), "{name}: {end:?}");
        }
        for (name, data) in seeds("codex_lines") {
            if !name.starts_with("turn-") {
                continue;
            }
            let mut reading = codex::Reading::default();
            for line in String::from_utf8_lossy(&data).lines() {
                assert!(reading.line(line, &mut |_| {}).is_ok(), "{name}");
            }
            assert!(
                reading.completed && reading.failure.is_none(),
                "{name}: {reading:?}"
            );
            assert!(!reading.done.thread_id.is_empty(), "{name}");
        }
    }
    /// The worker's seeds of `protocol_records` are an Orchestrator's state
    /// records as the worker writes them today (their transcript the
    /// recorded tool-use turn of `llm/tests/fixtures`): a change of the
    /// record fails here until the seeds are written again, with
    /// `ARBITER_WRITE_SEEDS=1 cargo test -p arbiter-worker --lib
    /// the_record_seeds`.
    #[test]
    fn the_record_seeds_are_what_is_written_today() {
        use crate::state::{CliTranscript, Record, Snapshot};
        use arbiter_llm::{Block, Message, MessageRole};
        let message = seeds("protocol_messages")
            .into_iter()
            .find(|(n, _)| n == "orchestrator-message.json")
            .and_then(|(_, d)| serde_json::from_slice(&d[1..]).ok());
        let Some(message) = message else {
            panic!("the docs' example is not in the corpus");
        };
        let at = chrono::DateTime::parse_from_rfc3339("2025-06-30T14:05:00Z")
            .map(|t| t.with_timezone(&chrono::Utc))
            .unwrap_or_default();
        let step = Record {
            v: arbiter_protocol::VERSION,
            orch_id: "0197c2a6-0b7d-7e21-8f90-4c3b2a1d0e9f".to_owned(),
            session_id: "0197c2a4-5f1e-7b3a-9c41-2d8e6f0a1b37".to_owned(),
            number: 1,
            rev: 4,
            worker_id: "worker-8c1f".to_owned(),
            summons_seq: 12,
            append: vec![
                Message {
                    role: MessageRole::Assistant,
                    content: vec![
                        Block::Text {
                            text: "I'll read the main file.".to_owned(),
                        },
                        Block::ToolUse {
                            id: "toolu_01A".to_owned(),
                            name: "read".to_owned(),
                            input: serde_json::json!({"path": "src/main.rs"}),
                        },
                    ],
                },
                Message {
                    role: MessageRole::User,
                    content: vec![Block::ToolResult {
                        tool_use_id: "toolu_01A".to_owned(),
                        content: "fn main() {}".to_owned(),
                        is_error: false,
                    }],
                },
            ],
            snapshot: Snapshot::new(),
            outbox: vec![message],
            rollup: false,
            baseline: None,
            cli_transcript: None,
            at,
        };
        let rollup = Record {
            rev: 9,
            rollup: true,
            outbox: Vec::new(),
            cli_transcript: Some(CliTranscript {
                append: "{\"type\":\"user\"}\n".to_owned(),
                reset: true,
            }),
            ..step.clone()
        };
        for (name, record) in [
            ("orchestrator-step-record.json", step),
            ("orchestrator-rollup-record.json", rollup),
        ] {
            let mut data = b"0".to_vec();
            data.extend(serde_json::to_vec(&record).unwrap_or_default());
            seed_is("protocol_records", name, &data);
        }
    }
}
