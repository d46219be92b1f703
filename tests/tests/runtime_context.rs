//! Context watch and turn semantics end to end: the 70 % and 85 % warnings
//! reach the model in the first request after the tool call that crossed
//! them; notes keep an Orchestrator working, up to a bound.

use crate::common;
use crate::direct;

use arbiter_protocol::OrchestratorState;
use arbiter_tests::MockReply;
use arbiter_worker::context::{CRITICAL_MARK, NOTICE_MARK};
use common::*;
use direct::*;
use pretty_assertions::assert_eq;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warnings_follow_the_tool_call_that_crosses_70_and_85_percent() {
    let sys = System::start_with(Options {
        coordinator: false,
        orch_context_budget: 1000,
        ..Default::default()
    })
    .await;
    let watch = Watch::start(&sys).await;
    let brief = "Fill your context.";
    let lane = orch_lane(brief);
    let touch = |n: u32| MockReply::tool_use("bash", json!({"command": format!("echo {n}")}));
    // Usage of each response: input, output, cache writes, cache reads.
    sys.mock.push(&lane, touch(1).usage(500, 10, 0, 0)); // 50 %
    sys.mock.push(&lane, touch(2).usage(20, 10, 100, 600)); // 72 %: cache counts
    sys.mock.push(&lane, touch(3).usage(800, 10, 0, 0)); // 80 %
    sys.mock.push(&lane, touch(4).usage(60, 10, 0, 800)); // 86 %
    // Past 85 % the report must carry a handoff packet.
    sys.mock.push(
        &lane,
        MockReply::json(&json!({
            "expects_response": true,
            "message": "Handoff: four echoes done; nothing remains.",
            "handoff": {"done": [{"id": "E1", "what": "four echoes", "files": []}], "open": [],
                        "decisions": [], "questions": [], "next_step": "Nothing; report done."}
        }))
        .usage(900, 10, 0, 0),
    );
    summon(&sys, "default", "s-ctx", "o-ctx", brief).await;
    let output = watch.wait_output("o-ctx", 1).await;
    assert!(output.message.starts_with("Handoff"));

    let requests = sys.mock.requests_for(&lane);
    assert_eq!(requests.len(), 5);
    let warnings: Vec<(bool, bool)> = requests
        .iter()
        .map(|r| {
            let last = r.last_user_text();
            (last.contains(NOTICE_MARK), last.contains(CRITICAL_MARK))
        })
        .collect();
    assert_eq!(
        warnings,
        [
            (false, false), // the brief
            (false, false), // after a tool call at 50 %
            (true, false),  // after the call that crossed 70 %
            (true, false),  // still past 70 %
            (false, true),  // after the call that crossed 85 %
        ]
    );
    // The warning follows the tool result in the same user message.
    let last = &requests[4].messages().last().unwrap()["content"];
    assert_eq!(last[0]["type"], "tool_result");
    assert!(
        last[1]["text"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{CRITICAL_MARK}: 86% of your context is used"))
    );
    assert!(requests[2].last_user_text().contains("72%"));

    // Status carries the measured context after every model response.
    let status = watch
        .wait_status("o-ctx", "the final waiting status", |s| {
            s.state == OrchestratorState::Waiting
        })
        .await;
    assert_eq!(
        (
            status.context_tokens,
            status.context_budget,
            status.context_pct
        ),
        (900, 1000, 90.0)
    );
    let measured: Vec<u64> = watch
        .statuses_of("o-ctx")
        .iter()
        .map(|s| s.context_tokens)
        .fold(Vec::new(), |mut seen, t| {
            if seen.last() != Some(&t) {
                seen.push(t);
            }
            seen
        });
    assert_eq!(measured, [0, 500, 720, 800, 860, 900]);
    // A reply's context is not a message of its own: it goes out with the
    // change of state or tool that follows (a heartbeat repeats what was
    // last sent, so it never changes the context alone either).
    let statuses = watch.statuses_of("o-ctx");
    for pair in statuses.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let same_step =
            (a.state, &a.current_tool, a.tool_count) == (b.state, &b.current_tool, b.tool_count);
        assert!(
            !same_step || a.context_tokens == b.context_tokens,
            "a status published for the context alone: {a:?} then {b:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_keep_an_orchestrator_working_until_it_must_ask() {
    let mut sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    let mut config = sys.worker_config("worker-notes", 1, 200_000);
    config.max_consecutive_notes = 2;
    sys.spawn_worker_with(config);
    let watch = Watch::start(&sys).await;
    let brief = "Work quietly.";
    let lane = orch_lane(brief);
    sys.mock.push(&lane, orch(false, "Note one."));
    sys.mock.push(&lane, orch(false, "Note two."));
    sys.mock.push(&lane, orch(false, "Note three."));
    sys.mock.push(&lane, orch(true, "Thank you; carrying on."));
    summon(&sys, "default", "s-notes", "o-notes", brief).await;

    let events = watch.wait_events("o-notes", 3).await;
    let outputs: Vec<(bool, String)> = events
        .into_iter()
        .map(|e| match e {
            arbiter_protocol::OrchestratorEvent::Output(o) => (o.expects_response, o.message),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        outputs,
        [
            (false, "Note one.".to_owned()),
            (false, "Note two.".to_owned()),
            // Past the bound, the note goes to the Arbiter and the Orchestrator waits.
            (true, "Note three.".to_owned()),
        ]
    );
    let requests = sys.mock.wait_for_requests(&lane, 3, WAIT).await;
    assert!(requests[1].last_user_text().contains("Continue your work"));
    assert!(
        requests[2]
            .last_user_text()
            .contains("your next reply must speak to the Arbiter")
    );
    watch
        .wait_status("o-notes", "waiting for the Arbiter", |s| {
            s.state == OrchestratorState::Waiting
        })
        .await;
    assert_eq!(sys.mock.requests_for(&lane).len(), 3);

    // The Arbiter answers; the Orchestrator takes it up.
    input(&sys, "s-notes", "o-notes", 1, "Go on.").await;
    let reply = watch.wait_output("o-notes", 4).await;
    assert_eq!(reply.message, "Thank you; carrying on.");
    assert_eq!(sys.mock.requests_for(&lane)[3].last_user_text(), "Go on.");
}
