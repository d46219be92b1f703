//! Table tests: consensus teams, their tally, and the escalation by risk.

use arbiter_protocol::{
    ConsensusEntry, ConsensusOutcome, Escalation, MissingVerdict, StrategyEntry, Verdict,
};

use super::*;
use crate::state::Pending;

/// A session with a consensus of `count` members on one question (at 1 s).
fn consensus_of(set: impl FnOnce(&mut Config), count: u32) -> (Core, Step) {
    let mut core = core_with(set);
    core.on_input(human("Should we ship v2?"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Should we ship v2 this week?",
            serde_json::json!({"strategy": "consensus", "count": count}),
        ),
        at(1),
    );
    let step = core.take_step();
    (core, step)
}

/// A member's report with its verdict `decision` (none: without a verdict).
fn report(orch_id: &str, text: &str, decision: Option<&str>) -> Input {
    let Input::Orchestrator(mut messages, trace, ack) = output(orch_id, 1, text, true) else {
        unreachable!()
    };
    if let OrchestratorEvent::Output(o) = &mut messages[0].event {
        o.verdict = decision.map(|d| Verdict {
            decision: d.into(),
            confidence: 70,
            reasons: vec!["because".into()],
        });
    }
    Input::Orchestrator(messages, trace, ack)
}

fn member_id(core: &Core, member: u32) -> String {
    core.state
        .team
        .iter()
        .find(|a| a.member == Some(member))
        .map(|a| a.orch_id.clone())
        .expect("that member is live")
}

fn tally(step: &Step) -> Option<&ConsensusEntry> {
    step.effects.iter().find_map(|e| match e {
        Effect::Log(entry) => match &entry.body {
            LogBody::Consensus(c) => Some(c),
            _ => None,
        },
        _ => None,
    })
}

fn strategy(step: &Step) -> Option<&StrategyEntry> {
    step.effects.iter().find_map(|e| match e {
        Effect::Log(entry) => match &entry.body {
            LogBody::Strategy(s) => Some(s),
            _ => None,
        },
        _ => None,
    })
}

fn summoned_count(step: &Step) -> usize {
    step.effects
        .iter()
        .filter(|e| matches!(e, Effect::Summon(_)))
        .count()
}

/// A solo summons at `risk`, with `more` fields, under the settings `set`.
fn risky(set: impl FnOnce(&mut Config), risk: u8, more: serde_json::Value) -> (Core, Step) {
    let mut core = core_with(set);
    core.on_input(human("Migrate the billing database"), at(0));
    core.take_step();
    let mut fields = serde_json::json!({ "risk": risk });
    if let (Some(map), Some(more)) = (fields.as_object_mut(), more.as_object()) {
        map.extend(more.clone());
    }
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Migrate the billing database.",
            fields,
        ),
        at(1),
    );
    let step = core.take_step();
    (core, step)
}

#[test]
fn a_consensus_summons_its_members_on_one_question() {
    let (core, step) = consensus_of(|_| {}, 3);
    let lines = shown(&step);
    assert_eq!(lines.len(), 7, "{lines:?}");
    assert_eq!(lines[0], "Strategy: consensus x3");
    for m in 1..=3 {
        let brief = format!(
            "Summoned Orchestrator I.{m}: You are Orchestrator I.{m}, one of 3 members of a \
             consensus: each member answers the same question independently"
        );
        assert!(has(&lines, &brief), "{lines:?}");
        assert!(has(
            &lines,
            &format!("summons Orchestrator I.{m} to default")
        ));
    }
    assert!(
        lines[1].contains("The question:\nShould we ship v2 this week?"),
        "{lines:?}"
    );
    assert!(core.state.gather.as_ref().is_some_and(|g| g.consensus));
}

#[test]
fn two_against_one_is_a_split_tallied_for_the_arbiter_who_decides() {
    let (mut core, _) = consensus_of(|_| {}, 3);
    let ids: Vec<String> = (1..=3).map(|m| member_id(&core, m)).collect();
    core.on_input(report(&ids[0], "Tests pass.", Some("ship")), at(2));
    core.on_input(report(&ids[1], "Two open bugs.", Some("hold")), at(3));
    core.take_step();
    assert!(!core.turn_due());
    core.on_input(report(&ids[2], "Good enough.", Some(" Ship ")), at(4));
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            "Orchestrator I.3: Good enough.",
            "System: 3 of 3 members of the team Orchestrator I reported; their reports go to \
             the Arbiter together.",
            "Consensus: split 2–1: \"ship\" (I.1, I.3) vs \"hold\" (I.2)",
        ]
    );
    let entry = tally(&step).unwrap();
    assert_eq!(entry.outcome, ConsensusOutcome::Split);
    assert_eq!(entry.decisions[0].members, vec![1, 3]);
    assert!(matches!(
        core.state.queue.front(),
        Some(Pending::Team {
            consensus: Some(_),
            ..
        })
    ));
    assert!(matches!(
        start_turn(&mut core, at(5)),
        TurnStart::New { .. }
    ));
    let asked = &core.transcript.last().unwrap().text;
    assert!(
        asked.starts_with(
            "The consensus Orchestrator I (3 members): 3 of 3 reported. The tally of their \
             verdicts: split 2–1: \"ship\" (I.1, I.3) vs \"hold\" (I.2). The tally decides \
             nothing: the decision is yours."
        ),
        "{asked}"
    );
    assert!(
        asked.contains(
            "Orchestrator I.2's verdict: \"hold\" (confidence 70 %). Reasons:\n- \
             because\nOrchestrator I.2: Two open bugs."
        ),
        "{asked}"
    );
}

#[test]
fn the_same_decision_from_every_member_is_unanimous() {
    let (mut core, _) = consensus_of(|_| {}, 2);
    let ids: Vec<String> = (1..=2).map(|m| member_id(&core, m)).collect();
    core.on_input(report(&ids[0], "Fine.", Some("Ship")), at(2));
    core.on_input(report(&ids[1], "Fine too.", Some("SHIP")), at(3));
    let step = core.take_step();
    assert!(
        has(&shown(&step), "Consensus: unanimous: \"Ship\" (I.1, I.2)"),
        "{:?}",
        shown(&step)
    );
    assert_eq!(tally(&step).unwrap().outcome, ConsensusOutcome::Unanimous);
}

#[test]
fn a_member_without_a_verdict_and_one_that_never_reported_count_as_no_verdict() {
    let (mut core, _) = consensus_of(|c| c.team_wait = Duration::from_secs(60), 3);
    let ids: Vec<String> = (1..=3).map(|m| member_id(&core, m)).collect();
    core.on_input(report(&ids[0], "Ship it.", Some("ship")), at(2));
    core.on_input(report(&ids[1], "I could not decide.", None), at(3));
    core.take_step();
    core.tick(at(61));
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            "System: 2 of 3 members of the team Orchestrator I reported; their reports go to \
             the Arbiter together (the team wait of 60 s ran out).",
            "Consensus: split 1–2: \"ship\" (I.1) vs no verdict (I.2, I.3)",
        ]
    );
    let entry = tally(&step).unwrap();
    assert_eq!(entry.verdicts[1].missing, Some(MissingVerdict::NoVerdict));
    assert_eq!(entry.verdicts[2].missing, Some(MissingVerdict::NotReported));
}

#[test]
fn a_risky_solo_summons_becomes_a_consensus_of_3() {
    let (core, step) = risky(|_| {}, 9, serde_json::json!({}));
    let lines = shown(&step);
    assert_eq!(lines[0], "Strategy: consensus x3", "{lines:?}");
    assert_eq!(
        strategy(&step).unwrap().escalation,
        Some(Escalation::Escalated { threshold: 8 })
    );
    assert_eq!(strategy(&step).unwrap().risk, Some(9));
    assert_eq!(summoned_count(&step), 3);
    assert!(
        has(
            &lines,
            "Summoned Orchestrator I.1: You are Orchestrator I.1, one of 3 members of a consensus"
        ),
        "{lines:?}"
    );
    assert!(core.state.gather.as_ref().is_some_and(|g| g.consensus));
}

#[test]
fn a_risky_summons_the_human_said_to_skip_consensus_for_stays_solo() {
    let (core, step) = risky(|_| {}, 9, serde_json::json!({"consensus": "skip"}));
    assert_eq!(
        shown(&step),
        vec![
            "Strategy: solo x1",
            "Summoned Orchestrator I: Migrate the billing database.",
            "summons Orchestrator I to default",
        ]
    );
    assert_eq!(
        strategy(&step).unwrap().escalation,
        Some(Escalation::KeptSolo)
    );
    assert!(core.state.gather.is_none());
}

#[test]
fn a_summons_below_the_risk_threshold_stays_solo() {
    let (_, step) = risky(|_| {}, 7, serde_json::json!({}));
    assert_eq!(shown(&step)[0], "Strategy: solo x1");
    assert_eq!(strategy(&step).unwrap().escalation, None);
    assert_eq!(summoned_count(&step), 1);
}

#[test]
fn with_the_risk_policy_off_even_risk_10_stays_solo() {
    let (_, step) = risky(|c| c.escalate_risk = 0, 10, serde_json::json!({}));
    assert_eq!(shown(&step)[0], "Strategy: solo x1");
    assert_eq!(summoned_count(&step), 1);
}

#[test]
fn the_human_asking_for_a_second_opinion_forces_a_consensus() {
    let (_, step) = risky(|_| {}, 2, serde_json::json!({"consensus": "force"}));
    assert_eq!(shown(&step)[0], "Strategy: consensus x3");
    assert_eq!(
        strategy(&step).unwrap().escalation,
        Some(Escalation::Forced)
    );
    assert_eq!(summoned_count(&step), 3);
}

#[test]
fn a_consensus_the_human_said_to_skip_is_refused() {
    let (core, step) = risky(
        |_| {},
        9,
        serde_json::json!({"consensus": "skip", "strategy": "consensus"}),
    );
    let lines = shown(&step);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with(
            "Strategy: consensus x0 refused: the human said to skip consensus, and the summons \
             asks for one"
        ),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("System: Your summon_orchestrator could not be carried out:"),
        "{lines:?}"
    );
    assert!(core.state.team.is_empty());
}

// Moved from the end-to-end suite (tests/tests/consensus.rs).

#[test]
fn a_risky_solo_summons_escalated_asks_one_question_and_tallies_its_verdicts() {
    let (mut core, step) = risky(|_| {}, 9, serde_json::json!({"complexity": 4}));
    let entry = strategy(&step).unwrap();
    assert_eq!(entry.strategy, arbiter_protocol::SummonStrategy::Consensus);
    assert_eq!(entry.members, 3);
    assert_eq!((entry.risk, entry.complexity), (Some(9), Some(4)));
    assert_eq!(
        entry.escalation,
        Some(Escalation::Escalated { threshold: 8 })
    );
    assert_eq!(entry.directive, None);
    for effect in &step.effects {
        if let Effect::Summon(s) = effect {
            assert!(
                s.brief.contains("one of 3 members of a consensus")
                    && s.brief.contains("Migrate the billing database."),
                "{}",
                s.brief
            );
        }
    }
    let ids: Vec<String> = (1..=3).map(|m| member_id(&core, m)).collect();
    for (i, id) in ids.iter().enumerate() {
        core.on_input(
            report(id, "Not yet: a report still reads them.", Some("wait")),
            at(2 + i as u64),
        );
    }
    core.take_step();
    assert!(matches!(
        start_turn(&mut core, at(5)),
        TurnStart::New { .. }
    ));
    let asked = &core.transcript.last().unwrap().text;
    assert!(
        asked.starts_with(
            "The consensus Orchestrator I (3 members): 3 of 3 reported. The tally of their \
             verdicts: unanimous: \"wait\" (I.1, I.2, I.3)."
        ),
        "{asked}"
    );
}

#[test]
fn a_risky_summons_kept_solo_on_the_humans_word_keeps_the_words_and_tallies_nothing() {
    let words = "Skip consensus, just drop the old billing tables.";
    let (mut core, step) = risky(
        |_| {},
        9,
        serde_json::json!({
            "consensus": "skip",
            "directive": {"words": words, "parsed": "no consensus", "confidence": 95}
        }),
    );
    let summoned: Vec<_> = step
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Log(entry) => match &entry.body {
                LogBody::Summoned(s) => Some((s.member, s.brief.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(
        summoned,
        vec![(None, "Migrate the billing database.".to_owned())]
    );
    let entry = strategy(&step).unwrap();
    assert_eq!(entry.strategy, arbiter_protocol::SummonStrategy::Solo);
    assert_eq!((entry.members, entry.risk), (1, Some(9)));
    assert_eq!(entry.escalation, Some(Escalation::KeptSolo));
    assert_eq!(entry.directive.as_ref().unwrap().words, words);
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "Dropped.", true), at(2));
    let step = core.take_step();
    assert!(tally(&step).is_none());
    assert_eq!(shown(&step), vec!["Orchestrator I: Dropped."]);
}

#[test]
fn a_consensus_refused_on_the_humans_word_keeps_the_words_and_starts_nothing() {
    let words = "No second opinions, skip consensus.";
    let (mut core, step) = risky(
        |_| {},
        5,
        serde_json::json!({
            "strategy": "consensus",
            "consensus": "skip",
            "directive": {"words": words}
        }),
    );
    let entry = strategy(&step).unwrap();
    assert_eq!(entry.number, None);
    assert!(
        entry
            .rejected
            .as_deref()
            .unwrap()
            .starts_with("the human said to skip consensus"),
    );
    assert_eq!(entry.directive.as_ref().unwrap().words, words);
    assert_eq!(summoned_count(&step), 0);
    assert!(!has(&shown(&step), "Summoned "));
    assert!(matches!(
        start_turn(&mut core, at(2)),
        TurnStart::New { .. }
    ));
    let told = &core.transcript.last().unwrap().text;
    assert!(
        told.starts_with(
            "System: Your summon_orchestrator could not be carried out: the human said to \
             skip consensus, and the summons asks for one (strategy consensus), so nothing \
             was summoned."
        ),
        "{told}"
    );
}
