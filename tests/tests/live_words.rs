//! The Arbiter's words reach consoles while the model writes them: the
//! coordinator publishes `ArbiterDelta`s on `session.<id>.delta` during the
//! turn; the log entry that ends it stays the record.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbiter_bus::TraceContext;
use arbiter_protocol::{ArbiterDelta, ArbiterIntent, LogBody, subjects};
use arbiter_tests::{MockReply, eventually};
use common::*;
use futures::StreamExt;
use pretty_assertions::assert_eq;

async fn collect_deltas(sys: &System, session: &str) -> Arc<Mutex<Vec<ArbiterDelta>>> {
    let client = sys.nats.client().await;
    let mut sub = client
        .subscribe(subjects::session_delta(session))
        .await
        .unwrap();
    client.flush().await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    tokio::spawn(async move {
        let _client = client;
        while let Some(msg) = sub.next().await {
            sink.lock()
                .unwrap()
                .push(serde_json::from_slice(&msg.payload).unwrap());
        }
    });
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_arbiters_reply_streams_in_pieces() {
    let sys = System::start().await;
    let s = "s-live";
    let deltas = collect_deltas(&sys, s).await;
    let log = sys.watch_log(s).await;
    let answer = "What OAuth providers? Token \"expiry\"?";
    sys.mock.push(
        &arbiter_lane("Build me an auth system"),
        arbiter("address_human", answer),
    );
    sys.send(s, "Build me an auth system").await;
    log.wait_len(2).await;
    let got = eventually(WAIT, "the whole reply in deltas", || async {
        let got = deltas.lock().unwrap().clone();
        (got.iter().map(|d| d.text.as_str()).collect::<String>() == answer).then_some(got)
    })
    .await;
    assert!(got.len() >= 2, "the reply came in pieces: {got:?}");
    for delta in &got {
        assert_eq!(delta.session_id, s);
        assert_eq!(delta.turn, 1);
        assert_eq!(delta.attempt, 0);
        assert_eq!(delta.intent, Some(ArbiterIntent::AddressHuman));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repaired_reply_streams_as_a_new_attempt() {
    let sys = System::start().await;
    let s = "s-live-repair";
    let deltas = collect_deltas(&sys, s).await;
    let arb = arbiter_lane("Speak");
    sys.mock.push(
        &arb,
        MockReply::text(r#"{"intent":"shout","message":"HEAR ME"}"#),
    );
    sys.mock.push(&arb, arbiter("address_human", "I hear."));
    sys.send(s, "Speak").await;
    sys.settled(s, 2).await;
    let got = eventually(WAIT, "both attempts in deltas", || async {
        let got = deltas.lock().unwrap().clone();
        got.iter().any(|d| d.attempt == 1).then_some(got)
    })
    .await;
    let text_of = |attempt: u32| {
        got.iter()
            .filter(|d| d.attempt == attempt)
            .map(|d| d.text.as_str())
            .collect::<String>()
    };
    assert_eq!(text_of(0), "HEAR ME");
    assert!(
        got.iter()
            .filter(|d| d.attempt == 0)
            .all(|d| d.intent.is_none())
    );
    // The repaired attempt is the one a console keeps.
    eventually(WAIT, "the repaired attempt in full", || async {
        let all = deltas.lock().unwrap().clone();
        (all.iter()
            .filter(|d| d.attempt == 1)
            .map(|d| d.text.as_str())
            .collect::<String>()
            == "I hear.")
            .then_some(())
    })
    .await;
}

/// The coordinator starts the Arbiter's call on an Orchestrator's output as
/// the server takes it in (a core subscriber gets it before it is stored),
/// and the turn that the stored copy starts adopts that call: one model
/// request, not two. Until then nothing of it shows: no log entry, and none
/// of the words it streams. The test plays the Orchestrator's worker, as a
/// worker in another language would: it publishes the output once in a way
/// the server refuses to store, then as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_starts_the_arbiters_call_as_it_is_published_and_shows_once_stored() {
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    let s = "s-early";
    let deltas = collect_deltas(&sys, s).await;
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Sort the crates");
    let brief = "Sort the crates; ask which goes first.";
    let answer = "The red one first, then the blue.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.push(&arb, arbiter("address_orchestrator", answer));
    sys.send(s, "Sort the crates").await;
    let at = log
        .wait_for("the summons", |b| matches!(b, LogBody::Summoned(_)))
        .await;
    let orch_id = match &log.bodies()[at] {
        LogBody::Summoned(e) => e.orch_id.clone(),
        other => panic!("{other:?}"),
    };
    let question = bare_question(s, &orch_id, 1, "Which crate goes first?");
    // What core subscribers get of every publish, before the store; here
    // without the store. The coordinator subscribes to the Orchestrator's
    // output once the summons' step is stored, a moment after the log shows
    // it: sent again until the call comes (an early call is made once per
    // output; a copy that finds no subscriber is simply not seen).
    eventually(WAIT, "the early call", || async {
        publish_refused(&sys, subjects::orch_out(&orch_id), &question).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        (sys.mock.requests_for(&arb).len() >= 2).then_some(())
    })
    .await;
    assert_eq!(
        sys.mock.requests_for(&arb)[1].last_user_text(),
        "Orchestrator I: Which crate goes first?"
    );
    // Not taken: nothing logged, none of its words shown (the mock
    // answered at once, so they would be out by now).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !log.bodies().iter().any(|b| matches!(
            b,
            LogBody::Orchestrator(_) | LogBody::ArbiterToOrchestrator(_)
        )),
        "{:?}",
        log.bodies()
    );
    assert!(
        deltas.lock().unwrap().iter().all(|d| d.turn < 2),
        "words of a turn not taken were shown: {:?}",
        deltas.lock().unwrap()
    );

    // The stored copy: taken, and its turn is the call already made.
    sys.bus
        .publish_js(
            subjects::orch_out(&orch_id),
            &format!("{orch_id}-out-1"),
            &TraceContext::none(),
            &question,
        )
        .await
        .unwrap();
    log.wait_for("the answer", |b| {
        matches!(b, LogBody::ArbiterToOrchestrator(_))
    })
    .await;
    let words = eventually(WAIT, "the answer's words", || async {
        let text: String = deltas
            .lock()
            .unwrap()
            .iter()
            .filter(|d| d.turn == 2)
            .map(|d| d.text.as_str())
            .collect();
        (text == answer).then_some(text)
    })
    .await;
    assert_eq!(words, answer);
    assert_eq!(
        sys.mock.requests_for(&arb).len(),
        2,
        "the stored copy's turn made a request of its own"
    );
    let shown: Vec<(String, String)> = briefs(&log.bodies())
        .into_iter()
        .filter(|(kind, _)| kind != "System")
        .collect();
    assert_eq!(
        shown,
        vec![
            pair("You", "Sort the crates"),
            pair("Summoned Orchestrator I", brief),
            pair("Orchestrator I", "Which crate goes first?"),
            pair("Arbiter → Orchestrator I", answer),
        ]
    );
}
