//! A directed summons (#21, first step): the Arbiter names the pool or the
//! runtime an Orchestrator must run on, with the human's words behind it.
//! The coordinator checks it against the workers that are up: a summons on
//! an offered pool goes there and only a worker of that pool takes it. A
//! pool nobody serves, or a strategy used the wrong way (a consensus given
//! sub-briefs), is refused back to the Arbiter (a decision over what the
//! workers offer, in the coordinator's table tests).

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

// Decisions tested as table cases in coordinator/src/rules/tests/routing.rs.

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

/// The Arbiter's form follows the fleet (#45): with workers of two pools up,
/// its request offers exactly those two pools and the one runtime they
/// run, so a model bound by the schema cannot name a pool nobody serves;
/// a reply that names one anyway (a mock is not bound) is refused by the
/// same schema and asked again, and the human sees no summons to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_arbiters_form_offers_the_pools_the_workers_serve() {
    let sys = two_pools().await;
    // The coordinator asks the fleet every second until a worker answers
    // (a 750 ms window each): the form has them within 2 s of their start.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let s = "s-form";
    let log = sys.watch_log(s).await;
    let human = "Send it to the gpu pool";
    let arb = arbiter_lane(human);
    sys.mock
        .push(&arb, summons("Do it.", json!({"pool": "gpu"})));
    sys.mock
        .push(&arb, arbiter("address_human", "No gpu pool is up."));
    sys.send(s, human).await;
    log.wait_for(
        "the Arbiter's answer",
        |b| matches!(b, LogBody::Arbiter(e) if e.text == "No gpu pool is up."),
    )
    .await;
    let asked = sys.mock.requests_for(&arb);
    assert_eq!(asked.len(), 2, "the reply naming gpu was asked again");
    let schema = &asked[0].body["output_config"]["format"]["schema"];
    let mut pools: Vec<&str> = schema["properties"]["pool"]["anyOf"]
        .as_array()
        .and_then(|a| a.iter().find_map(|v| v["enum"].as_array()))
        .or_else(|| schema["properties"]["pool"]["enum"].as_array())
        .unwrap_or_else(|| panic!("the pool is an enum: {}", schema["properties"]["pool"]))
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    pools.sort_unstable();
    assert_eq!(pools, ["default", "review"]);
    // One runtime up (native): a summons has no runtime to fill.
    assert!(schema["properties"].get("runtime").is_none(), "{schema}");
    assert!(
        asked[1].last_user_text().contains("gpu"),
        "{}",
        asked[1].last_user_text()
    );
    assert!(
        !log.bodies()
            .iter()
            .any(|b| matches!(b, LogBody::Summoned(_))),
        "nothing was summoned"
    );
}
