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

/// What the user sees of an Orchestrator that talks instead of acting (a
/// small model's habit, #45): its note claiming a file that does not exist
/// is answered with that fact, and the Arbiter's digest flags it; the second
/// note in a row without a tool call is told that notes do no work; once it
/// has made the file, a note is answered with what the worker sees and a
/// request to report if that is the brief; four notes in a row with no tool
/// call reach the Arbiter as a report that it is stuck, and it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_that_only_writes_notes_is_told_then_reported_stuck() {
    let sys = System::start().await;
    let s = "s-notes";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Make hello.py");
    let brief = "Create hello.py that prints hello.";
    let lane = orch_lane(brief);
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    for reply in [
        orch(false, "The file hello.py is now created."),
        orch(false, "Working on hello.py."),
        MockReply::tool_use(
            "write",
            json!({"path": "hello.py", "content": "print('hello')\n"}),
        ),
        orch(false, "hello.py is written."),
        orch(false, "Still checking."),
        orch(false, "Checking more."),
        orch(false, "Almost there."),
        orch(false, "All good."),
    ] {
        sys.mock.push(&lane, reply);
    }
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "hello.py is made."));
    sys.send(s, "Make hello.py").await;

    let at = log
        .wait_for(
            "the stuck report",
            |b| matches!(b, LogBody::Orchestrator(e) if e.expects_response),
        )
        .await;
    let LogBody::Orchestrator(stuck) = &log.bodies()[at] else {
        unreachable!()
    };
    assert_eq!(
        stuck.text,
        "[system] Stopped: I sent 4 notes in a row without calling a tool between them, so \
         my work has not moved. Tell me exactly which tool to call next, or release me. My \
         last note: All good."
    );
    let asked = sys.mock.wait_for_requests(&lane, 8, WAIT).await;
    assert_eq!(asked.len(), 8, "it waits after the report");
    let after = |i: usize| asked[i].last_user_text();
    // After the claim with nothing behind it.
    assert!(
        after(1).contains("it says work is done while the worker saw no tool call"),
        "{}",
        after(1)
    );
    // After the second note in a row without a tool call.
    assert!(
        after(2).contains("That is 2 notes in a row with no tool call"),
        "{}",
        after(2)
    );
    // After the note that follows the write: what the worker sees, and the ask.
    assert!(
        after(4).contains("The worker sees this work so far: 1 tool call (write 1), 1 file changed (created: hello.py)")
            && after(4).contains("check it and report to the Arbiter now"),
        "{}",
        after(4)
    );
    // The Arbiter's digest flags the first note, and it reads the stuck report.
    let arbiter_asked = sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    let read = arbiter_asked[1].last_user_text();
    assert!(
        read.contains(
            "- Orchestrator I: [Check: Orchestrator I reports done: 0 tool calls, 0 files \
             changed. Nothing of it shows in the workspace.] The file hello.py is now created."
        ) && read.contains("- Orchestrator I: hello.py is written.")
            && read.contains("Orchestrator I: [system] Stopped: I sent 4 notes in a row"),
        "{read}"
    );
    log.wait_for(
        "the release",
        |b| matches!(b, LogBody::Arbiter(e) if e.text == "hello.py is made."),
    )
    .await;
}

/// What the user sees of an Orchestrator whose every call fails, each a
/// different one (reads of paths that do not exist): told at the 6th
/// failure in a row, stopped at the 12th, and the Arbiter gets the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_whose_calls_keep_failing_is_told_then_stopped() {
    let sys = System::start().await;
    let s = "s-failing";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Read the notes");
    let brief = "Read the notes file.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    let n = std::sync::atomic::AtomicUsize::new(0);
    sys.mock.set_responder(move |request| {
        (request.model() == ORCH_MODEL).then(|| {
            let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            MockReply::tool_use("read", json!({"path": format!("notes-{i}.txt")}))
        })
    });
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "No notes file."));
    sys.send(s, "Read the notes").await;
    let at = log
        .wait_for(
            "the report of the stop",
            |b| matches!(b, LogBody::Orchestrator(e) if e.expects_response),
        )
        .await;
    let LogBody::Orchestrator(entry) = &log.bodies()[at] else {
        unreachable!()
    };
    assert!(
        entry.text.starts_with(
            "Stopped: my last 12 tool calls all failed (the last was read {\"path\":\"notes-11.txt\"})"
        ),
        "{}",
        entry.text
    );
    let asked = sys.mock.requests_for(&orch_lane(brief));
    assert_eq!(asked.len(), 12, "no model call after the stop");
    assert!(
        asked[6]
            .last_user_text()
            .contains("Your last 6 tool calls all failed"),
        "{}",
        asked[6].last_user_text()
    );
    log.wait_for(
        "the release",
        |b| matches!(b, LogBody::Arbiter(e) if e.text == "No notes file."),
    )
    .await;
}
