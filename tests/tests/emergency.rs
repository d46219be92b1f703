//! An emergency summons (#21): when the human declares one, the Arbiter
//! marks its summons `emergency`, the coordinator publishes it on the pool's
//! emergency lane (`summon.<pool>.urgent`), and a worker whose slot frees
//! takes it before the summonses queued before it. The log says so.

use crate::common;

use arbiter_protocol::{LogBody, subjects};
use arbiter_tests::{Gate, MockReply};
use common::*;
use serde_json::json;

/// Summonses waiting in the stream (taken or not: a running Orchestrator's
/// summons stays unacknowledged, as its lease).
async fn summonses_stored(sys: &System) -> u64 {
    let mut stream = sys
        .bus
        .js
        .get_stream(subjects::SUMMONS_STREAM)
        .await
        .unwrap();
    stream.info().await.unwrap().state.messages
}

/// Sends `human` to session `s`, whose Arbiter summons an Orchestrator
/// with `brief`, and waits until the summons is stored.
async fn summon(sys: &System, s: &str, human: &str, brief: &str, extra: serde_json::Value) {
    let before = summonses_stored(sys).await;
    let mut reply = json!({"intent": "summon_orchestrator", "message": brief});
    reply
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    sys.mock.push(&arbiter_lane(human), MockReply::json(&reply));
    sys.send(s, human).await;
    arbiter_tests::eventually(WAIT, "the summons to be stored", || async {
        (summonses_stored(sys).await > before).then_some(())
    })
    .await;
}

/// One worker with one slot, busy; two summonses queued behind it; then an
/// emergency. When the slot frees, the emergency's Orchestrator is the one
/// that starts: its model request comes while the queued ones have none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emergency_goes_ahead_of_the_summonses_queued_in_its_pool() {
    let mut sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    sys.spawn_worker("worker-one", 1, 200_000);
    sys.worker_up("worker-one").await;

    // The slot is taken: the first Orchestrator's model call is held.
    let busy_human = "Write the lexer";
    let busy_brief = "Brief: write the lexer.";
    let hold = Gate::new();
    sys.mock.push(
        &orch_lane(busy_brief),
        orch(true, "Lexer written.").gated(hold.clone()),
    );
    summon(&sys, "s-busy", busy_human, busy_brief, json!({})).await;
    sys.mock
        .wait_for_requests(&orch_lane(busy_brief), 1, WAIT)
        .await;

    // Two ordinary summonses wait in the pool's queue.
    let queued = [
        ("s-docs", "Tidy the docs", "Brief: tidy the docs."),
        ("s-lint", "Fix the lints", "Brief: fix the lints."),
    ];
    for (s, human, brief) in queued {
        sys.mock.push(&orch_lane(brief), orch(true, "Done."));
        summon(&sys, s, human, brief, json!({})).await;
    }

    // Then the human declares an emergency.
    let human = "Emergency: production is down, roll back the last deploy now";
    let urgent_brief = "Brief: roll back the last deploy.";
    sys.mock
        .push(&orch_lane(urgent_brief), orch(true, "Rolled back."));
    let log = sys.watch_log("s-prod").await;
    summon(
        &sys,
        "s-prod",
        human,
        urgent_brief,
        json!({
            "emergency": true,
            "directive": {"words": human, "parsed": "emergency", "confidence": 98}
        }),
    )
    .await;

    // Nothing started meanwhile: the only slot is still held.
    for (_, _, brief) in queued {
        assert!(sys.mock.requests_for(&orch_lane(brief)).is_empty());
    }
    assert!(sys.mock.requests_for(&orch_lane(urgent_brief)).is_empty());

    // The busy Orchestrator reports, its Arbiter releases it: the slot frees.
    sys.mock.push(
        &arbiter_lane(busy_human),
        arbiter("release_orchestrators", "The lexer is written."),
    );
    hold.open();
    sys.mock
        .wait_for_requests(&orch_lane(urgent_brief), 1, WAIT)
        .await;
    for (_, _, brief) in queued {
        assert!(
            sys.mock.requests_for(&orch_lane(brief)).is_empty(),
            "a summons queued before the emergency started first: {brief}"
        );
    }

    // What the human reads in the log: the emergency, in the human's words.
    let bodies = log.bodies();
    let said = |needle: &str| {
        bodies
            .iter()
            .any(|b| matches!(b, LogBody::System(e) if e.text.contains(needle)))
    };
    assert!(
        said("is an emergency: it goes ahead of the work queued in the pool default"),
        "{bodies:?}"
    );
    assert!(said(human), "the human's words verbatim: {bodies:?}");
}

/// A core subscriber gets a message before the server has stored it, so a
/// worker woken by an emergency may look in the lane a moment too early and
/// find it empty. Its look waits for the store, so the emergency starts at
/// once, not when the worker's pool fetch next ends (up to 5 s). Here the
/// wake-up is a summons the server refused, and the emergency lands in the
/// lane a moment later without a wake-up of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emergency_stored_just_after_its_wake_up_still_starts_at_once() {
    use arbiter_protocol::{Summon, VERSION};
    let mut sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    sys.spawn_worker("worker-idle", 1, 200_000);
    sys.worker_up("worker-idle").await;
    store_quietly(
        &sys,
        subjects::SUMMONS_STREAM,
        "test.late-urgent.*",
        &format!("{}.summon.{{{{wildcard(1)}}}}.urgent", subjects::PREFIX),
    )
    .await;
    // Let the worker settle into its pool fetch.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let brief = "Brief: roll back now.";
    sys.mock.push(&orch_lane(brief), orch(true, "Rolled back."));
    let summon = Summon {
        member: None,
        v: VERSION,
        session_id: "s-late-urgent".into(),
        orch_id: "o-late-urgent".into(),
        number: 1,
        brief: brief.into(),
        workspace: None,
        pool: "default".into(),
        summoned_at: chrono::Utc::now(),
        runtime: None,
        needs: Vec::new(),
        handoff: None,
        budget: None,
        emergency: true,
        policy: None,
        arbiter_policy: None,
        start_from: None,
        link: None,
    };
    publish_refused(&sys, subjects::summon_urgent("default"), &summon).await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let stored = std::time::Instant::now();
    sys.bus
        .js
        .publish(
            "test.late-urgent.default",
            serde_json::to_vec(&summon).unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();

    sys.mock.wait_for_requests(&orch_lane(brief), 1, WAIT).await;
    let started = stored.elapsed();
    assert!(
        started < std::time::Duration::from_secs(2),
        "the emergency started {started:?} after it was stored"
    );
    eprintln!("an emergency stored after its wake-up: started {started:?} after the store");
}
