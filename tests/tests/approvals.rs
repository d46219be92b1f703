//! Approvals from a console, across a coordinator crash, and refused by the
//! server for anyone else: an Orchestrator's `git push` under the worker's
//! `ask bash(git push*)` waits; a real `arbiter-console` shows it and
//! answers it; the call runs once; the log names who answered. (The
//! policy's decisions are table tests in protocol/src/approval/tests.rs,
//! the coordinator's in coordinator/src/rules/tests/approval.rs; the
//! worker's side, denial and the wait running out in `approvals_worker`.)

use crate::common;

use std::time::Duration;

use arbiter_bus::{Bus, Reach, TraceContext};
use arbiter_protocol::{
    Answerer, ApprovalDecision, ApprovalReply, HumanMessage, LogBody, Policy, VERSION,
    roles::NatsRole, subjects,
};
use arbiter_tests::{MockReply, eventually};
use common::*;
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};

/// The worker's floor in these tests.
const FLOOR: &str = "ask bash(git push*)";
/// What the Orchestrator runs: the push (which fails, there is no remote)
/// and a line in a marker file, so the file counts the runs.
const PUSH: &str = "git push origin main 2>/dev/null; echo ran >> pushed.log";

/// A system whose one worker asks before any `git push`.
async fn system(options: Options) -> System {
    let mut sys = System::start_with(Options {
        workers: 0,
        ..options
    })
    .await;
    let mut config = sys.worker_config("worker-0", 2, 200_000);
    config.policy = Policy::parse(FLOOR).unwrap();
    sys.spawn_worker_with(config);
    sys
}

/// Scripts a session whose Orchestrator I pushes, then reports.
fn script(sys: &System, words: &str) -> String {
    let brief = format!("Push the branch ({words}).");
    sys.mock
        .push(&arbiter_lane(words), arbiter("summon_orchestrator", &brief));
    sys.mock.push(
        &orch_lane(&brief),
        MockReply::tool_use("bash", json!({ "command": PUSH })),
    );
    sys.mock.push(&orch_lane(&brief), orch(true, "Pushed."));
    brief
}

/// How many times the command ran in session `s`'s workspace.
fn runs(sys: &System, s: &str) -> usize {
    std::fs::read_to_string(sys.workspace(s).join("pushed.log"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// A console's answer to approval `n` of session `s`, sent on `bus` under
/// console name `name`: what the server said.
async fn answer_on(
    bus: &Bus,
    name: &str,
    s: &str,
    n: u32,
    decision: ApprovalDecision,
) -> Result<(), String> {
    let message_id = uuid::Uuid::now_v7().to_string();
    let message = HumanMessage {
        v: VERSION,
        session_id: s.to_owned(),
        message_id: message_id.clone(),
        text: format!("/allow {n}"),
        sent_at: chrono::Utc::now(),
        command: None,
        budget: None,
        workspace: None,
        approval: Some(ApprovalReply {
            approval: n,
            decision,
            reason: None,
        }),
        policy: None,
        rewind: None,
    };
    let subject = subjects::session_human_from(s, name);
    let trace = TraceContext::none();
    let publish = bus.publish_js(subject, &message_id, &trace, &message);
    match tokio::time::timeout(Duration::from_secs(5), publish).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no acknowledgement".to_owned()),
    }
}

fn asked(b: &LogBody) -> bool {
    matches!(b, LogBody::ApprovalAsked(_))
}

fn answered(b: &LogBody) -> bool {
    matches!(b, LogBody::ApprovalAnswered(_))
}

/// What the human sees: a real `arbiter-console --plain` on the session
/// prints `? Approval 1: Orchestrator I asks to run bash: git push origin
/// main… (ask bash(git push*))`; the human types `/allow 1`; the push runs
/// once, the model reads its result, and the log holds the request and the
/// answer, naming the console.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_push_is_shown_in_a_console_and_allowed_from_it_and_runs_once() {
    // Secure: the console speaks under its credential's name, `console`.
    let sys = system(Options {
        secure: true,
        ..Default::default()
    })
    .await;
    let s = "s-approve-console";
    let log = sys.watch_log(s).await;
    let brief = script(&sys, "Push it");
    sys.mock.push(
        &arbiter_lane("Push it"),
        arbiter("address_human", "Pushed."),
    );

    let mut console = tokio::process::Command::new(arbiter_tests::bin("arbiter-console"))
        .env_clear()
        .envs(sys.nats_env("console"))
        .args(["--plain", "--session", s])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(process_log("console-approve"))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = console.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(console.stdout.take().unwrap()).lines();
    stdin.write_all(b"Push it\n").await.unwrap();

    // The console shows the request.
    let shown = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("? Approval 1:") {
                return line;
            }
        }
        panic!("the console ended before it showed the approval");
    })
    .await
    .expect("the console shows the approval");
    assert!(
        shown.contains("Orchestrator I asks to run bash: git push origin main")
            && shown.contains("ask bash(git push*)")
            && shown.contains("/allow 1"),
        "{shown}"
    );
    // Nothing ran while it waited; the model was not asked again.
    assert_eq!(runs(&sys, s), 0);
    assert_eq!(sys.mock.requests_for(&orch_lane(&brief)).len(), 1);
    let status = sys.status(s).await.expect("a status");
    assert_eq!(status.approvals.len(), 1, "{status:?}");

    stdin.write_all(b"/allow 1\n").await.unwrap();
    let at = log.wait_for("the answer", answered).await;
    let LogBody::ApprovalAnswered(entry) = &log.bodies()[at] else {
        unreachable!()
    };
    assert_eq!(entry.decision, ApprovalDecision::AllowOnce);
    assert_eq!(
        entry.by,
        Answerer::Console {
            name: "console".into()
        }
    );
    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(e) if e.text == "Pushed."),
    )
    .await;
    assert_eq!(runs(&sys, s), 1, "the push ran once");
    let calls = sys
        .mock
        .wait_for_requests(&orch_lane(&brief), 2, WAIT)
        .await;
    assert!(
        calls[1].all_text().contains("exit 0") || calls[1].all_text().contains("exit"),
        "the model read the command's result: {}",
        calls[1].all_text()
    );
    let bodies = log.bodies();
    assert_eq!(bodies.iter().filter(|b| asked(b)).count(), 1);
    assert_eq!(bodies.iter().filter(|b| answered(b)).count(), 1);
    assert!(sys.status(s).await.unwrap().approvals.is_empty());
    drop(stdin);
}

/// kill -9 of the coordinator while an approval waits: the next one lists
/// it, takes the console's answer, and the push runs once; the log shows
/// the request and the answer once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_survives_a_coordinator_kill_and_its_call_runs_once() {
    let sys = system(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let s = "s-approve-coordinator-kill";
    let log = sys.watch_log(s).await;
    let brief = script(&sys, "Push after a crash");
    sys.mock.push(
        &arbiter_lane("Push after a crash"),
        arbiter("address_human", "Pushed."),
    );
    let mut coordinator = sys.coordinator_process();
    sys.send_as("alice", s, "Push after a crash").await;
    log.wait_for("the request", asked).await;

    coordinator.start_kill().unwrap();
    coordinator.wait().await.unwrap();
    let _coordinator = sys.coordinator_process();
    // The restarted coordinator has the request: the status lists it.
    eventually(WAIT, "the approval listed after the restart", || async {
        sys.status(s)
            .await
            .filter(|st| st.approvals.len() == 1 && st.approvals[0].approval == 1)
    })
    .await;
    assert_eq!(runs(&sys, s), 0);

    answer_on(&sys.bus, "alice", s, 1, ApprovalDecision::AllowOnce)
        .await
        .unwrap();
    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(e) if e.text == "Pushed."),
    )
    .await;
    assert_eq!(runs(&sys, s), 1, "the push ran once");
    let bodies = log.bodies();
    assert_eq!(bodies.iter().filter(|b| asked(b)).count(), 1, "{bodies:#?}");
    assert_eq!(bodies.iter().filter(|b| answered(b)).count(), 1);
    assert_eq!(sys.mock.requests_for(&orch_lane(&brief)).len(), 2);
}

/// Refused by the server: an answer published with the worker's, the
/// coordinator's, or a console credential issued for another session is
/// refused ("Permissions Violation"), the log shows no answer and the call
/// still waits; the session's own console then answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_console_of_the_session_can_answer_and_the_server_refuses_the_rest() {
    let sys = system(Options {
        secure: true,
        ..Default::default()
    })
    .await;
    let s = "s-approve-refused";
    let log = sys.watch_log(s).await;
    script(&sys, "Push under guard");
    sys.mock.push(
        &arbiter_lane("Push under guard"),
        arbiter("address_human", "Pushed."),
    );
    sys.send(s, "Push under guard").await;
    log.wait_for("the request", asked).await;

    let admin = sys.admin.as_ref().unwrap().path();
    let scope = arbiter_admin::Scope {
        pools: &[],
        sessions: &["s-elsewhere".to_owned()],
    };
    arbiter_admin::issue(admin, NatsRole::Console, "eve", scope, 1).unwrap();
    for (credential, role, name) in [
        ("worker", NatsRole::Worker, "worker"),
        ("coordinator", NatsRole::Coordinator, "coordinator"),
        ("eve", NatsRole::Console, "eve"),
    ] {
        let conn = arbiter_bus::connect_with(&sys.nats_options(credential), name, Reach::FailFast)
            .await
            .unwrap();
        let alarms = conn.alarms.clone();
        let seen = alarms.denial_count();
        let denied = alarms.denied_after(seen);
        let bus = Bus::open(conn, role, Reach::FailFast).await.unwrap();
        let sent = answer_on(&bus, name, s, 1, ApprovalDecision::AllowOnce).await;
        assert!(sent.is_err(), "{credential}: the server took it");
        let text = tokio::time::timeout(Duration::from_secs(5), denied)
            .await
            .unwrap_or_else(|_| panic!("{credential}: no denial from the server"));
        assert!(
            text.to_lowercase().contains("permissions violation"),
            "{credential}: {text}"
        );
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !log.bodies().iter().any(answered),
        "an answer got through: {:#?}",
        log.bodies()
    );
    assert_eq!(runs(&sys, s), 0, "the call still waits");
    assert_eq!(sys.status(s).await.unwrap().approvals.len(), 1);

    // The session's console may.
    let conn = arbiter_bus::connect_with(&sys.nats_options("console"), "console", Reach::FailFast)
        .await
        .unwrap();
    let bus = Bus::open(conn, NatsRole::Console, Reach::FailFast)
        .await
        .unwrap();
    answer_on(&bus, "console", s, 1, ApprovalDecision::AllowOnce)
        .await
        .unwrap();
    log.wait_for(
        "the report",
        |b| matches!(b, LogBody::Orchestrator(e) if e.text == "Pushed."),
    )
    .await;
    assert_eq!(runs(&sys, s), 1);
}
