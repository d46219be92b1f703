//! Consensus teams and risk escalation (#21): N members answer one question
//! independently, each with a verdict; the coordinator tallies the verdicts
//! for the Arbiter and the log (a split is shown to the human), and decides
//! nothing. The escalation of a risky solo summons, and a consensus the
//! human forbade, are decisions of the coordinator, in its table tests.

use crate::common;

use arbiter_protocol::{ConsensusOutcome, LogBody, SummonStrategy};
use arbiter_tests::MockReply;
use common::*;
use serde_json::json;

/// A scripted consensus member's report with its verdict.
fn verdict_reply(message: &str, decision: &str, confidence: u8, reasons: &[&str]) -> MockReply {
    MockReply::json(&json!({
        "expects_response": true,
        "message": message,
        "verdict": {"decision": decision, "confidence": confidence, "reasons": reasons}
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consensus_of_three_splits_two_to_one_and_the_arbiter_gets_the_tally_and_every_verdict() {
    let sys = System::start_with(Options {
        workers: 0,
        ..Default::default()
    })
    .await;
    let _workers: Vec<_> = (1..=3)
        .map(|i| sys.worker_process(&format!("vote-worker-{i}"), 1))
        .collect();
    for i in 1..=3 {
        sys.worker_up(&format!("vote-worker-{i}")).await;
    }
    let s = "s-consensus";
    let log = sys.watch_log(s).await;
    let human = "Should we ship the parser today? Ask a few of them.";
    let arb = arbiter_lane(human);
    let question = "Is the parser ready to ship today? Read the code and decide: ship or hold.";
    // No count: a consensus is three members.
    sys.mock.push(
        &arb,
        summons(
            question,
            json!({
                "strategy": "consensus",
                "directive": {"words": human, "parsed": "consensus", "confidence": 85}
            }),
        ),
    );
    sys.mock.push(
        &arb,
        arbiter("address_human", "Two say ship, one says hold: I'd hold."),
    );
    sys.send(s, human).await;

    let members = summoned(&log, 3).await;
    let replies = [
        verdict_reply(
            "Ready: every test passes.",
            "Ship",
            80,
            &["All 212 tests pass.", "No open bugs."],
        ),
        verdict_reply(
            "Not yet: the error messages are \"raw\".",
            "hold",
            65,
            &["Errors show `Token(17)` to users."],
        ),
        verdict_reply("Ship it.", " ship ", 90, &["The API is stable."]),
    ];
    for (i, (member, reply)) in members.iter().zip(replies).enumerate() {
        let m = i as u32 + 1;
        assert_eq!(member.member, Some(m));
        // Each member is told it is one of a consensus, the question, and to give a verdict.
        assert!(
            member.brief.starts_with(&format!(
                "You are Orchestrator I.{m}, one of 3 members of a consensus"
            )),
            "{}",
            member.brief
        );
        assert!(member.brief.contains(question), "{}", member.brief);
        assert!(member.brief.contains("`verdict`"), "{}", member.brief);
        sys.mock.push(&orch_lane(&member.brief), reply);
    }

    // The Arbiter's next request is one input: the tally first, then each
    // member's verdict and report, verbatim.
    sys.mock.wait_for_requests(&arb, 2, WAIT).await;
    let input = sys.mock.requests_for(&arb)[1].last_user_text();
    assert!(
        input.starts_with(
            "The consensus Orchestrator I (3 members): 3 of 3 reported. The tally of their \
             verdicts: split 2–1: \"Ship\" (I.1, I.3) vs \"hold\" (I.2). The tally decides \
             nothing: the decision is yours."
        ),
        "{input}"
    );
    for expected in [
        "Orchestrator I.1's verdict: \"Ship\" (confidence 80 %). Reasons:\n- All 212 tests pass.\n- No open bugs.\nOrchestrator I.1: Ready: every test passes.",
        "Orchestrator I.2's verdict: \"hold\" (confidence 65 %). Reasons:\n- Errors show `Token(17)` to users.\nOrchestrator I.2: Not yet: the error messages are \"raw\".",
        "Orchestrator I.3's verdict: \"ship\" (confidence 90 %). Reasons:\n- The API is stable.\nOrchestrator I.3: Ship it.",
    ] {
        assert!(input.contains(expected), "missing {expected:?} in {input}");
    }
    let (one, two, three) = (
        input.find("Orchestrator I.1's verdict").unwrap(),
        input.find("Orchestrator I.2's verdict").unwrap(),
        input.find("Orchestrator I.3's verdict").unwrap(),
    );
    assert!(one < two && two < three, "{input}");

    // The Arbiter decides, not the coordinator: its answer is what the human reads.
    log.wait_for(
        "the Arbiter's decision",
        |b| matches!(b, LogBody::Arbiter(a) if a.text.starts_with("Two say ship")),
    )
    .await;
    // The log holds the tally: the split, who said what, every verdict.
    let entries = log.entries();
    let tally = entries
        .iter()
        .find_map(|e| match &e.body {
            LogBody::Consensus(c) => Some(c.clone()),
            _ => None,
        })
        .expect("a consensus entry");
    assert_eq!(tally.number, 1);
    assert_eq!(tally.members, 3);
    assert_eq!(tally.outcome, ConsensusOutcome::Split);
    assert_eq!(
        tally
            .decisions
            .iter()
            .map(|d| (d.decision.as_str(), d.members.clone()))
            .collect::<Vec<_>>(),
        vec![("Ship", vec![1, 3]), ("hold", vec![2])]
    );
    assert!(tally.no_verdict.is_empty());
    assert_eq!(
        tally
            .verdicts
            .iter()
            .map(|v| v.verdict.as_ref().unwrap().confidence)
            .collect::<Vec<_>>(),
        vec![80, 65, 90]
    );
    // What the console prints after "· Consensus on Orchestrator I: ".
    assert_eq!(
        tally.summary(),
        "split 2–1: \"Ship\" (I.1, I.3) vs \"hold\" (I.2)"
    );
    // It is logged before the Arbiter's answer, and the log has no gaps.
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let strategy = entries
        .iter()
        .find_map(|e| match &e.body {
            LogBody::Strategy(st) => Some(st.clone()),
            _ => None,
        })
        .expect("a strategy entry");
    assert_eq!(strategy.strategy, SummonStrategy::Consensus);
    assert_eq!(strategy.members, 3);
    assert_eq!(strategy.directive.unwrap().words, human);
}

// Decisions tested as table cases in coordinator/src/rules/tests/consensus.rs.
