//! Where a CLI Orchestrator runs and how it moves: left to a worker that
//! runs its runtime, taken over after kill -9 with its session, parked and
//! resumed, and a long turn stored as it goes.

use crate::common::*;
use arbiter_protocol::LogBody;
use arbiter_tests::{Gate, MockReply, eventually};
use arbiter_worker::Runtime;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

use super::support::*;

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
