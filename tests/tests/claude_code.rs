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
use std::sync::{Arc, Mutex};
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

    // The turn's usage and cost, from the CLI's `result` line, are in the
    // Orchestrator's records: the three requests' figures added up.
    let orch_id = log
        .bodies()
        .iter()
        .find_map(|b| match b {
            LogBody::Summoned(s) => Some(s.orch_id.clone()),
            _ => None,
        })
        .unwrap();
    let record = last_state_record(&sys, &orch_id).await;
    let cost = &record["snapshot"]["cost"];
    assert_eq!(cost["turns"], 1, "{cost}");
    assert_eq!(cost["input_tokens"], 140_000 + 175_000 + 100, "{cost}");
    assert_eq!(cost["cache_read_input_tokens"], 10_000, "{cost}");
    assert_eq!(cost["output_tokens"], 60, "{cost}");
    assert!(cost["cost_usd"].as_f64().unwrap() > 0.0, "{cost}");
    assert_eq!(
        cost["last_turn"]["usage"]["input_tokens"], 315_100,
        "{cost}"
    );
    assert!(
        cost["last_turn"]["model_usage"]["mock-orch"]["costUSD"].is_number(),
        "{cost}"
    );
}

/// The last state record an Orchestrator's worker stored, as JSON.
async fn last_state_record(sys: &System, orch_id: &str) -> Value {
    let stream = sys
        .bus
        .js
        .get_stream(arbiter_protocol::subjects::ORCH_STATE_STREAM)
        .await
        .unwrap();
    let msg = stream
        .get_last_raw_message_by_subject(&arbiter_protocol::subjects::orch_state(orch_id))
        .await
        .unwrap();
    serde_json::from_slice(&msg.payload).unwrap()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_orchestrator_moves_to_another_worker_with_its_session() {
    let cli = claude_cli_bin();
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    let roots = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let worker = |id: &str, root: &Path| {
        sys.worker_process_with(
            id,
            1,
            &[
                ("ARBITER_RUNTIME", "claude-code".as_ref()),
                ("CLAUDE_CLI_BIN", cli.as_os_str()),
                ("ARBITER_WORKSPACE_ROOT", root.as_os_str()),
            ],
        )
    };
    let mut a = worker("worker-a", roots[0].path());
    sys.worker_up("worker-a").await;
    let s = "s-move";
    let brief = "Move with me.";
    let lane = orch_lane(brief);
    let arb = arbiter_lane(&format!("start {s}"));
    let ws_a = roots[0].path().join(s);
    let ws_b = roots[1].path().join(s);
    // Turn 1 on worker A: a file, then a question.
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Write",
            json!({"file_path": ws_a.join("one.txt"), "content": "1\n"}),
        ),
    );
    sys.mock
        .push(&lane, output(true, "One is written. Go on to two?"));
    // Turn 2 starts on A and is held at the model until A is gone.
    let hold = Gate::new();
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Write",
            json!({"file_path": ws_a.join("two.txt"), "content": "2\n"}),
        )
        .gated(hold.clone()),
    );
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    sys.mock
        .push(&arb, arbiter("address_orchestrator", "Yes, go on."));
    sys.mock.wait_for_requests(&lane, 3, WAIT).await;

    // Worker A's host dies: the worker and its CLI, kill -9.
    let cli_a = cli_pids(roots[0].path());
    assert_eq!(cli_a.len(), 1, "one CLI process for the Orchestrator");
    let _ = std::process::Command::new("kill")
        .args(["-9", &a.id().unwrap().to_string()])
        .status();
    for pid in cli_a {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    a.wait().await.unwrap();
    hold.open();

    // The workspace is restored under another root; B resumes there.
    copy_dir(&ws_a, &ws_b);
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Write",
            json!({"file_path": ws_b.join("two.txt"), "content": "2\n"}),
        ),
    );
    sys.mock.push(&lane, output(true, "Two is written."));
    let _b = worker("worker-b", roots[1].path());
    log.wait_for(
        "the report from the resumed session",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Two is written."),
    )
    .await;

    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 5, "{:?}", sys.mock.lane_counts());
    let resumed = &requests[3];
    // The same CLI session, from B's workspace, with the earlier turns.
    let orch_id = match &log.bodies()[1] {
        LogBody::Summoned(summoned) => summoned.orch_id.clone(),
        other => panic!("expected the summons, got {other:?}"),
    };
    assert_eq!(
        resumed.header("x-claude-code-session-id"),
        Some(orch_id.as_str())
    );
    let text = resumed.all_text();
    assert!(text.contains("One is written. Go on to two?"), "{text}");
    assert!(text.contains("Yes, go on."), "{text}");
    assert!(
        text.contains(&ws_b.to_string_lossy().into_owned()),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(ws_b.join("two.txt")).unwrap(),
        "2\n"
    );
    // One Orchestrator throughout: I, never II.
    let numbers: Vec<u32> = log
        .bodies()
        .iter()
        .filter_map(|b| match b {
            LogBody::Orchestrator(o) => Some(o.number),
            LogBody::Summoned(s) => Some(s.number),
            _ => None,
        })
        .collect();
    assert_eq!(numbers, vec![1, 1, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_cli_orchestrator_gives_its_process_back_and_resumes() {
    claude_cli_bin();
    let mut sys = System::start_with(Options {
        runtime: Runtime::ClaudeCode,
        workers: 0,
        ..Default::default()
    })
    .await;
    let mut config = sys.worker_config("worker-0", 1, 200_000);
    config.park_after = Some(Duration::from_millis(500));
    sys.spawn_worker_with(config);
    sys.worker_up("worker-0").await;
    // The Arbiter's turn on the question waits for its scripted answer
    // until the Orchestrator has parked.
    sys.mock.set_reply_wait(Duration::from_secs(30));
    let s = "s-park";
    let brief = "Ask, then wait.";
    let lane = orch_lane(brief);
    let arb = arbiter_lane(&format!("start {s}"));
    sys.mock.push(&lane, output(true, "Which colour?"));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the question",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Which colour?"),
    )
    .await;
    // Parked: no CLI process is left running for it.
    eventually(WAIT, "the parked Orchestrator's CLI to end", || async {
        cli_pids(sys.workspaces.path()).is_empty().then_some(())
    })
    .await;
    // The Arbiter's answer (its turn has waited for it) brings the same session back.
    sys.mock.push(&lane, output(true, "Blue it is."));
    sys.mock
        .push(&arb, arbiter("address_orchestrator", "Blue."));
    log.wait_for(
        "the answer after the park",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Blue it is."),
    )
    .await;
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 2);
    let text = requests[1].all_text();
    assert!(
        text.contains("Which colour?") && text.contains("Blue."),
        "{text}"
    );
}

/// Copies a directory tree (the workspace, restored on another host).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_nothing_outside_the_workspace_and_not_its_key() {
    let sys = claude_system(1).await;
    let s = "s-read";
    let brief = "Look around.";
    let lane = orch_lane(brief);
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "TOPSECRET\n").unwrap();
    let calls = [
        ("Read", json!({"file_path": secret})),
        (
            "Grep",
            json!({"pattern": "TOPSECRET", "path": outside.path()}),
        ),
        (
            "Bash",
            json!({"command": format!("cat {}", secret.display())}),
        ),
        ("Bash", json!({"command": "echo $ANTHROPIC_API_KEY"})),
        ("Bash", json!({"command": "cat /proc/self/environ"})),
    ];
    for (tool, input) in &calls {
        sys.mock
            .push(&lane, MockReply::tool_use(*tool, input.clone()));
    }
    sys.mock.push(&lane, output(true, "Looked."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Looked."),
    )
    .await;
    // What each call returned to the model: a refusal, never the file or the key.
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), calls.len() + 1);
    for request in &requests[1..] {
        let returned = request.last_user_text();
        assert!(
            !returned.contains("TOPSECRET") && !returned.contains(API_KEY),
            "{returned}"
        );
    }
    let LogBody::Orchestrator(report) = log
        .bodies()
        .into_iter()
        .find(|b| matches!(b, LogBody::Orchestrator(_)))
        .unwrap()
    else {
        unreachable!()
    };
    let failed: u64 = report
        .evidence
        .unwrap()
        .tools
        .iter()
        .map(|t| t.failed)
        .sum();
    assert_eq!(failed, calls.len() as u64);
}

/// Past 85 % a CLI Orchestrator's report must carry its handoff packet, as
/// on the native loop: a report without one goes back to the CLI with the
/// reason, and the repaired report reaches the log with its packet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_85_percent_a_cli_report_without_a_packet_is_sent_back_for_one() {
    let sys = claude_system(1).await;
    let s = "s-cli-packet";
    let brief = "Fill up and report.";
    let lane = orch_lane(brief);
    let ws = sys.workspace(s);
    // 180k of the 200k budget: 90 %.
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Write",
            json!({"file_path": ws.join("a.txt"), "content": "a\n"}),
        )
        .usage(180_000, 20, 0, 0),
    );
    // The context a reply reports is its request's: the report's is 91 %.
    sys.mock.push(
        &lane,
        output(true, "Done, no packet.").usage(182_000, 20, 0, 0),
    );
    let packet = json!({
        "done": [{"id": "T1", "what": "wrote a.txt", "files": ["a.txt"]}],
        "open": [{"id": "T2", "what": "write b.txt"}],
        "decisions": [],
        "questions": [],
        "next_step": "Write b.txt.",
    });
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "StructuredOutput",
            json!({"expects_response": true, "message": "Done, with a packet.", "handoff": packet}),
        )
        .usage(183_000, 20, 0, 0),
    );
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    let at = log
        .wait_for(
            "the repaired report",
            |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Done, with a packet."),
        )
        .await;
    // The report without a packet never reached the log.
    assert!(
        !log.bodies()
            .iter()
            .any(|b| matches!(b, LogBody::Orchestrator(o) if o.text == "Done, no packet."))
    );
    let LogBody::Orchestrator(report) = &log.bodies()[at] else {
        unreachable!()
    };
    let carried = report
        .handoff
        .as_ref()
        .expect("the packet rides on the report");
    assert_eq!(carried.open[0].id, "T2");
    // The CLI's model was told why, in the next user line it got.
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 3);
    assert!(
        requests[2]
            .all_text()
            .contains("91% of your context is used, so this reply must carry your `handoff`"),
        "{}",
        requests[2].all_text()
    );
}

/// `--claude-allow` lets the CLI run the commands it names, and only those:
/// in `acceptEdits` an interpreter is refused, and with
/// `Bash(python3 -c:*)` allowed a python3 command runs while perl is still
/// refused. A bare `Bash` is refused at start: it would approve anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_commands_run_and_others_stay_refused() {
    let mut sys = System::start_with(Options {
        runtime: Runtime::ClaudeCode,
        workers: 0,
        ..Default::default()
    })
    .await;
    let mut config = sys.worker_config("worker-allow", 1, 200_000);
    config.claude_code.allow = vec!["Bash(python3 -c:*)".to_owned()];
    sys.spawn_worker_with(config);
    sys.worker_up("worker-allow").await;
    let s = "s-allow";
    let brief = "Run the scripts.";
    let lane = orch_lane(brief);
    let by_python = sys.workspace(s).join("by-python.txt");
    let by_perl = sys.workspace(s).join("by-perl.txt");
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Bash",
            json!({"command": "python3 -c \"open('by-python.txt', 'w').write('ran')\""}),
        ),
    );
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Bash",
            json!({"command": "perl -e 'open(my $f, \">\", \"by-perl.txt\"); print $f \"ran\"'"}),
        ),
    );
    sys.mock.push(&lane, output(true, "Ran them."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Ran them."),
    )
    .await;
    assert_eq!(std::fs::read_to_string(&by_python).unwrap(), "ran");
    assert!(!by_perl.exists(), "perl ran without a rule allowing it");
    // What the model got back for perl: a refusal.
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 3);
    let result = requests[2]
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .rfind(|b| b["type"] == "tool_result")
        .cloned()
        .unwrap();
    assert_eq!(result["is_error"], true, "{result}");

    // A rule that names nothing is refused at start, in one line.
    let mut config = sys.worker_config("worker-bare", 1, 200_000);
    config.claude_code.allow = vec!["Bash".to_owned()];
    let said = arbiter_worker::run(config, std::future::pending())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        said.contains("would let the CLI run Bash on anything"),
        "{said}"
    );
}

/// Without a rule the same python3 command is refused: the rule above is
/// what let it run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_rule_an_interpreter_is_refused() {
    let sys = claude_system(1).await;
    let s = "s-no-allow";
    let brief = "Run python.";
    let lane = orch_lane(brief);
    let by_python = sys.workspace(s).join("by-python.txt");
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Bash",
            json!({"command": "python3 -c \"open('by-python.txt', 'w').write('ran')\""}),
        ),
    );
    sys.mock.push(&lane, output(true, "Tried."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Tried."),
    )
    .await;
    assert!(!by_python.exists(), "python3 ran with no rule allowing it");
}

/// A long CLI turn is stored every few tool results, not only at its end:
/// kill -9 of the worker (and its CLI) after six tool calls of one turn, and
/// the worker that takes over resumes the CLI session with those calls in
/// it, so the model does not start the turn from nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_cli_turn_is_stored_as_it_goes_and_resumes_mid_turn() {
    let cli = claude_cli_bin();
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    let roots = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let worker = |id: &str, root: &Path| {
        sys.worker_process_with(
            id,
            1,
            &[
                ("ARBITER_RUNTIME", "claude-code".as_ref()),
                ("CLAUDE_CLI_BIN", cli.as_os_str()),
                ("ARBITER_WORKSPACE_ROOT", root.as_os_str()),
            ],
        )
    };
    let mut a = worker("worker-a", roots[0].path());
    sys.worker_up("worker-a").await;
    let s = "s-long-turn";
    let brief = "Write six files in one go.";
    let lane = orch_lane(brief);
    let ws_a = roots[0].path().join(s);
    let ws_b = roots[1].path().join(s);
    for n in 1..=6 {
        sys.mock.push(
            &lane,
            MockReply::tool_use(
                "Write",
                json!({"file_path": ws_a.join(format!("f{n}.txt")), "content": format!("{n}\n")}),
            ),
        );
    }
    // The seventh request of the turn is held until worker A is gone.
    let hold = Gate::new();
    sys.mock
        .push(&lane, output(true, "never sent").gated(hold.clone()));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    sys.mock.wait_for_requests(&lane, 7, WAIT).await;
    // The checkpoint after the fifth result is stored before A dies.
    let orch_id = log
        .bodies()
        .iter()
        .find_map(|b| match b {
            LogBody::Summoned(s) => Some(s.orch_id.clone()),
            _ => None,
        })
        .unwrap();
    eventually(
        WAIT,
        "a mid-turn record with the CLI's transcript",
        || async {
            let record = last_state_record(&sys, &orch_id).await;
            (!record["cli_transcript"].is_null()).then_some(())
        },
    )
    .await;
    let cli_a = cli_pids(roots[0].path());
    let _ = std::process::Command::new("kill")
        .args(["-9", &a.id().unwrap().to_string()])
        .status();
    for pid in cli_a {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    a.wait().await.unwrap();
    hold.open();

    copy_dir(&ws_a, &ws_b);
    sys.mock.push(&lane, output(true, "Six files are written."));
    let _b = worker("worker-b", roots[1].path());
    log.wait_for(
        "the report from the resumed turn",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Six files are written."),
    )
    .await;
    let requests = sys.mock.requests_for(&lane);
    let resumed = requests.last().unwrap();
    let text = resumed.all_text();
    // The calls made before the kill are in the resumed session.
    for n in 1..=5 {
        let written = ws_a.join(format!("f{n}.txt"));
        assert!(
            text.contains(&written.to_string_lossy().into_owned()),
            "f{n}.txt is missing from the resumed request: {text}"
        );
    }
}

/// The CLI's own subagents: the Orchestrator's model calls the `Task` tool
/// (sent as `Agent` on the wire), the CLI runs the subagent with its own
/// requests to the model, and the subagent's answer comes back to the
/// Orchestrator's model as the tool's result. The console's status names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_orchestrator_runs_a_subagent_through_the_task_tool() {
    let sys = claude_system(1).await;
    let s = "s-cli-task";
    let brief = "Ask a helper.";
    let lane = orch_lane(brief);
    let asked = "Count the files under src and answer with the number.";
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "Agent",
            json!({"description": "count files", "prompt": asked, "subagent_type": "general-purpose"}),
        ),
    );
    // The subagent's own request: its first user message is the prompt it was given.
    sys.mock.push(
        &orch_lane(asked),
        MockReply::text("There are 7 files under src."),
    );
    sys.mock.push(&lane, output(true, "The helper counted 7."));
    let statuses = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = statuses.clone();
    let mut sub = sys
        .bus
        .client
        .subscribe(arbiter_protocol::subjects::ALL_ORCH_STATUS.to_owned())
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Some(msg) = futures::StreamExt::next(&mut sub).await {
            if let Ok(status) =
                serde_json::from_slice::<arbiter_protocol::OrchestratorStatus>(&msg.payload)
                && let Some(tool) = status.current_tool
            {
                seen.lock()
                    .unwrap()
                    .push(format!("{tool} ({})", status.tool_count));
            }
        }
    });
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "The helper counted 7."),
    )
    .await;
    let sub_requests = sys.mock.requests_for(&orch_lane(asked));
    assert_eq!(sub_requests.len(), 1, "{:?}", sys.mock.lane_counts());
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 2);
    let back = requests[1].all_text();
    assert!(back.contains("There are 7 files under src."), "{back}");
    assert!(
        statuses
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.starts_with("Agent")),
        "{:?}",
        statuses.lock().unwrap()
    );
}

/// A subscription user: no API key, the user's own Claude login
/// (`CLAUDE_CODE_OAUTH_TOKEN`) passed through to the CLI, which sends it as
/// a bearer token; the worker neither needs a key nor logs the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_login_is_passed_to_the_cli_and_never_logged() {
    let cli = claude_cli_bin();
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    const TOKEN: &str = "sk-ant-oat01-test-subscription-login";
    let logs = tempfile::tempdir().unwrap();
    let stderr = std::fs::File::create(logs.path().join("worker.log")).unwrap();
    let mut command = sys.worker_command(
        None,
        "worker-oauth",
        1,
        &[
            ("ARBITER_RUNTIME", "claude-code".as_ref()),
            ("CLAUDE_CLI_BIN", cli.as_os_str()),
            ("CLAUDE_CODE_OAUTH_TOKEN", TOKEN.as_ref()),
            ("RUST_LOG", "debug,async_nats=warn".as_ref()),
        ],
    );
    command.env_remove("ANTHROPIC_API_KEY").stderr(stderr);
    let _worker = command.spawn().unwrap();
    sys.worker_up("worker-oauth").await;
    let s = "s-oauth";
    let brief = "Work on my subscription.";
    let lane = orch_lane(brief);
    sys.mock
        .push(&lane, output(true, "Done on the subscription."));
    let log = sys.watch_log(s).await;
    summon(&sys, s, brief).await;
    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Done on the subscription."),
    )
    .await;
    let request = &sys.mock.requests_for(&lane)[0];
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(request.header("x-api-key"), None);
    let written = std::fs::read_to_string(logs.path().join("worker.log")).unwrap();
    assert!(!written.is_empty());
    assert!(!written.contains(TOKEN), "the token is in the worker's log");
}
