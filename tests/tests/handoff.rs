//! Typed handoffs end to end: an Orchestrator past 85 % of its context ends
//! with a `handoff` packet that its schema validates; the coordinator stores
//! it and the successor's first model request carries it word for word,
//! beside the Arbiter's brief, while the Arbiter reads one line of it. A
//! packet that never validates stops the Orchestrator with a visible error
//! and is never routed.

use crate::common;
use crate::direct;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use arbiter_protocol::{Handoff, LogBody};
use arbiter_tests::MockReply;
use common::*;
use serde_json::{Value, json};

/// Context budget of the Orchestrators: small, so that scripted usage crosses 85 %.
const BUDGET: u64 = 1000;
/// Orchestrator generations of the long task.
const GENERATIONS: usize = 10;

fn ids(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("T{i}")).collect()
}

fn brief_of(generation: usize) -> String {
    format!("Generation {generation}: carry the ten items T1..T10 on; one item per generation.")
}

/// The packet Orchestrator `generation` writes: items 1..=generation done.
fn packet(generation: usize) -> Value {
    let all = ids(GENERATIONS);
    json!({
        "done": all[..generation].iter().map(|id| json!({
            "id": id, "what": format!("built {id}"), "files": [format!("src/{}.rs", id.to_lowercase())]
        })).collect::<Vec<_>>(),
        "open": all[generation..].iter().map(|id| json!({"id": id, "what": format!("build {id}")}))
            .collect::<Vec<_>>(),
        "decisions": [{"decision": format!("layout {generation} kept"),
                       "why": format!("reason-only-in-the-packet-{generation}")}],
        "questions": [],
        "next_step": format!("Start on T{}.", generation + 1),
    })
}

fn report(message: &str, handoff: &Value) -> MockReply {
    MockReply::json(&json!({"expects_response": true, "message": message, "handoff": handoff}))
}

/// Ten Orchestrator generations for one human request. Each successor's
/// first request holds its predecessor's packet as written; the Arbiter
/// reads only a count per generation, and its context grows by much less
/// than a packet per generation; no planted item is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_successor_gets_its_predecessors_packet_verbatim_and_the_arbiter_one_line() {
    let sys = System::start_with(Options {
        orch_context_budget: BUDGET,
        ..Default::default()
    })
    .await;
    let s = "s-handoff-chain";
    let log = sys.watch_log(s).await;
    let human = "Build the ten items.";
    let arb = arbiter_lane(human);
    for generation in 1..=GENERATIONS {
        sys.mock
            .push(&arb, arbiter("summon_orchestrator", &brief_of(generation)));
        let lane = orch_lane(&brief_of(generation));
        sys.mock.push(
            &lane,
            MockReply::tool_use("bash", json!({"command": format!("echo {generation}")}))
                .usage(500, 10, 0, 0),
        );
        if generation == 1 {
            // Past 85 % without a packet: sent back for repair.
            sys.mock.push(
                &lane,
                MockReply::json(&json!({"expects_response": true, "message": "Context is full."}))
                    .usage(900, 10, 0, 0),
            );
        }
        sys.mock.push(
            &lane,
            report(
                &format!("Item T{generation} built; context full."),
                &packet(generation),
            )
            .usage(900, 10, 0, 0),
        );
    }
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));
    sys.send(s, human).await;
    let arbiter_requests = sys
        .mock
        .wait_for_requests(&arb, GENERATIONS + 1, WAIT * 3)
        .await;

    // The repair: the reply past 85 % without a packet went back with the reason.
    let first = sys.mock.requests_for(&orch_lane(&brief_of(1)));
    assert!(
        first[2]
            .last_user_text()
            .contains("90% of your context is used, so this reply must carry your `handoff`"),
        "{}",
        first[2].last_user_text()
    );

    // Each successor's first request: the brief, then the packet as written.
    for generation in 2..=GENERATIONS {
        let requests = sys.mock.requests_for(&orch_lane(&brief_of(generation)));
        let content = &requests[0].messages()[0]["content"];
        assert_eq!(content[0]["text"], brief_of(generation));
        let carried = content[1]["text"].as_str().unwrap();
        let (header, json_text) = carried.split_once('\n').unwrap();
        assert!(
            header.starts_with(&format!(
                "[Handoff packet of Orchestrator {}, your predecessor, as it wrote it",
                arbiter_protocol::roman(generation as u32 - 1)
            )),
            "{header}"
        );
        let sent: Value = serde_json::from_str(json_text).unwrap();
        assert_eq!(sent, packet(generation - 1), "generation {generation}");
        let typed: Handoff = serde_json::from_value(packet(generation - 1)).unwrap();
        assert_eq!(json_text, typed.verbatim());
    }

    // The Arbiter never reads a packet, only one line per generation.
    for (i, request) in arbiter_requests.iter().enumerate() {
        assert!(
            !request.all_text().contains("reason-only-in-the-packet"),
            "Arbiter request {i} holds a packet"
        );
    }
    let last = arbiter_requests[GENERATIONS].last_user_text();
    assert_eq!(
        last,
        format!(
            "Orchestrator X: Item T10 built; context full.\n\
             [Evidence from the worker, not written by Orchestrator X: 1 tool call (bash 1), \
             0 files changed; commands: `echo 10` exit 0]\n\
             [Handoff of Orchestrator X: 10 done, 0 open, 1 decision, 0 open questions; it goes \
             verbatim to the next Orchestrator you summon]"
        )
    );

    // Growth of the Arbiter's context per generation, against a packet's size.
    let sizes: Vec<usize> = arbiter_requests
        .iter()
        .map(|r| serde_json::to_string(r.messages()).unwrap().len())
        .collect();
    let growth: Vec<usize> = sizes.windows(2).map(|w| w[1] - w[0]).collect();
    let packet_bytes: Vec<usize> = (1..=GENERATIONS)
        .map(|g| serde_json::to_string(&packet(g)).unwrap().len())
        .collect();
    let mean_growth = growth.iter().sum::<usize>() as f64 / growth.len() as f64;
    let mean_packet = packet_bytes.iter().sum::<usize>() as f64 / packet_bytes.len() as f64;
    let arbiter_budget = arbiter_coordinator::Config::default().context_budget as f64;
    eprintln!(
        "Arbiter context growth per Orchestrator generation: {mean_growth:.0} bytes \
         (~{:.0} tokens, {:.3} % of its {arbiter_budget} token budget; goal <= 2 %); \
         mean packet carried past it: {mean_packet:.0} bytes",
        mean_growth / 4.0,
        mean_growth / 4.0 / arbiter_budget * 100.0
    );
    // The late packets are larger than anything the Arbiter reads per generation.
    assert!(
        growth.iter().max().unwrap() < packet_bytes.last().unwrap(),
        "growth {growth:?}, packets {packet_bytes:?}"
    );

    // Every planted item is accounted for in the last packet; the log holds
    // each packet as it came, once per generation. The Arbiter may be asked
    // before the log watch has the last report (its call starts on the
    // report as it is published), so the watch is waited for.
    let entries: Vec<Handoff> =
        arbiter_tests::eventually(WAIT, "every packet in the log", || async {
            let entries: Vec<Handoff> = log
                .bodies()
                .into_iter()
                .filter_map(|b| match b {
                    LogBody::Orchestrator(e) => e.handoff.map(|h| *h),
                    _ => None,
                })
                .collect();
            (entries.len() >= GENERATIONS).then_some(entries)
        })
        .await;
    assert_eq!(entries.len(), GENERATIONS);
    let last_packet = entries.last().unwrap();
    let accounted: BTreeSet<String> = last_packet
        .done
        .iter()
        .map(|d| d.id.clone())
        .chain(last_packet.open.iter().map(|o| o.id.clone()))
        .collect();
    assert_eq!(accounted, ids(GENERATIONS).into_iter().collect());
    log.wait_for("the final word", |b| matches!(b, LogBody::Arbiter(_)))
        .await;

    // The handoff gap: from the predecessor's final report (its log entry)
    // to the successor's first model call, per generation.
    let reported: Vec<SystemTime> = log
        .entries()
        .into_iter()
        .filter(|e| matches!(&e.body, LogBody::Orchestrator(o) if o.handoff.is_some()))
        .map(|e| e.at.into())
        .collect();
    let mut gaps: Vec<Duration> = (2..=GENERATIONS)
        .map(|generation| {
            let first_call =
                sys.mock.requests_for(&orch_lane(&brief_of(generation)))[0].received_at;
            first_call
                .duration_since(reported[generation - 2])
                .expect("the successor's first call comes after its predecessor's report")
        })
        .collect();
    gaps.sort();
    let p50 = gaps[gaps.len() / 2];
    let p99 = gaps[(gaps.len() * 99).div_ceil(100) - 1];
    eprintln!(
        "handoff gap, predecessor's report to successor's first model call, {} handoffs: \
         p50 {p50:?}, p99 {p99:?} (the mock Arbiter answers at once: this is the system's share)",
        gaps.len()
    );
    eprintln!(
        "tokens carried per packet: ~{:.0} (bytes / 4), outside the Arbiter's context",
        mean_packet / 4.0
    );
}

// A malformed packet repaired, then failing: a table case of the worker's core,
// `agent::core::tests::a_malformed_packet_is_repaired_with_what_is_wrong_then_fails`; the
// failure's wiring is `bad_input::an_orchestrator_that_never_matches_its_schema_…`.

/// kill -9 of the worker while the predecessor writes its packet (its model
/// call in flight): another worker takes the Orchestrator over and makes the
/// call again; the packet is stored and reported once, and still reaches the
/// successor word for word. The log has no gap and no double.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_while_its_orchestrator_hands_off_loses_and_doubles_nothing() {
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    let s = "s-handoff-kill";
    let log = sys.watch_log(s).await;
    let human = "Hand off through a crash.";
    let arb = arbiter_lane(human);
    let (first, second) = (brief_of(1), brief_of(2));
    sys.mock.push(&arb, arbiter("summon_orchestrator", &first));
    sys.mock.push(&arb, arbiter("summon_orchestrator", &second));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));
    let lane = orch_lane(&first);
    sys.mock.push(
        &lane,
        MockReply::tool_use("bash", json!({"command": "echo one"})),
    );
    // The first worker dies waiting for the packet.
    let never = arbiter_tests::Gate::new();
    sys.mock
        .push(&lane, report("T1 built.", &packet(1)).gated(never.clone()));
    sys.mock.push(&lane, report("T1 built.", &packet(1)));
    sys.mock
        .push(&orch_lane(&second), report("T2 built.", &packet(2)));

    let mut w1 = sys.worker_process("w1", 2);
    direct::worker_ready(&sys, "w1").await;
    sys.send(s, human).await;
    sys.mock.wait_for_requests(&lane, 2, WAIT).await;
    let _w2 = sys.worker_process("w2", 2);
    direct::worker_ready(&sys, "w2").await;
    w1.start_kill().unwrap();
    w1.wait().await.unwrap();

    let successor = sys
        .mock
        .wait_for_requests(&orch_lane(&second), 1, WAIT)
        .await;
    let carried = successor[0].messages()[0]["content"][1]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    let typed: Handoff = serde_json::from_value(packet(1)).unwrap();
    assert!(
        carried.ends_with(&format!("\n{}", typed.verbatim())),
        "{carried}"
    );
    sys.settled(s, 8).await;
    never.open();
    // The call that was to bring the packet was made again by w2, once.
    assert_eq!(sys.mock.requests_for(&lane).len(), 3);
    let entries = log.entries();
    assert_eq!(
        entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=8).collect::<Vec<u64>>()
    );
    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", human),
            pair("Summoned Orchestrator I", &first),
            pair("Orchestrator I", "T1 built."),
            pair("Released", "I"),
            pair("Summoned Orchestrator II", &second),
            pair("Orchestrator II", "T2 built."),
            pair("Released", "II"),
            pair("Arbiter", "It is done."),
        ]
    );
    // The packet was logged once, with the report.
    let packets = log
        .bodies()
        .into_iter()
        .filter(|b| matches!(b, LogBody::Orchestrator(o) if o.handoff.is_some()))
        .count();
    assert_eq!(packets, 2);
}

/// At 70 % the Orchestrator sends a note with its packet as it stands (the
/// notice asks for it). The coordinator keeps it, so when the Orchestrator
/// then fails before its final report, the successor the Arbiter summons
/// still starts from that packet: nothing of the thread is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_packet_sent_at_70_percent_readies_the_successor_if_the_predecessor_dies() {
    let sys = System::start_with(Options {
        orch_context_budget: BUDGET,
        ..Default::default()
    })
    .await;
    let s = "s-handoff-early";
    let log = sys.watch_log(s).await;
    let human = "Survive a failure.";
    let arb = arbiter_lane(human);
    let (first, second) = (brief_of(1), brief_of(2));
    let lane = orch_lane(&first);
    sys.mock.push(&arb, arbiter("summon_orchestrator", &first));
    sys.mock.push(&arb, arbiter("summon_orchestrator", &second));
    sys.mock.push(
        &lane,
        MockReply::tool_use("bash", json!({"command": "echo one"})).usage(720, 10, 0, 0),
    );
    let early = packet(1);
    sys.mock.push(
        &lane,
        MockReply::json(
            &json!({"expects_response": false, "message": "Readying my successor.",
                                "handoff": early}),
        )
        .usage(740, 10, 0, 0),
    );
    // An error it cannot get past (a full window is a hand-off instead:
    // tests/tests/request_budget.rs).
    sys.mock.push(
        &lane,
        MockReply::http_error(
            400,
            "invalid_request_error",
            "messages.1.content: text content blocks must be non-empty",
        ),
    );
    sys.mock
        .push(&orch_lane(&second), orch(true, "Picked up at T2."));
    sys.send(s, human).await;

    let asked = sys.mock.requests_for(&lane);
    let successor = sys
        .mock
        .wait_for_requests(&orch_lane(&second), 1, WAIT)
        .await;
    // The notice after the 72 % call asked for the early packet.
    assert!(
        sys.mock.requests_for(&lane)[1]
            .last_user_text()
            .contains("carrying your `handoff` packet as it stands"),
        "{asked:?}"
    );
    let typed: Handoff = serde_json::from_value(early).unwrap();
    let carried = successor[0].messages()[0]["content"][1]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        carried.ends_with(&format!("\n{}", typed.verbatim())),
        "{carried}"
    );
    // The Arbiter was told of the failure, and read no packet.
    let told = sys.mock.requests_for(&arb)[1].last_user_text();
    assert!(told.contains("Orchestrator I has stopped"), "{told}");
    assert!(!told.contains("reason-only-in-the-packet"), "{told}");
    log.wait_for(
        "the successor's report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.number == 2),
    )
    .await;
}

/// kill -9 of the coordinator after it stored a packet and while the
/// Arbiter decides on the successor: the restarted coordinator reads the
/// packet back from its records, runs the turn again, and the successor
/// gets the packet verbatim; the log has no gap and no double.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_between_a_packet_and_its_summons_still_carries_it() {
    let sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let s = "s-handoff-coordinator-kill";
    let log = sys.watch_log(s).await;
    let human = "Hand off across a coordinator crash.";
    let arb = arbiter_lane(human);
    let (first, second) = (brief_of(1), brief_of(2));
    sys.mock.push(&arb, arbiter("summon_orchestrator", &first));
    let never = arbiter_tests::Gate::new();
    sys.mock.push(
        &arb,
        arbiter("summon_orchestrator", &second).gated(never.clone()),
    );
    sys.mock.push(&arb, arbiter("summon_orchestrator", &second));
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));
    sys.mock
        .push(&orch_lane(&first), report("T1 built.", &packet(1)));
    sys.mock.push(&orch_lane(&second), orch(true, "T2 built."));

    let mut coordinator = sys.coordinator_process();
    sys.send(s, human).await;
    sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    coordinator.start_kill().unwrap();
    coordinator.wait().await.unwrap();
    let _coordinator = sys.coordinator_process();

    let successor = sys
        .mock
        .wait_for_requests(&orch_lane(&second), 1, WAIT)
        .await;
    let typed: Handoff = serde_json::from_value(packet(1)).unwrap();
    let carried = successor[0].messages()[0]["content"][1]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        carried.ends_with(&format!("\n{}", typed.verbatim())),
        "{carried}"
    );
    sys.settled(s, 8).await;
    never.open();
    assert_eq!(
        log.entries().iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=8).collect::<Vec<u64>>()
    );
    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", human),
            pair("Summoned Orchestrator I", &first),
            pair("Orchestrator I", "T1 built."),
            pair("Released", "I"),
            pair("Summoned Orchestrator II", &second),
            pair("Orchestrator II", "T2 built."),
            pair("Released", "II"),
            pair("Arbiter", "It is done."),
        ]
    );
    assert_eq!(sys.mock.requests_for(&orch_lane(&second)).len(), 1);
}
