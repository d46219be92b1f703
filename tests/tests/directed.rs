//! A directed summons (#21, first step): the Arbiter names the pool or the
//! runtime an Orchestrator must run on, with the human's words behind it.
//! The coordinator checks it against the workers that are up: a summons on
//! an offered pool goes there and only a worker of that pool takes it; a
//! pool nobody serves, or a strategy used the wrong way (a consensus given
//! sub-briefs), is refused back to the Arbiter with the reason, and nothing
//! is summoned.

use crate::common;

use arbiter_protocol::{LogBody, Summon, subjects};
use arbiter_tests::{Gate, MockReply};
use common::*;
use futures::StreamExt as _;
use serde_json::{Value, json};

/// The Orchestrators a worker runs now (its presence endpoint).
async fn running_on(sys: &System, worker: &str) -> Vec<String> {
    let reply = sys
        .bus
        .client
        .request(
            arbiter_worker::presence::presence_subject(worker),
            "".into(),
        )
        .await
        .unwrap();
    let presence: Value = serde_json::from_slice(&reply.payload).unwrap();
    serde_json::from_value(presence["orchestrators"].clone()).unwrap()
}

/// Two native workers: `worker-default` in the coordinator's own pool,
/// `worker-review` in the pool "review".
async fn two_pools() -> System {
    let mut sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    sys.spawn_worker("worker-default", 2, 200_000);
    let mut review = sys.worker_config("worker-review", 2, 200_000);
    review.pool = "review".into();
    sys.spawn_worker_with(review);
    sys.worker_up("worker-default").await;
    sys.worker_up("worker-review").await;
    sys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summons_directed_to_a_pool_runs_only_on_a_worker_of_that_pool() {
    let sys = two_pools().await;
    let s = "s-directed";
    let log = sys.watch_log(s).await;
    let human = "Have the review pool check the parser, please";
    let arb = arbiter_lane(human);
    let brief = "Review the parser in src/parser.rs.";
    let lane = orch_lane(brief);
    sys.mock.push(
        &arb,
        summons(
            brief,
            json!({
                "pool": "review",
                "directive": {
                    "words": human,
                    "parsed": "pool review",
                    "confidence": 95
                }
            }),
        ),
    );
    // The Orchestrator's first call is held while the test looks at who runs it.
    let hold = Gate::new();
    sys.mock
        .push(&lane, orch(true, "Reviewed.").gated(hold.clone()));
    let mut wire = sys
        .bus
        .client
        .subscribe(subjects::summon("review"))
        .await
        .unwrap();
    sys.bus.client.flush().await.unwrap();
    sys.send(s, human).await;
    let summon: Summon = tokio::time::timeout(WAIT, wire.next())
        .await
        .map(|m| serde_json::from_slice(&m.unwrap().payload).unwrap())
        .expect("the summons on arbiter.v1.summon.review");
    assert_eq!(summon.pool, "review");
    // No runtime named, none configured: any runtime of the pool may take it.
    assert_eq!(summon.runtime, None);
    sys.mock.wait_for_requests(&lane, 1, WAIT).await;
    // The log entries go out after the summons: the worker may be first.
    // The `summoned` entry is the last of the step's (after the direction note).
    log.wait_for("the summoned entry", |b| matches!(b, LogBody::Summoned(_)))
        .await;

    let bodies = log.bodies();
    let summoned = bodies
        .iter()
        .find_map(|b| match b {
            LogBody::Summoned(e) => Some(e.clone()),
            _ => None,
        })
        .expect("a summoned entry");
    assert_eq!(summoned.pool, "review");
    assert_eq!(summoned.brief, brief);
    // The record of the direction: the pool, and the human's words verbatim.
    let note = bodies
        .iter()
        .find_map(|b| match b {
            LogBody::System(e) if e.text.contains("directive") => Some(e.text.clone()),
            _ => None,
        })
        .expect("a system entry with the directive");
    assert!(
        note.contains("pool \"review\"") && note.contains(&format!("{human:?}")),
        "{note}"
    );
    assert!(note.contains("confidence 95 %"), "{note}");
    // The worker of the review pool took it; the other did not.
    assert_eq!(
        running_on(&sys, "worker-review").await,
        vec![summoned.orch_id.clone()]
    );
    assert!(running_on(&sys, "worker-default").await.is_empty());
    hold.open();
    log.wait_for(
        "the Orchestrator's answer",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Reviewed."),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_nobody_serves_and_a_consensus_with_sub_briefs_are_refused_to_the_arbiter() {
    let sys = two_pools().await;

    // A pool no worker serves: refused, the reason names it, nothing summoned.
    let s = "s-no-pool";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Run it on the GPU boxes");
    let brief = "Train the model.";
    sys.mock.push(&arb, summons(brief, json!({"pool": "gpu"})));
    sys.mock
        .push(&arb, arbiter("address_human", "No worker serves gpu."));
    sys.send(s, "Run it on the GPU boxes").await;
    log.wait_for(
        "the Arbiter's answer",
        |b| matches!(b, LogBody::Arbiter(a) if a.text == "No worker serves gpu."),
    )
    .await;
    let requests = sys.mock.requests_for(&arb);
    assert_eq!(requests.len(), 2);
    let told = requests[1].last_user_text();
    assert!(
        told.starts_with("System: Your summon_orchestrator could not be carried out: no worker serves the pool \"gpu\" (pools served now: default, review)"),
        "{told}"
    );
    let bodies = log.bodies();
    assert!(
        bodies.iter().any(
            |b| matches!(b, LogBody::System(e) if e.text.contains("no worker serves the pool \"gpu\""))
        ),
        "{bodies:?}"
    );
    assert!(!bodies.iter().any(|b| matches!(b, LogBody::Summoned(_))));
    assert!(sys.mock.requests_for(&orch_lane(brief)).is_empty());

    // A runtime no worker of the pool offers: refused, the reason names it.
    let s = "s-no-codex";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Get Codex to review it");
    let brief = "Review the lexer.";
    sys.mock.push(
        &arb,
        summons(
            brief,
            json!({"runtime": "codex", "directive": {"words": "Get Codex to review it"}}),
        ),
    );
    sys.mock
        .push(&arb, arbiter("address_human", "No Codex here."));
    sys.send(s, "Get Codex to review it").await;
    log.wait_for(
        "the Arbiter's answer",
        |b| matches!(b, LogBody::Arbiter(a) if a.text == "No Codex here."),
    )
    .await;
    let told = sys.mock.requests_for(&arb)[1].last_user_text();
    assert!(
        told.contains("no worker of the pool \"default\" offers the runtime \"codex\" (runtimes offered there: native)"),
        "{told}"
    );
    assert!(
        !log.bodies()
            .iter()
            .any(|b| matches!(b, LogBody::Summoned(_)))
    );
    assert!(sys.mock.requests_for(&orch_lane(brief)).is_empty());

    // A consensus given sub-briefs: every member answers one question, so
    // it is refused with the reason.
    let s = "s-consensus";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Do all three parts at once");
    let brief = "Write the three modules.";
    sys.mock.push(
        &arb,
        summons(
            brief,
            json!({"strategy": "consensus", "briefs": ["Lexer.", "Parser.", "Printer."]}),
        ),
    );
    sys.mock
        .push(&arb, arbiter("address_human", "One at a time, then."));
    sys.send(s, "Do all three parts at once").await;
    log.wait_for(
        "the Arbiter's answer",
        |b| matches!(b, LogBody::Arbiter(a) if a.text == "One at a time, then."),
    )
    .await;
    let requests = sys.mock.requests_for(&arb);
    assert_eq!(requests.len(), 2);
    let told = requests[1].last_user_text();
    assert!(
        told.contains(
            "a consensus asks every member the same question, given in the message: leave \
             briefs out (use strategy parallel for sub-briefs), so nothing was summoned."
        ),
        "{told}"
    );
    let bodies = log.bodies();
    assert!(!bodies.iter().any(|b| matches!(b, LogBody::Summoned(_))));
    assert!(sys.mock.requests_for(&orch_lane(brief)).is_empty());
    assert!(running_on(&sys, "worker-default").await.is_empty());
    assert!(running_on(&sys, "worker-review").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summons_directed_to_claude_code_runs_on_the_worker_that_offers_it() {
    claude_cli_bin();
    let mut sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    // One pool, two runtimes; the coordinator names none of its own.
    sys.spawn_worker("worker-native", 1, 200_000);
    let mut cc = sys.worker_config("worker-cc", 1, 200_000);
    cc.runtime = arbiter_worker::Runtime::ClaudeCode;
    sys.spawn_worker_with(cc);
    sys.worker_up("worker-native").await;
    sys.worker_up("worker-cc").await;
    let s = "s-directed-cc";
    let log = sys.watch_log(s).await;
    let human = "Let Claude Code do this one";
    let arb = arbiter_lane(human);
    let brief = "Tidy the README.";
    let lane = orch_lane(brief);
    sys.mock.push(
        &arb,
        summons(
            brief,
            json!({"runtime": "claude-code", "directive": {"words": human, "confidence": 100}}),
        ),
    );
    let hold = Gate::new();
    sys.mock.push(
        &lane,
        MockReply::tool_use(
            "StructuredOutput",
            json!({"expects_response": true, "message": "Tidied."}),
        )
        .gated(hold.clone()),
    );
    // The summons on the wire, as the workers of the pool see it.
    let mut wire = sys
        .bus
        .client
        .subscribe(subjects::summon("default"))
        .await
        .unwrap();
    sys.bus.client.flush().await.unwrap();
    sys.send(s, human).await;
    let summon: Summon = tokio::time::timeout(WAIT, wire.next())
        .await
        .map(|m| serde_json::from_slice(&m.unwrap().payload).unwrap())
        .expect("the summons on arbiter.v1.summon.default");
    assert_eq!(summon.runtime.as_deref(), Some("claude-code"));
    assert_eq!(summon.brief, brief);
    sys.mock.wait_for_requests(&lane, 1, WAIT).await;
    // The CLI made the call, on the worker that offers claude-code.
    let requests = sys.mock.requests_for(&lane);
    assert!(
        requests[0]
            .header("user-agent")
            .is_some_and(|a| a.starts_with("claude-cli/"))
    );
    let orch_id = log
        .bodies()
        .iter()
        .find_map(|b| match b {
            LogBody::Summoned(e) => Some(e.orch_id.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(running_on(&sys, "worker-cc").await, vec![orch_id]);
    assert!(running_on(&sys, "worker-native").await.is_empty());
    assert!(log.bodies().iter().any(|b| matches!(b,
        LogBody::System(e) if e.text.contains("on the runtime \"claude-code\"")
            && e.text.contains(&format!("{human:?}")))));
    hold.open();
    log.wait_for(
        "the Orchestrator's answer",
        |b| matches!(b, LogBody::Orchestrator(o) if o.text == "Tidied."),
    )
    .await;
}
