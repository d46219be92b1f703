//! Table tests: teams (parallel gathering, the team wait, chains, the cap).

use arbiter_protocol::{OrchestratorFailed, Summon};

use super::*;
use crate::state::Pending;

/// A session whose Orchestrator I reported and was replaced by a parallel
/// team II of `n` members on the whole brief (at 3 s), with the settings
/// `set`; and the step that summoned the team.
fn parallel_team(set: impl FnOnce(&mut Config), n: u32) -> (Core, Step) {
    let mut core = core_with(set);
    core.on_input(human("Build it"), at(0));
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Build the auth module",
            serde_json::json!({}),
        ),
        at(1),
    );
    core.take_step();
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "Done.", true), at(2));
    core.take_step();
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Review the parser.",
            serde_json::json!({"strategy": "parallel", "count": n}),
        ),
        at(3),
    );
    let step = core.take_step();
    (core, step)
}

/// The orch_id of member `member` of generation `number`.
fn member_id(core: &Core, number: u32, member: u32) -> String {
    core.state
        .team
        .iter()
        .find(|a| a.number == number && a.member == Some(member))
        .map(|a| a.orch_id.clone())
        .expect("that member is live")
}

fn summonses(step: &Step) -> Vec<&Summon> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Summon(s) => Some(s),
            _ => None,
        })
        .collect()
}

#[test]
fn a_parallel_team_of_3_summons_3_members_with_a_strategy_entry() {
    let mut core = core();
    core.on_input(human("Build it"), at(0));
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Build the auth module",
            serde_json::json!({}),
        ),
        at(1),
    );
    core.take_step();
    let first = orch_id(&core, 1);
    core.on_input(output(&first, 1, "Done.", true), at(2));
    core.take_step();
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Review the parser.",
            serde_json::json!({"strategy": "parallel", "count": 3}),
        ),
        at(3),
    );
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            format!("release {first}"),
            "Released: I".to_owned(),
            "Strategy: parallel x3".to_owned(),
            "Summoned Orchestrator II.1: Review the parser.".to_owned(),
            "summons Orchestrator II.1 to default".to_owned(),
            "Summoned Orchestrator II.2: Review the parser.".to_owned(),
            "summons Orchestrator II.2 to default".to_owned(),
            "Summoned Orchestrator II.3: Review the parser.".to_owned(),
            "summons Orchestrator II.3 to default".to_owned(),
        ]
    );
    // Each member has a workspace of its own (its member number).
    let members: Vec<_> = summonses(&step).iter().map(|s| s.member).collect();
    assert_eq!(members, vec![Some(1), Some(2), Some(3)]);
    assert_eq!(
        step.tasks,
        vec![Task::CheckPool {
            orch_id: member_id(&core, 2, 1),
            pool: "default".into()
        }]
    );
    assert!(core.gathers(2));
    assert_eq!(core.state.team.len(), 3);
}

#[test]
fn sub_briefs_tell_each_member_its_part_of_the_team() {
    let mut core = core();
    core.on_input(human("Build it"), at(0));
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Build the compiler front end.",
            serde_json::json!({"strategy": "parallel", "briefs": ["Lexer.", "Parser."]}),
        ),
        at(1),
    );
    let lines = shown(&core.take_step());
    assert!(has(&lines, "Strategy: parallel x2"), "{lines:?}");
    assert!(
        has(
            &lines,
            "Summoned Orchestrator I.2: You are Orchestrator I.2 of a team of 2 working at \
             once, each in a workspace of its own. The team's purpose: Build the compiler front \
             end.\n\nYour part:\nParser."
        ),
        "{lines:?}"
    );
}

#[test]
fn reports_are_gathered_into_one_input_only_when_all_are_in() {
    let (mut core, _) = parallel_team(|_| {}, 3);
    let ids: Vec<String> = (1..=3).map(|m| member_id(&core, 2, m)).collect();
    core.on_input(output(&ids[1], 1, "Parser reviewed.", true), at(4));
    assert_eq!(
        shown(&core.take_step()),
        vec!["Orchestrator II.2: Parser reviewed."]
    );
    core.on_input(output(&ids[0], 1, "Lexer reviewed.", true), at(5));
    core.take_step();
    assert!(!core.turn_due(), "two of three: the team is still gathered");
    assert!(core.state.team.iter().all(|a| !a.asked));
    core.on_input(output(&ids[2], 1, "Tests reviewed.", true), at(6));
    let lines = shown(&core.take_step());
    assert_eq!(
        lines,
        vec![
            "Orchestrator II.3: Tests reviewed.",
            "System: 3 of 3 members of the team Orchestrator II reported; their reports go to \
             the Arbiter together."
        ]
    );
    assert!(core.state.gather.is_none());
    assert_eq!(core.state.queue.len(), 1, "one input for the whole team");
    assert!(matches!(
        start_turn(&mut core, at(7)),
        TurnStart::New { .. }
    ));
    let asked = &core.transcript.last().unwrap().text;
    assert!(
        asked.starts_with("The team Orchestrator II (3 members, parallel): 3 of 3 reported."),
        "{asked}"
    );
    // In member order, whatever order they came in.
    let one = asked.find("Orchestrator II.1: Lexer reviewed.").unwrap();
    let two = asked.find("Orchestrator II.2: Parser reviewed.").unwrap();
    assert!(one < two, "{asked}");
}

#[test]
fn a_members_note_is_a_note_and_not_its_report() {
    let (mut core, _) = parallel_team(|_| {}, 2);
    let id = member_id(&core, 2, 1);
    core.on_input(output(&id, 1, "Reading the grammar.", false), at(4));
    assert_eq!(
        shown(&core.take_step()),
        vec!["Orchestrator II.1 (note): Reading the grammar."]
    );
    assert!(core.state.gather.as_ref().unwrap().reports.is_empty());
    assert!(!core.turn_due());
}

#[test]
fn the_team_wait_running_out_delivers_what_came_in() {
    let (mut core, _) = parallel_team(|c| c.team_wait = Duration::from_secs(60), 3);
    assert_eq!(core.gather_deadline(at(3)), Some(at(63).mono));
    let id = member_id(&core, 2, 2);
    core.on_input(output(&id, 1, "Parser reviewed.", true), at(10));
    core.take_step();
    core.tick(at(62));
    assert!(shown(&core.take_step()).is_empty(), "not yet");
    assert!(!core.turn_due());
    core.tick(at(63));
    assert_eq!(
        shown(&core.take_step()),
        vec![
            "System: 1 of 3 members of the team Orchestrator II reported; their reports go to \
             the Arbiter together (the team wait of 60 s ran out)."
        ]
    );
    assert!(core.turn_due());
    assert!(matches!(
        core.state.queue.front(),
        Some(Pending::Team {
            waited_secs: Some(60),
            members: 3,
            ..
        })
    ));
    assert!(matches!(
        start_turn(&mut core, at(64)),
        TurnStart::New { .. }
    ));
    let asked = &core.transcript.last().unwrap().text;
    assert!(
        asked.contains(
            "Not reported within 60 s: Orchestrator II.1, Orchestrator II.3 (still at work"
        ),
        "{asked}"
    );
    // The members still at work stay live.
    assert_eq!(core.state.team.len(), 3);
}

#[test]
fn a_report_after_the_wait_ran_out_reaches_the_arbiter_on_its_own() {
    let (mut core, _) = parallel_team(|c| c.team_wait = Duration::from_secs(60), 2);
    core.tick(at(63));
    core.take_step();
    core.state.queue.clear();
    let id = member_id(&core, 2, 1);
    core.on_input(output(&id, 1, "Lexer reviewed, late.", true), at(70));
    assert_eq!(
        shown(&core.take_step()),
        vec!["Orchestrator II.1: Lexer reviewed, late."]
    );
    assert!(matches!(
        core.state.queue.front(),
        Some(Pending::Orchestrator {
            number: 2,
            member: Some(1),
            ..
        })
    ));
}

#[test]
fn a_chain_starts_link_2_with_link_1s_report_then_releases_link_1() {
    let mut core = core();
    core.on_input(human("Ship the parser"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Ship the parser.",
            serde_json::json!({"strategy": "sequential", "briefs": ["Plan it.", "Build it."]}),
        ),
        at(1),
    );
    let step = core.take_step();
    let chain = "link 1 of 2 of a chain: each link is summoned when the one before it reports, \
                 with its report, and works in the session's workspace. The chain's purpose: \
                 Ship the parser.\n\nYour part:\nPlan it.";
    assert_eq!(
        shown(&step),
        vec![
            "Strategy: sequential x2".to_owned(),
            format!("Summoned Orchestrator I.1: You are Orchestrator I.1, {chain}"),
            // A link works in the session's workspace: no member number.
            "summons Orchestrator I to default".to_owned(),
        ]
    );
    let first = member_id(&core, 1, 1);
    core.on_input(output(&first, 1, "Use a Pratt parser.", true), at(2));
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert_eq!(lines[0], "Orchestrator I.1: Use a Pratt parser.");
    assert!(
        lines[1].starts_with("Summoned Orchestrator I.2: You are Orchestrator I.2, link 2 of 2"),
        "{lines:?}"
    );
    assert!(
        lines[1].ends_with(
            "Your part:\nBuild it.\n\nThe report of Orchestrator I.1, verbatim:\nUse a Pratt \
             parser."
        ),
        "{lines:?}"
    );
    assert_eq!(lines[2], "summons Orchestrator I to default");
    assert_eq!(lines[3], format!("release {first}"));
    assert_eq!(lines[4], "Released: I");
    assert!(!core.turn_due(), "the chain goes on by itself");
    assert_eq!(core.state.team.len(), 1);
    // The last link's report ends the chain: the Arbiter reads both.
    let second = member_id(&core, 1, 2);
    core.on_input(output(&second, 1, "Built and tested.", true), at(3));
    let lines = shown(&core.take_step());
    assert_eq!(
        lines[1],
        "System: 2 of 2 members of the team Orchestrator I reported; their reports go to the \
         Arbiter together."
    );
    assert!(matches!(
        start_turn(&mut core, at(4)),
        TurnStart::New { .. }
    ));
    let asked = &core.transcript.last().unwrap().text;
    assert!(
        asked.starts_with("The chain Orchestrator I (2 links, sequential): 2 of 2 reported."),
        "{asked}"
    );
    assert!(
        asked.contains("Orchestrator I.1: Use a Pratt parser."),
        "{asked}"
    );
    assert!(
        asked.contains("Orchestrator I.2: Built and tested."),
        "{asked}"
    );
}

#[test]
fn a_team_larger_than_the_cap_is_refused_and_nothing_starts() {
    let mut core = core_with(|c| c.team_cap = 2);
    core.on_input(human("Review it"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Review the parser.",
            serde_json::json!({"strategy": "parallel", "count": 3}),
        ),
        at(1),
    );
    let step = core.take_step();
    let why = "a team of 3 is more than this session may run at once (2 Orchestrators), so \
               nothing was summoned. Summon 2 or fewer, or split the work in turns.";
    assert_eq!(
        shown(&step),
        vec![
            format!("Strategy: parallel x0 refused: {why}"),
            format!("System: Your summon_orchestrator could not be carried out: {why}"),
        ]
    );
    assert!(step.tasks.is_empty());
    assert_eq!(core.state.summoned, 0);
    assert_eq!(core.state.rejections, 1);
}

#[test]
fn addressing_a_team_names_its_members() {
    let (mut core, _) = parallel_team(|_| {}, 3);
    core.on_input(human("Tell them to hurry"), at(4));
    core.take_step();
    turn(
        &mut core,
        reply("address_orchestrator", "Hurry.", serde_json::json!({})),
        at(5),
    );
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with(
            "System: Your address_orchestrator could not be carried out: 3 Orchestrators are \
             live (Orchestrator II.1, Orchestrator II.2, Orchestrator II.3)"
        ),
        "{lines:?}"
    );
    turn(
        &mut core,
        reply(
            "address_orchestrator",
            "Hurry.",
            serde_json::json!({"members": [3, 1]}),
        ),
        at(6),
    );
    let lines = shown(&core.take_step());
    assert!(
        has(&lines, "Arbiter → Orchestrator II.3: Hurry."),
        "{lines:?}"
    );
    assert!(
        has(&lines, "Arbiter → Orchestrator II.1: Hurry."),
        "{lines:?}"
    );
    assert!(!has(&lines, "Arbiter → Orchestrator II.2"), "{lines:?}");
}

#[test]
fn release_by_members_ends_only_those() {
    let (mut core, _) = parallel_team(|_| {}, 3);
    let two = member_id(&core, 2, 2);
    core.on_input(human("Drop the second one"), at(4));
    core.take_step();
    turn(
        &mut core,
        reply(
            "release_orchestrators",
            "II.2 is not needed.",
            serde_json::json!({"members": [2]}),
        ),
        at(5),
    );
    assert_eq!(
        shown(&core.take_step()),
        vec![
            format!("release {two}"),
            "Released: II".to_owned(),
            "Arbiter: II.2 is not needed.".to_owned(),
        ]
    );
    let left: Vec<_> = core.state.team.iter().map(|a| a.member).collect();
    assert_eq!(left, vec![Some(1), Some(3)]);
    assert!(core.gathers(2), "the others are still gathered");
}

#[test]
fn releasing_the_team_before_all_reported_delivers_what_came_in() {
    let (mut core, _) = parallel_team(|_| {}, 3);
    let one = member_id(&core, 2, 1);
    core.on_input(output(&one, 1, "Lexer reviewed.", true), at(4));
    core.take_step();
    core.on_input(human("Stop them all"), at(5));
    core.take_step();
    turn(
        &mut core,
        reply("release_orchestrators", "Stopped.", serde_json::json!({})),
        at(6),
    );
    let lines = shown(&core.take_step());
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("release ")).count(),
        3,
        "{lines:?}"
    );
    assert!(
        has(
            &lines,
            "System: 1 of 3 members of the team Orchestrator II reported; their reports go to \
             the Arbiter together."
        ),
        "{lines:?}"
    );
    assert_eq!(lines.last().unwrap(), "Arbiter: Stopped.");
    assert!(core.state.team.is_empty());
    assert!(core.state.gather.is_none());
}

#[test]
fn a_member_that_fails_before_reporting_counts_as_reported() {
    let (mut core, _) = parallel_team(|_| {}, 2);
    let one = member_id(&core, 2, 1);
    let two = member_id(&core, 2, 2);
    core.on_input(output(&one, 1, "Lexer reviewed.", true), at(4));
    core.take_step();
    let Input::Orchestrator(mut messages, trace, ack) = output(&two, 1, "", false) else {
        unreachable!()
    };
    messages[0].event = OrchestratorEvent::Failed(OrchestratorFailed {
        error: WireError::OrchestratorFailed {
            number: 2,
            message: "the model is down".into(),
        },
    });
    core.on_input(Input::Orchestrator(messages, trace, ack), at(5));
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("Error: "), "{lines:?}");
    assert!(lines[0].contains("the model is down"), "{lines:?}");
    assert_eq!(
        lines[1],
        "System: 2 of 2 members of the team Orchestrator II reported; their reports go to the \
         Arbiter together."
    );
    assert_eq!(
        core.state.team.len(),
        1,
        "the failed member is no longer live"
    );
    assert!(matches!(
        start_turn(&mut core, at(6)),
        TurnStart::New { .. }
    ));
    let asked = &core.transcript.last().unwrap().text;
    assert!(
        asked.contains("Orchestrator II.2 has stopped and is no longer active"),
        "{asked}"
    );
}

// Moved from the end-to-end suite (tests/tests/teams.rs).

/// The Arbiter's summons of a team `more` (its strategy, count, briefs).
fn team_summons(more: serde_json::Value) -> ArbiterOutput {
    reply("summon_orchestrator", "Review it.", more)
}

#[test]
fn a_team_over_the_cap_a_count_of_zero_and_an_empty_sub_brief_are_refused_then_stopped() {
    let mut core = core();
    core.on_input(human("Run five at once"), at(0));
    core.take_step();
    turn(
        &mut core,
        team_summons(serde_json::json!({"strategy": "parallel", "count": 5})),
        at(1),
    );
    let step = core.take_step();
    let refused = |step: &Step| -> Vec<(Option<u32>, u32)> {
        step.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Log(entry) => match &entry.body {
                    LogBody::Strategy(s) if s.rejected.is_some() => Some((s.number, s.members)),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    };
    assert_eq!(refused(&step), vec![(None, 0)]);
    assert_eq!(
        next_asked(&mut core, at(2)),
        "System: Your summon_orchestrator could not be carried out: a team of 5 is more than \
         this session may run at once (4 Orchestrators), so nothing was summoned. Summon 4 or \
         fewer, or split the work in turns."
    );
    core.turn_ended(
        answered(
            team_summons(serde_json::json!({"strategy": "parallel", "count": 0})),
            1000,
        ),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        at(2),
    );
    assert_eq!(refused(&core.take_step()), vec![(None, 0)]);
    let asked = next_asked(&mut core, at(3));
    assert!(
        asked.contains("a team of 0 members was asked for (count 0), so nothing was summoned."),
        "{asked}"
    );
    // The third refusal in a row is the last: an error entry.
    core.turn_ended(
        answered(
            team_summons(
                serde_json::json!({"strategy": "parallel", "briefs": ["Review the lexer.", "  "]}),
            ),
            1000,
        ),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        at(3),
    );
    let step = core.take_step();
    assert_eq!(refused(&step), vec![(None, 0)]);
    let lines = shown(&step);
    let last = lines.last().unwrap();
    assert!(last.starts_with("Error: "), "{lines:?}");
    assert!(
        last.contains("sub-brief 2 of 2 is empty, so nothing was summoned."),
        "{lines:?}"
    );
    assert!(!core.turn_due());
    assert_eq!(core.state.summoned, 0);
    assert!(core.state.team.is_empty());
}

#[test]
fn a_chain_of_three_briefs_each_link_with_the_report_before_it_and_reports_once() {
    let mut core = core();
    core.on_input(human("Plan it, build it, then have it reviewed"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Add a --json flag to report.",
            serde_json::json!({
                "strategy": "sequential",
                "briefs": ["Plan the flag.", "Implement the plan.", "Review the implementation."]
            }),
        ),
        at(1),
    );
    let step = core.take_step();
    let links = summonses(&step);
    assert_eq!(links.len(), 1, "one link at a time");
    assert!(
        links[0].brief.contains("link 1 of 3 of a chain"),
        "{}",
        links[0].brief
    );
    // A link works in the session's workspace: no member workspace.
    assert_eq!(links[0].member, None);
    let plan =
        "Plan:\n1. Add `--json` to cli.rs (\"clap\" derive).\n2. Serialise Report with serde.";
    let reports = [plan, "Implemented; tests pass.", "Looks right."];
    let mut released = Vec::new();
    for (i, report) in reports.iter().enumerate() {
        let link = i as u32 + 1;
        let id = member_id(&core, 1, link);
        core.on_input(output(&id, 1, report, true), at(2 + i as u64));
        let step = core.take_step();
        for effect in &step.effects {
            if let Effect::Log(entry) = effect
                && let LogBody::Released(r) = &entry.body
            {
                released.push(r.member);
            }
        }
        let next = summonses(&step);
        if link < 3 {
            assert!(!core.turn_due(), "the chain goes on by itself");
            assert_eq!(next.len(), 1);
            assert_eq!(next[0].member, None);
            assert!(
                next[0].brief.ends_with(&format!(
                    "The report of Orchestrator I.{link}, verbatim:\n{report}"
                )),
                "{}",
                next[0].brief
            );
        } else {
            assert!(next.is_empty());
        }
    }
    assert_eq!(
        released,
        vec![Some(1), Some(2)],
        "the last link is still live"
    );
    assert_eq!(core.state.team.len(), 1);
    let asked = next_asked(&mut core, at(6));
    assert!(
        asked.starts_with("The chain Orchestrator I (3 links, sequential): 3 of 3 reported."),
        "{asked}"
    );
    for line in [
        "Orchestrator I.1: Plan:",
        "Orchestrator I.2: Implemented; tests pass.",
        "Orchestrator I.3: Looks right.",
    ] {
        assert!(asked.contains(line), "{asked}");
    }
}

#[test]
fn each_members_output_ahead_is_held_for_its_own_gap() {
    let mut core = core_with(|c| c.output_gap_wait = Duration::from_secs(1));
    core.on_input(human("Two at once"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Two parts.",
            serde_json::json!({"strategy": "parallel", "briefs": ["Part one.", "Part two."]}),
        ),
        at(1),
    );
    core.take_step();
    let ids = [member_id(&core, 1, 1), member_id(&core, 1, 2)];
    // Far ahead on both members' subjects: member 2's must not push member 1's out.
    for id in &ids {
        core.on_input(output(id, 1000, "AHEAD", true), at(2));
    }
    assert!(shown(&core.take_step()).is_empty(), "held");
    for (i, id) in ids.iter().enumerate() {
        core.on_input(output(id, 1, &format!("Part {} done.", i + 1), true), at(2));
    }
    let lines = shown(&core.take_step());
    assert!(has(&lines, "Orchestrator I.1: Part 1 done."), "{lines:?}");
    assert!(has(&lines, "Orchestrator I.2: Part 2 done."), "{lines:?}");
    core.tick(at(4));
    let gaps = shown(&core.take_step());
    for name in ["Orchestrator I.1", "Orchestrator I.2"] {
        assert!(
            gaps.iter().any(|g| g.starts_with("Error: ")
                && g.contains(&format!(
                    "output seq 2 of {name} never arrived within 1 s; the output held after it \
                     was dropped: seq 1000"
                ))),
            "{gaps:?}"
        );
    }
    assert!(
        core.transcript.iter().all(|t| !t.text.contains("AHEAD"))
            && next_asked(&mut core, at(5)).contains("Part 1 done."),
        "output ahead of its turn reaches no model"
    );
    assert!(core.transcript.iter().all(|t| !t.text.contains("AHEAD")));
}
