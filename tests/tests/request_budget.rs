//! The request budget end to end (#45, item 4), on a mock that copies
//! llama-server's window: a request whose prompt and output cap pass the
//! slot's context is refused with its 400 `exceed_context_size_error`. An
//! Orchestrator whose model ignores every context warning (as small models
//! do) and keeps reading large outputs reaches the edge of its window; it
//! hands off there, with a packet, instead of failing on an API error, and
//! its successor carries on from that packet. When the worker knows the
//! window, no request past it is ever sent; when it does not, the server's
//! refusal is the edge.

use crate::common;

use arbiter_llm::Provider;
use arbiter_protocol::{LogBody, SessionState};
use arbiter_tests::mock_openai::{output_cap, prompt_tokens};
use arbiter_tests::{ChatRequestExt, OpenAiReply};
use common::*;
use pretty_assertions::assert_eq;
use serde_json::json;

/// llama-server's `--ctx-size` per slot, in the mock's count of tokens.
const WINDOW: u64 = 16_384;
/// The roles' output cap.
const CAP: u64 = 2_048;
const HUMAN: &str = "Read the build logs and summarise the failures.";
const BRIEF: &str = "Read the build logs (run ./logs.sh N for part N) and summarise the failures.";
const SECOND: &str = "Carry on with the summary from the packet.";
/// Scripted reads of Orchestrator I, far more than its window holds.
const READS: usize = 12;

/// A part of the log: about 6,000 bytes, 1,500 of the mock's tokens.
fn read(part: usize) -> OpenAiReply {
    OpenAiReply::tool_call(
        "bash",
        json!({"command": format!(
            "yes 'part {part}: error[E0308]: mismatched types in src/lib.rs' | head -n 120"
        )}),
    )
}

async fn hands_off_at_the_edge(worker_knows_the_window: bool) {
    let mut sys = System::start_with(Options {
        provider: Provider::OpenAi,
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    sys.openai.set_window(Some(WINDOW));
    // The successor's lane is its brief: the packet after it aside.
    sys.openai.set_lane_fn(|body| {
        let lane = lane_of(body);
        match lane.split_once("\n\n[Handoff packet") {
            Some((brief, _)) => brief.to_owned(),
            None => lane,
        }
    });
    let mut coordinator = sys.coordinator_config();
    coordinator.model.limits.context_window = Some(WINDOW);
    coordinator.model.max_output_tokens = CAP;
    sys.spawn_coordinator_with(coordinator);
    let mut worker = sys.worker_config("worker-0", 4, 200_000);
    worker.model.max_output_tokens = CAP;
    if worker_knows_the_window {
        worker.model.limits.context_window = Some(WINDOW);
    }
    sys.spawn_worker_with(worker);

    let session = "s-window";
    let log = sys.watch_log(session).await;
    let arb = arbiter_lane(HUMAN);
    let first = orch_lane(BRIEF);
    let second = orch_lane(SECOND);
    let say = |intent: &str, message: &str| {
        OpenAiReply::json(&json!({"intent": intent, "message": message}))
    };
    sys.openai.push(&arb, say("summon_orchestrator", BRIEF));
    for part in 1..=READS {
        sys.openai.push(&first, read(part));
    }
    sys.openai.push(&arb, say("summon_orchestrator", SECOND));
    sys.openai.push(
        &second,
        OpenAiReply::answer(&json!({"expects_response": true,
                                    "message": "Summarised: one type mismatch, repeated."})),
    );
    sys.openai.push(
        &arb,
        say("release_orchestrators", "One type mismatch, repeated."),
    );
    sys.send(session, HUMAN).await;

    let status = sys.settled(session, 8).await;
    assert_eq!(status.state, SessionState::Idle);
    let bodies = log.bodies();
    let seen = briefs(&bodies);
    assert_eq!(seen[0], pair("You", HUMAN));
    assert_eq!(seen[1], pair("Summoned Orchestrator I", BRIEF));
    // What the human sees: Orchestrator I stops at the edge and says so;
    // no error, and the successor goes on.
    let (who, said) = &seen[2];
    assert_eq!(who, "Orchestrator I");
    assert!(
        said.starts_with("[system] My context window is full (")
            && said.contains("so I stop here and hand off")
            && said.contains("this one lists what the workspace shows changed"),
        "{said}"
    );
    if worker_knows_the_window {
        assert!(said.contains(&format!("of its {WINDOW} tokens")), "{said}");
    } else {
        assert!(said.contains("more than the server takes"), "{said}");
    }
    assert_eq!(
        seen[3..],
        [
            pair("Released", "I"),
            pair("Summoned Orchestrator II", SECOND),
            pair(
                "Orchestrator II",
                "Summarised: one type mismatch, repeated."
            ),
            pair("Released", "II"),
            pair("Arbiter", "One type mismatch, repeated."),
        ]
    );
    assert!(
        !bodies.iter().any(|b| matches!(b, LogBody::Error(_))),
        "{seen:#?}"
    );
    // The handoff carried a packet; the successor's first request has it.
    let packet = bodies
        .iter()
        .find_map(|b| match b {
            LogBody::Orchestrator(o) if o.number == 1 => o.handoff.clone(),
            _ => None,
        })
        .expect("Orchestrator I's handoff has a packet");
    assert_eq!(packet.open[0].id, "rest");
    let successor = sys.openai.requests_for(&second);
    let carried = successor[0]
        .messages()
        .iter()
        .find(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    assert!(
        carried.contains("[Handoff packet of Orchestrator I") && carried.contains("rest"),
        "{carried}"
    );

    // Orchestrator I read some parts, never all: the window ran out first.
    let asked = sys.openai.requests_for(&first);
    let reads = asked.len();
    assert!((3..READS).contains(&reads), "{reads} requests");
    // Each request the server took kept prompt + cap within the window.
    // Knowing the window, the worker never sent one past it (the cap is
    // lowered first); not knowing it, exactly one was sent and refused.
    let past: Vec<u64> = sys
        .openai
        .requests()
        .iter()
        .map(|r| prompt_tokens(&r.body) + output_cap(&r.body).unwrap_or(0))
        .filter(|&asked| asked > WINDOW)
        .collect();
    if worker_knows_the_window {
        assert_eq!(past, Vec::<u64>::new());
        let lowered = asked
            .iter()
            .filter(|r| output_cap(&r.body).is_some_and(|cap| cap < CAP))
            .count();
        assert!(lowered >= 1, "no request had its cap lowered to fit");
    } else {
        assert_eq!(past.len(), 1, "{past:?}");
        assert!(asked.last().unwrap().chat_last_input().contains("part"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_that_knows_its_window_hands_off_at_its_edge_and_never_asks_past_it() {
    hands_off_at_the_edge(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_whose_server_refuses_a_request_as_too_large_hands_off_instead_of_failing()
{
    hands_off_at_the_edge(false).await;
}
