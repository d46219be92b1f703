//! The worker's side of tool-call approvals: an Orchestrator whose `git
//! push` its worker's floor (`ask bash(git push*)`) asks about stores the
//! request and waits in its slot; a console's allow runs the call once and
//! the model reads its result; a denial or the wait running out reaches the
//! model as the call's result, with who said it and why, and the call never
//! runs; a worker killed while the call waits is taken over by another,
//! which asks nothing again and runs the call once when the answer comes.
//! (The policy's decisions are table tests in protocol/src/approval/tests.rs,
//! the coordinator's in coordinator/src/rules/tests/approval.rs, the
//! worker's in worker/src/approval.rs and worker/src/runtime/policy.rs; the
//! console's side in `approvals`.)

use crate::common;
use crate::direct;

use std::time::Duration;

use arbiter_bus::TraceContext;
use arbiter_protocol::{
    ApprovalDecision, ApprovalReply, HumanMessage, LogBody, OrchestratorEvent, OrchestratorState,
    Policy, VERSION, subjects,
};
use arbiter_tests::MockReply;
use common::*;
use direct::*;
use serde_json::json;

/// The workers' floor in these tests.
const FLOOR: &str = "ask bash(git push*)";
/// What the Orchestrator runs: the push (which fails: there is no
/// repository) and a line in a marker file, so the file counts the runs.
/// Its first part is what the floor asks about.
const PUSH: &str = "git push origin main 2>/dev/null; echo ran >> pushed.txt";

/// A console named `console`'s answer to approval `n` of session `s`, as
/// `/allow n` or `/deny n <reason>` sends it.
async fn answer_as(
    sys: &System,
    console: &str,
    s: &str,
    n: u32,
    decision: ApprovalDecision,
    reason: Option<&str>,
) {
    let message_id = uuid::Uuid::now_v7().to_string();
    let message = HumanMessage {
        v: VERSION,
        session_id: s.to_owned(),
        message_id: message_id.clone(),
        text: match decision {
            ApprovalDecision::Deny => format!("/deny {n} {}", reason.unwrap_or_default()),
            _ => format!("/allow {n}"),
        },
        sent_at: chrono::Utc::now(),
        command: None,
        budget: None,
        workspace: None,
        approval: Some(ApprovalReply {
            approval: n,
            decision,
            reason: reason.map(str::to_owned),
        }),
        policy: None,
        rewind: None,
    };
    sys.bus
        .publish_js(
            subjects::session_human_from(s, console),
            &message_id,
            &TraceContext::none(),
            &message,
        )
        .await
        .unwrap();
}

/// A system with no worker yet (each test starts its own).
async fn bare(coordinator: bool) -> System {
    System::start_with(Options {
        workers: 0,
        coordinator,
        ..Default::default()
    })
    .await
}

/// Runs an in-process worker whose floor is [`FLOOR`].
fn spawn_asking_worker(sys: &mut System) {
    let mut config = sys.worker_config("worker-0", 2, 200_000);
    config.policy = Policy::parse(FLOOR).unwrap();
    sys.spawn_worker_with(config);
}

/// Scripts session words `words`: the Arbiter summons, Orchestrator I
/// pushes, then reports `report`. Returns the Orchestrator's lane.
fn script(sys: &System, words: &str, report: &str) -> String {
    let brief = format!("Push the branch ({words}).");
    let arb = arbiter_lane(words);
    sys.mock.push(&arb, arbiter("summon_orchestrator", &brief));
    sys.mock.push(&arb, arbiter("address_human", "Done."));
    let lane = orch_lane(&brief);
    sys.mock.push(
        &lane,
        MockReply::tool_use("bash", json!({ "command": PUSH })),
    );
    sys.mock.push(&lane, orch(true, report));
    lane
}

/// How many times the command ran in session `s`'s workspace.
fn runs(sys: &System, s: &str) -> usize {
    std::fs::read_to_string(sys.workspace(s).join("pushed.txt"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn asked(b: &LogBody) -> bool {
    matches!(b, LogBody::ApprovalAsked(_))
}

/// Waits for the request in the log: number 1, the push, the floor's rule.
async fn wait_asked(log: &LogWatch) -> arbiter_protocol::ApprovalAskedEntry {
    let at = log.wait_for("the approval asked", asked).await;
    let LogBody::ApprovalAsked(entry) = log.bodies().swap_remove(at) else {
        unreachable!()
    };
    assert_eq!(entry.approval, 1);
    assert_eq!(entry.request.tool, "bash");
    assert_eq!(entry.request.input["command"], PUSH);
    assert_eq!(entry.request.rule, FLOOR);
    entry
}

async fn wait_report(log: &LogWatch, report: &str) {
    log.wait_for(
        report,
        |b| matches!(b, LogBody::Orchestrator(e) if e.text == report),
    )
    .await;
}

/// What the human sees: the log says Orchestrator I asks to run `bash: git
/// push origin main…` (`ask bash(git push*)`); nothing runs and the model is
/// not asked again while it waits; console alice's `/allow 1` makes the
/// push run once, and the Orchestrator's next message ("Pushed.") follows
/// from the model having read the command's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_the_floor_asks_about_waits_and_runs_once_when_allowed() {
    let mut sys = bare(true).await;
    spawn_asking_worker(&mut sys);
    let s = "s-approve-allow";
    let log = sys.watch_log(s).await;
    let lane = script(&sys, "Push it", "Pushed.");
    sys.send_as("alice", s, "Push it").await;

    wait_asked(&log).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(runs(&sys, s), 0, "nothing runs before the allow");
    assert_eq!(sys.mock.requests_for(&lane).len(), 1);
    let status = sys.status(s).await.unwrap();
    assert_eq!(status.approvals.len(), 1, "{status:?}");

    answer_as(&sys, "alice", s, 1, ApprovalDecision::AllowOnce, None).await;
    wait_report(&log, "Pushed.").await;
    assert_eq!(runs(&sys, s), 1, "the push ran once");
    let requests = sys.mock.wait_for_requests(&lane, 2, WAIT).await;
    let result = requests[1].last_user_text();
    assert!(result.starts_with("exit code: 0"), "{result}");
    assert_eq!(log.bodies().iter().filter(|b| asked(b)).count(), 1);
}

/// What the human sees: `/deny 1 use a branch` from console alice; the
/// push never runs, and the model's next request carries, as the call's
/// result, "The human denied this call (console alice): use a branch", on
/// which the Orchestrator reports it did not push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_push_never_runs_and_the_model_reads_who_denied_it_and_why() {
    let mut sys = bare(true).await;
    spawn_asking_worker(&mut sys);
    let s = "s-approve-deny";
    let log = sys.watch_log(s).await;
    let lane = script(&sys, "Push it now", "Not pushed: I will use a branch.");
    sys.send_as("alice", s, "Push it now").await;

    wait_asked(&log).await;
    answer_as(
        &sys,
        "alice",
        s,
        1,
        ApprovalDecision::Deny,
        Some("use a branch"),
    )
    .await;
    wait_report(&log, "Not pushed: I will use a branch.").await;
    let requests = sys.mock.wait_for_requests(&lane, 2, WAIT).await;
    let result = requests[1].last_user_text();
    assert_eq!(
        result,
        "The human denied this call (console alice): use a branch"
    );
    assert!(!sys.workspace(s).join("pushed.txt").exists());
}

/// What the human sees: the worker process running Orchestrator I is
/// killed (kill -9) while the push waits; another worker takes it over and
/// shows it waiting for approval again, without a second request (the log
/// and the Orchestrator's outputs hold one); `/allow 1`, sent after the
/// takeover, makes the push run exactly once, and the report follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_while_a_call_waits_is_taken_over_and_the_call_runs_once() {
    let sys = bare(true).await;
    let watch = Watch::start(&sys).await;
    let s = "s-approve-takeover";
    let log = sys.watch_log(s).await;
    let lane = script(&sys, "Push after a crash", "Pushed after the takeover.");
    let floor = std::ffi::OsStr::new(FLOOR);
    let mut w1 = sys.worker_process_with("w1", 1, &[("ORCHESTRATOR_POLICY", floor)]);
    worker_ready(&sys, "w1").await;
    sys.send_as("alice", s, "Push after a crash").await;

    let entry = wait_asked(&log).await;
    let orch_id = entry.orch_id.clone();
    watch
        .wait_status(&orch_id, "w1 waiting for approval", |st| {
            st.worker_id == "w1" && st.state == OrchestratorState::WaitingApproval
        })
        .await;
    let _w2 = sys.worker_process_with("w2", 1, &[("ORCHESTRATOR_POLICY", floor)]);
    worker_ready(&sys, "w2").await;
    w1.start_kill().unwrap();
    w1.wait().await.unwrap();
    watch
        .wait_status(&orch_id, "w2 to take the waiting call over", |st| {
            st.worker_id == "w2" && st.state == OrchestratorState::WaitingApproval
        })
        .await;
    assert_eq!(runs(&sys, s), 0);

    answer_as(&sys, "alice", s, 1, ApprovalDecision::AllowOnce, None).await;
    wait_report(&log, "Pushed after the takeover.").await;
    assert_eq!(runs(&sys, s), 1, "the push ran exactly once");
    let requests = sys.mock.wait_for_requests(&lane, 2, WAIT).await;
    assert_eq!(requests.len(), 2, "the model was not asked again meanwhile");
    assert!(requests[1].last_user_text().starts_with("exit code: 0"));
    let requested = watch
        .events(&orch_id)
        .into_iter()
        .filter(|e| matches!(e, OrchestratorEvent::ApprovalNeeded(_)))
        .count();
    assert_eq!(requested, 1, "the new worker asked nothing again");
    assert_eq!(log.bodies().iter().filter(|b| asked(b)).count(), 1);
}

/// What the human sees: nobody answers; after the coordinator's wait (3 s
/// here) the log says the approval was denied for want of an answer, the
/// model reads that nobody answered as the call's result, and the session
/// goes on: the Orchestrator's next message reaches the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_nobody_answers_is_denied_when_the_wait_runs_out_and_the_work_goes_on() {
    let mut sys = bare(false).await;
    let mut config = sys.coordinator_config();
    config.approval_timeout = Duration::from_secs(3);
    sys.spawn_coordinator_with(config);
    spawn_asking_worker(&mut sys);
    let s = "s-approve-timeout";
    let log = sys.watch_log(s).await;
    let lane = script(&sys, "Push when you can", "Went on without the push.");
    sys.send_as("alice", s, "Push when you can").await;

    wait_asked(&log).await;
    let at = log
        .wait_for("the wait running out", |b| {
            matches!(b, LogBody::ApprovalAnswered(e) if e.by == arbiter_protocol::Answerer::Timeout)
        })
        .await;
    let LogBody::ApprovalAnswered(answer) = log.bodies().swap_remove(at) else {
        unreachable!()
    };
    assert_eq!(answer.decision, ApprovalDecision::Deny);
    wait_report(&log, "Went on without the push.").await;
    let requests = sys.mock.wait_for_requests(&lane, 2, WAIT).await;
    let result = requests[1].last_user_text();
    assert!(
        result.contains("was denied") && result.contains("nobody answered"),
        "{result}"
    );
    assert!(!sys.workspace(s).join("pushed.txt").exists());
}
