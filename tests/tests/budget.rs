//! Budgets: caps on what a session and each Orchestrator may spend, from
//! the config file or a console's `/budget`. At the session cap the
//! Arbiter holds (no model request starts; the human is told why and how to
//! raise it) and raising the cap goes on; at an Orchestrator's cap its
//! worker stops it before its next request and the Arbiter is told. The
//! mock model servers count the requests, so a request past a cap would
//! show. The 80 % note, a summons decided at the cap and a team over the
//! budget are decisions of the coordinator, in its table tests.

use crate::common;

use std::time::Duration;

use arbiter_bus::TraceContext;
use arbiter_protocol::{
    BudgetChange, BudgetLimit, BudgetScope, Cap, HumanMessage, LogBody, SessionStatus, VERSION,
    WireError, subjects,
};
use arbiter_tests::{MockReply, eventually};
use common::*;
use serde_json::json;

const BRIEF: &str = "Brief: write hello.txt saying hello.";
const HUMAN: &str = "Build me a greeting";

/// What the human sees: the text of every `system` entry so far.
fn system_texts(log: &LogWatch) -> Vec<String> {
    log.bodies()
        .into_iter()
        .filter_map(|b| match b {
            LogBody::System(e) => Some(e.text),
            _ => None,
        })
        .collect()
}

/// Sends `/budget …` as a console does: the typed text with `budget` set.
async fn send_budget(sys: &System, session: &str, text: &str, change: BudgetChange) {
    let message_id = uuid::Uuid::now_v7().to_string();
    let message = HumanMessage {
        v: VERSION,
        session_id: session.to_owned(),
        message_id: message_id.clone(),
        text: text.to_owned(),
        sent_at: chrono::Utc::now(),
        command: None,
        budget: Some(change),
        workspace: None,
        approval: None,
        policy: None,
        rewind: None,
    };
    sys.bus
        .publish_js(
            subjects::session_human_from(session, "alice"),
            &message_id,
            &TraceContext::none(),
            &message,
        )
        .await
        .unwrap();
}

/// The last user message of a recorded request, as text.
fn last_user_text(body: &serde_json::Value) -> String {
    let message = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .unwrap();
    match &message["content"] {
        serde_json::Value::String(s) => s.clone(),
        blocks => blocks
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

async fn status_where(
    sys: &System,
    s: &str,
    what: &str,
    pred: impl Fn(&SessionStatus) -> bool,
) -> SessionStatus {
    eventually(WAIT, what, || async {
        sys.status(s).await.filter(|st| pred(st))
    })
    .await
}

fn config_file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("arbiter.toml");
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

/// The session cap from the config file: the Orchestrator's report takes
/// the session past it, so the Arbiter's turn for the report holds and the
/// human reads why and how to raise it. No Arbiter request starts, not even
/// for the human's next message, and the hold outlives a coordinator
/// restart. `/budget session …` raises it: the held turn runs, with the
/// report and the human's message, and the work (hello.txt) is all there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cap_holds_the_arbiter_survives_a_restart_and_raising_it_goes_on() {
    let sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let (_dir, file) = config_file("[budget.session]\ntokens = 10000\n");
    let env = [("ARBITER_CONFIG", file.as_os_str())];
    let mut coordinator = sys.coordinator_process_with(&env);
    let s = "s-budget-session";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane(HUMAN);
    let orch_l = orch_lane(BRIEF);
    // 1,000 tokens for the Arbiter, then 3,000 and 8,500 for the
    // Orchestrator: 12,500 of 10,000 once the report is in.
    sys.mock.push(
        &arb,
        arbiter("summon_orchestrator", BRIEF).usage(900, 100, 0, 0),
    );
    sys.mock.push(
        &orch_l,
        MockReply::tool_use("write", json!({"path": "hello.txt", "content": "hello\n"}))
            .usage(2900, 100, 0, 0),
    );
    sys.mock.push(
        &orch_l,
        orch(true, "Wrote hello.txt.").usage(8400, 100, 0, 0),
    );
    sys.send(s, HUMAN).await;

    log.wait_for(
        "the hold",
        |b| matches!(b, LogBody::System(e) if e.text.starts_with("Held: this session")),
    )
    .await;
    let held = system_texts(&log)
        .into_iter()
        .find(|t| t.starts_with("Held:"))
        .unwrap();
    assert_eq!(
        held,
        "Held: this session has spent 12,500 tokens; its budget is 10,000 tokens, so no new \
         model request starts. Nothing is lost: the work so far is kept, and what waits for the \
         Arbiter goes on once the cap is raised. Raise it with /budget session 20,000 tokens \
         (or /budget session off), or change [budget.session] in the coordinator's config file."
    );
    let status = status_where(&sys, s, "the held status", |st| st.budget.held).await;
    assert_eq!(
        status.budget.session,
        Cap {
            tokens: Some(10_000),
            cost_nanos: None
        }
    );
    assert_eq!(status.state, arbiter_protocol::SessionState::Idle);
    assert_eq!(status.queued, 0);
    assert_eq!(status.spend.total.tokens(), 12_500);
    // The report's turn did not start: one Arbiter request, and it stays one.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(sys.mock.requests_for(&arb).len(), 1);
    assert_eq!(sys.mock.requests_for(&orch_l).len(), 2);
    assert_eq!(
        std::fs::read_to_string(sys.workspace(s).join("hello.txt")).unwrap(),
        "hello\n"
    );

    // A restart keeps the cap and the hold; the human's next words wait with it.
    coordinator.start_kill().unwrap();
    coordinator.wait().await.unwrap();
    let _coordinator = sys.coordinator_process_with(&env);
    sys.send(s, "Are you there?").await;
    log.wait_for(
        "the human's words",
        |b| matches!(b, LogBody::Human(e) if e.text == "Are you there?"),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        sys.mock.requests_for(&arb).len(),
        1,
        "a request past the cap"
    );
    let status = sys.status(s).await.unwrap();
    assert!(status.budget.held, "{status:?}");
    assert_eq!(status.budget.session.tokens, Some(10_000));

    // Raised: the held turn runs with what waited.
    sys.mock.push(
        &arb,
        arbiter("release_orchestrators", "hello.txt is written.").usage(100, 10, 0, 0),
    );
    send_budget(
        &sys,
        s,
        "/budget session 40k tokens",
        BudgetChange {
            scope: BudgetScope::Session,
            limit: BudgetLimit::Tokens(40_000),
        },
    )
    .await;
    let requests = sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    let asked = last_user_text(&requests[1].body);
    assert!(
        asked.contains("Orchestrator I: Wrote hello.txt."),
        "{asked}"
    );
    assert!(asked.contains("Are you there?"), "{asked}");
    assert!(
        asked.contains("System: This session has used 125 % of its budget"),
        "{asked}"
    );
    let status = status_where(&sys, s, "the session to settle", |st| {
        st.state == arbiter_protocol::SessionState::Idle && st.active.is_none()
    })
    .await;
    assert!(!status.budget.held);
    assert_eq!(status.budget.session.tokens, Some(40_000));
    let texts = system_texts(&log);
    assert!(
        texts.iter().any(|t| t
            == "Budget set by console alice: the session's cap is now 40,000 tokens (27,500 \
                tokens of 40,000 tokens left; spent 12,500 tokens, cost unknown)."),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t == "The session goes on under its new budget."),
        "{texts:?}"
    );
    // One hold entry, however long it held.
    assert_eq!(texts.iter().filter(|t| t.starts_with("Held:")).count(), 1);
    assert_eq!(sys.mock.requests_for(&arb).len(), 2);
}

/// An Orchestrator cap from the coordinator's config: the summons carries
/// it, and the worker starts no model request past it. Its last paid reply's
/// tool call still runs (b.txt), then it stops, and the Arbiter's next
/// request says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_cap_stops_it_and_tells_the_arbiter() {
    let mut sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let mut config = sys.coordinator_config();
    config.budget.orchestrator = Cap {
        tokens: Some(5_000),
        cost_nanos: None,
    };
    sys.spawn_coordinator_with(config);
    let s = "s-budget-orch";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane(HUMAN);
    let orch_l = orch_lane(BRIEF);
    sys.mock.push(
        &arb,
        arbiter("summon_orchestrator", BRIEF).usage(90, 10, 0, 0),
    );
    // 4,100 tokens (82 %: it is told), then 1,900 more (6,000: stopped).
    for (name, input) in [("a.txt", 4000), ("b.txt", 1800)] {
        sys.mock.push(
            &orch_l,
            MockReply::tool_use("write", json!({"path": name, "content": "x\n"}))
                .usage(input, 100, 0, 0),
        );
    }
    // Past the cap: never asked for.
    sys.mock
        .push(&orch_l, orch(true, "Both written.").usage(10, 10, 0, 0));
    sys.mock.push(
        &arb,
        arbiter("address_human", "Orchestrator I ran out of budget.").usage(90, 10, 0, 0),
    );
    sys.send(s, HUMAN).await;

    let at = log
        .wait_for("the Orchestrator's stop", |b| {
            matches!(b, LogBody::Error(e) if matches!(e.error, WireError::OrchestratorFailed { .. }))
        })
        .await;
    let LogBody::Error(entry) = &log.bodies()[at] else {
        unreachable!()
    };
    let WireError::OrchestratorFailed { number, message } = &entry.error else {
        unreachable!()
    };
    assert_eq!(*number, 1);
    assert!(
        message.starts_with(
            "budget: it has spent 6,000 tokens of the 5,000 tokens it may spend, so no new \
             model request starts."
        ),
        "{message}"
    );
    let requests = sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    let told = last_user_text(&requests[1].body);
    assert!(
        told.starts_with(
            "System: Orchestrator I has stopped and is no longer active: Orchestrator I \
             stopped: budget: it has spent 6,000 tokens"
        ),
        "{told}"
    );
    log.wait_for(
        "the Arbiter's answer",
        |b| matches!(b, LogBody::Arbiter(e) if e.text == "Orchestrator I ran out of budget."),
    )
    .await;
    let asked = sys.mock.requests_for(&orch_l);
    assert_eq!(asked.len(), 2, "a request past the cap");
    // At 80 % the Orchestrator's model was told, with its next request.
    let told = last_user_text(&asked[1].body);
    assert!(
        told.contains(
            "[system] You have used 82 % of your budget (4,100 tokens of 5,000 tokens). At the \
             cap you are stopped before your next model request."
        ),
        "{told}"
    );
    assert_eq!(sys.mock.pending(&orch_l), 1);
    assert!(sys.workspace(s).join("b.txt").exists());
    // Its spend is the session's: nothing lost from the count either.
    let status = sys.status(s).await.unwrap();
    assert_eq!(status.spend.orchestrators[0].spend.tokens(), 6_000);
    assert_eq!(status.budget.orchestrator.tokens, Some(5_000));
}

// Decisions tested as table cases in coordinator/src/rules/tests/budget.rs.

/// A malformed `[budget]` stops the coordinator at start, with the line and
/// the field that are wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_budget_in_the_config_is_refused_at_start() {
    let sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    for (text, says) in [
        (
            "[budget.session]\nusd = \"five\"\n",
            "usd: US dollars as a number",
        ),
        (
            "[budget.orchestrator]\ntokens = -3\n",
            "tokens: -3 is not a number of tokens",
        ),
        ("[budget.session]\ndollars = 5\n", "unknown field `dollars`"),
    ] {
        let (_dir, file) = config_file(text);
        let out = tokio::process::Command::new(arbiter_tests::bin("arbiter-coordinator"))
            .env_clear()
            .envs(sys.nats_env("coordinator"))
            .env("ARBITER_CONFIG", &file)
            .env("ANTHROPIC_API_KEY", API_KEY)
            .output();
        let out = tokio::time::timeout(WAIT, out).await.unwrap().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}: started anyway");
        assert!(stderr.contains(says), "{text}: {stderr}");
        assert!(stderr.contains("line 2"), "{text}: {stderr}");
    }
}

/// A `/budget` line the console cannot read is refused there, with what to
/// write; nothing reaches the session. `/budget` alone shows the caps, and
/// a good line sets the session's cap, which the log confirms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_refuses_a_malformed_budget_command_and_sends_a_good_one() {
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    let s = "s-budget-console";
    let console = |input: &'static str| {
        let mut command = tokio::process::Command::new(arbiter_tests::bin("arbiter-console"));
        command
            .env_clear()
            .envs(sys.nats_env("console"))
            .args(["--session", s, "--plain"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = command.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        async move {
            use tokio::io::AsyncWriteExt as _;
            stdin.write_all(input.as_bytes()).await.unwrap();
            drop(stdin);
            let out = tokio::time::timeout(WAIT, child.wait_with_output())
                .await
                .unwrap()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            (
                String::from_utf8(out.stdout).unwrap(),
                String::from_utf8(out.stderr).unwrap(),
            )
        }
    };
    let (stdout, stderr) = console("/budget session lots\n").await;
    assert!(
        stderr.contains(
            "! /budget: \"lots\" is not an amount: write /budget session <amount> or /budget \
             orchestrator <amount>"
        ),
        "{stderr}"
    );
    assert_eq!(stdout, "");
    assert!(sys.status(s).await.is_none(), "the session was reached");

    let (stdout, _) = console("/budget session $2.50\n").await;
    assert!(stdout.contains("/budget session $2.50"), "{stdout}");
    assert!(
        stdout.contains("Budget set by console local: the session's cap is now $2.50"),
        "{stdout}"
    );
    let status = sys.status(s).await.unwrap();
    assert_eq!(status.budget.session.cost_nanos, Some(2_500_000_000));
    assert!(sys.mock.requests().is_empty());

    let (_, stderr) = console("/budget\n").await;
    assert!(
        stderr.contains(
            "Budget: session $2.50 ($2.50 of $2.50 left; spent $0.0000); each Orchestrator none"
        ),
        "{stderr}"
    );
}
