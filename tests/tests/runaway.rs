//! Work that runs away is caught: an Arbiter–Orchestrator echo that makes no
//! progress is stopped after N rounds with one line to the human, the
//! Arbiter's turns per human message are capped, and the human's `/stop`
//! (in a console, or `arbiter-console stop`) ends the model calls at once.
//! In every case nothing queued is lost: it reaches the Arbiter with the
//! human's next message.

use crate::common;

use std::time::Duration;

use arbiter_protocol::LogBody;
use arbiter_tests::MockReply;
use common::*;
use serde_json::json;

fn system_lines(log: &LogWatch) -> Vec<String> {
    log.bodies()
        .into_iter()
        .filter_map(|b| match b {
            LogBody::System(s) => Some(s.text),
            _ => None,
        })
        .collect()
}

/// What the human sees: after the Arbiter and Orchestrator I have said the
/// same things to each other for three rounds, one line says the exchange
/// was stopped and how to go on; no more model calls are made. The human's
/// next message reaches the Arbiter together with I's last report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echo_loop_is_stopped_and_the_session_goes_on() {
    let sys = System::start().await;
    let s = "s-echo";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Make hello.py");
    let brief = "Create hello.py that prints hello.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    for _ in 0..4 {
        sys.mock.push(
            &arb,
            arbiter("address_orchestrator", "Yes, create hello.py."),
        );
    }
    for _ in 0..5 {
        sys.mock
            .push(&orch_lane(brief), orch(true, "Should I create hello.py?"));
    }
    sys.send(s, "Make hello.py").await;

    log.wait_for("the hold", |b| {
        matches!(b, LogBody::System(e) if e.text.starts_with("Held: the Arbiter and Orchestrator I have repeated themselves for 3 rounds"))
    })
    .await;
    // Nothing more is asked of either model.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(sys.mock.requests_for(&arb).len(), 5);
    assert_eq!(sys.mock.requests_for(&orch_lane(brief)).len(), 5);
    let status = sys.status(s).await.unwrap();
    assert_eq!(status.state, arbiter_protocol::SessionState::Idle);
    assert_eq!(status.queued, 0);

    // The human goes on: the held report and the new words arrive together.
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "Done asking."));
    sys.send(s, "Stop asking and write the file.").await;
    let requests = sys.mock.wait_for_requests(&arb, 6, WAIT).await;
    let last = requests[5].last_user_text();
    assert!(
        last.contains("Orchestrator I: Should I create hello.py?")
            && last.contains("Stop asking and write the file."),
        "{last}"
    );
    log.wait_for("the release", |b| matches!(b, LogBody::Released(_)))
        .await;
}

/// What the human sees: past the cap of Arbiter turns for one message, one
/// line says so and names the setting; the next message goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_arbiters_turns_per_human_message_are_capped() {
    let mut sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let mut config = sys.coordinator_config();
    config.loop_rounds = 0;
    config.max_turns_per_message = 3;
    sys.spawn_coordinator_with(config);
    let s = "s-cap";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Keep going");
    let brief = "Count to a million, one report at a time.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    for i in 1..=5 {
        sys.mock.push(
            &arb,
            arbiter("address_orchestrator", &format!("Go on ({i}).")),
        );
        sys.mock
            .push(&orch_lane(brief), orch(true, &format!("Counted to {i}.")));
    }
    sys.send(s, "Keep going").await;
    log.wait_for("the cap", |b| {
        matches!(b, LogBody::System(e) if e.text.contains("took 3 turns since your last message")
            && e.text.contains("ARBITER_MAX_TURNS_PER_MESSAGE"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sys.mock.requests_for(&arb).len(), 3);
    sys.send(s, "Go on.").await;
    sys.mock.wait_for_requests(&arb, 4, WAIT).await;
}

/// What the human sees: `/stop` while Orchestrator I runs a long command
/// ends its work within seconds (no further model call), and the log says
/// which console stopped what. The next message goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_a_running_orchestrators_model_calls() {
    let sys = System::start().await;
    let s = "s-stop";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Build it");
    let brief = "Build it slowly.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.push(
        &orch_lane(brief),
        MockReply::tool_use("bash", json!({"command": "sleep 20"})),
    );
    sys.mock.push(&orch_lane(brief), orch(true, "Built."));
    sys.send_as("alice", s, "Build it").await;
    sys.mock.wait_for_requests(&orch_lane(brief), 1, WAIT).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    sys.stop_as("alice", s).await;
    log.wait_for("the stop", |b| {
        matches!(b, LogBody::System(e) if e.text == "Stopped by console alice: Orchestrator I was cancelled. Write to go on.")
    })
    .await;
    // No further model call reaches the mock.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sys.mock.requests_for(&orch_lane(brief)).len(), 1);
    assert_eq!(sys.mock.requests_for(&arb).len(), 1);
    let status = sys.status(s).await.unwrap();
    assert!(status.active.is_none());

    // The Arbiter hears of it with the human's next message.
    sys.mock
        .push(&arb, arbiter("address_human", "Stopped, as you asked."));
    sys.send_as("alice", s, "Why did it stop?").await;
    let requests = sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    let last = requests[1].last_user_text();
    assert!(
        last.contains("The human stopped the work (Orchestrator I was cancelled)")
            && last.contains("Why did it stop?"),
        "{last}"
    );
    assert!(system_lines(&log).len() == 1, "{:?}", system_lines(&log));
}

/// What the user sees from `arbiter-console stop --session ID`: the log's
/// account of what was stopped, on one line, and exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stop_command_stops_a_thinking_arbiter() {
    let sys = System::start_with(Options {
        secure: true,
        ..Default::default()
    })
    .await;
    let s = "s-stop-cli";
    let arb = arbiter_lane("Think hard");
    let hold = arbiter_tests::Gate::new();
    sys.mock.push(
        &arb,
        arbiter("address_human", "Thought.").gated(hold.clone()),
    );
    sys.send(s, "Think hard").await;
    sys.mock.wait_for_requests(&arb, 1, WAIT).await;
    let out = tokio::process::Command::new(arbiter_tests::bin("arbiter-console"))
        .args(["stop", "--session", s])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(sys.nats_env("console"))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Stopped by console console: the Arbiter's turn was abandoned. Write to go on.\n"
    );
    hold.open();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The abandoned reply was never routed.
    let log = sys.watch_log(s).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !log.bodies()
            .iter()
            .any(|b| matches!(b, LogBody::Arbiter(_))),
        "{:?}",
        log.bodies()
    );
}
