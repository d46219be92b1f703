//! Capacity, release and process clean-up end to end: summons beyond the
//! slots wait in the queue and all complete; a bash timeout kills every
//! process the command started; a release during a long tool call (inside a subagent)
//! frees the slot within a second and leaves no process behind; an
//! Orchestrator that waits for the Arbiter parks, and its slot runs another
//! session meanwhile.

use crate::common;
use crate::direct;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use arbiter_protocol::{ControlAction, OrchestratorEvent, OrchestratorState};
use arbiter_tests::{Gate, MockReply, eventually};
use common::*;
use direct::*;
use pretty_assertions::assert_eq;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_summons_than_slots_wait_in_the_queue_and_all_complete() {
    let sys = System::start_with(Options {
        coordinator: false,
        slots: 2,
        ..Default::default()
    })
    .await;
    let watch = Watch::start(&sys).await;
    let hold = Gate::new();
    let ids: Vec<String> = (1..=5).map(|i| format!("o-cap-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let brief = format!("Job {i}.");
        sys.mock.push(
            &orch_lane(&brief),
            orch(true, &format!("Job {i} done.")).gated(hold.clone()),
        );
        summon(&sys, "default", &format!("s-cap-{i}"), id, &brief).await;
    }

    // Two run; three wait in the queue, untouched.
    eventually(WAIT, "two running and three queued", || async {
        let p = presence(&sys).await;
        let waiting = queued(&sys, "default").await;
        let calling: usize = sys.mock.lane_counts().values().sum();
        (p.slots_used == 2 && p.slots_free == 0 && waiting == Some(3) && calling == 2).then_some(())
    })
    .await;

    // Let them answer; free each slot as its Orchestrator reports (release
    // some, cancel others), as the coordinator would.
    hold.open();
    let mut done = HashSet::new();
    let deadline = Instant::now() + WAIT;
    while done.len() < ids.len() {
        assert!(Instant::now() < deadline, "only {done:?} reported");
        for (i, id) in ids.iter().enumerate() {
            if !done.contains(id) && !watch.events(id).is_empty() {
                let action = if i % 2 == 0 {
                    ControlAction::Release
                } else {
                    ControlAction::Cancel
                };
                control(&sys, id, action).await;
                done.insert(id.clone());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Nothing lost, nothing doubled: one output and one model call each.
    for (i, id) in ids.iter().enumerate() {
        watch.wait_stopped(id).await;
        let events = watch.events(id);
        assert_eq!(events.len(), 1, "{id}: {events:?}");
        assert!(
            matches!(&events[0], OrchestratorEvent::Output(o) if o.message == format!("Job {i} done.")),
            "{id}: {events:?}"
        );
        assert_eq!(
            sys.mock
                .requests_for(&orch_lane(&format!("Job {i}.")))
                .len(),
            1
        );
    }
    assert_eq!(queued(&sys, "default").await, Some(0));
    eventually(WAIT, "every slot free", || async {
        (presence(&sys).await.slots_used == 0).then_some(())
    })
    .await;

    // Never more than two at once: replay the status stream.
    let mut running = HashSet::new();
    let mut most = 0;
    for status in watch.statuses() {
        if status.state == OrchestratorState::Stopped {
            running.remove(&status.orch_id);
        } else {
            running.insert(status.orch_id.clone());
        }
        most = most.max(running.len());
    }
    assert_eq!(most, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_timeout_kills_every_process_the_command_started() {
    let sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let watch = Watch::start(&sys).await;
    let brief = "Run something that hangs.";
    let lane = orch_lane(brief);
    let hang = marker("hang");
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "bash",
            json!({
                "command": format!("(bash -c 'exec -a {hang}-child sleep 60'; echo never) & exec -a {hang}-shell sleep 60"),
                "timeout_ms": 1500
            }),
        ),
    );
    sys.mock.push(&lane, orch(true, "It hung; it was killed."));
    summon(&sys, "default", "s-hang", "o-hang", brief).await;
    sys.mock.wait_for_requests(&lane, 1, WAIT).await;
    processes_started(&hang, 2).await;
    let started = Instant::now();
    let requests = sys.mock.wait_for_requests(&lane, 2, WAIT).await;
    let returned = started.elapsed();
    watch.wait_output("o-hang", 1).await;

    let results = tool_results(&requests[1]);
    assert_eq!(results.len(), 1);
    let (text, is_error) = &results[0];
    assert!(*is_error);
    assert!(
        text.starts_with(
            "timed out after 1.5 s; the command and every process it started were killed"
        ),
        "{text}"
    );
    assert!(!text.contains("never"));
    // No process left behind: the shell and the background child are gone.
    let killed = eventually(
        Duration::from_secs(2),
        "the command's processes to die",
        || async { processes(&hang).is_empty().then(|| started.elapsed()) },
    )
    .await;
    assert!(returned < Duration::from_secs(3), "{returned:?}");
    eprintln!(
        "bash timeout: tool result back {returned:?} after the pids appeared; group dead after {killed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_during_a_long_tool_call_frees_the_slot_within_a_second() {
    let sys = System::start_with(Options {
        coordinator: false,
        slots: 1,
        ..Default::default()
    })
    .await;
    let watch = Watch::start(&sys).await;
    // A: its subagent runs a long command. B waits for A's slot.
    let (brief_a, brief_b) = ("Delegate a long build.", "Come after.");
    let prompt = "Run the long build and report.";
    let build = marker("build");
    sys.mock.push(
        &orch_lane(brief_a),
        MockReply::tool_use(
            "task",
            json!({"description": "Long build", "prompt": prompt}),
        ),
    );
    sys.mock.push(
        &sub_lane(prompt),
        MockReply::tool_use(
            "bash",
            json!({"command": format!("(exec -a {build}-worker sleep 60) & exec -a {build}-shell sleep 60")}),
        ),
    );
    sys.mock.push(&orch_lane(brief_b), orch(true, "B here."));
    summon(&sys, "default", "s-long", "o-long", brief_a).await;
    summon(&sys, "default", "s-next", "o-next", brief_b).await;

    processes_started(&build, 2).await;
    watch
        .wait_status("o-long", "the subagent's bash", |s| {
            s.current_tool.as_deref() == Some("Task › Bash")
        })
        .await;
    assert_eq!(queued(&sys, "default").await, Some(1));

    let released = Instant::now();
    control(&sys, "o-long", ControlAction::Release).await;
    let freed = eventually(WAIT, "A's slot to be freed", || async {
        let p = presence(&sys).await;
        (!p.orchestrators.contains(&"o-long".to_owned())).then(|| released.elapsed())
    })
    .await;
    let dead = eventually(WAIT, "the build's processes to die", || async {
        processes(&build).is_empty().then(|| released.elapsed())
    })
    .await;
    assert!(freed < Duration::from_secs(1), "slot freed after {freed:?}");
    assert!(
        dead < Duration::from_secs(1),
        "processes died after {dead:?}"
    );

    // B takes the slot and works; A published nothing more and stopped.
    let b = watch.wait_output("o-next", 1).await;
    let b_started = released.elapsed();
    assert_eq!(b.message, "B here.");
    assert!(watch.events("o-long").is_empty());
    assert_eq!(
        watch.wait_stopped("o-long").await.state,
        OrchestratorState::Stopped
    );
    assert_eq!(sys.mock.requests_for(&sub_lane(prompt)).len(), 1);
    eprintln!(
        "release: slot freed after {freed:?}, processes dead after {dead:?}, B answered after {b_started:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_model_call_frees_the_slot_within_a_second() {
    let sys = System::start_with(Options {
        coordinator: false,
        slots: 1,
        ..Default::default()
    })
    .await;
    let watch = Watch::start(&sys).await;
    let brief = "Think for ever.";
    let never = Gate::new();
    sys.mock.push(
        &orch_lane(brief),
        orch(true, "Too late.").gated(never.clone()),
    );
    summon(&sys, "default", "s-think", "o-think", brief).await;
    sys.mock.wait_for_requests(&orch_lane(brief), 1, WAIT).await;
    assert_eq!(presence(&sys).await.slots_used, 1);

    let cancelled = Instant::now();
    control(&sys, "o-think", ControlAction::Cancel).await;
    let freed = eventually(WAIT, "the slot to be freed", || async {
        (presence(&sys).await.slots_free == 1).then(|| cancelled.elapsed())
    })
    .await;
    assert!(freed < Duration::from_secs(1), "slot freed after {freed:?}");
    watch.wait_stopped("o-think").await;
    // Its answer, let through now, goes nowhere.
    never.open();
    assert!(watch.events("o-think").is_empty());
    eprintln!("cancel during a model call: slot freed after {freed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_orchestrator_parks_and_its_slot_runs_another_session() {
    // One worker with one slot; Orchestrators park after half a second.
    let mut sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    let mut config = sys.worker_config("worker-0", 1, 200_000);
    config.park_after = Some(Duration::from_millis(500));
    sys.spawn_worker_with(config);
    worker_ready(&sys, "worker-0").await;
    let watch = Watch::start(&sys).await;
    let (sa, sb) = ("s-park-a", "s-park-b");
    let (log_a, log_b) = (sys.watch_log(sa).await, sys.watch_log(sb).await);

    // A's Orchestrator asks, and the Arbiter takes its time to answer.
    let (arb_a, brief_a) = (arbiter_lane("Task A"), "Brief A: ask before you start.");
    let answer_a = Gate::new();
    sys.mock
        .push(&arb_a, arbiter("summon_orchestrator", brief_a));
    sys.mock.push(
        &arb_a,
        arbiter("address_orchestrator", "Answer for A.").gated(answer_a.clone()),
    );
    sys.mock
        .push(&arb_a, arbiter("release_orchestrators", "A finished."));
    sys.mock
        .push(&orch_lane(brief_a), orch(true, "Question from A?"));
    sys.mock.push(&orch_lane(brief_a), orch(true, "A done."));
    sys.send(sa, "Task A").await;
    let orch_a = summoned_id(&log_a).await;
    watch
        .wait_status(&orch_a, "A's Orchestrator to park", |s| {
            s.parked && s.state == OrchestratorState::Waiting
        })
        .await;
    let parked = presence(&sys).await;
    assert_eq!(
        (parked.slots_free, parked.orchestrators, parked.parked),
        (1, Vec::new(), vec![orch_a.clone()])
    );

    // B is summoned and runs on the same worker, in the slot A gave back.
    let (arb_b, brief_b) = (arbiter_lane("Task B"), "Brief B: just do it.");
    let b_works = Gate::new();
    sys.mock
        .push(&arb_b, arbiter("summon_orchestrator", brief_b));
    sys.mock
        .push(&arb_b, arbiter("release_orchestrators", "B finished."));
    sys.mock.push(
        &orch_lane(brief_b),
        orch(true, "B done.").gated(b_works.clone()),
    );
    sys.send(sb, "Task B").await;
    sys.mock
        .wait_for_requests(&orch_lane(brief_b), 1, WAIT)
        .await;

    // The Arbiter answers A while B holds the only slot: A stores the input
    // and waits, parked, for a slot.
    answer_a.open();
    eventually(WAIT, "A's input to be stored", || async {
        (sys.orch_inputs_taken(&orch_a).await >= 1).then_some(())
    })
    .await;
    assert_eq!(sys.mock.requests_for(&orch_lane(brief_a)).len(), 1);
    assert_eq!(presence(&sys).await.parked, vec![orch_a.clone()]);

    // B finishes and is released; A takes the slot and finishes too.
    b_works.open();
    sys.settled(sb, 5).await;
    sys.settled(sa, 7).await;
    assert_eq!(
        briefs(&log_a.bodies()),
        vec![
            pair("You", "Task A"),
            pair("Summoned Orchestrator I", brief_a),
            pair("Orchestrator I", "Question from A?"),
            pair("Arbiter → Orchestrator I", "Answer for A."),
            pair("Orchestrator I", "A done."),
            pair("Released", "I"),
            pair("Arbiter", "A finished."),
        ]
    );
    assert_eq!(
        briefs(&log_b.bodies()),
        vec![
            pair("You", "Task B"),
            pair("Summoned Orchestrator I", brief_b),
            pair("Orchestrator I", "B done."),
            pair("Released", "I"),
            pair("Arbiter", "B finished."),
        ]
    );
    let a_calls = sys.mock.requests_for(&orch_lane(brief_a));
    assert_eq!(a_calls.len(), 2);
    assert_eq!(a_calls[1].last_user_text(), "Answer for A.");
    // Never more than the one slot in use: replay the status stream.
    let mut seated = HashSet::new();
    let mut most = 0;
    for status in watch.statuses() {
        if status.state == OrchestratorState::Stopped || status.parked {
            seated.remove(&status.orch_id);
        } else {
            seated.insert(status.orch_id.clone());
        }
        most = most.max(seated.len());
    }
    assert_eq!(most, 1);
    // The session settles when the Arbiter has spoken; the worker frees A's
    // slot when its release arrives, which may be a moment later.
    eventually(WAIT, "A's slot to be free again", || async {
        let done = presence(&sys).await;
        ((done.slots_free, done.parked.len()) == (1, 0)).then_some(())
    })
    .await;
}

async fn summoned_id(log: &LogWatch) -> String {
    let at = log
        .wait_for("the summons", |b| {
            matches!(b, arbiter_protocol::LogBody::Summoned(_))
        })
        .await;
    match &log.bodies()[at] {
        arbiter_protocol::LogBody::Summoned(e) => e.orch_id.clone(),
        other => panic!("{other:?}"),
    }
}
