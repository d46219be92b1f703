//! The Arbiter's reply, routed by its intent.

use super::*;

#[test]
fn address_human_logs_the_arbiters_words_and_publishes_nothing_else() {
    let mut core = core();
    core.on_input(human("Build me an auth system"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply("address_human", "What OAuth providers?", serde_json::json!({})),
        at(1),
    );
    let step = core.take_step();
    assert_eq!(shown(&step), vec!["Arbiter: What OAuth providers?"]);
    assert!(!core.state.turn_in_flight);
    assert!(!core.turn_due());
    assert_eq!(core.state.context_tokens, 1000);
}

#[test]
fn summon_orchestrator_logs_the_summons_publishes_it_and_asks_whether_a_worker_is_up() {
    let mut core = core();
    core.on_input(human("Build it"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply("summon_orchestrator", "Build the auth module", serde_json::json!({})),
        at(1),
    );
    let step = core.take_step();
    let lines = shown(&step);
    assert!(has(&lines, "Summoned Orchestrator I: Build the auth module"), "{lines:?}");
    assert!(has(&lines, "summons Orchestrator I to default"), "{lines:?}");
    let id = orch_id(&core, 1);
    assert_eq!(
        step.tasks,
        vec![Task::CheckPool {
            orch_id: id,
            pool: "default".into()
        }]
    );
    assert_eq!(core.state.summoned, 1);
}

#[test]
fn address_orchestrator_without_one_live_is_sent_back_to_the_arbiter() {
    let mut core = core();
    core.on_input(human("hi"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply("address_orchestrator", "Stateless.", serde_json::json!({})),
        at(1),
    );
    let lines = shown(&core.take_step());
    assert!(has(&lines, "System:"), "the refusal is shown: {lines:?}");
    assert!(core.turn_due(), "the Arbiter is asked again");
}

#[test]
fn an_orchestrators_report_reaches_the_arbiter_and_its_answer_goes_to_it() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "Shared store or stateless?", true), at(2));
    let lines = shown(&core.take_step());
    assert_eq!(lines, vec!["Orchestrator I: Shared store or stateless?"]);
    assert!(core.turn_due());
    turn(
        &mut core,
        reply("address_orchestrator", "Stateless.", serde_json::json!({})),
        at(3),
    );
    // A worker that reads its inputs from the session's log (v3) gets the
    // entry itself: nothing else is published.
    let lines = shown(&core.take_step());
    assert_eq!(lines, vec!["Arbiter → Orchestrator I: Stateless."]);
}

#[test]
fn a_worker_that_reads_inputs_on_its_own_subject_also_gets_them_there() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    let Input::Orchestrator(mut messages, trace, ack) =
        output(&id, 1, "Shared store or stateless?", true)
    else {
        unreachable!()
    };
    messages[0].session_inputs = false;
    core.on_input(Input::Orchestrator(messages, trace, ack), at(2));
    core.take_step();
    turn(
        &mut core,
        reply("address_orchestrator", "Stateless.", serde_json::json!({})),
        at(3),
    );
    let lines = shown(&core.take_step());
    assert!(has(&lines, "Arbiter → Orchestrator I: Stateless."), "{lines:?}");
    assert!(has(&lines, &format!("input to {id}: Stateless.")), "{lines:?}");
}

#[test]
fn a_note_is_logged_and_starts_no_turn() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "Creating configs now.", false), at(2));
    let lines = shown(&core.take_step());
    assert_eq!(lines, vec!["Orchestrator I (note): Creating configs now."]);
    assert!(!core.turn_due());
    assert_eq!(core.state.notes.len(), 1);
}

#[test]
fn release_ends_the_orchestrator_and_says_so() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "Complete.", true), at(2));
    core.take_step();
    turn(
        &mut core,
        reply("release_orchestrators", "It is done.", serde_json::json!({})),
        at(3),
    );
    let lines = shown(&core.take_step());
    assert!(has(&lines, "Released: I"), "{lines:?}");
    assert!(has(&lines, &format!("release {id}")), "{lines:?}");
    assert!(has(&lines, "Arbiter: It is done."), "{lines:?}");
    assert!(core.state.team.is_empty());
}

#[test]
fn musings_are_logged_as_musings() {
    let mut core = core();
    core.on_input(human("hi"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply("musings", "Thinking it over.", serde_json::json!({})),
        at(1),
    );
    assert_eq!(shown(&core.take_step()), vec!["Musing: Thinking it over."]);
}

#[test]
fn a_failed_turn_is_an_error_entry_and_the_user_turn_stays() {
    let mut core = core();
    core.on_input(human("hi"), at(0));
    core.take_step();
    assert!(matches!(start_turn(&mut core, at(1)), TurnStart::New { .. }));
    core.turn_ended(
        Err(LlmError::Stream("connection reset".into())),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        at(2),
    );
    let lines = shown(&core.take_step());
    assert!(has(&lines, "Error:"), "{lines:?}");
    assert_eq!(core.transcript.len(), 1, "the user turn stays for the next message");
}

#[test]
fn a_question_left_by_a_turn_that_answered_another_member_says_so_not_that_it_failed() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "Done.", true), at(2));
    core.take_step();
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Review the parser.",
            serde_json::json!({"strategy": "parallel", "count": 2}),
        ),
        at(3),
    );
    core.take_step();
    let members: Vec<String> = core.state.team.iter().map(|a| a.orch_id.clone()).collect();
    assert_eq!(members.len(), 2);
    for (i, id) in members.iter().enumerate() {
        core.on_input(output(id, 1, &format!("Question {}?", i + 1), true), at(4));
    }
    core.take_step();
    turn(
        &mut core,
        reply(
            "address_orchestrator",
            "Go on, both.",
            serde_json::json!({"members": [1, 2]}),
        ),
        at(5),
    );
    core.take_step();
    // Gathered once; what a member reports after comes by itself.
    core.on_input(output(&members[0], 2, "Which parser?", true), at(6));
    core.take_step();
    assert!(core.state.team[0].asked);
    turn(
        &mut core,
        reply(
            "address_orchestrator",
            "Answer for two.",
            serde_json::json!({"members": [2]}),
        ),
        at(7),
    );
    let lines = shown(&core.take_step());
    assert!(has(&lines, "Arbiter → Orchestrator II.2: Answer for two."), "{lines:?}");
    assert!(
        has(
            &lines,
            "System: Orchestrator II.1 asked a question and is waiting for an answer, but the \
             Arbiter's turn went to someone else."
        ),
        "{lines:?}"
    );
}
