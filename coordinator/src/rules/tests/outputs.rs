//! Table tests: Orchestrator output, taken in `seq` order.

use super::*;
use serde_json::json;

fn notes(core: &Core) -> Vec<&str> {
    core.state.notes.iter().map(|(_, t)| t.as_str()).collect()
}

fn seen(core: &Core) -> u64 {
    core.state.team[0].outputs_seen
}

#[test]
fn output_is_taken_in_seq_order() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "one", false), at(2));
    core.on_input(output(&id, 2, "two", false), at(3));
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec!["Orchestrator I (note): one", "Orchestrator I (note): two"]
    );
    assert!(step.changed);
    assert_eq!(seen(&core), 2);
    assert_eq!(notes(&core), vec!["one", "two"]);
}

#[test]
fn outputs_of_one_message_are_taken_together_in_order() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    let Input::Orchestrator(mut first, trace, ack) = output(&id, 1, "one", false) else {
        unreachable!()
    };
    let Input::Orchestrator(second, _, _) = output(&id, 2, "Done?", true) else {
        unreachable!()
    };
    first.extend(second);
    core.on_input(Input::Orchestrator(first, trace, ack), at(2));
    assert_eq!(
        shown(&core.take_step()),
        vec!["Orchestrator I (note): one", "Orchestrator I: Done?"]
    );
    assert_eq!(seen(&core), 2);
    assert!(core.turn_due());
}

#[test]
fn a_duplicate_seq_is_dropped() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "one", false), at(2));
    core.take_step();
    core.on_input(output(&id, 1, "one again", false), at(3));
    let step = core.take_step();
    assert!(shown(&step).is_empty(), "{:?}", shown(&step));
    assert!(!step.changed);
    assert_eq!(notes(&core), vec!["one"]);
    assert_eq!(seen(&core), 1);
}

#[test]
fn a_seq_ahead_is_held_and_taken_when_the_gap_fills() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 2, "two", false), at(2));
    core.on_input(output(&id, 3, "three?", true), at(2));
    assert!(shown(&core.take_step()).is_empty());
    assert_eq!(seen(&core), 0);
    assert!(!core.turn_due());
    assert!(core.held.deadline().is_some());
    core.on_input(output(&id, 1, "one", false), at(3));
    assert_eq!(
        shown(&core.take_step()),
        vec![
            "Orchestrator I (note): one",
            "Orchestrator I (note): two",
            "Orchestrator I: three?"
        ]
    );
    assert_eq!(seen(&core), 3);
    assert!(core.held.deadline().is_none());
    assert!(core.turn_due());
}

#[test]
fn a_gap_that_never_fills_is_dropped_after_the_gap_wait_and_named() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "one", false), at(2));
    core.on_input(output(&id, 3, "three", false), at(2));
    core.take_step();
    assert_eq!(core.held.deadline(), Some(at(32).mono));
    core.tick(at(31));
    assert!(shown(&core.take_step()).is_empty(), "not yet");
    core.tick(at(32));
    let lines = shown(&core.take_step());
    assert_eq!(
        lines,
        vec![format!(
            "Error: a malformed message on {} was rejected: output seq 2 of Orchestrator I \
             never arrived within 30 s; the output held after it was dropped: seq 3",
            arbiter_protocol::subjects::orch_out(&id)
        )]
    );
    assert!(core.held.deadline().is_none());
    assert_eq!(
        seen(&core),
        1,
        "the last seq taken does not move past the gap"
    );
    // The missing one, late, is still taken.
    core.on_input(output(&id, 2, "two", false), at(40));
    assert_eq!(shown(&core.take_step()), vec!["Orchestrator I (note): two"]);
}

#[test]
fn the_gap_wait_is_the_configured_one() {
    let mut core = core_with(|c| c.output_gap_wait = Duration::from_secs(5));
    core.on_input(human("Build it"), at(0));
    turn(
        &mut core,
        reply("summon_orchestrator", "Build it.", serde_json::json!({})),
        at(1),
    );
    core.take_step();
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 2, "two", false), at(2));
    core.take_step();
    core.tick(at(7));
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("output seq 1 of Orchestrator I never arrived within 5 s"),
        "{lines:?}"
    );
    assert!(lines[0].ends_with("dropped: seq 2"), "{lines:?}");
}

#[test]
fn output_from_an_orchestrator_not_live_is_ignored() {
    let mut core = summoned("Build the auth module");
    core.on_input(output("o-stranger", 1, "Let me in.", true), at(2));
    let step = core.take_step();
    assert!(shown(&step).is_empty());
    assert!(!step.changed);
    assert!(!core.turn_due());
    assert!(core.state.queue.is_empty());
}

#[test]
fn output_from_a_released_orchestrator_is_ignored() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "Done.", true), at(2));
    turn(
        &mut core,
        reply("release_orchestrators", "Done.", serde_json::json!({})),
        at(3),
    );
    core.take_step();
    core.on_input(output(&id, 2, "One more thing.", true), at(4));
    assert!(shown(&core.take_step()).is_empty());
    assert!(!core.turn_due());
}

#[test]
fn a_report_asks_and_a_note_does_not() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "Working.", false), at(2));
    assert!(!core.state.team[0].asked);
    assert!(!core.turn_due());
    core.on_input(output(&id, 2, "TOML or YAML?", true), at(3));
    assert!(core.state.team[0].asked);
    assert!(core.state.team[0].reported);
    assert!(core.turn_due());
    // The notes go first, as a digest, in the Arbiter's next turn.
    assert!(matches!(
        start_turn(&mut core, at(4)),
        TurnStart::New { .. }
    ));
    assert_eq!(
        core.transcript.last().unwrap().text,
        "Notes sent while working:\n- Orchestrator I: Working.\n\nOrchestrator I: TOML or YAML?"
    );
}

/// A note that says work is done while the worker saw none is flagged in
/// the Arbiter's digest, as a report is; one with work behind it is not.
#[test]
fn a_note_claiming_work_the_evidence_does_not_show_is_flagged_for_the_arbiter() {
    let mut core = summoned("Write hello.py");
    let id = orch_id(&core, 1);
    let with_evidence = |input: Input, evidence: arbiter_protocol::Evidence| match input {
        Input::Orchestrator(mut messages, trace, ack) => {
            messages[0].evidence = Some(evidence);
            Input::Orchestrator(messages, trace, ack)
        }
        other => other,
    };
    let nothing = arbiter_protocol::Evidence::default();
    let mut wrote = nothing.clone();
    wrote.files.created = vec!["hello.py".into()];
    core.on_input(
        with_evidence(
            output(&id, 1, "The file hello.py is now created.", false),
            nothing,
        ),
        at(2),
    );
    core.on_input(
        with_evidence(output(&id, 2, "hello.py is written.", false), wrote.clone()),
        at(3),
    );
    core.on_input(
        with_evidence(output(&id, 3, "It prints hello.", true), wrote),
        at(4),
    );
    start_turn(&mut core, at(5));
    assert_eq!(
        core.transcript
            .last()
            .unwrap()
            .text
            .lines()
            .take(3)
            .collect::<Vec<_>>(),
        [
            "Notes sent while working:",
            "- Orchestrator I: [Check: Orchestrator I reports done: 0 tool calls, 0 files \
             changed. Nothing of it shows in the workspace.] The file hello.py is now created.",
            "- Orchestrator I: hello.py is written.",
        ]
    );
}

/// Under the `small` profile the Arbiter's closing words carry the last
/// report and the worker's evidence, once: after a release, and after a
/// failure when the Arbiter next speaks to the human; a question asked
/// while an Orchestrator works does not. The full profile's words stay its own.
#[test]
fn small_profile_closing_words_carry_the_last_report_and_its_evidence() {
    let with_evidence = |input: Input| match input {
        Input::Orchestrator(mut messages, trace, ack) => {
            let mut evidence = arbiter_protocol::Evidence::default();
            evidence.files.created = vec!["hello.py".into()];
            messages[0].evidence = Some(evidence);
            Input::Orchestrator(messages, trace, ack)
        }
        other => other,
    };
    let evidence = "[Evidence from the worker, not written by Orchestrator I: 0 tool calls, \
                    1 file changed (created: hello.py)]";
    let closing = |profile: arbiter_llm::Profile, release: bool| {
        let mut core = core_with(|c| c.model.profile = profile);
        core.on_input(human("Make hello.py"), at(0));
        turn(
            &mut core,
            reply("summon_orchestrator", "Make it.", json!({})),
            at(1),
        );
        core.take_step();
        let id = orch_id(&core, 1);
        core.on_input(
            with_evidence(output(&id, 1, "It prints hello.", true)),
            at(2),
        );
        core.take_step();
        if release {
            turn(
                &mut core,
                reply("release_orchestrators", "release all", json!({})),
                at(3),
            );
        } else {
            // A question to the human while it works: no closing words yet.
            turn(
                &mut core,
                reply("address_human", "Shall I go on?", json!({})),
                at(3),
            );
            let asked = shown(&core.take_step());
            assert_eq!(asked.last().unwrap(), "Arbiter: Shall I go on?");
            core.on_input(human("Yes"), at(4));
            turn(
                &mut core,
                reply("release_orchestrators", "", json!({})),
                at(5),
            );
        }
        shown(&core.take_step())
            .into_iter()
            .filter(|l| l.starts_with("Arbiter:"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        closing(arbiter_llm::Profile::Small, true),
        [format!(
            "Arbiter: release all\n\nThe last report: Orchestrator I: It prints hello.\n{evidence}"
        )]
    );
    // An empty release message still shows the report.
    assert_eq!(
        closing(arbiter_llm::Profile::Small, false),
        [format!(
            "Arbiter: The last report: Orchestrator I: It prints hello.\n{evidence}"
        )]
    );
    assert_eq!(
        closing(arbiter_llm::Profile::Full, true),
        ["Arbiter: release all".to_owned()]
    );

    // After a failure: the Arbiter's next words to the human carry it.
    let mut core = core_with(|c| c.model.profile = arbiter_llm::Profile::Small);
    core.on_input(human("Make hello.py"), at(0));
    turn(
        &mut core,
        reply("summon_orchestrator", "Make it.", json!({})),
        at(1),
    );
    core.take_step();
    let id = orch_id(&core, 1);
    core.on_input(
        with_evidence(output(&id, 1, "Made it; checking.", true)),
        at(2),
    );
    core.take_step();
    turn(
        &mut core,
        reply("address_orchestrator", "Check it.", json!({})),
        at(3),
    );
    core.take_step();
    let Input::Orchestrator(mut messages, trace, ack) = output(&id, 2, "", false) else {
        unreachable!()
    };
    messages[0].event = OrchestratorEvent::Failed(arbiter_protocol::OrchestratorFailed {
        error: WireError::OrchestratorFailed {
            number: 1,
            message: "HTTP 400: the request exceeds the available context size".into(),
        },
    });
    core.on_input(Input::Orchestrator(messages, trace, ack), at(4));
    core.take_step();
    turn(
        &mut core,
        reply("address_human", "It stopped.", json!({})),
        at(5),
    );
    let said: Vec<String> = shown(&core.take_step())
        .into_iter()
        .filter(|l| l.starts_with("Arbiter:"))
        .collect();
    assert_eq!(
        said,
        [format!(
            "Arbiter: It stopped.\n\nThe last report: Orchestrator I: Made it; checking.\n{evidence}"
        )]
    );
}

// Moved from the end-to-end suite (tests/tests/forged.rs).

#[test]
fn forged_seqs_far_ahead_never_silence_the_real_orchestrator() {
    let mut core = core_with(|c| c.output_gap_wait = Duration::from_secs(1));
    core.on_input(human("Build the thing"), at(0));
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Build the thing, then ask.",
            serde_json::json!({}),
        ),
        at(1),
    );
    core.take_step();
    let id = orch_id(&core, 1);
    // Someone with NATS access speaks first, as the Orchestrator, far ahead.
    for seq in [1000, u64::MAX] {
        core.on_input(output(&id, seq, &format!("FORGED {seq}"), true), at(2));
    }
    assert!(shown(&core.take_step()).is_empty(), "held, not taken");
    // The real seq 1 is taken while the forged ones are held.
    core.on_input(output(&id, 1, "Built. Ship it?", true), at(2));
    assert_eq!(
        shown(&core.take_step()),
        vec!["Orchestrator I: Built. Ship it?"]
    );
    assert!(core.turn_due());
    core.tick(at(4));
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].ends_with(&format!(
            "output seq 2 of Orchestrator I never arrived within 1 s; the output held after it \
             was dropped: seq 1000, {}",
            u64::MAX
        )),
        "{lines:?}"
    );
    assert_eq!(
        next_asked(&mut core, at(5)),
        "Orchestrator I: Built. Ship it?"
    );
    assert!(core.transcript.iter().all(|t| !t.text.contains("FORGED")));
}
