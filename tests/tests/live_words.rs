//! The Arbiter's words reach consoles while the model writes them: the
//! coordinator publishes `ArbiterDelta`s on `session.<id>.delta` during the
//! turn; the log entry that ends it stays the record.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};

use arbiter_protocol::{ArbiterDelta, ArbiterIntent, subjects};
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
