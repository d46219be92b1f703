//! Several coordinators on one bus share the sessions: an Orchestrator's
//! question reaches the Arbiter whichever coordinator pulls it and the human
//! gets the answer; a coordinator killed mid-turn has its sessions resumed by
//! the others (each console sees every entry once); a coordinator that
//! starts beside one that owns every session takes a share without any
//! turn being run twice.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use arbiter_protocol::{LogBody, subjects};
use arbiter_tests::{Gate, eventually};
use common::*;
use futures::StreamExt as _;
use pretty_assertions::assert_eq;

/// A coordinator's config under a fixed id.
fn coordinator(sys: &System, id: &str) -> arbiter_coordinator::Config {
    arbiter_coordinator::Config {
        id: id.to_owned(),
        ..sys.coordinator_config()
    }
}

/// Who owns each session, as the lease bucket says.
async fn owners(sys: &System, sessions: &[String]) -> BTreeMap<String, String> {
    let kv = sys
        .bus
        .js
        .get_key_value(subjects::COORDINATOR_LEASES_BUCKET)
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for s in sessions {
        if let Some(owner) = kv.get(subjects::session_lease_key(s)).await.unwrap() {
            out.insert(s.clone(), String::from_utf8(owner.to_vec()).unwrap());
        }
    }
    out
}

/// The flow that stalled with two coordinators: the Orchestrator's
/// question is pulled by whichever coordinator, reaches the Arbiter of the
/// session's owner, and the human reads the answer. The second coordinator
/// starts while the Orchestrators work, and takes a share of the sessions
/// (handed over mid-flow), so both pull messages of sessions the other owns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_coordinators_an_orchestrators_question_reaches_the_arbiter_and_the_human_gets_the_answer()
 {
    two_coordinators_flow(false).await;
}

/// The same as deployed securely: both coordinators on the `coordinator`
/// credential, under the permissions of `protocol::roles` (the lease bucket,
/// forwarding to each other, answering on the asker's inbox).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_coordinators_over_tls_with_the_coordinator_credential() {
    two_coordinators_flow(true).await;
}

async fn two_coordinators_flow(secure: bool) {
    let mut sys = System::start_with(Options {
        coordinator: false,
        slots: 8,
        secure,
        ..Default::default()
    })
    .await;
    sys.worker_up("worker-0").await;
    sys.spawn_coordinator_with(coordinator(&sys, "c-a"));
    let sessions: Vec<String> = (0..8).map(|i| format!("s-two-{i}")).collect();
    let questions = Gate::new();
    let mut logs = Vec::new();
    for s in &sessions {
        let ask = format!("Build the thing of {s}");
        let brief = format!("Brief: build the thing of {s}.");
        let arb = arbiter_lane(&ask);
        let lane = orch_lane(&brief);
        sys.mock.push(&arb, arbiter("summon_orchestrator", &brief));
        sys.mock.push(
            &lane,
            orch(true, "Clarifying: stateless or not?").gated(questions.clone()),
        );
        sys.mock
            .push(&arb, arbiter("address_orchestrator", "Stateless."));
        sys.mock.push(&lane, orch(true, "Complete: stateless."));
        sys.mock.push(
            &arb,
            arbiter("release_orchestrators", "It is done, stateless."),
        );
        logs.push((s.clone(), ask, brief, sys.watch_log(s).await));
    }
    for (s, ask, _, _) in &logs {
        sys.send(s, ask).await;
    }
    for (_, _, _, log) in &logs {
        log.wait_len(2).await;
    }
    // Every Orchestrator is at work; a second coordinator starts and takes
    // its share of the sessions before the questions come.
    sys.spawn_coordinator_with(coordinator(&sys, "c-b"));
    eventually(WAIT, "c-b to take a share", || async {
        let owned = owners(&sys, &sessions).await;
        (owned.values().filter(|o| *o == "c-b").count() >= 2).then_some(())
    })
    .await;
    questions.open();
    for (s, ask, brief, log) in &logs {
        sys.settled(s, 7).await;
        // What the human's console shows: the question answered, the work
        // reported, the answer to the human; each once, in order.
        assert_eq!(
            log.entries().iter().map(|e| e.seq).collect::<Vec<_>>(),
            (1..=7).collect::<Vec<u64>>(),
            "{s}"
        );
        assert_eq!(
            briefs(&log.bodies()),
            vec![
                pair("You", ask),
                pair("Summoned Orchestrator I", brief),
                pair("Orchestrator I", "Clarifying: stateless or not?"),
                pair("Arbiter → Orchestrator I", "Stateless."),
                pair("Orchestrator I", "Complete: stateless."),
                pair("Released", "I"),
                pair("Arbiter", "It is done, stateless."),
            ],
            "{s}"
        );
        // The Arbiter ran exactly three turns: nothing was routed twice.
        assert_eq!(sys.mock.requests_for(&arbiter_lane(ask)).len(), 3, "{s}");
    }
    let owned = owners(&sys, &sessions).await;
    assert!(
        owned.values().any(|o| o == "c-a") && owned.values().any(|o| o == "c-b"),
        "both coordinators run sessions: {owned:?}"
    );
}

/// Three coordinator processes, sessions with an Arbiter turn in flight on
/// each; one coordinator is killed -9. Every session goes on: its console
/// shows the human's line and the Arbiter's answer, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_mid_turn_has_its_sessions_resumed_by_the_others() {
    let n: usize = std::env::var("ARBITER_TEST_COORDINATOR_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    let gate = Gate::new();
    {
        let gate = gate.clone();
        sys.mock.set_responder(move |request| {
            let lane = lane_of(&request.body);
            let session = lane.rsplit(' ').next().unwrap_or_default().to_owned();
            Some(arbiter("address_human", &format!("Answer for {session}")).gated(gate.clone()))
        });
    }
    let ids = ["c-1", "c-2", "c-3"];
    let mut procs: Vec<_> = ids
        .iter()
        .map(|id| {
            sys.coordinator_process_with(&[("ARBITER_COORDINATOR_ID", std::ffi::OsStr::new(id))])
        })
        .collect();
    let sessions: Vec<String> = (0..n).map(|i| format!("s-kill-{i}")).collect();
    let mut logs = Vec::new();
    for s in &sessions {
        logs.push(sys.watch_log(s).await);
    }
    for s in &sessions {
        sys.send(s, &format!("Question of {s}")).await;
    }
    // Every turn is in flight: the model has every request, and holds them.
    eventually(
        Duration::from_secs(60),
        "every Arbiter turn to start",
        || async { (sys.mock.requests().len() >= n).then_some(()) },
    )
    .await;
    let owned = owners(&sys, &sessions).await;
    let count = |id: &str| owned.values().filter(|o| *o == id).count();
    println!(
        "owners before the kill: c-1 {}, c-2 {}, c-3 {}",
        count("c-1"),
        count("c-2"),
        count("c-3")
    );
    // The one that owns the most sessions is killed.
    let victim = (0..ids.len()).max_by_key(|i| count(ids[*i])).unwrap();
    let victims: Vec<&String> = sessions
        .iter()
        .filter(|s| owned.get(*s).map(String::as_str) == Some(ids[victim]))
        .collect();
    assert!(
        !victims.is_empty(),
        "no coordinator owns a session: {owned:?}"
    );
    let killed_at = chrono::Utc::now();
    procs[victim].start_kill().unwrap();
    procs[victim].wait().await.unwrap();
    gate.open();

    // Each console sees the answer; for the victim's sessions, how long after the
    // kill the Arbiter's answer was logged.
    let mut times: Vec<Duration> = Vec::new();
    for (s, log) in sessions.iter().zip(&logs) {
        let answered = eventually(
            Duration::from_secs(60),
            &format!("{s} to answer"),
            || async {
                log.entries()
                    .into_iter()
                    .find(|e| matches!(e.body, LogBody::Arbiter(_)))
                    .map(|e| e.at)
            },
        )
        .await;
        if victims.contains(&s) {
            times.push((answered - killed_at).to_std().unwrap_or_default());
        }
    }
    times.sort();
    let p99 = times[((times.len() * 99).div_ceil(100)).saturating_sub(1)];
    println!(
        "{} sessions, {} on the killed coordinator: time to resume p50 {:?}, p99 {:?}, max {:?} (target p99 <= 10 s)",
        n,
        times.len(),
        times[times.len() / 2],
        p99,
        times.last().unwrap()
    );
    assert!(p99 <= Duration::from_secs(10), "p99 time to resume {p99:?}");
    // Nothing lost, nothing doubled: each console saw the line and the answer once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (s, log) in sessions.iter().zip(&logs) {
        assert_eq!(
            briefs(&log.bodies()),
            vec![
                pair("You", &format!("Question of {s}")),
                pair("Arbiter", &format!("Answer for {s}")),
            ],
            "{s}"
        );
        assert_eq!(
            log.entries().iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2],
            "{s}"
        );
    }
    for p in &mut procs {
        let _ = p.start_kill();
    }
}

/// One coordinator owns every session; a second one starts. It takes a
/// share, and while the sessions move every human line gets exactly one
/// Arbiter turn and each console sees every entry once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_that_starts_takes_a_share_and_no_session_is_routed_twice() {
    let mut sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    sys.mock.set_responder(|request| {
        let last = request.messages().last().cloned().unwrap_or_default();
        let text = last["content"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| last["content"][0]["text"].as_str().map(str::to_owned))
            .unwrap_or_default();
        Some(arbiter("address_human", &format!("Re: {text}")))
    });
    let a = coordinator(&sys, "c-first");
    sys.spawn_coordinator_with(a);
    let sessions: Vec<String> = (0..20).map(|i| format!("s-share-{i}")).collect();
    let mut logs = Vec::new();
    for s in &sessions {
        logs.push(sys.watch_log(s).await);
        sys.send(s, &format!("one {s}")).await;
    }
    for s in &sessions {
        sys.settled(s, 2).await;
    }
    let owned = owners(&sys, &sessions).await;
    assert!(owned.values().all(|o| o == "c-first"), "{owned:?}");

    let b = coordinator(&sys, "c-second");
    sys.spawn_coordinator_with(b);
    // Lines keep coming while the sessions move.
    for round in ["two", "three"] {
        for s in &sessions {
            sys.send(s, &format!("{round} {s}")).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    for s in &sessions {
        sys.settled(s, 6).await;
    }
    eventually(WAIT, "the second coordinator to take a share", || async {
        let owned = owners(&sys, &sessions).await;
        (owned.values().filter(|o| *o == "c-second").count() >= 5).then_some(())
    })
    .await;
    for (s, log) in sessions.iter().zip(&logs) {
        assert_eq!(
            log.entries().iter().map(|e| e.seq).collect::<Vec<_>>(),
            (1..=6).collect::<Vec<u64>>(),
            "{s}"
        );
        let you = log
            .bodies()
            .iter()
            .filter(|b| matches!(b, LogBody::Human(_)))
            .count();
        let answers = log
            .bodies()
            .iter()
            .filter(|b| matches!(b, LogBody::Arbiter(_)))
            .count();
        assert_eq!((you, answers), (3, 3), "{s}: {:?}", briefs(&log.bodies()));
    }
    // Every human line made exactly one Arbiter request: no turn ran twice.
    let requests = sys.mock.requests().len();
    assert_eq!(requests, sessions.len() * 3);
}

/// Two coordinator processes; one is stopped with SIGTERM. It hands its
/// sessions over at once (well before its leases would run out), and the
/// human's next line in each gets one answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_stopped_gracefully_hands_its_sessions_over_at_once() {
    let sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    sys.mock.set_responder(|request| {
        let last = request.messages().last().cloned().unwrap_or_default();
        let text = last["content"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| last["content"][0]["text"].as_str().map(str::to_owned))
            .unwrap_or_default();
        Some(arbiter("address_human", &format!("Re: {text}")))
    });
    let mut first =
        sys.coordinator_process_with(&[("ARBITER_COORDINATOR_ID", std::ffi::OsStr::new("c-1"))]);
    let _second =
        sys.coordinator_process_with(&[("ARBITER_COORDINATOR_ID", std::ffi::OsStr::new("c-2"))]);
    let sessions: Vec<String> = (0..20).map(|i| format!("s-term-{i}")).collect();
    let mut logs = Vec::new();
    for s in &sessions {
        logs.push(sys.watch_log(s).await);
        sys.send(s, &format!("one {s}")).await;
    }
    for s in &sessions {
        sys.settled(s, 2).await;
    }
    // The two share the sessions (the one that pulled fewer takes a share).
    let on_first = eventually(WAIT, "c-1 to own sessions", || async {
        let owned = owners(&sys, &sessions).await;
        let on_first = owned.values().filter(|o| *o == "c-1").count();
        (on_first >= 5).then_some(on_first)
    })
    .await;

    let stopped = std::time::Instant::now();
    let pid = first.id().unwrap().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = first.wait().await.unwrap();
    assert!(exit.success(), "c-1 exits cleanly on SIGTERM: {exit:?}");
    eventually(WAIT, "c-2 to own every session", || async {
        let owned = owners(&sys, &sessions).await;
        (owned.len() == sessions.len() && owned.values().all(|o| o == "c-2")).then_some(())
    })
    .await;
    let moved = stopped.elapsed();
    println!("{on_first} sessions handed over in {moved:?} (leases run out after 4 s)");
    assert!(
        moved < Duration::from_secs(2),
        "handed over at once, not left to run out: {moved:?}"
    );
    for s in &sessions {
        sys.send(s, &format!("two {s}")).await;
    }
    for (s, log) in sessions.iter().zip(&logs) {
        sys.settled(s, 4).await;
        assert_eq!(
            briefs(&log.bodies()),
            vec![
                pair("You", &format!("one {s}")),
                pair("Arbiter", &format!("Re: one {s}")),
                pair("You", &format!("two {s}")),
                pair("Arbiter", &format!("Re: two {s}")),
            ],
            "{s}"
        );
    }
    assert_eq!(sys.mock.requests().len(), sessions.len() * 2);
}

/// A coordinator paused (SIGSTOP) mid-turn past its liveness key's TTL:
/// another takes its sessions over and answers. When the paused one wakes
/// with the model's replies in hand, it finds its key ran out and stops those
/// sessions, and the server refuses its step writes (10071): each console
/// shows one answer, never two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_coordinator_that_wakes_is_fenced_out_and_writes_nothing() {
    let sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    let gate = Gate::new();
    {
        let gate = gate.clone();
        sys.mock.set_responder(move |request| {
            let lane = lane_of(&request.body);
            let session = lane.rsplit(' ').next().unwrap_or_default().to_owned();
            Some(arbiter("address_human", &format!("Answer for {session}")).gated(gate.clone()))
        });
    }
    let mut first =
        sys.coordinator_process_with(&[("ARBITER_COORDINATOR_ID", std::ffi::OsStr::new("c-1"))]);
    let sessions: Vec<String> = (0..5).map(|i| format!("s-pause-{i}")).collect();
    let mut logs = Vec::new();
    for s in &sessions {
        logs.push(sys.watch_log(s).await);
        sys.send(s, &format!("Question of {s}")).await;
    }
    eventually(WAIT, "every Arbiter turn to start", || async {
        (sys.mock.requests().len() >= sessions.len()).then_some(())
    })
    .await;
    let pid = first.id().unwrap().to_string();
    let signal = |sig: &str| {
        assert!(
            std::process::Command::new("kill")
                .args([sig, &pid])
                .status()
                .unwrap()
                .success()
        );
    };
    signal("-STOP");
    let _second =
        sys.coordinator_process_with(&[("ARBITER_COORDINATOR_ID", std::ffi::OsStr::new("c-2"))]);
    eventually(WAIT, "c-2 to take every session over", || async {
        let owned = owners(&sys, &sessions).await;
        (owned.len() == sessions.len() && owned.values().all(|o| o == "c-2")).then_some(())
    })
    .await;
    // c-2 runs the turns again; the model answers both coordinators.
    gate.open();
    for log in &logs {
        log.wait_for("the answer", |b| matches!(b, LogBody::Arbiter(_)))
            .await;
    }
    signal("-CONT");
    // c-1 wakes with the first replies in hand; give it time to try.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (s, log) in sessions.iter().zip(&logs) {
        assert_eq!(
            briefs(&log.bodies()),
            vec![
                pair("You", &format!("Question of {s}")),
                pair("Arbiter", &format!("Answer for {s}")),
            ],
            "{s}"
        );
    }
    // Both coordinators asked the model for each turn: c-1 before its pause.
    assert_eq!(sys.mock.requests().len(), sessions.len() * 2);
    first.start_kill().unwrap();
}

/// Idle sessions cost no lease writes and no status messages: 50 sessions,
/// each answered once and then left idle, owned by two coordinators. Over
/// 10 s the lease bucket's stream gets only the coordinators' own liveness
/// renewals (one every third of the 4 s TTL each, about 8 per coordinator),
/// however many sessions they own, and no session republishes its status;
/// a message to one of them brings its status back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_cost_no_lease_writes() {
    let mut sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    sys.mock.set_responder(|request| {
        let lane = lane_of(&request.body);
        let session = lane.rsplit(' ').next().unwrap_or_default().to_owned();
        Some(arbiter("address_human", &format!("Answer for {session}")))
    });
    sys.spawn_coordinator_with(coordinator(&sys, "c-idle-a"));
    sys.spawn_coordinator_with(coordinator(&sys, "c-idle-b"));
    let sessions: Vec<String> = (0..50).map(|i| format!("s-idle-{i}")).collect();
    for s in &sessions {
        sys.send(s, &format!("Question of {s}")).await;
    }
    for s in &sessions {
        sys.settled(s, 2).await;
    }
    // Both coordinators own sessions, and the sharing has settled: nothing
    // moved over more than one rebalancing round (3 s).
    let mut before = owners(&sys, &sessions).await;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        tokio::time::sleep(Duration::from_millis(3500)).await;
        let now = owners(&sys, &sessions).await;
        let a = now.values().filter(|o| *o == "c-idle-a").count();
        if now == before && now.len() == sessions.len() && a > 0 && a < now.len() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the sharing never settled: {now:?}"
        );
        before = now;
    }
    let stream = format!("KV_{}", subjects::COORDINATOR_LEASES_BUCKET);
    let last_seq = || async {
        let mut stream = sys.bus.js.get_stream(&stream).await.unwrap();
        stream.info().await.unwrap().state.last_sequence
    };
    // Nor a status message: a settled session's status is not republished.
    let mut statuses = sys
        .bus
        .client
        .subscribe(subjects::ALL_SESSION_STATUS)
        .await
        .unwrap();
    sys.bus.client.flush().await.unwrap();
    let first = last_seq().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let writes = last_seq().await - first;
    let mut heartbeats = 0;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::ZERO, statuses.next()).await {
        heartbeats += 1;
    }
    let a = before.values().filter(|o| *o == "c-idle-a").count();
    println!(
        "{} idle sessions (c-idle-a {a}, c-idle-b {}): {writes} lease bucket writes in 10 s (target: a handful per coordinator, <= 10 each)",
        sessions.len(),
        sessions.len() - a
    );
    assert!(
        writes <= 20,
        "idle sessions cost lease writes: {writes} in 10 s"
    );
    assert_eq!(
        heartbeats, 0,
        "settled sessions published their status {heartbeats} times in 10 s"
    );
    // Nothing moved and nothing more was said while idle.
    assert_eq!(owners(&sys, &sessions).await, before);
    assert_eq!(sys.mock.requests().len(), sessions.len());
    // A message wakes the session: its status goes out again.
    sys.send(&sessions[0], "One more question").await;
    let woken = tokio::time::timeout(WAIT, async {
        while let Some(msg) = statuses.next().await {
            if msg.subject.as_str() == subjects::session_status(&sessions[0]) {
                return;
            }
        }
    })
    .await;
    assert!(woken.is_ok(), "no status after the session was written to");
}

/// The only coordinator is paused (SIGSTOP) mid-turn past its liveness
/// key's TTL. When it wakes it finds its key ran out, stops its sessions,
/// announces itself again and takes back the sessions nobody took: each
/// turn ends, and each console shows the human's line and one answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_coordinator_paused_past_its_ttl_takes_its_sessions_back() {
    let sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    let gate = Gate::new();
    {
        let gate = gate.clone();
        sys.mock.set_responder(move |request| {
            let lane = lane_of(&request.body);
            let session = lane.rsplit(' ').next().unwrap_or_default().to_owned();
            Some(arbiter("address_human", &format!("Answer for {session}")).gated(gate.clone()))
        });
    }
    let mut only =
        sys.coordinator_process_with(&[("ARBITER_COORDINATOR_ID", std::ffi::OsStr::new("c-1"))]);
    let sessions: Vec<String> = (0..5).map(|i| format!("s-lone-{i}")).collect();
    let mut logs = Vec::new();
    for s in &sessions {
        logs.push(sys.watch_log(s).await);
        sys.send(s, &format!("Question of {s}")).await;
    }
    eventually(WAIT, "every Arbiter turn to start", || async {
        (sys.mock.requests().len() >= sessions.len()).then_some(())
    })
    .await;
    let pid = only.id().unwrap().to_string();
    let signal = |sig: &str| {
        assert!(
            std::process::Command::new("kill")
                .args([sig, &pid])
                .status()
                .unwrap()
                .success()
        );
    };
    signal("-STOP");
    // Past the 4 s TTL: the key runs out while the process sleeps.
    tokio::time::sleep(Duration::from_secs(6)).await;
    gate.open();
    signal("-CONT");
    for (s, log) in sessions.iter().zip(&logs) {
        log.wait_for("the answer", |b| matches!(b, LogBody::Arbiter(_)))
            .await;
        sys.settled(s, 2).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (s, log) in sessions.iter().zip(&logs) {
        assert_eq!(
            briefs(&log.bodies()),
            vec![
                pair("You", &format!("Question of {s}")),
                pair("Arbiter", &format!("Answer for {s}")),
            ],
            "{s}"
        );
    }
    let owned = owners(&sys, &sessions).await;
    assert!(
        owned.len() == sessions.len() && owned.values().all(|o| o == "c-1"),
        "{owned:?}"
    );
    only.start_kill().unwrap();
}
