//! Routing beyond the happy path: re-summoning while an Orchestrator is
//! active, two sessions side by side, and intents that cannot be carried out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use arbiter_bus::TraceContext;
use arbiter_protocol::{
    LogBody, OrchestratorEvent, OrchestratorMessage, OrchestratorOutput, VERSION, subjects,
};
use arbiter_tests::{Gate, MockReply};
use common::*;
use pretty_assertions::assert_eq;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resummon_releases_the_active_orchestrator_and_ignores_its_late_output() {
    // One slot: II can only start once I's slot is freed by the release.
    let sys = System::start_with(Options {
        slots: 1,
        ..Default::default()
    })
    .await;
    let s = "s-resummon";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Write the parser");

    sys.mock.push(
        &arb,
        arbiter("summon_orchestrator", "Brief one: write the parser."),
    );
    // I's first call hangs until released.
    let never = Gate::new();
    sys.mock.push(
        &orch_lane("Brief one: write the parser."),
        orch(true, "I am I.").gated(never.clone()),
    );
    sys.send(s, "Write the parser").await;
    sys.mock
        .wait_for_requests(&orch_lane("Brief one: write the parser."), 1, WAIT)
        .await;

    sys.mock.push(
        &arb,
        arbiter("summon_orchestrator", "Brief two: write the lexer first."),
    );
    sys.mock.push(
        &orch_lane("Brief two: write the lexer first."),
        orch(true, "II here. Lexer first, then."),
    );
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));
    sys.send(s, "No: the lexer comes first").await;
    sys.settled(s, 8).await;

    let orch_one = match &log.bodies()[1] {
        LogBody::Summoned(e) => e.orch_id.clone(),
        other => panic!("{other:?}"),
    };
    // A late output from I (its worker had not yet seen the release) is not routed.
    let late = OrchestratorMessage {
        v: VERSION,
        session_id: s.into(),
        orch_id: orch_one.clone(),
        seq: 1,
        event: OrchestratorEvent::Output(OrchestratorOutput {
            expects_response: true,
            message: "Late words from I".into(),
        }),
        sent_at: chrono::Utc::now(),
    };
    sys.bus
        .publish_js(
            subjects::orch_out(&orch_one),
            "late-1",
            &TraceContext::new_root(),
            &late,
        )
        .await
        .unwrap();
    never.open();
    tokio::time::sleep(Duration::from_millis(500)).await;

    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Write the parser"),
            pair("Summoned Orchestrator I", "Brief one: write the parser."),
            pair("You", "No: the lexer comes first"),
            pair("Released", "I"),
            pair(
                "Summoned Orchestrator II",
                "Brief two: write the lexer first."
            ),
            pair("Orchestrator II", "II here. Lexer first, then."),
            pair("Released", "II"),
            pair("Arbiter", "It is done."),
        ]
    );
    let arbiter_requests = sys.mock.requests_for(&arb);
    assert_eq!(arbiter_requests.len(), 3);
    assert_eq!(
        arbiter_requests[1].last_user_text(),
        "Human: No: the lexer comes first"
    );
    assert_eq!(
        arbiter_requests[2].last_user_text(),
        "Orchestrator II: II here. Lexer first, then."
    );
    assert!(
        sys.mock
            .requests()
            .iter()
            .all(|r| !r.all_text().contains("Late words from I"))
    );
    // II was briefed with exactly the second brief, and I was called once only.
    let two = sys
        .mock
        .requests_for(&orch_lane("Brief two: write the lexer first."));
    assert_eq!(two.len(), 1);
    assert_eq!(two[0].last_user_text(), "Brief two: write the lexer first.");
    assert_eq!(
        sys.mock
            .requests_for(&orch_lane("Brief one: write the parser."))
            .len(),
        1
    );
    assert_eq!(sys.status(s).await.unwrap().summoned, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_at_once_never_see_each_others_messages() {
    let sys = System::start().await;
    let names = ["alpha", "beta"];
    let mut logs = Vec::new();
    for name in names {
        let first = format!("{name}: build the {name} service");
        let brief = format!("Brief {name}: build the {name} service.");
        let arb = arbiter_lane(&first);
        sys.mock.push(&arb, arbiter("summon_orchestrator", &brief));
        sys.mock.push(
            &orch_lane(&brief),
            MockReply::tool_use(
                "write",
                serde_json::json!({"path": "owner.txt", "content": name}),
            ),
        );
        sys.mock
            .push(&orch_lane(&brief), orch(true, &format!("{name} done")));
        sys.mock.push(
            &arb,
            arbiter("release_orchestrators", &format!("{name} is finished.")),
        );
        logs.push(sys.watch_log(&format!("s-{name}")).await);
    }
    // Both sessions start at the same moment.
    let (a, b) = tokio::join!(
        sys.send("s-alpha", "alpha: build the alpha service"),
        sys.send("s-beta", "beta: build the beta service"),
    );
    assert_ne!(a, b);
    for name in names {
        sys.settled(&format!("s-{name}"), 5).await;
    }
    for (name, log) in names.iter().zip(&logs) {
        let other = if *name == "alpha" { "beta" } else { "alpha" };
        let bodies = briefs(&log.bodies());
        assert_eq!(bodies.len(), 5, "{bodies:?}");
        assert_eq!(
            bodies[3],
            pair("Released", "I"),
            "each session numbers its own Orchestrators"
        );
        for (_, text) in &bodies {
            assert!(!text.contains(other), "{name} saw {other}: {text}");
        }
        for request in sys.mock.requests() {
            if request.all_text().contains(&format!("{name}: build")) {
                assert!(
                    !request.all_text().contains(other),
                    "{name}'s model request leaked {other}"
                );
            }
        }
        let owner =
            std::fs::read_to_string(sys.workspace(&format!("s-{name}")).join("owner.txt")).unwrap();
        assert_eq!(owner, *name, "each session has its own workspace");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_that_cannot_be_carried_out_goes_back_to_the_arbiter() {
    let sys = System::start().await;
    let s = "s-reject";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Tell the builder to hurry");
    sys.mock
        .push(&arb, arbiter("address_orchestrator", "Hurry."));
    sys.mock.push(
        &arb,
        arbiter("address_human", "None labours yet. Shall one be summoned?"),
    );
    sys.send(s, "Tell the builder to hurry").await;
    sys.settled(s, 3).await;
    let bodies = briefs(&log.bodies());
    assert_eq!(bodies[0], pair("You", "Tell the builder to hurry"));
    assert_eq!(bodies[1].0, "System");
    assert!(
        bodies[1].1.contains("no Orchestrator is active"),
        "{bodies:?}"
    );
    assert_eq!(
        bodies[2],
        pair("Arbiter", "None labours yet. Shall one be summoned?")
    );
    let requests = sys.mock.requests_for(&arb);
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1]
            .last_user_text()
            .starts_with("System: Your address_orchestrator could not be carried out")
    );

    // An Arbiter that insists is stopped after the retry budget (2), with an error entry.
    let arb2 = arbiter_lane("Again");
    for _ in 0..3 {
        sys.mock
            .push(&arb2, arbiter("address_orchestrator", "Hurry!"));
    }
    let s2 = "s-reject-2";
    let log2 = sys.watch_log(s2).await;
    sys.send(s2, "Again").await;
    sys.settled(s2, 4).await;
    let kinds: Vec<String> = briefs(&log2.bodies()).into_iter().map(|b| b.0).collect();
    assert_eq!(kinds, vec!["You", "System", "System", "Error"]);
    assert!(
        briefs(&log2.bodies())[3]
            .1
            .contains("could not be carried out")
    );
    assert_eq!(sys.mock.requests_for(&arb2).len(), 3);
}
