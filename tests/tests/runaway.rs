//! Work that runs away is caught: the human's `/stop` (in a console, or
//! `arbiter-console stop`) ends the model calls at once, and nothing queued
//! is lost: it reaches the Arbiter with the human's next message. An
//! Orchestrator that makes the same tool call over and over is told, then
//! stopped, and the Arbiter gets its report. The echo
//! stop and the cap on the Arbiter's turns per human message are decisions
//! of the coordinator, in its table tests.

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

// Decisions tested as table cases in coordinator/src/rules/tests/guard.rs.

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

/// What the user sees: an Orchestrator whose model asks for the same
/// `bash ls` forever is told at the 5th call in a row, and at the 10th the
/// call is not run and the Arbiter gets a report naming the call and the
/// count, as an ordinary Orchestrator message it can answer; the model was
/// asked 10 times, not more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_repeating_one_tool_call_is_told_then_stopped_and_the_arbiter_hears() {
    let sys = System::start().await;
    let s = "s-repeat";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("List the files");
    let brief = "List the files, forever.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.set_responder(|request| {
        (request.model() == ORCH_MODEL)
            .then(|| MockReply::tool_use("bash", json!({"command": "ls"})))
    });
    sys.mock.push(
        &arb,
        arbiter("release_orchestrators", "It went round in circles."),
    );
    // A session cap of 5,000 tokens (each mock request spends about 120):
    // the stop comes long before it.
    let message_id = uuid::Uuid::now_v7().to_string();
    let cap = arbiter_protocol::HumanMessage {
        v: arbiter_protocol::VERSION,
        session_id: s.to_owned(),
        message_id: message_id.clone(),
        text: "/budget session 5000 tokens".to_owned(),
        sent_at: chrono::Utc::now(),
        command: None,
        budget: Some(arbiter_protocol::BudgetChange {
            scope: arbiter_protocol::BudgetScope::Session,
            limit: arbiter_protocol::BudgetLimit::Tokens(5_000),
        }),
        workspace: None,
        approval: None,
        policy: None,
        rewind: None,
    };
    sys.bus
        .publish_js(
            arbiter_protocol::subjects::session_human_from(s, "alice"),
            &message_id,
            &arbiter_bus::TraceContext::none(),
            &cap,
        )
        .await
        .unwrap();
    log.wait_for(
        "the cap",
        |b| matches!(b, LogBody::System(e) if e.text.starts_with("Budget set by console alice")),
    )
    .await;
    sys.send_as("alice", s, "List the files").await;

    let report = log
        .wait_for("the report of the stop", |b| {
            matches!(b, LogBody::Orchestrator(e) if e.text.starts_with("Stopped: I made the same tool call"))
        })
        .await;
    let LogBody::Orchestrator(entry) = &log.bodies()[report] else {
        unreachable!()
    };
    assert!(entry.expects_response, "the Arbiter is to answer it");
    assert!(
        entry.text.contains("10 times in a row") && entry.text.contains(r#"bash {"command":"ls"}"#),
        "{}",
        entry.text
    );
    // The Arbiter reads it in its next turn.
    let asked = sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    assert!(
        asked[1]
            .last_user_text()
            .contains("Stopped: I made the same tool call 10 times in a row"),
        "{}",
        asked[1].last_user_text()
    );
    let calls = sys.mock.requests_for(&orch_lane(brief));
    assert_eq!(calls.len(), 10, "the model asked 10 times, no more");
    // The 6th request carries the warning after the 5th call's result.
    assert!(
        calls[5]
            .all_text()
            .contains("You have made this exact call 5 times in a row"),
        "{}",
        calls[5].last_user_text()
    );
    assert!(
        !calls[4]
            .all_text()
            .contains("You have made this exact call")
    );
    // The spend stayed under the session's cap, short of its 80 % note.
    let status = sys.status(s).await.expect("a status");
    let spent = status.spend.total.input_tokens + status.spend.total.output_tokens;
    assert!(spent > 0 && spent < 4_000, "spent {spent} tokens");
    assert!(!status.budget.held);
    assert!(
        !sys.mock
            .requests_for(&arb)
            .iter()
            .any(|r| r.all_text().contains("% of its budget")),
        "the Arbiter was told of 80 % of the cap"
    );
}

// Notes without a tool call (the claim with nothing behind it, the warning, what the
// worker sees, the stuck report): a table case of the worker's core,
// `agent::core::tests::notes_with_no_tool_call_between_them_are_warned_then_stop_the_work`;
// the digest's flag is `evidence::a_claim_of_work_with_no_tool_call_is_flagged_…`.

// A run of failing calls (told at the 6th, stopped at the 12th): a table case of the
// worker's core, `agent::core::tests::twelve_failures_in_a_row_stop_the_work_…`.
