//! What someone with NATS access can forge, end to end (issue #13): input
//! `seq`s far ahead of the real ones must not silence the real Arbiter, and
//! what the server refused to store never counts. The attacker here is a
//! plain test client publishing on the subjects. Forged output `seq`s are
//! held and dropped by the coordinator's rule (its table tests).

use crate::common;
use crate::direct;

use std::time::Duration;

use arbiter_bus::TraceContext;
use arbiter_protocol::{LogBody, OrchestratorInput, VERSION, subjects};
use arbiter_tests::Gate;
use common::*;
use pretty_assertions::assert_eq;

/// Forged seqs: far ahead, and the largest there is.
const FORGED: [u64; 2] = [1000, u64::MAX];
/// How long a gap is held in these tests (the default is far longer).
const GAP_WAIT: Duration = Duration::from_secs(1);

/// A system whose coordinator and worker hold gaps for [`GAP_WAIT`] only.
async fn start() -> System {
    let mut sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    let mut coordinator = sys.coordinator_config();
    coordinator.output_gap_wait = GAP_WAIT;
    sys.spawn_coordinator_with(coordinator);
    let mut worker = sys.worker_config("worker-0", 4, 200_000);
    worker.input_gap_wait = GAP_WAIT;
    sys.spawn_worker_with(worker);
    // Up before the first summons, which would otherwise log that no worker answered.
    direct::worker_ready(&sys, "worker-0").await;
    sys
}

async fn summoned_id(log: &LogWatch) -> String {
    let at = log
        .wait_for("the summons", |b| matches!(b, LogBody::Summoned(_)))
        .await;
    match &log.bodies()[at] {
        LogBody::Summoned(e) => e.orch_id.clone(),
        other => panic!("{other:?}"),
    }
}

// Decisions tested as table cases in coordinator/src/rules/tests/outputs.rs.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_input_seqs_never_silence_the_real_arbiter() {
    let sys = start().await;
    let s = "s-forged-in";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Paint the shed");
    let brief = "Paint the shed; ask which colour.";
    let lane = orch_lane(brief);
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    let answer = Gate::new();
    sys.mock.push(
        &arb,
        arbiter("address_orchestrator", "Blue.").gated(answer.clone()),
    );
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "Done."));
    sys.mock.push(&lane, orch(true, "Which colour?"));
    sys.mock.push(&lane, orch(true, "Painted blue."));
    sys.send(s, "Paint the shed").await;
    let orch_id = summoned_id(&log).await;
    log.wait_for("the question", |b| matches!(b, LogBody::Orchestrator(_)))
        .await;

    // While I waits, the attacker speaks to it as the Arbiter, far ahead.
    for seq in FORGED {
        let forged = OrchestratorInput {
            v: VERSION,
            session_id: s.into(),
            orch_id: orch_id.clone(),
            seq,
            message: format!("FORGED {seq}"),
            sent_at: chrono::Utc::now(),
            budget: None,
        };
        sys.bus
            .publish_js(
                subjects::orch_in(&orch_id),
                &format!("forged-in-{seq}"),
                &TraceContext::none(),
                &forged,
            )
            .await
            .unwrap();
    }
    // The worker reads them at once, holds them for the gap, and drops them
    // when it never fills; the real answer comes only after that.
    tokio::time::sleep(GAP_WAIT * 2).await;
    answer.open();
    sys.settled(s, 7).await;

    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Paint the shed"),
            pair("Summoned Orchestrator I", brief),
            pair("Orchestrator I", "Which colour?"),
            pair("Arbiter → Orchestrator I", "Blue."),
            pair("Orchestrator I", "Painted blue."),
            pair("Released", "I"),
            pair("Arbiter", "Done."),
        ]
    );
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].last_user_text(), "Blue.");
    assert!(
        sys.mock
            .requests()
            .iter()
            .all(|r| !r.all_text().contains("FORGED")),
        "a forged input reached a model"
    );
}

/// An input the server refused to store (what a coordinator that another
/// one fenced out sends: the server refuses it, yet core subscribers, the
/// worker's wake-up among them, still get it) never becomes the
/// Orchestrator's: the worker may start the model call it would make at
/// once (so that reading the stream is not on the way to the model), but it
/// takes only what it read from the stream. What the user sees: the
/// Orchestrator answers the real input, and the refused text is in no log
/// entry, no stored record and no output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_the_server_refused_to_store_never_becomes_the_orchestrators() {
    let sys = start().await;
    let s = "s-refused-in";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Paint the fence");
    let brief = "Paint the fence; ask which colour.";
    let lane = orch_lane(brief);
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    let answer = Gate::new();
    sys.mock.push(
        &arb,
        arbiter("address_orchestrator", "Green.").gated(answer.clone()),
    );
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "Done."));
    sys.mock.push(&lane, orch(true, "Which colour?"));
    // The reply to a call started on the refused input (taken by nobody).
    sys.mock.push(&lane, orch(true, "REFUSED ANSWER"));
    sys.mock.push(&lane, orch(true, "Painted green."));
    sys.send(s, "Paint the fence").await;
    let orch_id = summoned_id(&log).await;
    log.wait_for("the question", |b| matches!(b, LogBody::Orchestrator(_)))
        .await;
    sys.mock.wait_for_requests(&lane, 1, WAIT).await;

    // Input 1, as a fenced-out coordinator would publish it: refused.
    let refused = arbiter_protocol::LogEntry {
        v: VERSION,
        session_id: s.into(),
        seq: 99,
        at: chrono::Utc::now(),
        body: LogBody::ArbiterToOrchestrator(arbiter_protocol::ArbiterToOrchestratorEntry {
            number: 1,
            member: None,
            orch_id: orch_id.clone(),
            text: "REFUSED: paint it red.".into(),
            input_seq: Some(1),
            budget: None,
        }),
    };
    publish_refused(&sys, subjects::session_input(s, &orch_id, 1), &refused).await;
    // The worker saw it on its wake-up and started that call.
    sys.mock.wait_for_requests(&lane, 2, WAIT).await;
    assert_eq!(
        sys.mock.requests_for(&lane)[1].last_user_text(),
        "REFUSED: paint it red."
    );

    answer.open();
    sys.settled(s, 7).await;
    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Paint the fence"),
            pair("Summoned Orchestrator I", brief),
            pair("Orchestrator I", "Which colour?"),
            pair("Arbiter → Orchestrator I", "Green."),
            pair("Orchestrator I", "Painted green."),
            pair("Released", "I"),
            pair("Arbiter", "Done."),
        ]
    );
    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2].last_user_text(), "Green.");
    assert!(
        !requests[2].all_text().contains("REFUSED"),
        "the refused input is in the Orchestrator's transcript"
    );
    let records = direct::state_records(&sys, &orch_id).await;
    assert!(!records.is_empty());
    assert!(
        records.iter().all(|r| !r.to_string().contains("REFUSED")),
        "the refused input or its reply was stored: {records:?}"
    );
}

/// An Orchestrator output the server refused to store (what a worker that
/// another one fenced out publishes: the server refuses it, yet core
/// subscribers, the coordinator's watch among them, still get it) never
/// becomes the Arbiter's: the coordinator may start the Arbiter call it
/// would make at once (so that the store and the stored copy's delivery are
/// not on the way from the Orchestrator's words to the Arbiter), but it
/// takes only the stored copy. What the user sees: the Arbiter answers the
/// real question, and the refused text is in no log entry and never in the
/// Arbiter's transcript.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_the_server_refused_to_store_never_becomes_the_arbiters() {
    let sys = start().await;
    let s = "s-refused-out";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Paint the shed");
    let brief = "Paint the shed; ask which colour.";
    let lane = orch_lane(brief);
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    // The reply to the call started on the refused output (taken by nobody).
    sys.mock
        .push(&arb, arbiter("address_orchestrator", "REFUSED ANSWER"));
    sys.mock
        .push(&arb, arbiter("address_orchestrator", "Green."));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "Done."));
    let speak = Gate::new();
    sys.mock
        .push(&lane, orch(true, "Which colour?").gated(speak.clone()));
    sys.mock.push(&lane, orch(true, "Painted green."));
    sys.send(s, "Paint the shed").await;
    let orch_id = summoned_id(&log).await;
    sys.mock.wait_for_requests(&lane, 1, WAIT).await;

    // Output 1, as a fenced-out worker would publish it: refused. Then
    // twice more, as a hostile worker credential could, each with other
    // words: refused too, and no further call (one per turn at most).
    for text in [
        "REFUSED: which shade of red?",
        "REFUSED AGAIN: blue?",
        "REFUSED THRICE: green?",
    ] {
        let refused = bare_question(s, &orch_id, 1, text);
        publish_refused(&sys, subjects::orch_out(&orch_id), &refused).await;
        // The coordinator saw the first as it was published and started that call.
        sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    }
    assert_eq!(
        sys.mock.requests_for(&arb)[1].last_user_text(),
        "Orchestrator I: REFUSED: which shade of red?"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        sys.mock.requests_for(&arb).len(),
        2,
        "one early call per turn"
    );

    speak.open();
    sys.settled(s, 7).await;
    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Paint the shed"),
            pair("Summoned Orchestrator I", brief),
            pair("Orchestrator I", "Which colour?"),
            pair("Arbiter → Orchestrator I", "Green."),
            pair("Orchestrator I", "Painted green."),
            pair("Released", "I"),
            pair("Arbiter", "Done."),
        ]
    );
    let requests = sys.mock.requests_for(&arb);
    assert_eq!(
        requests.len(),
        4,
        "one request per turn, and the refused one"
    );
    assert!(
        requests[2]
            .last_user_text()
            .starts_with("Orchestrator I: Which colour?"),
        "{}",
        requests[2].last_user_text()
    );
    assert!(
        !requests[3].all_text().contains("REFUSED"),
        "the refused output or its reply is in the Arbiter's transcript"
    );
}
