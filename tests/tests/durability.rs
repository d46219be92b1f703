//! Nothing is lost when the coordinator dies: kill -9 of the real binary in
//! the middle of an Arbiter turn, then a restart. The turn runs again from
//! the stored transcript; the log has no gap and no duplicate; an
//! Orchestrator gets each of the Arbiter's messages exactly once.

use crate::common;

use arbiter_protocol::LogBody;
use arbiter_tests::Gate;
use common::*;
use futures::StreamExt as _;
use pretty_assertions::assert_eq;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_mid_turn_resumes_the_turn_after_restart() {
    let sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let s = "s-kill-mid-turn";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Count to three");
    // The first attempt hangs; the coordinator dies while waiting for it.
    let never = Gate::new();
    sys.mock
        .push(&arb, arbiter("address_human", "LOST").gated(never.clone()));
    let hold = Gate::new();
    sys.mock.push(
        &arb,
        arbiter("address_human", "One, two, three.").gated(hold.clone()),
    );
    sys.mock.push(&arb, arbiter("address_human", "Four."));

    let mut coordinator = sys.coordinator_process();
    sys.send(s, "Count to three").await;
    sys.mock.wait_for_requests(&arb, 1, WAIT).await;
    log.wait_len(1).await;
    coordinator.start_kill().unwrap();
    coordinator.wait().await.unwrap();

    // Typed while no coordinator runs: it waits in the stream.
    sys.send(s, "And four?").await;
    let _coordinator = sys.coordinator_process();
    // The restarted coordinator re-runs the unfinished turn by itself.
    let requests = sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    assert_eq!(requests[1].body["messages"], requests[0].body["messages"]);
    log.wait_for(
        "the human's second message",
        |b| matches!(b, LogBody::Human(h) if h.text == "And four?"),
    )
    .await;
    hold.open();
    sys.settled(s, 4).await;
    never.open();

    assert_eq!(
        log.entries().iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Count to three"),
            pair("You", "And four?"),
            pair("Arbiter", "One, two, three."),
            pair("Arbiter", "Four."),
        ]
    );
    let requests = sys.mock.requests_for(&arb);
    assert_eq!(requests.len(), 3, "the lost turn ran twice, the next once");
    assert_eq!(
        requests[2].messages().len(),
        3,
        "the restored transcript continues"
    );
    assert_eq!(requests[2].last_user_text(), "And four?");
    assert!(!requests[2].all_text().contains("LOST"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_while_an_orchestrator_waits_delivers_its_answer_once() {
    let sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let s = "s-kill-orch";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Build the store");
    let brief = "Brief: build the session store.";
    let lane = orch_lane(brief);
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock
        .push(&lane, orch(true, "Shared store or stateless?"));
    let never = Gate::new();
    sys.mock.push(
        &arb,
        arbiter("address_orchestrator", "LOST").gated(never.clone()),
    );
    sys.mock
        .push(&arb, arbiter("address_orchestrator", "Stateless."));
    sys.mock.push(&lane, orch(true, "Done: stateless store."));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));

    let mut coordinator = sys.coordinator_process();
    sys.send(s, "Build the store").await;
    // The Arbiter is answering the Orchestrator's question when the coordinator dies.
    sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    coordinator.start_kill().unwrap();
    coordinator.wait().await.unwrap();
    // The status in the KV bucket is written after the turn starts, so a kill
    // can leave it saying idle: the restart must not trust it.
    let mut stale = sys.status(s).await.expect("a status was written");
    stale.state = arbiter_protocol::SessionState::Idle;
    stale.queued = 0;
    sys.bus
        .sessions_kv
        .put(s, serde_json::to_vec(&stale).unwrap().into())
        .await
        .unwrap();
    let _coordinator = sys.coordinator_process();
    sys.settled(s, 7).await;
    never.open();

    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Build the store"),
            pair("Summoned Orchestrator I", brief),
            pair("Orchestrator I", "Shared store or stateless?"),
            pair("Arbiter → Orchestrator I", "Stateless."),
            pair("Orchestrator I", "Done: stateless store."),
            pair("Released", "I"),
            pair("Arbiter", "It is done."),
        ]
    );
    let orch_requests = sys.mock.requests_for(&lane);
    assert_eq!(
        orch_requests.len(),
        2,
        "one summons, one answer: nothing twice"
    );
    assert_eq!(orch_requests[1].last_user_text(), "Stateless.");
    assert_eq!(sys.status(s).await.unwrap().summoned, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_server_restart_mid_conversation_loses_nothing() {
    let mut sys = System::start().await;
    let s = "s-nats-restart";
    let arb = arbiter_lane("Build the cache");
    let brief = "Brief: build the cache.";
    let lane = orch_lane(brief);
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.push(&lane, orch(true, "LRU or LFU?"));
    {
        let log = sys.watch_log(s).await;
        sys.send(s, "Build the cache").await;
        log.wait_len(3).await;
    }
    // The server goes away while the Orchestrator waits for its answer, and
    // comes back on the same port with the same store.
    sys.nats.restart().await;
    sys.mock.push(&arb, arbiter("address_orchestrator", "LRU."));
    sys.mock.push(&lane, orch(true, "Done: LRU cache."));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));
    // The processes reconnect by themselves; the Arbiter's turn on the
    // question was already running or runs now.
    sys.settled(s, 7).await;
    let log = sys.watch_log(s).await;
    log.wait_len(7).await;
    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Build the cache"),
            pair("Summoned Orchestrator I", brief),
            pair("Orchestrator I", "LRU or LFU?"),
            pair("Arbiter → Orchestrator I", "LRU."),
            pair("Orchestrator I", "Done: LRU cache."),
            pair("Released", "I"),
            pair("Arbiter", "It is done."),
        ]
    );
    assert_eq!(
        log.entries().iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=7).collect::<Vec<u64>>()
    );
    assert_eq!(sys.mock.requests_for(&lane).len(), 2);
    // And a new message after the restart is served as usual.
    sys.mock.push(&arb, arbiter("address_human", "Still here."));
    sys.send(s, "Are you there?").await;
    sys.settled(s, 9).await;
}

/// Session `s` answers "First" with "One." (and its next line with
/// "Two."); its coordinator is killed, `bad` is stored on `subject`
/// meanwhile, and a coordinator is started again: its log, the Arbiter's
/// lane and the running coordinator.
async fn stored_while_down(
    sys: &System,
    s: &str,
    subject: &str,
    bad: &serde_json::Value,
) -> (LogWatch, String, tokio::process::Child) {
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("First");
    sys.mock.push(&arb, arbiter("address_human", "One."));
    sys.mock.push(&arb, arbiter("address_human", "Two."));
    let mut coordinator = sys.coordinator_process();
    sys.send(s, "First").await;
    sys.settled(s, 2).await;
    coordinator.start_kill().unwrap();
    coordinator.wait().await.unwrap();
    sys.bus
        .js
        .publish(subject.to_owned(), bad.to_string().into())
        .await
        .unwrap()
        .await
        .unwrap();
    (log, arb, sys.coordinator_process())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_stored_step_costs_that_step_not_the_session() {
    let sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let s = "s-bad-record";
    // A step record nobody can read lands on the session's log (a step
    // entry, which consoles skip, whose record is not one).
    let subject = arbiter_protocol::subjects::session_log(s);
    let bad = serde_json::json!({
        "v": arbiter_protocol::VERSION,
        "session_id": s,
        "seq": 2,
        "at": "2026-01-01T00:00:00Z",
        "body": {"type": "step"},
        "step": {"rev": 4, "append": 7},
    });
    let (log, arb, _coordinator) = stored_while_down(&sys, s, &subject, &bad).await;
    // The restarted coordinator says so in the log at once.
    log.wait_len(3).await;
    sys.send(s, "Second").await;
    sys.settled(s, 5).await;

    // What the user sees: the error, then the conversation going on.
    let bodies = log.bodies();
    assert!(
        matches!(&bodies[2], LogBody::Error(e) if matches!(
            &e.error,
            arbiter_protocol::WireError::MalformedMessage { subject: on, .. } if *on == subject
        )),
        "{:?}",
        bodies[2]
    );
    assert_eq!(
        briefs(&[&bodies[..2], &bodies[3..]].concat()),
        vec![
            pair("You", "First"),
            pair("Arbiter", "One."),
            pair("You", "Second"),
            pair("Arbiter", "Two."),
        ]
    );
    assert_eq!(
        log.entries().iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    // The readable steps survived: the Arbiter still has the first exchange.
    let requests = sys.mock.requests_for(&arb);
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].messages().len(), 3);
}

/// An input whose sealed record does not open (sealed under another key:
/// the coordinators' key was replaced by hand, say) costs its step, not the
/// session: the restarted coordinator logs the error, the input still shows,
/// and the log goes on after it with no `seq` twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_record_that_does_not_open_costs_that_step_not_the_session() {
    let sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let s = "s-bad-seal";
    let subject = arbiter_protocol::subjects::session_input(s, "o-gone", 1);
    let foreign = arbiter_bus::seal::Sealer::random();
    let bad = serde_json::json!({
        "v": arbiter_protocol::VERSION,
        "session_id": s,
        "seq": 3,
        "at": "2026-01-01T00:00:00Z",
        "body": {"type": "arbiter_to_orchestrator", "number": 1, "orch_id": "o-gone",
                 "text": "Lost words.", "input_seq": 1},
        "sealed": foreign.seal(s, br#"{"rev":3}"#),
    });
    let (log, _, _coordinator) = stored_while_down(&sys, s, &subject, &bad).await;
    log.wait_len(4).await;
    sys.send(s, "Second").await;
    sys.settled(s, 6).await;

    // What the user sees: the input, the error that says its record did
    // not open, then the conversation going on.
    let bodies = log.bodies();
    assert!(
        matches!(&bodies[3], LogBody::Error(e) if matches!(
            &e.error,
            arbiter_protocol::WireError::MalformedMessage { subject: on, detail }
                if *on == subject && detail.contains("did not open")
        )),
        "{:?}",
        bodies[3]
    );
    assert_eq!(
        briefs(&[&bodies[..3], &bodies[4..]].concat()),
        vec![
            pair("You", "First"),
            pair("Arbiter", "One."),
            pair("Arbiter → Orchestrator I", "Lost words."),
            pair("You", "Second"),
            pair("Arbiter", "Two."),
        ]
    );
    assert_eq!(
        log.entries().iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_step_too_large_for_one_message_is_stored_and_restored() {
    let sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let s = "s-big-step";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Wait for it");
    let hold = Gate::new();
    sys.mock.push(
        &arb,
        arbiter("address_human", "Waiting.").gated(hold.clone()),
    );
    sys.mock
        .push(&arb, arbiter("address_human", "Read it all."));
    sys.mock.push(&arb, arbiter("address_human", "Still here."));

    let mut coordinator = sys.coordinator_process();
    sys.send(s, "Wait for it").await;
    sys.mock.wait_for_requests(&arb, 1, WAIT).await;
    // Four long messages queue while the Arbiter is mid-turn: the queue, and
    // then the turn made of it, pass 1 MB, more than one NATS message holds.
    let parts: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|c| c.repeat(250 * 1024))
        .collect();
    for part in &parts {
        sys.send(s, part).await;
    }
    log.wait_len(5).await;
    hold.open();
    sys.settled(s, 7).await;
    let pointers = state_pointers(&sys, s).await;
    assert!(pointers >= 1, "no record went to the object store");

    // A restart reads the large steps back through their pointers.
    coordinator.start_kill().unwrap();
    coordinator.wait().await.unwrap();
    let _coordinator = sys.coordinator_process();
    sys.send(s, "Are you there?").await;
    sys.settled(s, 9).await;
    let requests = sys.mock.requests_for(&arb);
    assert_eq!(requests.len(), 3);
    // The turn made of the four parts reached the model whole, and is still
    // in the transcript after the restart.
    let joined = requests[1].last_user_text();
    assert!(parts.iter().all(|p| joined.contains(p.as_str())));
    assert_eq!(requests[2].messages().len(), 5);
    assert_eq!(
        requests[2].body["messages"][2],
        requests[1].body["messages"][2]
    );
    assert_eq!(
        log.entries().iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=9).collect::<Vec<_>>()
    );
}

/// Steps on a session's log whose record went to the object store.
async fn state_pointers(sys: &System, session: &str) -> usize {
    let subject = arbiter_protocol::subjects::session_log(session);
    let (messages, _) = sys
        .bus
        .replay_subject(arbiter_protocol::subjects::SESSIONS_STREAM, &subject)
        .await
        .unwrap()
        .unwrap();
    messages
        .iter()
        .filter(|m| {
            serde_json::from_slice::<serde_json::Value>(&m.payload)
                .unwrap()
                .get("blob")
                .is_some()
        })
        .count()
}

/// What a conversation costs the server (protocol v2): no session record of
/// its own. Each step's record rides on the first entry it shows, so the
/// session's log holds what consoles show and nothing more, and the old
/// state subject holds nothing. Nothing is lost for it: every question is in
/// the log once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arbiter_turn_stores_no_record_of_its_own() {
    let sys = System::start().await;
    let s = "s-two-records";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Ask me three things");
    let brief = "Ask three questions, one at a time.";
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    for n in 1..=3 {
        sys.mock
            .push(&orch_lane(brief), orch(true, &format!("Question {n}?")));
        let reply = if n == 3 {
            arbiter("release_orchestrators", "Done.")
        } else {
            arbiter("address_orchestrator", &format!("Answer {n}."))
        };
        sys.mock.push(&arb, reply);
    }
    sys.send(s, "Ask me three things").await;
    log.wait_for("the release", |b| matches!(b, LogBody::Released(_)))
        .await;
    // The release step shows two entries (its words and the release); the
    // count is taken once both are in.
    log.wait_for(
        "the last words",
        |b| matches!(b, LogBody::Arbiter(a) if a.text == "Done."),
    )
    .await;
    let status = sys.settled(s, log.entries().len() as u64).await;
    assert_eq!(status.summoned, 1);

    // Four Arbiter turns: the human's line, then three questions.
    assert_eq!(sys.mock.requests_for(&arb).len(), 4);
    let state = stored_per_subject(
        &sys,
        arbiter_protocol::subjects::STATE_STREAM,
        &arbiter_protocol::subjects::session_state(s),
    )
    .await;
    assert!(
        state.is_empty(),
        "no record on the state subject: {state:?}"
    );
    // On `.log`, and (protocol v3) each input on a subject of its own.
    let mut stored = 0;
    for subject in arbiter_protocol::subjects::session_log_filters(s) {
        stored += stored_per_subject(&sys, arbiter_protocol::subjects::SESSIONS_STREAM, &subject)
            .await
            .iter()
            .map(|(_, n)| n)
            .sum::<usize>();
    }
    assert_eq!(
        stored,
        log.entries().len(),
        "every step rode on an entry the log shows"
    );
    // Each question and each answer once, in order.
    let said: Vec<String> = log
        .bodies()
        .into_iter()
        .filter_map(|b| match b {
            LogBody::Orchestrator(o) => Some(o.text),
            _ => None,
        })
        .collect();
    assert_eq!(said, vec!["Question 1?", "Question 2?", "Question 3?"]);
}

/// Stored messages of the Orchestrators' streams now (their last sequences).
async fn orch_streams_seq(sys: &System) -> u64 {
    let mut total = 0;
    for name in [
        arbiter_protocol::subjects::ORCH_STREAM,
        arbiter_protocol::subjects::ORCH_STATE_STREAM,
    ] {
        let mut stream = sys.bus.js.get_stream(name).await.unwrap();
        total += stream.info().await.unwrap().state.last_sequence;
    }
    total
}

/// What an Orchestrator turn costs the server: a turn whose reply is an
/// output stores one message, its state record on `orch.<id>.out`, which is
/// the output the coordinator reads (not a record plus a copy of the output).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_turn_with_an_output_is_one_stored_message() {
    let sys = System::start().await;
    let s = "s-one-message";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Ask me two things");
    let brief = "Ask two questions, one at a time.";
    let lane = orch_lane(brief);
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.push(&lane, orch(true, "Question 1?"));
    sys.mock
        .push(&arb, arbiter("address_orchestrator", "Answer 1."));
    let hold = Gate::new();
    sys.mock
        .push(&lane, orch(true, "Question 2?").gated(hold.clone()));
    sys.mock
        .push(&arb, arbiter("address_human", "Two questions."));
    sys.send(s, "Ask me two things").await;
    // The Orchestrator's second turn has begun: the answer is stored (in
    // `orch.<id>.in`), its model call waits.
    sys.mock.wait_for_requests(&lane, 2, WAIT).await;
    let before = orch_streams_seq(&sys).await;
    hold.open();
    log.wait_for(
        "the Arbiter's word after the second question",
        |b| matches!(b, LogBody::Arbiter(a) if a.text == "Two questions."),
    )
    .await;
    // The Orchestrator waits for the Arbiter now; it wrote its turn before
    // the coordinator could log the question.
    let after = orch_streams_seq(&sys).await;
    assert_eq!(
        after - before,
        1,
        "one stored message for the turn and its output"
    );
    let said: Vec<String> = log
        .bodies()
        .into_iter()
        .filter_map(|b| match b {
            LogBody::Orchestrator(o) => Some(o.text),
            _ => None,
        })
        .collect();
    assert_eq!(said, vec!["Question 1?", "Question 2?"]);
}

/// How many messages `stream` stores on each subject matching `filter`.
async fn stored_per_subject(sys: &System, stream: &str, filter: &str) -> Vec<(String, usize)> {
    sys.bus
        .js
        .get_stream(stream)
        .await
        .unwrap()
        .info_with_subjects(filter)
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await
}
