//! Bad input never crashes anything and never loses a message: model replies
//! that do not match their schema, API errors, and malformed JSON published
//! on every subject. Each test says what the human sees.

use crate::common;

use arbiter_protocol::{LogBody, WireError, subjects};
use arbiter_tests::MockReply;
use common::*;
use pretty_assertions::assert_eq;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arbiter_reply_off_schema_is_repaired_with_the_validation_error() {
    let sys = System::start().await;
    let s = "s-repair";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Speak");
    sys.mock.push(
        &arb,
        MockReply::text(r#"{"intent":"shout","message":"HEAR ME"}"#),
    );
    sys.mock.push(&arb, arbiter("address_human", "I hear."));
    sys.send(s, "Speak").await;
    sys.settled(s, 2).await;
    // The human sees only the repaired answer.
    assert_eq!(
        briefs(&log.bodies()),
        vec![pair("You", "Speak"), pair("Arbiter", "I hear.")]
    );
    let requests = sys.mock.requests_for(&arb);
    assert_eq!(requests.len(), 2);
    let repair = requests[1].last_user_text();
    assert!(
        repair.contains("did not match the required JSON schema"),
        "{repair}"
    );
    assert!(
        repair.contains("$.intent: \"shout\" is not one of"),
        "{repair}"
    );
}

/// A summons with a strategy there is none of (#21) is refused by the
/// schema before anything routes: the Arbiter is told which field and which
/// values there are, and nothing is summoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summons_with_an_unknown_strategy_is_refused_with_the_strategies_there_are() {
    let sys = System::start().await;
    let s = "s-swarm";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Swarm it");
    sys.mock.push(
        &arb,
        MockReply::text(
            r#"{"intent":"summon_orchestrator","message":"Fix the build.","strategy":"swarm"}"#,
        ),
    );
    sys.mock
        .push(&arb, arbiter("address_human", "One at a time, then."));
    sys.send(s, "Swarm it").await;
    sys.settled(s, 2).await;
    let requests = sys.mock.requests_for(&arb);
    assert_eq!(requests.len(), 2);
    // What the Arbiter reads: the field, the value, and the ones there are.
    let repair = requests[1].last_user_text();
    assert!(
        repair.contains("$.strategy: \"swarm\" is not one of"),
        "{repair}"
    );
    for strategy in ["solo", "parallel", "consensus", "sequential"] {
        assert!(repair.contains(strategy), "{strategy}: {repair}");
    }
    // Nothing started: no summons in the log, the human reads the answer.
    let bodies = log.bodies();
    assert!(
        !bodies.iter().any(|b| matches!(b, LogBody::Summoned(_))),
        "{bodies:?}"
    );
    assert_eq!(
        briefs(&bodies),
        vec![
            pair("You", "Swarm it"),
            pair("Arbiter", "One at a time, then.")
        ]
    );
}

// Decisions tested as table cases in coordinator/src/rules/tests/routing.rs.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_that_never_matches_its_schema_is_reported_to_the_arbiter() {
    let sys = System::start().await;
    let s = "s-orch-giveup";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Build it");
    let brief = "Brief: build it.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    for _ in 0..3 {
        sys.mock
            .push(&orch_lane(brief), MockReply::text("Done, I think?"));
    }
    sys.mock.push(
        &arb,
        arbiter(
            "address_human",
            "The builder faltered. Shall I summon another?",
        ),
    );
    sys.send(s, "Build it").await;
    sys.settled(s, 4).await;
    let bodies = briefs(&log.bodies());
    assert_eq!(bodies.len(), 4, "{bodies:?}");
    assert_eq!(bodies[0], pair("You", "Build it"));
    assert_eq!(bodies[1].0, "Summoned Orchestrator I");
    assert_eq!(bodies[2].0, "Error");
    assert!(
        bodies[2].1.starts_with("Orchestrator I stopped"),
        "{bodies:?}"
    );
    assert_eq!(bodies[2].1.matches("stopped").count(), 1, "{bodies:?}");
    assert!(
        bodies[2].1.contains("schema after 3 attempts"),
        "{bodies:?}"
    );
    assert_eq!(
        bodies[3],
        pair("Arbiter", "The builder faltered. Shall I summon another?")
    );
    let last = sys.mock.requests_for(&arb).pop().unwrap();
    assert!(
        last.last_user_text()
            .starts_with("System: Orchestrator I has stopped")
    );
    assert_eq!(sys.status(s).await.unwrap().active, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_error_is_shown_in_plain_words() {
    let sys = System::start().await;
    let s = "s-401";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Hello");
    sys.mock.push(
        &arb,
        MockReply::http_error(401, "authentication_error", "invalid x-api-key"),
    );
    sys.send(s, "Hello").await;
    sys.settled(s, 2).await;
    let error = briefs(&log.bodies())[1].clone();
    assert_eq!(
        error,
        pair(
            "Error",
            "the Arbiter's model call failed: authentication failed: invalid x-api-key (is the API key right?)"
        )
    );
    assert!(!error.1.contains(API_KEY));
    assert_eq!(sys.mock.requests_for(&arb).len(), 1, "a 401 is not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_on_every_subject_is_rejected_and_everything_keeps_serving() {
    let sys = System::start().await;
    let s = "s-garbage";
    let log = sys.watch_log(s).await;
    let client = sys.nats.client().await;
    let js = async_nats::jetstream::new(client.clone());
    let publish = |subject: String, payload: &'static str| {
        let js = js.clone();
        async move {
            js.publish(subject, payload.into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    };

    // On the human subject: the session's log shows the rejection.
    publish(subjects::session_human(s), "{not json").await;
    publish(subjects::session_human(s), r#"{"text": 42}"#).await;
    // A message whose session id does not match its subject is rejected too.
    publish(
        subjects::session_human(s),
        r#"{"v":1,"session_id":"other","message_id":"m","text":"hi","sent_at":"2026-01-01T00:00:00Z"}"#,
    )
    .await;
    // On the work queue and on an Orchestrator's output: logged and dropped.
    publish(subjects::summon("default"), "\u{0}\u{1}garbage").await;
    publish(subjects::summon("default"), r#"{"brief":"no ids"}"#).await;
    publish(subjects::orch_out("nobody"), "[1,2,3]").await;
    // Output that names its session but is malformed: that session's log shows it.
    publish(
        subjects::orch_out("ghost"),
        r#"{"session_id":"s-garbage","orch_id":"ghost","event":"??"}"#,
    )
    .await;
    let errors = log.wait_len(4).await;
    let mut rejected_subjects: Vec<String> = errors
        .iter()
        .map(|body| match body {
            LogBody::Error(e) => match &e.error {
                WireError::MalformedMessage { subject, .. } => subject.clone(),
                other => panic!("{other:?}"),
            },
            other => panic!("expected only rejections so far, got {other:?}"),
        })
        .collect();
    rejected_subjects.sort();
    let mut expected = vec![subjects::session_human(s); 3];
    expected.insert(0, subjects::orch_out("ghost"));
    assert_eq!(rejected_subjects, expected);
    let human_rejection = format!(
        "a malformed message on {} was rejected",
        subjects::session_human(s)
    );
    assert!(
        briefs(&errors)
            .iter()
            .any(|(_, text)| text.starts_with(&human_rejection))
    );

    // A whole exchange still works, with garbage also thrown at the active
    // Orchestrator's input and control subjects mid-way.
    let arb = arbiter_lane("Now build");
    let brief = "Brief: build after the storm.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.push(&orch_lane(brief), orch(true, "Which file?"));
    sys.mock
        .push(&arb, arbiter("address_orchestrator", "main.rs"));
    sys.mock
        .push(&orch_lane(brief), orch(true, "Built main.rs."));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));
    sys.send(s, "Now build").await;
    let at = log
        .wait_for("the Orchestrator's question", |b| {
            matches!(b, LogBody::Orchestrator(_))
        })
        .await;
    let orch_id = match &log.bodies()[at] {
        LogBody::Orchestrator(o) => o.orch_id.clone(),
        _ => unreachable!(),
    };
    publish(subjects::orch_in(&orch_id), "}{").await;
    publish(subjects::orch_ctl(&orch_id), r#"{"action":"explode"}"#).await;
    sys.settled(s, 4 + 7).await;
    let tail: Vec<(String, String)> = briefs(&log.bodies())[4..].to_vec();
    assert_eq!(
        tail,
        vec![
            pair("You", "Now build"),
            pair("Summoned Orchestrator I", brief),
            pair("Orchestrator I", "Which file?"),
            pair("Arbiter → Orchestrator I", "main.rs"),
            pair("Orchestrator I", "Built main.rs."),
            pair("Released", "I"),
            pair("Arbiter", "It is done."),
        ]
    );
    // The garbage never reached a model.
    for request in sys.mock.requests() {
        let text = request.all_text();
        assert!(
            !text.contains("garbage") && !text.contains("explode") && !text.contains("}{"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_too_large_is_refused_in_plain_words_and_the_session_goes_on() {
    let sys = System::start().await;
    let s = "s-too-large";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("After that, this.");
    sys.mock.push(&arb, arbiter("address_human", "Heard."));
    let huge = "x".repeat(300 * 1024);
    sys.send(s, &huge).await;
    sys.send(s, "After that, this.").await;
    sys.settled(s, 3).await;

    // What the user sees: the refusal with both sizes and what to do, then
    // the conversation going on.
    let bodies = log.bodies();
    let LogBody::Error(refused) = &bodies[0] else {
        panic!("expected the refusal, got {:?}", bodies[0]);
    };
    assert_eq!(
        refused.error,
        WireError::MessageTooLarge {
            subject: subjects::session_human(s),
            bytes: 300 * 1024,
            limit: 256 * 1024,
        }
    );
    assert_eq!(
        refused.error.to_string(),
        format!(
            "a message of 300 KiB on {} was refused: the limit is 256 KiB; \
             put long text in a file in the workspace and point to it",
            subjects::session_human(s)
        )
    );
    assert_eq!(
        briefs(&bodies[1..]),
        vec![pair("You", "After that, this."), pair("Arbiter", "Heard.")]
    );
    // The Arbiter never saw the refused text.
    let requests = sys.mock.requests_for(&arb);
    assert_eq!(requests.len(), 1);
    assert!(!requests[0].all_text().contains("xxxxxxxx"));
}
