//! The seed flow on each Orchestrator runtime, checked the same way: the
//! native agent loop, the real Claude Code CLI (`CLAUDE_CLI_BIN`, from the
//! pinned `claude-agent-sdk` wheel) against the mock Messages API, and the
//! real Codex CLI (`CODEX_CLI_BIN`, from the pinned `openai-codex-cli-bin`
//! wheel) against the mock's Responses API. The
//! Orchestrator's questions reach the Arbiter, notes stay notes, its work is
//! on disk with the worker's evidence, the console's `◈ Tool (n)` follows its
//! tools, and the next Orchestrator of the session is II.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arbiter_protocol::{OrchestratorStatus, SessionState, subjects};
use arbiter_tests::{MockReply, OpenAiReply, ResponsesRequestExt};
use arbiter_worker::Runtime;
use common::*;
use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::json;

const BRIEF: &str = "Build an authentication system in src/auth/: Google and GitHub OAuth, \
                     JWT access tokens that expire after 48 hours.";
const BRIEF_II: &str = "Add a logout route to src/auth/.";

/// How the model asks for the same things on each runtime: the native
/// loop's tools and final JSON, the Claude Code CLI's tools (absolute paths)
/// and its `StructuredOutput` tool, or Codex's `exec_command` and a final
/// JSON message (from the OpenAI mock's Responses API).
struct Flavor {
    runtime: Runtime,
    workspace: PathBuf,
}

/// A scripted reply for the mock the runtime's model calls go to.
enum Scripted {
    Messages(MockReply),
    Responses(OpenAiReply),
}

impl Flavor {
    fn output(&self, expects_response: bool, message: &str) -> Scripted {
        let value = json!({"expects_response": expects_response, "message": message});
        match self.runtime {
            Runtime::Native => Scripted::Messages(orch(expects_response, message)),
            Runtime::ClaudeCode => {
                Scripted::Messages(MockReply::tool_use("StructuredOutput", value))
            }
            Runtime::Codex => Scripted::Responses(OpenAiReply::json(&value)),
        }
    }

    fn write(&self, path: &str, content: &str) -> Scripted {
        match self.runtime {
            Runtime::Native => Scripted::Messages(MockReply::tool_use(
                "write",
                json!({"path": path, "content": content}),
            )),
            Runtime::ClaudeCode => Scripted::Messages(MockReply::tool_use(
                "Write",
                json!({"file_path": self.workspace.join(path), "content": content}),
            )),
            Runtime::Codex => {
                let dir = Path::new(path).parent().unwrap().display().to_string();
                Scripted::Responses(OpenAiReply::tool_call(
                    "exec_command",
                    json!({"cmd": format!("mkdir -p {dir} && cat > {path} <<'EOF'\n{content}EOF")}),
                ))
            }
        }
    }

    /// The tool the console shows for a write, and the evidence's count.
    fn write_tool(&self) -> (&'static str, &'static str) {
        match self.runtime {
            Runtime::Codex => ("Bash", "bash 2"),
            _ => ("Write", "write 2"),
        }
    }

    fn push(&self, sys: &System, lane: &str, reply: Scripted) {
        match reply {
            Scripted::Messages(reply) => sys.mock.push(lane, reply),
            Scripted::Responses(reply) => sys.openai.push(lane, reply),
        }
    }
}

/// Every Orchestrator status published, as the console receives them.
async fn watch_statuses(sys: &System) -> Arc<Mutex<Vec<OrchestratorStatus>>> {
    let mut sub = sys
        .bus
        .client
        .subscribe(subjects::orch_status("*"))
        .await
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            if let Ok(status) = serde_json::from_slice(&msg.payload) {
                sink.lock().unwrap().push(status);
            }
        }
    });
    seen
}

/// What the console's status line shows for a status: `◈ Tool (n)`.
fn tool_line(status: &OrchestratorStatus) -> Option<String> {
    let tool = status.current_tool.as_ref()?;
    Some(format!("◈ {tool} ({})", status.tool_count))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_flow_on_the_native_runtime() {
    seed_flow_on(Runtime::Native).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_flow_on_claude_code() {
    claude_cli_bin();
    seed_flow_on(Runtime::ClaudeCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_flow_on_codex() {
    codex_cli_bin();
    seed_flow_on(Runtime::Codex).await;
}

async fn seed_flow_on(runtime: Runtime) {
    let sys = System::start_with(Options {
        runtime,
        ..Default::default()
    })
    .await;
    let s = "s-seed";
    let f = Flavor {
        runtime,
        workspace: sys.workspace(s),
    };
    sys.worker_up("worker-0").await;
    let statuses = watch_statuses(&sys).await;
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Build me an auth system");
    let lane = orch_lane(BRIEF);

    sys.mock.push(
        &arb,
        arbiter("address_human", "What OAuth providers? Token expiry?"),
    );
    sys.send(s, "Build me an auth system").await;
    log.wait_len(2).await;

    sys.mock.push(&arb, arbiter("summon_orchestrator", BRIEF));
    f.push(
        &sys,
        &lane,
        f.output(true, "Clarifying: shared session store or stateless?"),
    );
    sys.mock
        .push(&arb, arbiter("address_orchestrator", "Stateless."));
    f.push(
        &sys,
        &lane,
        f.write("src/auth/config.ts", "providers: google, github\n"),
    );
    f.push(
        &sys,
        &lane,
        f.output(false, "Creating provider configurations now."),
    );
    f.push(&sys, &lane, f.write("src/auth/jwt.ts", "expiry: 48h\n"));
    f.push(
        &sys,
        &lane,
        f.output(true, "Complete. Auth system in src/auth/."),
    );
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));
    sys.send(s, "Google and GitHub. 48hr tokens.").await;
    sys.settled(s, 10).await;

    // A second Orchestrator of the same session.
    let lane_ii = orch_lane(BRIEF_II);
    sys.mock
        .push(&arb, arbiter("summon_orchestrator", BRIEF_II));
    f.push(&sys, &lane_ii, f.output(true, "Logout is in."));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "Logout is in."));
    sys.send(s, "Add logout too.").await;
    let status = sys.settled(s, 15).await;
    assert_eq!(status.state, SessionState::Idle);
    assert_eq!(status.summoned, 2);

    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Build me an auth system"),
            pair("Arbiter", "What OAuth providers? Token expiry?"),
            pair("You", "Google and GitHub. 48hr tokens."),
            pair("Summoned Orchestrator I", BRIEF),
            pair(
                "Orchestrator I",
                "Clarifying: shared session store or stateless?"
            ),
            pair("Arbiter → Orchestrator I", "Stateless."),
            pair(
                "Orchestrator I (note)",
                "Creating provider configurations now."
            ),
            pair("Orchestrator I", "Complete. Auth system in src/auth/."),
            pair("Released", "I"),
            pair("Arbiter", "It is done."),
            pair("You", "Add logout too."),
            pair("Summoned Orchestrator II", BRIEF_II),
            pair("Orchestrator II", "Logout is in."),
            pair("Released", "II"),
            pair("Arbiter", "Logout is in."),
        ],
        "on {runtime}"
    );

    // The question reached the Arbiter; the note did not start an Arbiter
    // turn of its own, but rode with the report; the report carries what
    // the worker saw the CLI or the loop do.
    let asked: Vec<String> = sys
        .mock
        .requests_for(&arb)
        .iter()
        .map(|r| r.last_user_text())
        .collect();
    assert_eq!(asked.len(), 6, "{asked:#?}");
    assert_eq!(
        asked[2],
        "Orchestrator I: Clarifying: shared session store or stateless?\n\
         [Evidence from the worker, not written by Orchestrator I: 0 tool calls, 0 files changed]"
    );
    let (tool, counted) = f.write_tool();
    assert!(
        asked[3].contains("Creating provider configurations now.")
            && asked[3].contains(&format!(
                "Orchestrator I: Complete. Auth system in src/auth/.\n\
                 [Evidence from the worker, not written by Orchestrator I: 2 tool calls ({counted}), \
                 2 files changed (created: src/auth/config.ts, src/auth/jwt.ts)"
            )),
        "{}",
        asked[3]
    );
    assert_eq!(asked[4], "Add logout too.");
    assert!(asked[5].starts_with("Orchestrator II: Logout is in."));

    // The work is on disk, in the session's workspace.
    let ws = sys.workspace(s);
    assert_eq!(
        std::fs::read_to_string(ws.join("src/auth/config.ts")).unwrap(),
        "providers: google, github\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("src/auth/jwt.ts")).unwrap(),
        "expiry: 48h\n"
    );

    // The console's tool line followed the tools: ◈ Write (1), then (2).
    let lines: Vec<String> = statuses
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.number == 1)
        .filter_map(tool_line)
        .collect();
    for want in [format!("◈ {tool} (1)"), format!("◈ {tool} (2)")] {
        assert!(lines.contains(&want), "{want} in {lines:?}");
    }

    // Its model use is in its records the same way on both runtimes: the
    // tokens the mock reported.
    let orch_id = log
        .bodies()
        .iter()
        .find_map(|b| match b {
            arbiter_protocol::LogBody::Summoned(s) if s.number == 1 => Some(s.orch_id.clone()),
            _ => None,
        })
        .unwrap();
    let stream = sys
        .bus
        .js
        .get_stream(subjects::ORCH_STATE_STREAM)
        .await
        .unwrap();
    let last = stream
        .get_last_raw_message_by_subject(&subjects::orch_records(&orch_id))
        .await
        .unwrap();
    let record: serde_json::Value = serde_json::from_slice(&last.payload).unwrap();
    let spend = &record["snapshot"]["spend"];
    // Five model calls (question; write, note; write, report) of 100 input
    // and 20 output tokens each (the mock's default).
    assert_eq!(spend["input_tokens"], 500, "{spend}");
    assert_eq!(spend["output_tokens"], 100, "{spend}");

    // Who the mock heard from.
    if runtime == Runtime::Codex {
        let requests = sys.openai.requests_for(&lane);
        assert_eq!(requests.len(), 5, "{:?}", sys.openai.lane_counts());
        for request in &requests {
            let developer = request.input_texts("developer").join("\n");
            assert!(developer.contains("You are an Orchestrator"), "{developer}");
            assert!(
                !request.body.to_string().contains("Build me an auth system"),
                "the human's words reach I only through the Arbiter"
            );
            assert_eq!(
                request.header("authorization"),
                Some(format!("Bearer {API_KEY}").as_str())
            );
            assert_eq!(request.body["stream"], true);
            assert!(
                request.responses_output_schema()["properties"]["expects_response"].is_object()
            );
            let tools = request.body["tools"].to_string();
            assert!(tools.contains("\"exec_command\""), "{tools}");
        }
        // Later turns resume the same thread: the Arbiter's answer follows
        // the question in the same conversation.
        let last = requests.last().unwrap().input_texts("user").join("\n");
        assert!(last.contains("Stateless."), "{last}");
        arbiter_tests::eventually(WAIT, "the CLI processes to end", || async {
            cli_processes(sys.workspaces.path(), ".codex")
                .is_empty()
                .then_some(())
        })
        .await;
        return;
    }
    let requests = sys.mock.requests_for(&lane);
    for request in &requests {
        assert!(request.system_text().contains("You are an Orchestrator"));
        assert!(
            !request.all_text().contains("Build me an auth system"),
            "the human's words reach I only through the Arbiter"
        );
        match runtime {
            Runtime::Native | Runtime::Codex => {
                assert_eq!(request.header("x-api-key"), Some(API_KEY));
            }
            Runtime::ClaudeCode => {
                assert_eq!(request.header("x-api-key"), Some(API_KEY));
                let agent = request.header("user-agent").unwrap_or_default();
                assert!(agent.starts_with("claude-cli/"), "{agent}");
                let tools = request.tool_names();
                for tool in ["Write", "Edit", "Read", "Bash", "StructuredOutput"] {
                    assert!(tools.iter().any(|t| t == tool), "{tool} in {tools:?}");
                }
            }
        }
    }
    if runtime == Runtime::ClaudeCode {
        // One CLI process per Orchestrator, ended with it.
        arbiter_tests::eventually(WAIT, "the CLI processes to end", || async {
            cli_processes(sys.workspaces.path(), ".claude-code")
                .is_empty()
                .then_some(())
        })
        .await;
    }
}

/// The processes running with a CLI home under `root/homes` in their environment.
fn cli_processes(root: &Path, homes: &str) -> Vec<std::ffi::OsString> {
    let homes = root.join(homes);
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let environ = String::from_utf8_lossy(&environ);
        if environ.contains(&*homes.to_string_lossy()) {
            left.push(entry.file_name());
        }
    }
    left
}
