//! The claude-code runtime against the real Claude Code CLI (`CLAUDE_CLI_BIN`,
//! from the pinned `claude-agent-sdk` wheel) and the mock Messages API:
//! context warnings reach the CLI's model through the `PostToolUse` hook, a
//! write outside the workspace is denied, a turn the CLI fails ends in a
//! `failed` event with its cause and frees the slot, a worker without a
//! usable CLI refuses to start, and a summons for one runtime is left to a
//! worker that runs it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use arbiter_protocol::{LogBody, WireError};
use arbiter_tests::{Gate, MockReply, eventually};
use arbiter_worker::Runtime;
use arbiter_worker::context::{CRITICAL_MARK, NOTICE_MARK};
use common::*;
use serde_json::{Value, json};

fn output(expects_response: bool, message: &str) -> MockReply {
    MockReply::tool_use(
        "StructuredOutput",
        json!({"expects_response": expects_response, "message": message}),
    )
}

/// A system whose worker runs Orchestrators on the CLI, up and ready.
async fn claude_system(slots: usize) -> System {
    claude_cli_bin();
    let sys = System::start_with(Options {
        runtime: Runtime::ClaudeCode,
        slots,
        ..Default::default()
    })
    .await;
    sys.worker_up("worker-0").await;
    sys
}

/// The human's first words make the Arbiter summon an Orchestrator with `brief`.
async fn summon(sys: &System, session: &str, brief: &str) {
    let arb = arbiter_lane(&format!("start {session}"));
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.send(session, &format!("start {session}")).await;
}

/// The first `error` entry of the log.
async fn first_error(log: &LogWatch) -> WireError {
    let at = log
        .wait_for("an error entry", |b| matches!(b, LogBody::Error(_)))
        .await;
    match &log.bodies()[at] {
        LogBody::Error(e) => e.error.clone(),
        _ => unreachable!(),
    }
}

/// The worker's presence: its slots in use.
async fn slots_used(sys: &System, worker: &str) -> u64 {
    let reply = sys
        .bus
        .client
        .request(
            arbiter_worker::presence::presence_subject(worker),
            "".into(),
        )
        .await
        .unwrap();
    let presence: Value = serde_json::from_slice(&reply.payload).unwrap();
    presence["slots_used"].as_u64().unwrap()
}

/// The CLI processes running for the workspaces under `root`, by pid.
fn cli_pids(root: &Path) -> Vec<i32> {
    let homes = root.join(".claude-code").to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            String::from_utf8_lossy(&environ)
                .contains(&homes)
                .then_some(pid)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_warnings_reach_the_cli_model_through_its_hook() {
    let sys = claude_system(1).await;
    let s = "s-warn";
    let brief = "Fill your context.";
    let lane = orch_lane(brief);
    let ws = sys.workspace(s);
    // 150k and then 175k of the 200k budget: 75 %, then 87.5 %.
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Write",
            json!({"file_path": ws.join("a.txt"), "content": "a\n"}),
        )
        .usage(140_000, 20, 0, 10_000),
    );
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Write",
            json!({"file_path": ws.join("b.txt"), "content": "b\n"}),
        )
        .usage(175_000, 20, 0, 0),
    );
    sys.mock.push(&lane, output(true, "Full."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the Orchestrator's report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Full."),
    )
    .await;
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 3);
    let texts: Vec<String> = requests.iter().map(|r| r.all_text()).collect();
    assert!(!texts[0].contains(NOTICE_MARK) && !texts[0].contains(CRITICAL_MARK));
    // After the first Write: the notice at 75 %, as the hook's additional context.
    assert!(
        texts[1].contains(&format!("{NOTICE_MARK}: 75% of your context is used")),
        "{}",
        texts[1]
    );
    assert!(!texts[1].contains(CRITICAL_MARK));
    // After the second: the critical warning, telling it to report.
    assert!(
        texts[2].contains(&format!("{CRITICAL_MARK}: 88% of your context is used")),
        "{}",
        texts[2]
    );
    assert!(texts[2].contains("Report to the Arbiter now"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_outside_the_workspace_is_denied() {
    let sys = claude_system(1).await;
    let s = "s-outside";
    let brief = "Write outside.";
    let lane = orch_lane(brief);
    let outside = tempfile::tempdir().unwrap();
    let by_write = outside.path().join("by-write.txt");
    let by_bash = outside.path().join("by-bash.txt");
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Write",
            json!({"file_path": by_write, "content": "escaped\n"}),
        ),
    );
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Bash",
            json!({"command": format!("echo escaped > {}", by_bash.display())}),
        ),
    );
    sys.mock.push(&lane, output(true, "Tried."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the Orchestrator's report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Tried."),
    )
    .await;
    // Nothing was written, and the model was told so: each call's result is an error.
    assert!(!by_write.exists(), "the Write outside the workspace ran");
    assert!(
        !by_bash.exists(),
        "the Bash redirect outside the workspace ran"
    );
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 3);
    for request in &requests[1..] {
        let last = request
            .messages()
            .iter()
            .rev()
            .find(|m| {
                m["content"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
            })
            .unwrap();
        let result = last["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "tool_result")
            .unwrap();
        assert_eq!(result["is_error"], true, "{result}");
    }
    // The evidence counts them as failed calls, with no file changed.
    let LogBody::Orchestrator(report) = log
        .bodies()
        .into_iter()
        .find(|b| matches!(b, LogBody::Orchestrator(_)))
        .unwrap()
    else {
        unreachable!()
    };
    let evidence = report.evidence.unwrap();
    let failed: u64 = evidence.tools.iter().map(|t| t.failed).sum();
    assert_eq!(failed, 2, "{evidence:?}");
    assert_eq!(
        evidence.files.created.len() + evidence.files.changed.len(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_error_the_cli_ends_its_turn_with_is_a_failed_event() {
    let sys = claude_system(1).await;
    let s = "s-400";
    let brief = "Hit an error.";
    let lane = orch_lane(brief);
    // The CLI sends a refused request again a few times (4 in 2.1.331)
    // before it ends the turn: every one is refused.
    for _ in 0..8 {
        sys.mock.push(
            &lane,
            MockReply::http_error(
                400,
                "invalid_request_error",
                "mock: this request is refused",
            ),
        );
    }
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    // The log says which Orchestrator failed and why, in the CLI's words.
    let error = first_error(&log).await;
    let WireError::OrchestratorFailed { number, message } = &error else {
        panic!("expected the Orchestrator's failure, got {error:?}");
    };
    assert_eq!(*number, 1);
    assert!(
        message.contains("the Claude Code CLI ended the turn in an error")
            && message.contains("this request is refused"),
        "{message}"
    );
    eventually(WAIT, "the slot to be free", || async {
        (slots_used(&sys, "worker-0").await == 0).then_some(())
    })
    .await;
    eventually(WAIT, "the CLI to end", || async {
        cli_pids(sys.workspaces.path()).is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_killed_mid_turn_is_a_failed_event_and_frees_the_slot() {
    let sys = claude_system(1).await;
    let s = "s-crash";
    let brief = "Crash.";
    let lane = orch_lane(brief);
    let hold = Gate::new();
    sys.mock
        .push(&lane, output(true, "never sent").gated(hold.clone()));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    sys.mock.wait_for_requests(&lane, 1, WAIT).await;
    let pids = cli_pids(sys.workspaces.path());
    assert!(!pids.is_empty());
    for pid in pids {
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
    }
    let error = first_error(&log).await;
    let text = error.to_string();
    assert!(
        text.contains("the Claude Code CLI stopped mid-turn") && text.contains("signal: 9"),
        "{text}"
    );
    hold.open();
    eventually(WAIT, "the slot to be free", || async {
        (slots_used(&sys, "worker-0").await == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_that_prints_a_line_that_is_not_json_is_a_failed_event() {
    let real = claude_cli_bin();
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_cli(
        dir.path(),
        &format!(
            "if [ \"$1\" = --version ]; then exec '{}' --version; fi\n\
             read -r line\necho 'Welcome to Claude Code!'\nexec sleep 30\n",
            real.display()
        ),
    );
    let mut sys = System::start_with(Options {
        runtime: Runtime::ClaudeCode,
        workers: 0,
        ..Default::default()
    })
    .await;
    let mut config = sys.worker_config("worker-0", 1, 200_000);
    config.claude_code.bin = fake;
    sys.spawn_worker_with(config);
    sys.worker_up("worker-0").await;
    let s = "s-garbage";
    let log = sys.watch_log(s).await;
    summon(&sys, s, "Say something odd.").await;
    let text = first_error(&log).await.to_string();
    assert!(
        text.contains("printed a line that is not JSON: Welcome to Claude Code!"),
        "{text}"
    );
    eventually(WAIT, "the slot to be free", || async {
        (slots_used(&sys, "worker-0").await == 0).then_some(())
    })
    .await;
}

/// A script standing in for the CLI.
fn fake_cli(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("claude");
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn a_worker_without_a_usable_cli_refuses_to_start_saying_what_to_install() {
    let dir = tempfile::tempdir().unwrap();
    let old = fake_cli(dir.path(), "echo '2.0.1 (Claude Code)'\n");
    let broken = dir.path().join("broken");
    std::fs::create_dir(&broken).unwrap();
    let broken = fake_cli(&broken, "echo 'segfault' >&2; exit 139\n");
    let cases = [
        (dir.path().join("missing"), "was not found"),
        (old, "is version 2.0.1, older than 2.1.331"),
        (broken, "is not a working Claude Code CLI"),
    ];
    for (bin, says) in cases {
        let out = tokio::process::Command::new(arbiter_tests::bin("arbiter-worker"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("ANTHROPIC_API_KEY", API_KEY)
            .env("ARBITER_WORKSPACE_ROOT", dir.path().join("ws"))
            // Nothing listens here: it must refuse before it connects.
            .env("NATS_URL", "nats://127.0.0.1:1")
            .args([
                "--runtime",
                "claude-code",
                "--sandbox",
                "none",
                "--claude-bin",
            ])
            .arg(&bin)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .expect("the worker refuses at once")
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.trim().lines().last().unwrap_or_default();
        assert!(
            last.starts_with("arbiter-worker: ")
                && last.contains(says)
                && last.contains("pip install claude-agent-sdk==0.2.188"),
            "{}: {stderr}",
            bin.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summons_for_claude_code_is_left_to_a_worker_that_runs_it() {
    claude_cli_bin();
    let mut sys = System::start_with(Options {
        coordinator: false,
        slots: 1,
        ..Default::default()
    })
    .await;
    let mut coordinator = sys.coordinator_config();
    coordinator.orchestrator_runtime = Some("claude-code".into());
    sys.spawn_coordinator_with(coordinator);
    sys.worker_up("worker-0").await;
    let s = "s-pick";
    let brief = "Only on Claude Code.";
    let lane = orch_lane(brief);
    sys.mock.push(&lane, output(true, "On Claude Code."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for("the summons", |b| matches!(b, LogBody::Summoned(_)))
        .await;
    // The native worker does not take it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sys.mock.requests_for(&lane).len(), 0);
    assert_eq!(slots_used(&sys, "worker-0").await, 0);
    // A claude-code worker of the pool does.
    let mut config = sys.worker_config("worker-1", 1, 200_000);
    config.runtime = Runtime::ClaudeCode;
    sys.spawn_worker_with(config);
    log.wait_for(
        "the Orchestrator's answer",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "On Claude Code."),
    )
    .await;
    let requests = sys.mock.requests_for(&lane);
    assert!(
        requests[0]
            .header("user-agent")
            .is_some_and(|a| a.starts_with("claude-cli/"))
    );
}
