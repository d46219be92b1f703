//! The Arbiter hands itself off: past its threshold (60 % of a small test
//! budget here) the coordinator asks it, between turns, for an Arbiter
//! packet, and the next Arbiter generation starts from the system prompt,
//! the packet and the last exchanges verbatim. The active Orchestrator works
//! on meanwhile and what arrives waits in the queue; a coordinator killed
//! mid-handoff resumes it; an Arbiter that never gives a valid packet is cut
//! over with one the coordinator builds, and the log says so.

use crate::common;

use std::collections::BTreeSet;

use arbiter_coordinator::arbiter_handoff::KEEP_EXCHANGES;
use arbiter_protocol::{ArbiterHandoffEntry, ArbiterPacket, Handoff, LogBody, Role, WireError};
use arbiter_tests::{Gate, MockReply, eventually};
use common::*;
use serde_json::{Value, json};

/// The Arbiter's context budget in these tests: small, so that scripted
/// usage crosses the 60 % threshold (6000 tokens).
const ARBITER_BUDGET: u64 = 10_000;
const THRESHOLD: u64 = ARBITER_BUDGET * 60 / 100;
/// Context budget of the Orchestrators: small, so that they hand off too.
const ORCH_BUDGET: u64 = 1000;
/// Orchestrator generations of the long task.
const GENERATIONS: usize = 10;
/// Every Arbiter request, whatever its first message, goes to this lane
/// (a new generation's first message is its packet).
const ARB: &str = "arbiter";

fn lanes(body: &Value) -> String {
    if body["model"] == ARBITER_MODEL {
        ARB.to_owned()
    } else {
        lane_of(body)
    }
}

fn coordinator_config(sys: &System) -> arbiter_coordinator::Config {
    arbiter_coordinator::Config {
        context_budget: ARBITER_BUDGET,
        arbiter_handoff_pct: 60,
        ..sys.coordinator_config()
    }
}

fn ids(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("T{i}")).collect()
}

fn brief_of(generation: usize) -> String {
    format!("Generation {generation}: carry the ten items T1..T10 on; one item per generation.")
}

/// The packet Orchestrator `generation` writes: items 1..=generation done.
fn orch_packet(generation: usize) -> Value {
    let all = ids(GENERATIONS);
    json!({
        "done": all[..generation].iter().map(|id| json!({
            "id": id, "what": format!("built {id}"), "files": [format!("src/{}.rs", id.to_lowercase())]
        })).collect::<Vec<_>>(),
        "open": all[generation..].iter().map(|id| json!({"id": id, "what": format!("build {id}")}))
            .collect::<Vec<_>>(),
        "decisions": [{"decision": format!("layout {generation} kept"), "why": "it reads well"}],
        "questions": [],
        "next_step": format!("Start on T{}.", generation + 1),
    })
}

/// The packet the Arbiter writes when Orchestrator `active` is at work.
fn arbiter_packet(active: usize) -> Value {
    let all = ids(GENERATIONS);
    json!({
        "goal": "Build the ten items T1..T10.",
        "preferences": ["Rust only", "one item per generation"],
        "decisions": [{"decision": "one item per Orchestrator", "why": "the human asked"}],
        "orchestrators": (1..active).map(|n| json!({"number": n, "line": format!("built T{n}")}))
            .collect::<Vec<_>>(),
        "open": all[active - 1..].iter().map(|id| json!({"id": id, "what": format!("build {id}")}))
            .collect::<Vec<_>>(),
        "active": {"number": active, "doing": format!("building T{active}")},
    })
}

fn summon(generation: usize, input_tokens: u64) -> MockReply {
    arbiter("summon_orchestrator", &brief_of(generation)).usage(input_tokens, 20, 0, 0)
}

/// A message of a recorded request as (role, its text blocks joined):
/// cache breakpoints move from request to request, the words do not.
fn said(message: &Value) -> (String, String) {
    let text = match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    (
        message["role"].as_str().unwrap_or_default().to_owned(),
        text,
    )
}

fn said_all(messages: &[Value]) -> Vec<(String, String)> {
    messages.iter().map(said).collect()
}

fn handoffs(log: &LogWatch) -> Vec<ArbiterHandoffEntry> {
    log.bodies()
        .into_iter()
        .filter_map(|b| match b {
            LogBody::ArbiterHandoff(e) => Some(e),
            _ => None,
        })
        .collect()
}

/// One human request, ten Orchestrator generations, three Arbiter
/// generations. Each Orchestrator successor's first request holds its
/// predecessor's packet verbatim; each Arbiter generation starts from its
/// predecessor's packet and last exchanges; an Orchestrator's report that
/// comes during a handoff waits and reaches the next generation; the
/// Arbiter's context drops below its threshold at each handoff; no planted
/// item is dropped; the log is one conversation, seqs 1..n once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_task_runs_through_ten_orchestrators_and_three_arbiter_generations() {
    let mut sys = System::start_with(Options {
        coordinator: false,
        orch_context_budget: ORCH_BUDGET,
        ..Default::default()
    })
    .await;
    sys.mock.set_lane_fn(lanes);
    let config = coordinator_config(&sys);
    sys.spawn_coordinator_with(config);
    let s = "s-arbiter-handoff-chain";
    let log = sys.watch_log(s).await;
    let human = "Build the ten items T1..T10, in Rust only, one item per generation.";

    // The Arbiter's context grows by 1500 tokens a turn and is handed off
    // past 6000: after its 4th and 8th turns. The first handoff's reply
    // waits until Orchestrator V has reported: that report must wait too.
    let first_handoff = Gate::new();
    let mut usage = 1500;
    for generation in 1..=GENERATIONS {
        sys.mock.push(ARB, summon(generation, usage));
        if generation == 4 {
            sys.mock.push(
                ARB,
                MockReply::json(&arbiter_packet(4)).gated(first_handoff.clone()),
            );
            usage = 0;
        }
        if generation == 8 {
            sys.mock.push(ARB, MockReply::json(&arbiter_packet(8)));
            usage = 0;
        }
        usage += 1500;
        let lane = orch_lane(&brief_of(generation));
        sys.mock.push(
            &lane,
            MockReply::tool_use("bash", json!({"command": format!("echo {generation}")}))
                .usage(500, 10, 0, 0),
        );
        sys.mock.push(
            &lane,
            MockReply::json(&json!({
                "expects_response": true,
                "message": format!("Item T{generation} built; context full."),
                "handoff": orch_packet(generation),
            }))
            .usage(900, 10, 0, 0),
        );
    }
    sys.mock.push(
        ARB,
        arbiter("release_orchestrators", "It is done.").usage(usage, 20, 0, 0),
    );
    sys.send(s, human).await;

    // The first handoff is asked for after the 4th turn (which summoned
    // Orchestrator IV); Orchestrator IV works on, and its report waits.
    sys.mock.wait_for_requests(ARB, 5, WAIT).await;
    log.wait_for(
        "Orchestrator IV's report",
        |b| matches!(b, LogBody::Orchestrator(o) if o.number == 4),
    )
    .await;
    eventually(WAIT, "the report to wait in the queue", || async {
        sys.status(s)
            .await
            .filter(|st| st.queued == 1 && st.arbiter_context_tokens >= THRESHOLD)
    })
    .await;
    first_handoff.open();

    let requests = sys
        .mock
        .wait_for_requests(ARB, GENERATIONS + 1 + 2, WAIT * 3)
        .await;
    log.wait_for("the final word", |b| matches!(b, LogBody::Arbiter(_)))
        .await;

    // Two handoffs, each asked after the turn that crossed the threshold,
    // each bringing the context below it.
    let done = handoffs(&log);
    assert_eq!(
        done.iter().map(|h| h.generation).collect::<Vec<_>>(),
        vec![2, 3]
    );
    for h in &done {
        assert!(h.built_by_coordinator.is_none(), "{h:?}");
        assert_eq!(h.kept_exchanges as usize, KEEP_EXCHANGES);
        assert!(h.context_tokens_before >= THRESHOLD, "{h:?}");
        assert!(h.context_tokens_after < THRESHOLD, "the bar drops: {h:?}");
    }
    // Requests 0..=3 are turns, 4 the first handoff, 5..=8 turns, 9 the second, 10..=12 turns.
    for (at, generation, active) in [(4usize, 2u32, 4usize), (9, 3, 8)] {
        let ask = requests[at].last_user_text();
        assert!(
            ask.starts_with("[System: your context is")
                && ask.contains(&format!("Arbiter, generation {generation} takes over")),
            "{ask}"
        );
        // The next generation's first request: the packet as written, then
        // the last exchanges verbatim.
        let next = &requests[at + 1];
        let previous = &requests[at];
        let first = said(&next.messages()[0]).1;
        let (header, rest) = first.split_once('\n').unwrap();
        assert!(
            header.starts_with(&format!("[You are Arbiter generation {generation}.")),
            "{header}"
        );
        let packet_json = rest.split("\n\n").next().unwrap();
        let typed: ArbiterPacket = serde_json::from_value(arbiter_packet(active)).unwrap();
        assert_eq!(packet_json, typed.verbatim());
        // The kept exchanges: the predecessor's last 2*KEEP-1 messages
        // (before the handoff request), word for word.
        let before_ask = &previous.messages()[..previous.messages().len() - 1];
        let kept = &before_ask[before_ask.len() - (KEEP_EXCHANGES * 2 - 1)..];
        assert_eq!(
            said_all(&next.messages()[1..KEEP_EXCHANGES * 2]),
            said_all(kept)
        );
        assert!(
            first.ends_with(&said(&before_ask[before_ask.len() - KEEP_EXCHANGES * 2]).1),
            "the first kept user message follows the packet"
        );
        // What came during the handoff reaches the new generation's first turn.
        assert!(
            next.last_user_text().starts_with(&format!(
                "Orchestrator {}: Item T",
                arbiter_protocol::roman(active as u32)
            )),
            "{}",
            next.last_user_text()
        );
        // The new generation is small: far less than its predecessor.
        assert!(next.messages().len() < previous.messages().len());
    }

    // Each Orchestrator successor's first request: its brief, then the packet as written.
    for generation in 2..=GENERATIONS {
        let requests = sys.mock.requests_for(&orch_lane(&brief_of(generation)));
        let content = &requests[0].messages()[0]["content"];
        assert_eq!(content[0]["text"], brief_of(generation));
        let (_, json_text) = content[1]["text"]
            .as_str()
            .unwrap()
            .split_once('\n')
            .unwrap();
        let typed: Handoff = serde_json::from_value(orch_packet(generation - 1)).unwrap();
        assert_eq!(json_text, typed.verbatim(), "generation {generation}");
    }

    // Every planted item is accounted for in the last Orchestrator packet.
    let last: Handoff = log
        .bodies()
        .into_iter()
        .rev()
        .find_map(|b| match b {
            LogBody::Orchestrator(e) => e.handoff.map(|h| *h),
            _ => None,
        })
        .unwrap();
    let accounted: BTreeSet<String> = last
        .done
        .iter()
        .map(|d| d.id.clone())
        .chain(last.open.iter().map(|o| o.id.clone()))
        .collect();
    assert_eq!(accounted, ids(GENERATIONS).into_iter().collect());

    // One continuous conversation: seqs 1..n once each, every Orchestrator
    // summoned and reporting once, the handoffs in their places.
    let status = sys.settled(s, log.entries().len() as u64).await;
    let entries = log.entries();
    assert_eq!(
        entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=entries.len() as u64).collect::<Vec<_>>()
    );
    let kinds: Vec<String> = briefs(&log.bodies()).into_iter().map(|(k, _)| k).collect();
    for generation in 1..=GENERATIONS {
        let name = arbiter_protocol::orchestrator_name(generation as u32);
        assert_eq!(kinds.iter().filter(|k| **k == name).count(), 1, "{kinds:?}");
        assert_eq!(
            kinds
                .iter()
                .filter(|k| **k == format!("Summoned {name}"))
                .count(),
            1,
            "{kinds:?}"
        );
    }
    let iv = kinds.iter().position(|k| k == "Orchestrator IV").unwrap();
    let gen2 = kinds
        .iter()
        .position(|k| k == "Arbiter, generation 2")
        .unwrap();
    assert!(
        iv < gen2,
        "Orchestrator IV reported during the handoff: {kinds:?}"
    );
    assert!(status.arbiter_context_tokens < THRESHOLD, "{status:?}");

    // Figures for the report: growth per Orchestrator generation within an
    // Arbiter generation, and the size of a packet.
    let sizes: Vec<usize> = requests
        .iter()
        .map(|r| serde_json::to_string(r.messages()).unwrap().len())
        .collect();
    let growth: Vec<usize> = [(0, 3), (5, 8), (10, 12)]
        .iter()
        .flat_map(|&(a, b)| (a..b).map(|i| sizes[i + 1] - sizes[i]).collect::<Vec<_>>())
        .collect();
    let mean_growth = growth.iter().sum::<usize>() as f64 / growth.len() as f64;
    let packet_bytes = serde_json::to_string(&arbiter_packet(4)).unwrap().len() as f64;
    let default_budget = arbiter_coordinator::Config::default().context_budget as f64;
    eprintln!(
        "Arbiter handoffs: context {} -> {} and {} -> {} tokens ({:.0} % -> {:.0} %, {:.0} % -> \
         {:.0} % of {ARBITER_BUDGET}); Arbiter packet ~{:.0} tokens; growth per Orchestrator \
         generation ~{:.0} tokens ({:.3} % of a {default_budget} budget)",
        done[0].context_tokens_before,
        done[0].context_tokens_after,
        done[1].context_tokens_before,
        done[1].context_tokens_after,
        done[0].context_tokens_before as f64 * 100.0 / ARBITER_BUDGET as f64,
        done[0].context_tokens_after as f64 * 100.0 / ARBITER_BUDGET as f64,
        done[1].context_tokens_before as f64 * 100.0 / ARBITER_BUDGET as f64,
        done[1].context_tokens_after as f64 * 100.0 / ARBITER_BUDGET as f64,
        packet_bytes / 4.0,
        mean_growth / 4.0,
        mean_growth / 4.0 / default_budget * 100.0,
    );
}

/// Three human messages take the Arbiter past its threshold: the handoff
/// is asked for, and the coordinator is killed (-9) while it waits for the
/// packet. A message typed meanwhile waits in the stream. The restarted
/// coordinator asks for the packet again from the stored transcript, hands
/// off once, then answers the waiting message: no log entry twice, none lost.
/// Killed again after the handoff, a coordinator restores the new
/// generation's transcript (its record replaced the old one), not the old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_mid_handoff_resumes_it_from_the_records() {
    let sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    sys.mock.set_lane_fn(lanes);
    let s = "s-arbiter-handoff-kill";
    let log = sys.watch_log(s).await;
    for (i, tokens) in [(1, 2000), (2, 4000), (3, 7000)] {
        sys.mock.push(
            ARB,
            arbiter("address_human", &format!("Answer {i}.")).usage(tokens, 20, 0, 0),
        );
    }
    let never = Gate::new();
    let packet = json!({"goal": "Answer the human's four questions.", "preferences": ["short answers"],
        "decisions": [], "orchestrators": [], "open": [{"id": "Q4", "what": "the fourth question"}],
        "active": null});
    sys.mock
        .push(ARB, MockReply::json(&packet).gated(never.clone()));
    sys.mock.push(ARB, MockReply::json(&packet));
    sys.mock.push(
        ARB,
        arbiter("address_human", "Answer 4.").usage(1500, 20, 0, 0),
    );

    let env = [
        ("ARBITER_CONTEXT_TOKENS", std::ffi::OsStr::new("10000")),
        ("ARBITER_HANDOFF_PCT", std::ffi::OsStr::new("60")),
    ];
    let mut coordinator = sys.coordinator_process_with(&env);
    for i in 1..=3 {
        sys.send(s, &format!("Question {i}?")).await;
        log.wait_for(
            "the answer",
            |b| matches!(b, LogBody::Arbiter(a) if a.text == format!("Answer {i}.")),
        )
        .await;
    }
    // The handoff is asked for (stored first), then the coordinator dies.
    sys.mock.wait_for_requests(ARB, 4, WAIT).await;
    log.wait_for("the handoff notice", |b| {
        matches!(b, LogBody::System(e) if e.text.starts_with("Arbiter, generation 1: its context is 70 % full"))
    })
    .await;
    coordinator.start_kill().unwrap();
    coordinator.wait().await.unwrap();
    sys.send(s, "Question 4?").await;

    let mut coordinator = sys.coordinator_process_with(&env);
    let requests = sys.mock.wait_for_requests(ARB, 6, WAIT * 2).await;
    log.wait_for(
        "the fourth answer",
        |b| matches!(b, LogBody::Arbiter(a) if a.text == "Answer 4."),
    )
    .await;
    never.open();
    let status = sys.settled(s, log.entries().len() as u64).await;

    // The handoff was asked twice, from the same stored transcript.
    assert_eq!(
        said_all(requests[4].messages()),
        said_all(requests[3].messages())
    );
    assert_eq!(said(&requests[3].messages()[0]).1, "Question 1?");
    assert!(
        requests[4]
            .last_user_text()
            .starts_with("[System: your context is 70 % full")
    );
    // The new generation starts from the packet and the last exchanges,
    // then takes the message that waited.
    let first = said(&requests[5].messages()[0]).1;
    assert!(
        first.starts_with("[You are Arbiter generation 2."),
        "{first}"
    );
    assert!(first.ends_with("Question 2?"), "{first}");
    assert_eq!(requests[5].messages().len(), KEEP_EXCHANGES * 2 + 1);
    assert_eq!(requests[5].last_user_text(), "Question 4?");
    assert!(!requests[5].all_text().contains("Question 1?"));
    assert_eq!(
        sys.mock.requests_for(ARB).len(),
        6,
        "nothing asked twice more"
    );

    let entries = log.entries();
    assert_eq!(
        entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=entries.len() as u64).collect::<Vec<_>>()
    );
    let kinds: Vec<(String, String)> = briefs(&log.bodies())
        .into_iter()
        .map(|(k, t)| (k, t.chars().take(30).collect()))
        .collect();
    // The restarted coordinator may finish the handoff before or after
    // it takes the waiting message: either order is one conversation.
    let mut middle = kinds[7..9].to_vec();
    middle.sort();
    assert_eq!(
        [&kinds[..7], &middle[..], &kinds[9..]].concat(),
        vec![
            pair("You", "Question 1?"),
            pair("Arbiter", "Answer 1."),
            pair("You", "Question 2?"),
            pair("Arbiter", "Answer 2."),
            pair("You", "Question 3?"),
            pair("Arbiter", "Answer 3."),
            pair("System", "Arbiter, generation 1: its con"),
            pair("Arbiter, generation 2", "Answer the human's four questi"),
            pair("You", "Question 4?"),
            pair("Arbiter", "Answer 4."),
        ]
    );
    let h = &handoffs(&log)[0];
    assert_eq!(
        (h.context_tokens_before, h.built_by_coordinator.clone()),
        (7000, None)
    );
    assert!(h.context_tokens_after < THRESHOLD, "{h:?}");
    assert!(status.arbiter_context_tokens < THRESHOLD, "{status:?}");

    // Killed after the handoff: the next coordinator restores generation 2.
    coordinator.start_kill().unwrap();
    coordinator.wait().await.unwrap();
    sys.mock.push(
        ARB,
        arbiter("address_human", "Answer 5.").usage(2000, 20, 0, 0),
    );
    let _coordinator = sys.coordinator_process_with(&env);
    sys.send(s, "Question 5?").await;
    let requests = sys.mock.wait_for_requests(ARB, 7, WAIT * 2).await;
    let restored = said_all(requests[6].messages());
    assert_eq!(restored.len(), KEEP_EXCHANGES * 2 + 3);
    assert_eq!(restored[..5], said_all(requests[5].messages())[..]);
    assert_eq!(restored[5].0, "assistant");
    assert!(restored[5].1.contains("Answer 4."), "{restored:?}");
    assert_eq!(restored[6], pair("user", "Question 5?"));
    log.wait_for(
        "the fifth answer",
        |b| matches!(b, LogBody::Arbiter(a) if a.text == "Answer 5."),
    )
    .await;
    let entries = log.entries();
    assert_eq!(
        entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=entries.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(handoffs(&log).len(), 1);
}

/// An Arbiter whose packet never validates: each bad reply goes back with
/// the reason; then the human sees an error entry (a schema violation of
/// the Arbiter), and the next generation starts from a packet the
/// coordinator built from the records (the human's first words as the
/// goal, the Orchestrator's open items and line), which the log says.
/// Nothing half-formed is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arbiter_that_never_gives_a_valid_packet_is_cut_over_with_a_built_one() {
    let mut sys = System::start_with(Options {
        coordinator: false,
        orch_context_budget: ORCH_BUDGET,
        ..Default::default()
    })
    .await;
    sys.mock.set_lane_fn(lanes);
    let config = arbiter_coordinator::Config {
        schema_repairs: 2,
        ..coordinator_config(&sys)
    };
    sys.spawn_coordinator_with(config);
    let s = "s-arbiter-handoff-bad";
    let log = sys.watch_log(s).await;
    let human = "Build T1, T2 and T3.";
    sys.mock.push(ARB, summon(1, 2000));
    sys.mock.push(ARB, summon(2, 4000));
    sys.mock.push(
        ARB,
        arbiter("address_human", "Orchestrator II is at work.").usage(7000, 20, 0, 0),
    );
    let good = arbiter_packet(2);
    let mut no_goal = good.clone();
    no_goal.as_object_mut().unwrap().remove("goal");
    let mut twice = good.clone();
    twice["open"][1]["id"] = json!("T2");
    let mut extra = good.clone();
    extra["mood"] = json!("tired");
    for bad in [no_goal, twice, extra] {
        sys.mock.push(ARB, MockReply::json(&bad));
    }
    sys.mock.push(
        ARB,
        arbiter("address_human", "Generation two speaks.").usage(1500, 20, 0, 0),
    );
    let items = ["T1", "T2", "T3"];
    for generation in 1..=2 {
        let lane = orch_lane(&brief_of(generation));
        let done: Vec<Value> = items[..generation]
            .iter()
            .map(|id| json!({"id": id, "what": format!("built {id}"), "files": []}))
            .collect();
        let open: Vec<Value> = items[generation..]
            .iter()
            .map(|id| json!({"id": id, "what": format!("build {id}")}))
            .collect();
        let report = json!({"expects_response": true,
            "message": format!("Part {generation} done."),
            "handoff": {"done": done, "open": open,
                "decisions": [{"decision": format!("d{generation}"), "why": "w"}],
                "questions": [], "next_step": "Go on."}});
        sys.mock
            .push(&lane, MockReply::json(&report).usage(900, 10, 0, 0));
    }
    sys.send(s, human).await;
    log.wait_for("the handoff", |b| matches!(b, LogBody::ArbiterHandoff(_)))
        .await;
    sys.send(s, "Go on.").await;
    log.wait_for(
        "the new generation's word",
        |b| matches!(b, LogBody::Arbiter(a) if a.text == "Generation two speaks."),
    )
    .await;

    let requests = sys.mock.requests_for(ARB);
    // The three bad packets: the 2nd and 3rd requests carry the reasons.
    // Requests 0..=2 are turns, 3..=5 the three tries at the packet, 6 the next generation.
    assert_eq!(requests.len(), 7);
    assert!(
        requests[4].last_user_text().contains("goal"),
        "{}",
        requests[4].last_user_text()
    );
    assert!(
        requests[5].last_user_text().contains("used twice"),
        "{}",
        requests[5].last_user_text()
    );
    let bodies = log.bodies();
    let error = bodies
        .iter()
        .find_map(|b| match b {
            LogBody::Error(e) => Some(e.error.clone()),
            _ => None,
        })
        .expect("an error entry");
    match &error {
        WireError::SchemaViolation {
            role,
            attempts,
            detail,
        } => {
            assert_eq!((*role, *attempts), (Role::Arbiter, 3));
            assert!(detail.contains("mood"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    let h = handoffs(&log).remove(0);
    let why = h
        .built_by_coordinator
        .clone()
        .expect("the log says the coordinator built it");
    assert!(why.contains("no valid packet"), "{why}");
    // Built from the records, never from a rejected reply.
    assert_eq!(h.packet.goal, human);
    assert_eq!(
        h.packet
            .open
            .iter()
            .map(|o| o.id.as_str())
            .collect::<Vec<_>>(),
        ["T3"]
    );
    assert_eq!(
        h.packet.orchestrators.len(),
        2,
        "{:?}",
        h.packet.orchestrators
    );
    assert!(
        h.packet.orchestrators[0]
            .line
            .starts_with("1 done, 2 open (T2, T3), 1 decision"),
        "{:?}",
        h.packet.orchestrators
    );
    assert_eq!(h.packet.decisions.len(), 2, "{:?}", h.packet.decisions);
    assert_eq!(h.packet.active.as_ref().map(|a| a.number), Some(2));
    assert!(h.packet.preferences.is_empty());
    assert!(h.context_tokens_after < THRESHOLD, "{h:?}");
    let first = said(&requests[6].messages()[0]).1;
    assert!(first.contains(&h.packet.verbatim()), "{first}");
    assert!(!requests[6].all_text().contains("tired"));
    assert_eq!(requests[6].last_user_text(), "Human: Go on.");
}
