//! Limits per console identity (issue #13: "300 sessions opened in 0.9 s
//! meant 300 model calls"): a console may have so many sessions at work at
//! once and send so fast; past either, its message is refused with the
//! reason in the session's log (once per run of refusals) and never reaches
//! the Arbiter. Other consoles are not affected. The server's own bound on
//! a console's lines is in `security/flood.rs`.

use crate::common;

use std::time::Duration;

use arbiter_coordinator::{ConsoleCaps, Rate};
use arbiter_tests::{Gate, eventually};
use common::*;
use pretty_assertions::assert_eq;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_past_its_limits_is_refused_and_others_are_not() {
    let mut sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let mut config = sys.coordinator_config();
    // Three sessions at work; eight messages, and next to none more for an hour.
    config.console_caps = ConsoleCaps {
        max_sessions: Some(3),
        rate: Some(Rate {
            count: 8,
            per: Duration::from_secs(3600),
            burst: 8,
        }),
    };
    sys.spawn_coordinator_with(config);

    // Alice opens five sessions in a burst; the Arbiter thinks about each
    // until the gate opens, so the first three are at work throughout.
    let thinking = Gate::new();
    let sessions: Vec<String> = (1..=5).map(|i| format!("s-alice-{i}")).collect();
    let mut logs = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        let first = format!("alice task {}", i + 1);
        sys.mock.push(
            &arbiter_lane(&first),
            arbiter("address_human", &format!("On it, task {}.", i + 1)).gated(thinking.clone()),
        );
        logs.push(sys.watch_log(s).await);
    }
    sys.mock.push(
        &arbiter_lane("alice task 1"),
        arbiter("address_human", "Noted."),
    );
    for (i, s) in sessions.iter().enumerate() {
        sys.send_as("alice", s, &format!("alice task {}", i + 1))
            .await;
    }
    let refused_sessions = "Message refused: console \"alice\" already has 3 sessions at work, \
        the most it may have at once. Send it again once one of them is idle, or raise the \
        limit (arbiter-coordinator --max-sessions-per-console, or \
        ARBITER_MAX_SESSIONS_PER_CONSOLE). Until one is idle, any more messages it sends to \
        other sessions are refused as well, and not logged one by one.";
    // The fourth is told; the fifth, in the same run, is refused without a word.
    logs[3].wait_len(1).await;
    for i in 1..=3 {
        sys.mock
            .wait_for_requests(&arbiter_lane(&format!("alice task {i}")), 1, WAIT)
            .await;
    }

    // A burst in a session at work: three tokens are left of eight. The
    // fourth line is refused, and said; the fifth only refused.
    for n in 1..=5 {
        sys.send_as("alice", &sessions[0], &format!("burst {n}"))
            .await;
    }
    let refused_rate = "Message refused: console \"alice\" is sending faster than \
        8/h,burst=8 messages. Wait a moment and send it again, or raise the limit \
        (arbiter-coordinator --console-rate, or ARBITER_CONSOLE_RATE). Until it slows down, \
        any more messages it sends are refused as well, and not logged one by one.";
    logs[0].wait_len(5).await;

    // Bob is not affected.
    let bob_log = sys.watch_log("s-bob").await;
    sys.mock.push(
        &arbiter_lane("bob task"),
        arbiter("address_human", "Hello, Bob."),
    );
    sys.send_as("bob", "s-bob", "bob task").await;
    sys.settled("s-bob", 2).await;

    thinking.open();
    sys.settled(&sessions[0], 7).await;
    for s in &sessions[1..3] {
        sys.settled(s, 2).await;
    }
    sys.settled(&sessions[3], 1).await;

    assert_eq!(
        briefs(&logs[0].bodies()),
        vec![
            pair("You", "alice task 1"),
            pair("You", "burst 1"),
            pair("You", "burst 2"),
            pair("You", "burst 3"),
            pair("System", refused_rate),
            pair("Arbiter", "On it, task 1."),
            pair("Arbiter", "Noted."),
        ]
    );
    for (i, log) in logs.iter().enumerate().take(3).skip(1) {
        assert_eq!(
            briefs(&log.bodies()),
            vec![
                pair("You", &format!("alice task {}", i + 1)),
                pair("Arbiter", &format!("On it, task {}.", i + 1)),
            ]
        );
    }
    assert_eq!(
        briefs(&logs[3].bodies()),
        vec![pair("System", refused_sessions)]
    );
    assert_eq!(briefs(&logs[4].bodies()), Vec::<(String, String)>::new());
    assert_eq!(
        briefs(&bob_log.bodies()),
        vec![pair("You", "bob task"), pair("Arbiter", "Hello, Bob.")]
    );

    // Exactly three of alice's sessions made model calls; the refused
    // messages reached no model.
    let calls: Vec<usize> = (1..=5)
        .map(|i| {
            sys.mock
                .requests_for(&arbiter_lane(&format!("alice task {i}")))
                .len()
        })
        .collect();
    assert_eq!(calls, vec![2, 1, 1, 0, 0]);
    assert_eq!(
        sys.mock.requests_for(&arbiter_lane("alice task 1"))[1].last_user_text(),
        "burst 1\n\nburst 2\n\nburst 3"
    );
    assert!(
        sys.mock
            .requests()
            .iter()
            .all(|r| !r.all_text().contains("burst 4") && !r.all_text().contains("burst 5"))
    );
}

/// A session stream an older version made holds the human lines, read
/// through `coordinator-human` on it (and, older still, only the bare
/// subject). The coordinator's start gives the human subjects to the human
/// intake, takes the lines the old consumer had not, and deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_stream_made_before_the_human_intake_gives_its_lines_up() {
    use arbiter_protocol::subjects;
    use async_nats::jetstream::{consumer::pull, stream};

    let mut sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    // As an older version left them: the human subjects in the session
    // stream, its consumer there, and a line it had not taken yet.
    let js = sys.bus.js.clone();
    js.delete_stream(subjects::HUMAN_STREAM).await.unwrap();
    js.delete_stream(subjects::SESSIONS_STREAM).await.unwrap();
    let old = js
        .create_stream(stream::Config {
            name: subjects::SESSIONS_STREAM.into(),
            subjects: vec![
                subjects::ALL_SESSION_HUMAN.into(),
                subjects::ALL_SESSION_HUMAN_FROM.into(),
                subjects::ALL_SESSION_LOG.into(),
                subjects::ALL_SESSION_IN.into(),
            ],
            storage: stream::StorageType::File,
            duplicate_window: Duration::from_secs(120),
            allow_direct: true,
            ..Default::default()
        })
        .await
        .unwrap();
    old.create_consumer(pull::Config {
        durable_name: Some(subjects::COORDINATOR_HUMAN_CONSUMER.into()),
        filter_subjects: vec![
            subjects::ALL_SESSION_HUMAN.into(),
            subjects::ALL_SESSION_HUMAN_FROM.into(),
        ],
        ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
        ..Default::default()
    })
    .await
    .unwrap();
    let log = sys.watch_log("s-upgraded").await;
    sys.mock.push(
        &arbiter_lane("sent before the upgrade"),
        arbiter("address_human", "Heard."),
    );
    sys.mock.push(
        &arbiter_lane("sent before the upgrade"),
        arbiter("address_human", "Heard again."),
    );
    sys.send_as("carol", "s-upgraded", "sent before the upgrade")
        .await;

    sys.spawn_coordinator();
    sys.settled("s-upgraded", 2).await;
    let subjects_of = |name: &'static str| {
        let js = js.clone();
        async move {
            let mut stream = js.get_stream(name).await.unwrap();
            let mut subjects = stream.info().await.unwrap().config.subjects.clone();
            subjects.sort();
            subjects
        }
    };
    assert_eq!(
        subjects_of(subjects::SESSIONS_STREAM).await,
        vec![
            subjects::ALL_SESSION_IN.to_owned(),
            subjects::ALL_SESSION_LOG.to_owned(),
        ]
    );
    assert_eq!(
        subjects_of(subjects::HUMAN_STREAM).await,
        vec![
            subjects::ALL_SESSION_HUMAN.to_owned(),
            subjects::ALL_SESSION_HUMAN_FROM.to_owned(),
        ]
    );
    // Once empty, the old consumer is deleted.
    eventually(WAIT, "the old consumer to be deleted", || async {
        let stream = js.get_stream(subjects::SESSIONS_STREAM).await.ok()?;
        stream
            .get_consumer::<pull::Config>(subjects::COORDINATOR_HUMAN_CONSUMER)
            .await
            .is_err()
            .then_some(())
    })
    .await;
    // A line sent now goes through the intake.
    sys.send_as("carol", "s-upgraded", "sent after the upgrade")
        .await;
    sys.settled("s-upgraded", 4).await;
    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "sent before the upgrade"),
            pair("Arbiter", "Heard."),
            pair("You", "sent after the upgrade"),
            pair("Arbiter", "Heard again."),
        ]
    );
    let stream = js.get_stream(subjects::HUMAN_STREAM).await.unwrap();
    let mut consumer = stream
        .get_consumer::<pull::Config>(subjects::COORDINATOR_HUMAN_CONSUMER)
        .await
        .unwrap();
    let mut filters = consumer
        .info()
        .await
        .unwrap()
        .config
        .filter_subjects
        .clone();
    filters.sort();
    assert_eq!(
        filters,
        vec![
            subjects::ALL_HUMAN_INTAKE.to_owned(),
            subjects::ALL_SESSION_HUMAN.to_owned(),
        ]
    );
}

/// A session that cannot take its messages (here: its first step is too
/// large for a message, and the object store it goes to refuses it, so its
/// actor retries the write) fills its inbox (256). The intake puts that
/// session's further messages back on the server instead of waiting, so
/// other sessions go on; once the session can store again, every message
/// reaches it, and its log says some were put back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_session_inbox_stalls_no_other_session_and_loses_nothing() {
    let mut sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    sys.spawn_coordinator();
    // Once the coordinator has started (a first session answered: it has
    // made the streams and set their limits), the object store of large
    // session steps refuses new writes past 64 KiB.
    let warm = sys.watch_log("s-inbox-warm").await;
    sys.mock
        .push(&arbiter_lane("warm"), arbiter("address_human", "Warm."));
    sys.send("s-inbox-warm", "warm").await;
    warm.wait_len(2).await;
    let blobs = format!("OBJ_{}", arbiter_protocol::subjects::SESSION_BLOBS_BUCKET);
    let mut store = eventually(WAIT, "the coordinator to make the object store", || async {
        sys.bus
            .js
            .get_stream(&blobs)
            .await
            .ok()
            .map(|s| s.cached_info().config.clone())
    })
    .await;
    let limit = store.max_bytes;
    let discard = store.discard;
    store.max_bytes = 64 * 1024;
    store.discard = async_nats::jetstream::stream::DiscardPolicy::New;
    sys.bus.js.update_stream(&store).await.unwrap();

    let stuck = "s-inbox-stuck";
    let other = "s-inbox-other";
    let stuck_log = sys.watch_log(stuck).await;
    let other_log = sys.watch_log(other).await;
    // The stuck session's Arbiter turn hangs; four lines of 250 KiB queue
    // meanwhile, each step's record holding the queue so far: by the third
    // or fourth, the step passes what one message holds, and the object
    // store refuses it, so the session retries that write.
    let never = Gate::new();
    sys.mock.push(
        &arbiter_lane("first"),
        arbiter("address_human", "never sent").gated(never.clone()),
    );
    sys.send(stuck, "first").await;
    stuck_log.wait_len(1).await;
    sys.mock
        .wait_for_requests(&arbiter_lane("first"), 1, WAIT)
        .await;
    const PARTS: usize = 4;
    for c in ["a", "b", "c", "d"] {
        sys.send(stuck, &c.repeat(250 * 1024)).await;
    }
    // 300 more: the inbox holds 256, the rest are put back again and again.
    // From eight consoles: the intake keeps 64 untaken lines of one.
    const MORE: usize = 300;
    for i in 0..MORE {
        sys.send_as(&format!("c{}", i % 8), stuck, &format!("more {i}"))
            .await;
    }

    // Another session takes its message meanwhile (its log shows it).
    sys.mock
        .push(&arbiter_lane("hello"), arbiter("address_human", "Hello."));
    sys.send(other, "hello").await;
    other_log
        .wait_for(
            "the other session to take its message",
            |b| matches!(b, arbiter_protocol::LogBody::Human(e) if e.text == "hello"),
        )
        .await;

    let humans = |bodies: &[arbiter_protocol::LogBody]| {
        bodies
            .iter()
            .filter(|b| matches!(b, arbiter_protocol::LogBody::Human(_)))
            .count()
    };
    // The stuck session can store again: every message reaches it, in its log once.
    let shown = humans(&stuck_log.bodies());
    assert!(
        shown < PARTS + 1,
        "{shown} lines shown: no step was refused"
    );
    store.max_bytes = limit;
    store.discard = discard;
    sys.bus.js.update_stream(&store).await.unwrap();
    eventually(
        Duration::from_secs(60),
        "every message in the stuck session's log",
        || async { (humans(&stuck_log.bodies()) == MORE + PARTS + 1).then_some(()) },
    )
    .await;
    // And its log says what happened to the late ones (what the sender sees).
    let told = stuck_log.bodies().iter().any(|b| {
        matches!(b, arbiter_protocol::LogBody::System(e)
            if e.text.contains("came faster than it could take them: they were put back"))
    });
    assert!(told, "{:#?}", stuck_log.bodies());
    other_log
        .wait_for(
            "the other session's answer",
            |b| matches!(b, arbiter_protocol::LogBody::Arbiter(e) if e.text == "Hello."),
        )
        .await;
    never.open();
}
