//! Routing beyond the happy path: re-summoning while an Orchestrator is
//! active, two sessions side by side, and intents that cannot be carried out.

use crate::common;

use arbiter_bus::TraceContext;
use arbiter_protocol::{LogBody, subjects};
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
    // II's first answer waits until I has spoken out of turn.
    let two_speaks = Gate::new();
    sys.mock.push(
        &orch_lane("Brief two: write the lexer first."),
        orch(true, "II here. Lexer first, then.").gated(two_speaks.clone()),
    );
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));
    sys.send(s, "No: the lexer comes first").await;
    sys.mock
        .wait_for_requests(&orch_lane("Brief two: write the lexer first."), 1, WAIT)
        .await;

    let orch_one = match &log.bodies()[1] {
        LogBody::Summoned(e) => e.orch_id.clone(),
        other => panic!("{other:?}"),
    };
    // A late output from I (its worker had not yet seen the release) while
    // II is active is not routed: not to the log, not to the Arbiter. The
    // coordinator reads Orchestrator output in stream order, so once II's
    // answer (published after it) is in the log, I's has been dealt with.
    let late = bare_question(s, &orch_one, 1, "Late words from I");
    sys.bus
        .publish_js(
            subjects::orch_out(&orch_one),
            "late-1",
            &TraceContext::none(),
            &late,
        )
        .await
        .unwrap();
    two_speaks.open();
    sys.settled(s, 8).await;
    never.open();

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
        "Orchestrator II: II here. Lexer first, then.\n[Evidence from the worker, not written by Orchestrator II: 0 tool calls, 0 files changed]"
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_that_arrives_mid_turn_is_delivered_after_it_in_order_in_one_message() {
    let sys = System::start().await;
    let s = "s-mid-turn";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Plan the release");
    let brief = "Draft the release notes.";
    let lane = orch_lane(brief);
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    // The Arbiter's second turn is in flight while the rest arrives.
    let second_turn = Gate::new();
    sys.mock.push(
        &arb,
        arbiter("address_human", "Soon.").gated(second_turn.clone()),
    );
    let answer = "Yes, include them; thank the contributors.";
    sys.mock.push(&arb, arbiter("address_orchestrator", answer));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));
    let note = Gate::new();
    sys.mock.push(
        &lane,
        orch(false, "Reading the changelog.").gated(note.clone()),
    );
    sys.mock
        .push(&lane, orch(true, "Include the internal fixes?"));
    sys.mock.push(&lane, orch(true, "Done."));

    sys.send(s, "Plan the release").await;
    sys.mock.wait_for_requests(&lane, 1, WAIT).await;
    sys.send(s, "How long will it take?").await;
    sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    // Mid-turn: a note, a question from I, and the human again.
    note.open();
    log.wait_len(5).await;
    sys.send(s, "Also thank the contributors.").await;
    log.wait_len(6).await;
    second_turn.open();
    sys.settled(s, 11).await;

    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Plan the release"),
            pair("Summoned Orchestrator I", brief),
            pair("You", "How long will it take?"),
            pair("Orchestrator I (note)", "Reading the changelog."),
            pair("Orchestrator I", "Include the internal fixes?"),
            pair("You", "Also thank the contributors."),
            pair("Arbiter", "Soon."),
            pair("Arbiter → Orchestrator I", answer),
            pair("Orchestrator I", "Done."),
            pair("Released", "I"),
            pair("Arbiter", "It is done."),
        ]
    );
    let requests = sys.mock.requests_for(&arb);
    assert_eq!(requests.len(), 4);
    assert_eq!(
        requests[1].last_user_text(),
        "Human: How long will it take?"
    );
    // Everything that arrived mid-turn reaches the Arbiter in one message,
    // in arrival order, the note as a digest first; nothing was interleaved
    // into the turn in flight.
    assert_eq!(
        requests[2].last_user_text(),
        "Notes sent while working:\n- Orchestrator I: Reading the changelog.\n\n\
         Orchestrator I: Include the internal fixes?\n\
         [Evidence from the worker, not written by Orchestrator I: 0 tool calls, 0 files changed]\n\n\
         Human: Also thank the contributors."
    );
    assert_eq!(requests[2].messages().len(), 5);
    assert_eq!(
        requests[3].last_user_text(),
        "Orchestrator I: Done.\n[Evidence from the worker, not written by Orchestrator I: 0 tool calls, 0 files changed]\n[Check: Orchestrator I reports done: 0 tool calls, 0 files changed. Nothing of it shows in the workspace.]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn musings_are_logged_and_never_routed() {
    let sys = System::start().await;
    let s = "s-musings";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Should we rewrite it in Rust?");
    sys.mock
        .push(&arb, arbiter("musings", "The mortal wavers between paths."));
    sys.mock
        .push(&arb, arbiter("address_human", "Speak plainly."));
    sys.send(s, "Should we rewrite it in Rust?").await;
    sys.settled(s, 2).await;
    sys.send(s, "Well?").await;
    sys.settled(s, 4).await;

    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Should we rewrite it in Rust?"),
            pair("Musing", "The mortal wavers between paths."),
            pair("You", "Well?"),
            pair("Arbiter", "Speak plainly."),
        ]
    );
    // Nothing was summoned, and no Orchestrator or human was sent the musing;
    // the Arbiter keeps it in its own transcript.
    assert_eq!(sys.mock.requests().len(), 2);
    let requests = sys.mock.requests_for(&arb);
    assert_eq!(requests[1].messages().len(), 3);
    assert!(
        requests[1]
            .all_text()
            .contains("The mortal wavers between paths.")
    );
}

fn system_text(body: &LogBody) -> Option<&str> {
    match body {
        LogBody::System(e) => Some(e.text.as_str()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_met_with_musings_is_reminded_once_then_told_to_the_human() {
    let sys = System::start().await;
    let s = "s-question-musings";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Write the config loader");
    sys.mock.push(
        &arb,
        arbiter("summon_orchestrator", "Brief: the config loader."),
    );
    sys.mock.push(
        &orch_lane("Brief: the config loader."),
        orch(true, "The config file needs a format. TOML or YAML?"),
    );
    // The Arbiter only muses, twice: nobody would ever answer the question.
    sys.mock.push(&arb, arbiter("musings", "TOML, probably."));
    sys.mock.push(&arb, arbiter("musings", "Or YAML."));
    sys.send(s, "Write the config loader").await;

    // What the human sees: a line saying the Orchestrator waits.
    log.wait_for("the human told that the question waits", |b| {
        system_text(b).is_some_and(|t| {
            t.starts_with("Orchestrator I asked a question and is waiting for an answer")
                && t.contains("ended in musings again")
        })
    })
    .await;
    // Between the two musings the Arbiter was reminded of the question.
    let requests = sys.mock.requests_for(&arb);
    assert_eq!(requests.len(), 3, "summon, musing, reminded musing");
    let reminder = requests[2].last_user_text();
    assert!(
        reminder.contains("Orchestrator I asked you a question and is waiting for your answer"),
        "{reminder}"
    );
    // The question itself is still in what the Arbiter reads.
    assert!(requests[2].all_text().contains("TOML or YAML?"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_whose_arbiter_turn_fails_is_told_to_the_human() {
    let sys = System::start().await;
    let s = "s-question-failed";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Write the config parser");
    sys.mock.push(
        &arb,
        arbiter("summon_orchestrator", "Brief: the config parser."),
    );
    sys.mock.push(
        &orch_lane("Brief: the config parser."),
        orch(true, "Should unknown keys be an error?"),
    );
    // The Arbiter's turn on the question fails for good (not retried).
    sys.mock.push(
        &arb,
        MockReply::http_error(401, "authentication_error", "invalid x-api-key"),
    );
    sys.send(s, "Write the config parser").await;

    let told = log
        .wait_for("the human told that the question waits", |b| {
            system_text(b).is_some_and(|t| {
                t == "Orchestrator I asked a question and is waiting for an answer, but the \
                      Arbiter's turn failed. Write to go on, or /stop."
            })
        })
        .await;
    // After the failure's error entry, not before.
    let bodies = log.bodies();
    assert!(
        matches!(&bodies[told - 1], LogBody::Error(_)),
        "{:?}",
        &bodies[told - 1]
    );
}
