//! Table tests: the guards (the turn cap, the echo stop, `/stop`) and the
//! question-left reminders.

use arbiter_protocol::HumanCommand;

use super::*;
use crate::state::Pending;

/// `/stop` typed at console `alice`.
fn stop() -> Input {
    let mut message = human_message("m-stop", "/stop");
    message.command = Some(HumanCommand::Stop);
    Input::Human {
        message: Box::new(message),
        console: "alice".into(),
        trace: TraceContext::none(),
        ack: None,
    }
}

fn to_orchestrator(text: &str) -> ArbiterOutput {
    reply("address_orchestrator", text, serde_json::json!({}))
}

fn musing(text: &str) -> ArbiterOutput {
    reply("musings", text, serde_json::json!({}))
}

/// A session whose Orchestrator I asked `question` (seq 1, at 2 s).
fn asked(question: &str) -> (Core, String) {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, question, true), at(2));
    core.take_step();
    (core, id)
}

#[test]
fn past_the_turn_cap_for_one_human_message_the_session_holds() {
    let mut core = core_with(|c| c.max_turns_per_message = 2);
    core.on_input(human("hi"), at(0));
    core.take_step();
    // Each refusal goes back to the Arbiter: a turn a time, with no human word.
    turn(&mut core, to_orchestrator("Anyone?"), at(1));
    turn(&mut core, to_orchestrator("Anyone?"), at(2));
    core.take_step();
    assert!(core.turn_due());
    assert_eq!(core.turn_start(at(3)), TurnStart::Held);
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            "System: Held: the Arbiter took 2 turns since your last message (the limit, \
             arbiter-coordinator --max-turns-per-message or ARBITER_MAX_TURNS_PER_MESSAGE). \
             Write to go on, or /stop."
        ]
    );
    assert!(step.changed);
    assert!(!core.turn_due());
    assert!(core.state.queue.is_empty());
    assert_eq!(core.state.hold.as_ref().map(|h| h.waiting.len()), Some(1));
}

#[test]
fn the_humans_next_message_ends_a_hold_and_what_waited_goes_first() {
    let mut core = core_with(|c| c.max_turns_per_message = 1);
    core.on_input(human("hi"), at(0));
    turn(&mut core, to_orchestrator("Anyone?"), at(1));
    assert_eq!(core.turn_start(at(2)), TurnStart::Held);
    core.take_step();
    core.on_input(human("Talk to me instead"), at(3));
    assert_eq!(shown(&core.take_step()), vec!["You: Talk to me instead"]);
    assert!(core.state.hold.is_none());
    assert!(matches!(
        core.state.queue.front(),
        Some(Pending::System { .. })
    ));
    assert!(matches!(
        start_turn(&mut core, at(4)),
        TurnStart::New { .. }
    ));
    let asked = &core.transcript.last().unwrap().text;
    assert!(
        asked.starts_with("System: Your address_orchestrator could not be carried out"),
        "{asked}"
    );
    assert!(asked.ends_with("Talk to me instead"), "{asked}");
}

#[test]
fn the_same_words_both_ways_for_loop_rounds_rounds_stop_the_exchange() {
    let said = "Please create hello.py.";
    let (mut core, id) = asked(said);
    for seq in 2..=4 {
        turn(&mut core, to_orchestrator(said), at(seq * 2));
        core.take_step();
        core.on_input(output(&id, seq, said, true), at(seq * 2 + 1));
        let lines = shown(&core.take_step());
        if seq < 4 {
            assert_eq!(
                lines,
                vec![format!("Orchestrator I: {said}")],
                "round {seq}"
            );
            assert!(core.turn_due());
        } else {
            assert_eq!(
                lines,
                vec![
                    format!("Orchestrator I: {said}"),
                    "System: Held: the Arbiter and Orchestrator I have repeated themselves for 3 \
                     rounds with no tool call between, so the exchange was stopped. Write to go \
                     on (say what should change), or /stop."
                        .to_owned(),
                ]
            );
        }
    }
    assert!(!core.turn_due());
    assert_eq!(core.state.hold.as_ref().map(|h| h.waiting.len()), Some(1));
}

#[test]
fn an_exchange_that_moves_on_is_not_stopped() {
    let (mut core, id) = asked("Shall I start with the lexer?");
    // Each report says something new (a counter alone would not: see
    // `guard.rs`, `same`).
    let parts = ["lexer", "parser", "type checker", "emitter", "linker"];
    for seq in 2..=6 {
        turn(&mut core, to_orchestrator("Yes, go on."), at(seq * 2));
        core.take_step();
        let part = parts[seq as usize - 2];
        core.on_input(
            output(&id, seq, &format!("The {part} is done."), true),
            at(seq * 2 + 1),
        );
        core.take_step();
        assert!(core.turn_due(), "round {seq}");
    }
    assert!(core.state.hold.is_none());
}

#[test]
fn loop_rounds_0_never_stops_an_exchange() {
    let said = "Please create hello.py.";
    let mut core = core_with(|c| c.loop_rounds = 0);
    core.on_input(human("Build it"), at(0));
    turn(
        &mut core,
        reply("summon_orchestrator", "Build it.", serde_json::json!({})),
        at(1),
    );
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, said, true), at(2));
    for seq in 2..=6 {
        turn(&mut core, to_orchestrator(said), at(seq * 2));
        core.on_input(output(&id, seq, said, true), at(seq * 2 + 1));
    }
    assert!(core.state.hold.is_none());
    assert!(core.turn_due());
}

#[test]
fn stop_with_a_turn_in_flight_abandons_it_and_holds() {
    let mut core = core();
    core.on_input(human("Build it"), at(0));
    core.take_step();
    assert!(matches!(
        start_turn(&mut core, at(1)),
        TurnStart::New { .. }
    ));
    core.on_input(stop(), at(2));
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            "You: /stop",
            "System: Stopped by console alice: the Arbiter's turn was abandoned. Write to go on."
        ]
    );
    assert!(step.abandon_turn);
    assert!(!core.state.turn_in_flight);
    assert!(!core.turn_due());
    let waiting = &core.state.hold.as_ref().unwrap().waiting;
    assert_eq!(
        waiting.back(),
        Some(&Pending::System {
            text: "The human stopped the work (the Arbiter's turn was abandoned). Wait for the \
                   human's next message before acting."
                .into()
        })
    );
}

#[test]
fn stop_cancels_the_live_orchestrator() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(stop(), at(2));
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            "You: /stop".to_owned(),
            format!("cancel {id}"),
            "Released: I".to_owned(),
            "System: Stopped by console alice: Orchestrator I was cancelled. Write to go on."
                .to_owned(),
        ]
    );
    assert!(!step.abandon_turn, "no turn was running");
    assert!(core.state.team.is_empty());
}

#[test]
fn stop_with_nothing_running_says_so() {
    let mut core = core();
    core.on_input(stop(), at(0));
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            "You: /stop",
            "System: Stopped by console alice: nothing was running. Write to go on."
        ]
    );
    assert!(!step.abandon_turn);
    assert!(core.state.hold.is_some());
}

#[test]
fn a_question_left_in_musings_is_reminded_once_then_told_to_the_human() {
    let (mut core, _) = asked("Shared store or stateless?");
    turn(&mut core, musing("Hmm."), at(3));
    assert_eq!(
        shown(&core.take_step()),
        vec![
            "Musing: Hmm.",
            "System: Orchestrator I asked you a question and is waiting for your answer; \
             musings reach nobody. Answer it (address_orchestrator), or ask the human \
             (address_human)."
        ]
    );
    assert!(core.turn_due(), "the reminder is a new turn");
    turn(&mut core, musing("Still thinking."), at(4));
    assert_eq!(
        shown(&core.take_step()),
        vec![
            "Musing: Still thinking.",
            "System: Orchestrator I asked a question and is waiting for an answer, but the \
             Arbiter's turn ended in musings again. Write to go on, or /stop."
        ]
    );
    assert!(!core.turn_due());
    assert!(!core.state.team[0].asked, "told once");
}

#[test]
fn a_question_left_by_a_turn_that_could_not_be_carried_out_is_told_to_the_human() {
    let mut core = core_with(|c| c.intent_retries = 0);
    core.on_input(human("Build it"), at(0));
    turn(
        &mut core,
        reply("summon_orchestrator", "Build it.", serde_json::json!({})),
        at(1),
    );
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "Shared store or stateless?", true), at(2));
    core.take_step();
    turn(
        &mut core,
        reply(
            "address_orchestrator",
            "Stateless.",
            serde_json::json!({"members": [5]}),
        ),
        at(3),
    );
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with(
            "Error: the Arbiter's address_orchestrator could not be carried out: there is no \
             live member 5"
        ),
        "{lines:?}"
    );
    assert_eq!(
        lines[1],
        "System: Orchestrator I asked a question and is waiting for an answer, but the \
         Arbiter's turn could not be carried out. Write to go on, or /stop."
    );
}

#[test]
fn a_question_left_by_a_failed_turn_is_told_to_the_human() {
    let (mut core, _) = asked("Shared store or stateless?");
    assert!(matches!(
        start_turn(&mut core, at(3)),
        TurnStart::New { .. }
    ));
    core.turn_ended(
        Err(LlmError::Stream("connection reset".into())),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        at(4),
    );
    let lines = shown(&core.take_step());
    assert!(
        has(
            &lines,
            "System: Orchestrator I asked a question and is waiting for an answer, but the \
             Arbiter's turn failed."
        ),
        "{lines:?}"
    );
}

#[test]
fn an_answered_question_or_one_taken_to_the_human_is_not_reminded() {
    for answer in [
        to_orchestrator("Stateless."),
        reply(
            "address_human",
            "Shared store or stateless?",
            serde_json::json!({}),
        ),
    ] {
        let (mut core, _) = asked("Shared store or stateless?");
        turn(&mut core, answer, at(3));
        let lines = shown(&core.take_step());
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(!core.turn_due());
    }
}

// Moved from the end-to-end suite (tests/tests/routing.rs, runaway.rs).

#[test]
fn a_reminded_arbiter_still_reads_the_question() {
    let (mut core, _) = asked("The config file needs a format. TOML or YAML?");
    turn(&mut core, musing("TOML, probably."), at(3));
    core.take_step();
    let reminder = next_asked(&mut core, at(4));
    assert!(
        reminder.contains("Orchestrator I asked you a question and is waiting for your answer"),
        "{reminder}"
    );
    assert!(
        core.transcript
            .iter()
            .any(|t| t.text.contains("TOML or YAML?")),
        "the question is still in what the Arbiter reads"
    );
}

#[test]
fn a_question_whose_turn_fails_is_told_to_the_human_after_the_error() {
    let (mut core, _) = asked("Should unknown keys be an error?");
    failed_turn(
        &mut core,
        LlmError::Authentication {
            message: "invalid x-api-key".into(),
        },
        at(3),
    );
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("Error: "), "{lines:?}");
    assert_eq!(
        lines[1],
        "System: Orchestrator I asked a question and is waiting for an answer, but the \
         Arbiter's turn failed. Write to go on, or /stop."
    );
    assert!(!core.turn_due());
}

#[test]
fn after_an_echo_stop_the_humans_next_message_comes_with_the_held_report() {
    let said = "Should I create hello.py?";
    let (mut core, id) = asked(said);
    // The same answer to the same question, until the exchange is stopped.
    let mut answers = 0;
    for seq in 2..=6 {
        if !core.turn_due() {
            break;
        }
        turn(
            &mut core,
            to_orchestrator("Yes, create hello.py."),
            at(seq * 2),
        );
        answers += 1;
        core.on_input(output(&id, seq, said, true), at(seq * 2 + 1));
    }
    assert_eq!(answers, 4, "the first answer, then 3 rounds of the same");
    let lines = shown(&core.take_step());
    assert!(
        has(
            &lines,
            "System: Held: the Arbiter and Orchestrator I have repeated themselves for 3 rounds"
        ),
        "{lines:?}"
    );
    assert!(!core.turn_due(), "nothing more is asked of either model");
    core.on_input(human("Stop asking and write the file."), at(10));
    core.take_step();
    assert!(core.state.hold.is_none());
    let asked = next_asked(&mut core, at(11));
    assert!(
        asked.contains(&format!("Orchestrator I: {said}"))
            && asked.contains("Stop asking and write the file."),
        "{asked}"
    );
}

#[test]
fn an_exchange_with_an_orchestrator_past_the_turn_cap_holds_until_the_human_writes() {
    let mut core = core_with(|c| {
        c.loop_rounds = 0;
        c.max_turns_per_message = 3;
    });
    core.on_input(human("Keep going"), at(0));
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Count to a million, one report at a time.",
            serde_json::json!({}),
        ),
        at(1),
    );
    let id = orch_id(&core, 1);
    for seq in 1..=2 {
        core.on_input(
            output(&id, seq, &format!("Counted to {seq}."), true),
            at(seq * 2),
        );
        turn(
            &mut core,
            to_orchestrator(&format!("Go on ({seq}).")),
            at(seq * 2 + 1),
        );
    }
    core.on_input(output(&id, 3, "Counted to 3.", true), at(6));
    core.take_step();
    assert!(core.turn_due());
    assert_eq!(core.turn_start(at(7)), TurnStart::Held);
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("took 3 turns since your last message")
            && lines[0].contains("ARBITER_MAX_TURNS_PER_MESSAGE"),
        "{lines:?}"
    );
    core.on_input(human("Go on."), at(8));
    core.take_step();
    assert!(matches!(
        start_turn(&mut core, at(9)),
        TurnStart::New { .. }
    ));
}
