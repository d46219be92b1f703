//! Orchestrators survive their workers: kill -9 of a worker process in the
//! middle of a tool loop, and another worker of the pool resumes the
//! Orchestrator from its stored transcript (one continuous Orchestrator in
//! the log, no stored tool run twice); a worker paused past its lease is
//! fenced off when it wakes (it writes, publishes and runs nothing more); a
//! summons published twice never takes a live Orchestrator from its holder;
//! a parked Orchestrator (waiting without a slot) keeps its lease, and is
//! taken over like any other when its worker dies.

use crate::common;
use crate::direct;

use std::time::{Duration, Instant};

use arbiter_protocol::{
    CommandRun, ControlAction, Evidence, FileChanges, LogBody, OrchestratorEvent,
    OrchestratorState, ToolCalls, subjects,
};
use arbiter_tests::{Gate, MockReply, eventually};
use common::*;
use direct::*;
use futures::TryStreamExt;
use pretty_assertions::assert_eq;
use serde_json::json;

/// A system with no coordinator and no worker: each test starts its workers.
async fn workers_only() -> System {
    System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await
}

fn append(line: &str) -> MockReply {
    MockReply::tool_use(
        "bash",
        json!({"command": format!("echo {line} >> steps.txt")}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_tool_loop_is_resumed_by_another_worker_of_the_pool() {
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    let watch = Watch::start(&sys).await;
    let s = "s-failover";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Write the three steps");
    let brief = "Brief: append one, two and three to steps.txt.";
    let lane = orch_lane(brief);
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.push(&lane, append("one"));
    sys.mock.push(&lane, append("two"));
    // The first worker dies waiting for this reply.
    let never = Gate::new();
    sys.mock.push(&lane, append("LOST").gated(never.clone()));
    sys.mock.push(&lane, append("three"));
    sys.mock.push(&lane, orch(true, "Done: three steps."));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));

    let mut w1 = sys.worker_process("w1", 1);
    worker_ready(&sys, "w1").await;
    sys.send(s, "Write the three steps").await;
    let before = sys.mock.wait_for_requests(&lane, 3, WAIT).await;
    let orch_id = match &log.wait_len(2).await[1] {
        LogBody::Summoned(summoned) => summoned.orch_id.clone(),
        other => panic!("expected the summons, got {other:?}"),
    };
    // A second worker of the pool is up when the first one dies.
    let _w2 = sys.worker_process("w2", 1);
    worker_ready(&sys, "w2").await;
    let killed = Instant::now();
    w1.start_kill().unwrap();
    w1.wait().await.unwrap();

    watch
        .wait_status(&orch_id, "w2 to take the Orchestrator over", |s| {
            s.worker_id == "w2"
        })
        .await;
    let detected = killed.elapsed();
    let after = sys.mock.wait_for_requests(&lane, 4, WAIT).await;
    let resumed = killed.elapsed();
    // Neither the claim nor the takeover made a consumer for the
    // Orchestrator: it reads its inputs from the stream.
    let stream = sys.bus.js.get_stream(subjects::ORCH_STREAM).await.unwrap();
    let consumers: Vec<_> = stream.consumers().try_collect().await.unwrap();
    let inputs = subjects::orch_in(&orch_id);
    let reading_inputs: Vec<&str> = consumers
        .iter()
        .filter(|c| c.config.filter_subject == inputs || c.config.filter_subjects.contains(&inputs))
        .map(|c| c.name.as_str())
        .collect();
    assert!(reading_inputs.is_empty(), "consumers: {reading_inputs:?}");
    sys.settled(s, 5).await;
    never.open();

    // The resumed Orchestrator's first call carries the stored transcript:
    // the brief, both tool calls and both results.
    assert_eq!(after[3].body["messages"], before[2].body["messages"]);
    assert_eq!(after[3].messages().len(), 5);
    // Each stored tool ran once; the lost reply's tool never ran.
    let steps = std::fs::read_to_string(sys.workspace(s).join("steps.txt")).unwrap();
    assert_eq!(steps, "one\ntwo\nthree\n");
    // One continuous Orchestrator I, no entry lost or doubled.
    assert_eq!(
        log.entries().iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Write the three steps"),
            pair("Summoned Orchestrator I", brief),
            pair("Orchestrator I", "Done: three steps."),
            pair("Released", "I"),
            pair("Arbiter", "It is done."),
        ]
    );
    // The evidence goes on across the takeover: the calls both workers
    // counted, and the file compared with the walk w1 took at the summons
    // (stored with the state), so it is still "created", not "changed".
    let evidence = log
        .bodies()
        .into_iter()
        .find_map(|b| match b {
            LogBody::Orchestrator(e) => e.evidence,
            _ => None,
        })
        .unwrap();
    let run = |line: &str| CommandRun {
        command: format!("echo {line} >> steps.txt"),
        exit_code: Some(0),
    };
    assert_eq!(
        evidence,
        Evidence {
            tools: vec![ToolCalls {
                tool: "bash".into(),
                calls: 3,
                failed: 0,
            }],
            files: FileChanges {
                created: vec!["steps.txt".into()],
                ..FileChanges::default()
            },
            commands: vec![run("one"), run("two"), run("three")],
            commands_more: 0,
            checkpoint: None,
            no_checkpoint: Some(NO_GIT.into()),
        }
    );
    assert_eq!(watch.events(&orch_id).len(), 1);
    assert_eq!(sys.mock.requests_for(&lane).len(), 5);
    // Status shows the takeover: same number and id, the new worker's name.
    let statuses = watch.statuses_of(&orch_id);
    let first_w2 = statuses.iter().position(|s| s.worker_id == "w2").unwrap();
    assert!(statuses[..first_w2].iter().all(|s| s.worker_id == "w1"));
    assert!(statuses[first_w2..].iter().all(|s| s.worker_id == "w2"));
    assert!(statuses.iter().all(|s| s.number == 1));
    assert_eq!(statuses[first_w2].tool_count, 2, "counts carry over");
    // The released Orchestrator's lease is given up: nothing held, nothing queued.
    eventually(WAIT, "the summons to be acknowledged", || async {
        (leases_held(&sys, "default").await == Some(0)).then_some(())
    })
    .await;
    let lease = Duration::from_secs_f64(test_lease_secs().parse().unwrap());
    assert!(detected < lease * 2, "taken over after {detected:?}");
    eprintln!(
        "worker kill -9 (lease {lease:?}): taken over (summons redelivered) after {detected:?}, \
         resumed (first model call) after {resumed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_paused_past_its_lease_is_fenced_off_when_it_wakes() {
    let sys = workers_only().await;
    let watch = Watch::start(&sys).await;
    let brief = "Append one and two.";
    let lane = orch_lane(brief);
    let (session, id) = ("s-fence", "o-fence");
    sys.mock.push(&lane, append("one"));
    // The paused worker gets this reply only after it lost its lease.
    let late = Gate::new();
    sys.mock.push(&lane, append("STALE").gated(late.clone()));
    sys.mock.push(&lane, append("two"));
    sys.mock.push(&lane, orch(true, "Done."));

    let w1 = sys.worker_process("w1", 1);
    worker_ready(&sys, "w1").await;
    summon(&sys, "default", session, id, brief).await;
    sys.mock.wait_for_requests(&lane, 2, WAIT).await;
    let _w2 = sys.worker_process("w2", 1);
    worker_ready(&sys, "w2").await;
    let w1_pid = w1.id().unwrap();
    signal(w1_pid, "STOP");
    let paused = Instant::now();

    // w2 takes over, runs the step again and finishes the turn.
    let done = watch.wait_output(id, 1).await;
    assert_eq!(done.message, "Done.");
    let taken = paused.elapsed();
    watch
        .wait_status(id, "w2 to wait for the Arbiter", |s| {
            s.worker_id == "w2" && s.state == OrchestratorState::Waiting
        })
        .await;

    // w1 wakes up with the stale reply in hand.
    late.open();
    signal(w1_pid, "CONT");
    let freed = slot_freed(&sys, "w1", paused).await;
    // Give a misbehaving w1 time to do harm.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let steps = std::fs::read_to_string(sys.workspace(session).join("steps.txt")).unwrap();
    assert_eq!(steps, "one\ntwo\n", "the stale reply's tool never ran");
    assert_eq!(watch.events(id).len(), 1, "no output from w1");
    let writers = state_writers(&sys, id).await;
    let first_w2 = writers.iter().position(|(_, w)| w == "w2").unwrap();
    assert!(
        writers[first_w2..].iter().all(|(_, w)| w == "w2"),
        "w1 wrote after losing its lease: {writers:?}"
    );
    let revs: Vec<u64> = writers.iter().map(|(rev, _)| *rev).collect();
    assert_eq!(revs, (1..=writers.len() as u64).collect::<Vec<_>>());
    // w1 is alive and serving, and w2 still holds the lease.
    let mut w1 = w1;
    assert!(w1.try_wait().unwrap().is_none(), "w1 died");
    assert_eq!(worker_presence(&sys, "w1").await.unwrap().slots_free, 1);
    assert_eq!(leases_held(&sys, "default").await, Some(1));

    // w2 carries on as usual: the Arbiter's answer reaches it, and a release ends it.
    sys.mock.push(&lane, orch(true, "Noted."));
    input(&sys, session, id, 1, "Thank you.").await;
    let noted = watch.wait_output(id, 2).await;
    assert_eq!(noted.message, "Noted.");
    control(&sys, id, ControlAction::Release).await;
    watch.wait_stopped(id).await;
    eventually(WAIT, "the lease to be given up", || async {
        (leases_held(&sys, "default").await == Some(0)).then_some(())
    })
    .await;
    assert!(matches!(
        &watch.events(id)[..],
        [OrchestratorEvent::Output(_), OrchestratorEvent::Output(_)]
    ));
    eprintln!(
        "worker paused: taken over and answered after {taken:?}; the paused worker freed its slot {freed:?} after the pause"
    );
}

/// How long after `since` the worker `id` has no slot in use.
async fn slot_freed(sys: &System, id: &str, since: Instant) -> Duration {
    eventually(WAIT, &format!("{id} to free its slot"), || async {
        worker_presence(sys, id)
            .await
            .filter(|p| p.slots_used == 0)
            .map(|_| since.elapsed())
    })
    .await
}

/// Starts `w1` with one Orchestrator that asked the Arbiter a question and
/// waits for the answer; returns the worker's process.
async fn waiting_on_w1(
    sys: &System,
    watch: &Watch,
    session: &str,
    id: &str,
) -> tokio::process::Child {
    let brief = format!("Ask about {id}.");
    sys.mock
        .push(&orch_lane(&brief), orch(true, "Which branch?"));
    let w1 = sys.worker_process("w1", 1);
    worker_ready(sys, "w1").await;
    summon(sys, "default", session, id, &brief).await;
    assert_eq!(watch.wait_output(id, 1).await.message, "Which branch?");
    watch
        .wait_status(id, "w1 to wait for the Arbiter", |s| {
            s.worker_id == "w1" && s.state == OrchestratorState::Waiting
        })
        .await;
    w1
}

/// A waiting Orchestrator checks its fence far less often than a working
/// one; a worker paused past its lease still finds out at once when it
/// wakes (its renewal is late), frees its slot, and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_paused_past_its_lease_while_its_orchestrator_waits_stops_it_when_it_wakes() {
    let sys = workers_only().await;
    let watch = Watch::start(&sys).await;
    let (session, id) = ("s-wait-fence", "o-wait-fence");
    let w1 = waiting_on_w1(&sys, &watch, session, id).await;
    let _w2 = sys.worker_process("w2", 1);
    worker_ready(&sys, "w2").await;
    let w1_pid = w1.id().unwrap();
    signal(w1_pid, "STOP");
    watch
        .wait_status(id, "w2 to take the waiting Orchestrator over", |s| {
            s.worker_id == "w2" && s.state == OrchestratorState::Waiting
        })
        .await;

    signal(w1_pid, "CONT");
    let woke = Instant::now();
    let freed = slot_freed(&sys, "w1", woke).await;
    // The late renewal, not the 10 s backstop, finds it.
    assert!(
        freed < Duration::from_secs(3),
        "w1 held the Orchestrator {freed:?} after it woke"
    );
    let writers = state_writers(&sys, id).await;
    let first_w2 = writers.iter().position(|(_, w)| w == "w2").unwrap();
    assert!(
        writers[first_w2..].iter().all(|(_, w)| w == "w2"),
        "w1 wrote after losing its lease: {writers:?}"
    );

    // The answer reaches w2, and only w2 replies.
    let lane = orch_lane(&format!("Ask about {id}."));
    sys.mock.push(&lane, orch(true, "main, then."));
    input(&sys, session, id, 1, "main").await;
    assert_eq!(watch.wait_output(id, 2).await.message, "main, then.");
    assert_eq!(
        watch.events(id).len(),
        2,
        "one output per question, none from w1"
    );
    assert_eq!(leases_held(&sys, "default").await, Some(1));
    let mut w1 = w1;
    assert!(w1.try_wait().unwrap().is_none(), "w1 died");
    eprintln!("waiting Orchestrator, worker paused: its slot freed {freed:?} after it woke");
}

/// A takeover the holder's renewals cannot reveal (another writer claims
/// while the holder renews on time): a waiting holder still finds it, by
/// its periodic check, and stops without writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_orchestrator_claimed_by_another_writer_is_stopped_by_the_periodic_check() {
    use async_nats::HeaderMap;
    let sys = workers_only().await;
    let watch = Watch::start(&sys).await;
    let (session, id) = ("s-claimed", "o-claimed");
    let mut w1 = waiting_on_w1(&sys, &watch, session, id).await;

    // A claim on top of the last record, as a worker that got the summons would write it.
    let last = last_record_message(&sys, id).await.unwrap();
    let mut record: serde_json::Value = serde_json::from_slice(&last.payload).unwrap();
    let rev = record["rev"].as_u64().unwrap() + 1;
    record["rev"] = json!(rev);
    record["worker_id"] = json!("w-other");
    record["outbox"] = json!([]);
    let mut headers = HeaderMap::new();
    headers.insert(
        "Nats-Msg-Id",
        format!("{id}:state:{rev}:{}", "ab".repeat(16)).as_str(),
    );
    headers.insert(
        "Nats-Expected-Last-Subject-Sequence",
        last.sequence.to_string().as_str(),
    );
    headers.insert(
        "Nats-Expected-Last-Subject-Sequence-Subject",
        subjects::orch_records(id).as_str(),
    );
    let claimed = Instant::now();
    sys.bus
        .js
        .publish_with_headers(
            subjects::orch_state(id),
            headers,
            serde_json::to_vec(&record).unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();

    let freed = slot_freed(&sys, "w1", claimed).await;
    // The backstop (10 s) plus one renewal period, with room for a loaded machine.
    assert!(
        freed < Duration::from_secs(14),
        "w1 held the Orchestrator {freed:?} after the claim"
    );
    let writers = state_writers(&sys, id).await;
    assert_eq!(
        writers.last().map(|(_, w)| w.as_str()),
        Some("w-other"),
        "w1 wrote after the claim: {writers:?}"
    );
    assert!(w1.try_wait().unwrap().is_none(), "w1 died");
    eprintln!("waiting Orchestrator claimed by another writer: stopped {freed:?} after the claim");
}

/// A core subscriber gets a message before the server has stored it, so a
/// worker woken by a release may read `.ctl` a moment too early and find
/// nothing. It looks again, as it does for an input, and stops the
/// Orchestrator at once, not at the next 30 s poll (once in CI, a release
/// waited so). Here the wake-up is a control the server refused, and the
/// release lands in the stream a moment later without a wake-up of its
/// own: the stream stores `test.late-ctl.<id>` as `orch.<id>.ctl`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_stored_just_after_its_wake_up_still_stops_the_orchestrator_at_once() {
    use arbiter_protocol::Control;
    let sys = workers_only().await;
    let watch = Watch::start(&sys).await;
    let (session, id) = ("s-late-ctl", "o-late-ctl");
    let _w1 = waiting_on_w1(&sys, &watch, session, id).await;
    store_quietly(
        &sys,
        subjects::ORCH_STREAM,
        "test.late-ctl.*",
        &format!("{}.orch.{{{{wildcard(1)}}}}.ctl", subjects::PREFIX),
    )
    .await;

    let release = Control {
        v: arbiter_protocol::VERSION,
        orch_id: id.into(),
        action: ControlAction::Release,
        sent_at: chrono::Utc::now(),
    };
    publish_refused(&sys, subjects::orch_ctl(id), &release).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stored = Instant::now();
    sys.bus
        .js
        .publish(
            format!("test.late-ctl.{id}"),
            serde_json::to_vec(&release).unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let last = sys
        .bus
        .js
        .get_stream(subjects::ORCH_STREAM)
        .await
        .unwrap()
        .get_last_raw_message_by_subject(&subjects::orch_ctl(id))
        .await
        .unwrap();
    assert_eq!(last.subject.as_str(), subjects::orch_ctl(id));

    watch.wait_stopped(id).await;
    let stopped = stored.elapsed();
    // The looks go 1, 2, 4 … ms apart: the 50 ms wait ends within about 0.1 s of them.
    assert!(
        stopped < Duration::from_secs(3),
        "the release was taken {stopped:?} after it was stored"
    );
    eprintln!("a release stored after its wake-up: taken {stopped:?} after the store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_consumer_made_by_an_older_worker_gets_the_lease_as_its_ack_wait() {
    use async_nats::jetstream::consumer::{AckPolicy, pull};
    let mut sys = workers_only().await;
    // The consumer as workers made it before leases: ack wait 30 s.
    let stream = sys
        .bus
        .js
        .get_stream(arbiter_protocol::subjects::SUMMONS_STREAM)
        .await
        .unwrap();
    let name = arbiter_protocol::subjects::pool_consumer("default");
    stream
        .create_consumer(pull::Config {
            durable_name: Some(name.clone()),
            filter_subject: arbiter_protocol::subjects::summon("default"),
            ack_policy: AckPolicy::Explicit,
            ack_wait: Duration::from_secs(30),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut config = sys.worker_config("w-new", 1, 200_000);
    config.lease = Duration::from_secs(3);
    sys.spawn_worker_with(config);
    worker_ready(&sys, "w-new").await;
    let mut consumer = stream.get_consumer::<pull::Config>(&name).await.unwrap();
    let info = consumer.info().await.unwrap();
    assert_eq!(info.config.ack_wait, Duration::from_secs(3));
    assert_eq!(info.config.max_ack_pending, 100_000);
    // And it serves as before.
    let watch = Watch::start(&sys).await;
    sys.mock.push(&orch_lane("Hello."), orch(true, "Hi."));
    summon(&sys, "default", "s-upd", "o-upd", "Hello.").await;
    assert_eq!(watch.wait_output("o-upd", 1).await.message, "Hi.");
    assert_eq!(leases_held(&sys, "default").await, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_too_large_for_one_message_is_stored_and_resumed_from_the_object_store() {
    let sys = workers_only().await;
    // A window that holds the 1.1 MB reply: in the mock's 200,000 tokens
    // the worker that takes over (which estimates the restored transcript,
    // 3 characters a token) would rightly hand off at the edge instead.
    sys.mock.set_model_limits(4_000_000, 64_000);
    let watch = Watch::start(&sys).await;
    let brief = "Write the big file.";
    let lane = orch_lane(brief);
    // A model reply of more than 1 MB: over the NATS message cap.
    let content = "abcdefghij".repeat(110_000);
    sys.mock.push(
        &lane,
        MockReply::tool_use("write", json!({"path": "big.txt", "content": content})),
    );
    let never = Gate::new();
    sys.mock
        .push(&lane, orch(true, "LOST").gated(never.clone()));
    sys.mock.push(&lane, orch(true, "Done big."));

    let mut w1 = sys.worker_process("w1", 1);
    worker_ready(&sys, "w1").await;
    summon(&sys, "default", "s-big", "o-big", brief).await;
    let before = sys.mock.wait_for_requests(&lane, 2, WAIT).await;
    let _w2 = sys.worker_process("w2", 1);
    worker_ready(&sys, "w2").await;
    w1.start_kill().unwrap();
    w1.wait().await.unwrap();

    assert_eq!(watch.wait_output("o-big", 1).await.message, "Done big.");
    never.open();
    let after = sys.mock.requests_for(&lane);
    assert_eq!(after[2].body["messages"], before[1].body["messages"]);
    assert!(after[2].all_text().contains(&content));
    let written = std::fs::read_to_string(sys.workspace("s-big").join("big.txt")).unwrap();
    assert_eq!(written.len(), content.len());
    // The big step went to the object store; the subject holds a pointer to it.
    let pointers = state_records(&sys, "o-big")
        .await
        .into_iter()
        .filter(|r| r.get("blob").is_some())
        .count();
    assert_eq!(pointers, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summons_published_again_never_takes_a_live_orchestrator_over() {
    let mut sys = workers_only().await;
    let watch = Watch::start(&sys).await;
    let lease = Duration::from_secs(1);
    let (session, id, brief) = ("s-dup", "o-dup", "Think it over.");
    let lane = orch_lane(brief);
    // w1's model call outlasts several leases.
    let slow = Gate::new();
    sys.mock
        .push(&lane, orch(true, "Done.").gated(slow.clone()));
    for worker in ["w1", "w2"] {
        let mut config = sys.worker_config(worker, 1, 200_000);
        config.lease = lease;
        sys.spawn_worker_with(config);
        worker_ready(&sys, worker).await;
        if worker == "w1" {
            summon(&sys, "default", session, id, brief).await;
            sys.mock.wait_for_requests(&lane, 1, WAIT).await;
        }
    }
    // The same summons again under another message id: what a coordinator
    // restored after the server's duplicate window would publish. Only w2
    // has a free slot, so w2 gets it.
    summon_as(&sys, "default", session, id, brief, None, "o-dup:again").await;
    eventually(WAIT, "the duplicate to be dropped", || async {
        (summons_queued(&sys).await == 1).then_some(())
    })
    .await;
    tokio::time::sleep(lease * 3).await;
    slow.open();

    // w1 keeps the Orchestrator: it alone wrote its state and reported it,
    // and the model was called once.
    assert_eq!(watch.wait_output(id, 1).await.message, "Done.");
    let writers = state_writers(&sys, id).await;
    assert!(
        writers.iter().all(|(_, w)| w == "w1"),
        "taken over: {writers:?}"
    );
    assert!(watch.statuses_of(id).iter().all(|s| s.worker_id == "w1"));
    assert_eq!(sys.mock.requests_for(&lane).len(), 1);
    assert_eq!(worker_presence(&sys, "w2").await.unwrap().slots_used, 0);
    assert_eq!(summons_queued(&sys).await, 1, "w1 still holds its summons");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_orchestrator_whose_worker_is_killed_is_taken_over() {
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    let watch = Watch::start(&sys).await;
    let s = "s-parked-failover";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Pick a name");
    let brief = "Brief: ask which name, then use it.";
    let lane = orch_lane(brief);
    let answer = Gate::new();
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.push(
        &arb,
        arbiter("address_orchestrator", "Call it Mira.").gated(answer.clone()),
    );
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "Named."));
    sys.mock.push(&lane, orch(true, "Which name?"));
    sys.mock.push(&lane, orch(true, "Named it Mira."));

    let park = [("ARBITER_PARK_AFTER_SECS", std::ffi::OsStr::new("0.3"))];
    let mut w1 = sys.worker_process_with("w1", 1, &park);
    worker_ready(&sys, "w1").await;
    sys.send(s, "Pick a name").await;
    let orch_id = match &log.wait_len(2).await[1] {
        LogBody::Summoned(summoned) => summoned.orch_id.clone(),
        other => panic!("expected the summons, got {other:?}"),
    };
    watch
        .wait_status(&orch_id, "the Orchestrator to park on w1", |s| {
            s.parked && s.worker_id == "w1"
        })
        .await;
    // Parked past a whole lease, it is still w1's: the lease is renewed.
    tokio::time::sleep(Duration::from_secs_f64(
        test_lease_secs().parse::<f64>().unwrap() * 1.5,
    ))
    .await;
    assert_eq!(leases_held(&sys, "default").await, Some(1));
    assert!(
        watch
            .statuses_of(&orch_id)
            .iter()
            .all(|s| s.worker_id == "w1")
    );

    let _w2 = sys.worker_process_with("w2", 1, &park);
    worker_ready(&sys, "w2").await;
    w1.start_kill().unwrap();
    w1.wait().await.unwrap();
    watch
        .wait_status(&orch_id, "w2 to take the parked Orchestrator over", |s| {
            s.worker_id == "w2"
        })
        .await;
    answer.open();
    sys.settled(s, 7).await;

    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Pick a name"),
            pair("Summoned Orchestrator I", brief),
            pair("Orchestrator I", "Which name?"),
            pair("Arbiter → Orchestrator I", "Call it Mira."),
            pair("Orchestrator I", "Named it Mira."),
            pair("Released", "I"),
            pair("Arbiter", "Named."),
        ]
    );
    let calls = sys.mock.requests_for(&lane);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].last_user_text(), "Call it Mira.");
}

/// The check a worker makes between lease renewals, whose an Orchestrator's
/// last record is, reads it by direct get over both its subjects (`.state`
/// and `.out`): the newest message's id, none for an Orchestrator with no
/// record. A stream made before direct gets were allowed on it answers
/// nothing, which the worker sees as an error and then asks the stream
/// (`STREAM.MSG.GET`) instead, as before, at once for the next while (a
/// credential from before the change would cost a timeout on each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_check_reads_the_last_record_id_by_direct_get() {
    let sys = workers_only().await;
    let log = arbiter_bus::steplog::StepLog::open(
        &sys.bus,
        arbiter_protocol::subjects::ORCH_STATE_STREAM,
        arbiter_protocol::subjects::ORCH_BLOBS_BUCKET,
    )
    .await
    .unwrap();
    let records = arbiter_protocol::subjects::orch_records("o-check");
    assert_eq!(log.last_msg_id(&records).await.unwrap(), None);
    for (subject, id) in [
        (
            arbiter_protocol::subjects::orch_state("o-check"),
            "o-check:1:lease-a",
        ),
        (
            arbiter_protocol::subjects::orch_out("o-check"),
            "o-check:2:lease-b",
        ),
    ] {
        sys.bus
            .js
            .send_publish(
                subject,
                async_nats::jetstream::message::PublishMessage::build()
                    .payload("{}".into())
                    .message_id(id),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }
    assert_eq!(
        log.last_msg_id(&records).await.unwrap().as_deref(),
        Some("o-check:2:lease-b"),
        "not the newest message over .state and .out"
    );
    // What the stream itself says (`STREAM.MSG.GET`), the worker's fallback.
    let asked_the_stream = || async { log.last(&records).await.unwrap().map(|l| l.msg_id) };
    assert_eq!(
        asked_the_stream().await.as_deref(),
        Some("o-check:2:lease-b"),
        "the direct get and the stream disagree"
    );

    // A stream from before the setting: no direct get is answered.
    let mut stream = sys
        .bus
        .js
        .get_stream(arbiter_protocol::subjects::ORCH_STATE_STREAM)
        .await
        .unwrap();
    let mut config = stream.info().await.unwrap().config.clone();
    config.allow_direct = false;
    sys.bus.js.update_stream(config).await.unwrap();
    let refused = log.last_msg_id(&records).await;
    assert!(refused.is_err(), "{refused:?}");
    // And the next check does not wait on the server again.
    let asked = Instant::now();
    assert!(log.last_msg_id(&records).await.is_err());
    assert!(asked.elapsed() < Duration::from_millis(100));
    assert_eq!(
        asked_the_stream().await.as_deref(),
        Some("o-check:2:lease-b")
    );
}
