//! The Arbiter's reply, routed by its intent.

use super::*;
use crate::state::TurnRole;

#[test]
fn address_human_logs_the_arbiters_words_and_publishes_nothing_else() {
    let mut core = core();
    core.on_input(human("Build me an auth system"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply(
            "address_human",
            "What OAuth providers?",
            serde_json::json!({}),
        ),
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
        reply(
            "summon_orchestrator",
            "Build the auth module",
            serde_json::json!({}),
        ),
        at(1),
    );
    let step = core.take_step();
    let lines = shown(&step);
    assert!(
        has(&lines, "Summoned Orchestrator I: Build the auth module"),
        "{lines:?}"
    );
    assert!(
        has(&lines, "summons Orchestrator I to default"),
        "{lines:?}"
    );
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
    assert!(
        has(&lines, "Arbiter → Orchestrator I: Stateless."),
        "{lines:?}"
    );
    assert!(
        has(&lines, &format!("input to {id}: Stateless.")),
        "{lines:?}"
    );
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
        reply(
            "release_orchestrators",
            "It is done.",
            serde_json::json!({}),
        ),
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
    assert!(matches!(
        start_turn(&mut core, at(1)),
        TurnStart::New { .. }
    ));
    core.turn_ended(
        Err(LlmError::Stream("connection reset".into())),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        at(2),
    );
    let lines = shown(&core.take_step());
    assert!(has(&lines, "Error:"), "{lines:?}");
    assert_eq!(
        core.transcript.len(),
        1,
        "the user turn stays for the next message"
    );
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
    assert!(
        has(&lines, "Arbiter → Orchestrator II.2: Answer for two."),
        "{lines:?}"
    );
    assert!(
        has(
            &lines,
            "System: Orchestrator II.1 asked a question and is waiting for an answer, but the \
             Arbiter's turn went to someone else."
        ),
        "{lines:?}"
    );
}

// Moved from the end-to-end suite (tests/tests/routing.rs, bad_input.rs).

#[test]
fn a_second_summons_releases_the_first_and_its_late_output_is_ignored() {
    let mut core = summoned("Brief one: write the parser.");
    let one = orch_id(&core, 1);
    core.on_input(human("No: the lexer comes first"), at(2));
    assert_eq!(
        shown(&core.take_step()),
        vec!["You: No: the lexer comes first"]
    );
    assert_eq!(
        next_asked(&mut core, at(3)),
        "Human: No: the lexer comes first"
    );
    core.turn_ended(
        answered(
            reply(
                "summon_orchestrator",
                "Brief two: write the lexer first.",
                serde_json::json!({}),
            ),
            1000,
        ),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        at(3),
    );
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            format!("release {one}"),
            "Released: I".to_owned(),
            "Summoned Orchestrator II: Brief two: write the lexer first.".to_owned(),
            "summons Orchestrator II to default".to_owned(),
        ]
    );
    let brief = step.effects.iter().find_map(|e| match e {
        Effect::Summon(s) => Some(s.brief.clone()),
        _ => None,
    });
    assert_eq!(brief.as_deref(), Some("Brief two: write the lexer first."));
    let two = orch_id(&core, 2);
    // I's worker had not seen the release yet: its output goes nowhere.
    core.on_input(output(&one, 1, "Late words from I", true), at(4));
    assert!(shown(&core.take_step()).is_empty());
    assert!(!core.turn_due());
    core.on_input(output(&two, 1, "II here. Lexer first, then.", true), at(5));
    assert_eq!(
        shown(&core.take_step()),
        vec!["Orchestrator II: II here. Lexer first, then."]
    );
    assert!(
        next_asked(&mut core, at(6)).starts_with("Orchestrator II: II here. Lexer first, then.")
    );
    core.turn_ended(
        answered(
            reply(
                "release_orchestrators",
                "It is done.",
                serde_json::json!({}),
            ),
            1000,
        ),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        at(6),
    );
    let lines = shown(&core.take_step());
    assert_eq!(
        lines,
        vec![
            format!("release {two}"),
            "Released: II".to_owned(),
            "Arbiter: It is done.".to_owned(),
        ]
    );
    assert!(
        core.transcript
            .iter()
            .all(|t| !t.text.contains("Late words from I")),
        "the late output never reaches the Arbiter"
    );
    assert_eq!(core.state.summoned, 2);
}

#[test]
fn an_intent_refused_past_the_retry_budget_is_an_error_entry() {
    let mut core = core();
    core.on_input(human("Tell the builder to hurry"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply("address_orchestrator", "Hurry.", serde_json::json!({})),
        at(1),
    );
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("System: "), "{lines:?}");
    assert!(lines[0].contains("no Orchestrator is active"), "{lines:?}");
    assert!(
        next_asked(&mut core, at(2))
            .starts_with("System: Your address_orchestrator could not be carried out")
    );
    // The refusal went back to the Arbiter; an Arbiter that insists is
    // told once more (the retry budget, 2), then stopped with an error.
    core.turn_ended(
        answered(
            reply("address_orchestrator", "Hurry!", serde_json::json!({})),
            1000,
        ),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        at(2),
    );
    let lines = shown(&core.take_step());
    assert!(
        lines.len() == 1 && lines[0].starts_with("System: "),
        "{lines:?}"
    );
    turn(
        &mut core,
        reply("address_orchestrator", "Hurry!", serde_json::json!({})),
        at(3),
    );
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("Error: "), "{lines:?}");
    assert!(lines[0].contains("could not be carried out"), "{lines:?}");
    assert!(!core.turn_due(), "three turns in all, then it stops");
}

#[test]
fn what_arrives_mid_turn_reaches_the_next_turn_in_one_message_in_arrival_order() {
    let mut core = summoned("Draft the release notes.");
    let id = orch_id(&core, 1);
    core.on_input(human("How long will it take?"), at(2));
    core.take_step();
    assert_eq!(
        next_asked(&mut core, at(3)),
        "Human: How long will it take?"
    );
    // The turn is in flight: a note, a question from I, the human again.
    core.on_input(output(&id, 1, "Reading the changelog.", false), at(4));
    core.on_input(output(&id, 2, "Include the internal fixes?", true), at(5));
    core.on_input(human("Also thank the contributors."), at(6));
    assert_eq!(
        shown(&core.take_step()),
        vec![
            "Orchestrator I (note): Reading the changelog.",
            "Orchestrator I: Include the internal fixes?",
            "You: Also thank the contributors.",
        ]
    );
    assert!(
        core.state.turn_in_flight,
        "nothing is interleaved into the turn in flight"
    );
    let before = core.transcript.len();
    core.turn_ended(
        answered(reply("address_human", "Soon.", serde_json::json!({})), 1000),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        at(7),
    );
    assert_eq!(shown(&core.take_step()), vec!["Arbiter: Soon."]);
    assert_eq!(
        core.transcript.len(),
        before + 1,
        "the turn's own reply only"
    );
    // Everything that arrived mid-turn, in one message, the note as a digest first.
    assert_eq!(
        next_asked(&mut core, at(8)),
        "Notes sent while working:\n- Orchestrator I: Reading the changelog.\n\n\
         Orchestrator I: Include the internal fixes?\n\n\
         Human: Also thank the contributors."
    );
    assert_eq!(core.transcript.len(), 5);
}

#[test]
fn a_musing_stays_in_the_arbiters_transcript_and_reaches_nobody() {
    let mut core = core();
    core.on_input(human("Should we rewrite it in Rust?"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply(
            "musings",
            "The mortal wavers between paths.",
            serde_json::json!({}),
        ),
        at(1),
    );
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec!["Musing: The mortal wavers between paths."]
    );
    assert!(step.tasks.is_empty());
    assert!(!core.turn_due(), "a musing starts no turn");
    assert_eq!(core.state.summoned, 0);
    core.on_input(human("Well?"), at(2));
    core.take_step();
    assert_eq!(next_asked(&mut core, at(3)), "Well?");
    assert_eq!(core.transcript.len(), 3);
    assert!(
        core.transcript[1]
            .text
            .contains("The mortal wavers between paths.")
    );
}

#[test]
fn an_arbiter_reply_that_never_matched_its_schema_is_an_error_and_its_words_wait() {
    let mut core = core();
    core.on_input(human("First words"), at(0));
    core.take_step();
    failed_turn(
        &mut core,
        LlmError::SchemaViolation {
            attempts: 3,
            detail: "$: unexpected property \"mood\"".into(),
        },
        at(1),
    );
    let step = core.take_step();
    let lines = shown(&step);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("the Arbiter's reply did not match its schema after 3 attempts"),
        "{lines:?}"
    );
    let Some(Effect::Log(entry)) = step.effects.first() else {
        unreachable!()
    };
    assert!(
        matches!(&entry.body, LogBody::Error(e) if matches!(
            &e.error,
            WireError::SchemaViolation { attempts: 3, detail, .. } if detail.contains("mood")
        )),
        "{:?}",
        entry.body
    );
    // The session goes on; the failed turn's words reach the Arbiter with
    // the next message: two user turns in a row, which the model client
    // sends as one message; no rejected reply is in between.
    core.on_input(human("Second words"), at(2));
    core.take_step();
    assert_eq!(next_asked(&mut core, at(3)), "Second words");
    let said: Vec<(TurnRole, &str)> = core
        .transcript
        .iter()
        .map(|t| (t.role, t.text.as_str()))
        .collect();
    assert_eq!(
        said,
        vec![
            (TurnRole::User, "First words"),
            (TurnRole::User, "Second words")
        ]
    );
}

/// Two workers up: the default pool's and the review pool's, both native.
fn two_pools() -> FleetView {
    let offer = |pool: &str| crate::fleet::Offer {
        pool: pool.into(),
        runtime: "native".into(),
        urgent: false,
        mcp: Vec::new(),
    };
    FleetView::Seen(vec![offer("default"), offer("review")])
}

/// A session whose Arbiter's first turn answers `summons` (at 1 s), the
/// workers of [`two_pools`] up.
fn directed(human_words: &str, summons: ArbiterOutput) -> (Core, Step) {
    let mut core = core();
    core.on_input(human(human_words), at(0));
    core.take_step();
    turn_seeing(&mut core, summons, &two_pools(), at(1));
    let step = core.take_step();
    (core, step)
}

#[test]
fn a_pool_nobody_serves_a_runtime_nobody_offers_and_a_consensus_with_sub_briefs_are_refused() {
    for (words, more, why) in [
        (
            "Run it on the GPU boxes",
            serde_json::json!({"pool": "gpu"}),
            "no worker serves the pool \"gpu\" (pools served now: default, review)",
        ),
        (
            "Get Codex to review it",
            serde_json::json!({"runtime": "codex", "directive": {"words": "Get Codex to review it"}}),
            "no worker of the pool \"default\" offers the runtime \"codex\" (runtimes offered \
             there: native)",
        ),
        (
            "Do all three parts at once",
            serde_json::json!({"strategy": "consensus", "briefs": ["Lexer.", "Parser.", "Printer."]}),
            "a consensus asks every member the same question, given in the message: leave \
             briefs out (use strategy parallel for sub-briefs), so nothing was summoned.",
        ),
    ] {
        let (mut core, step) = directed(words, reply("summon_orchestrator", "Do the work.", more));
        let lines = shown(&step);
        assert!(lines.iter().any(|l| l.contains(why)), "{words}: {lines:?}");
        assert!(!has(&lines, "Summoned "), "{words}: {lines:?}");
        assert!(!has(&lines, "summons "), "{words}: {lines:?}");
        assert!(step.tasks.is_empty());
        let told = next_asked(&mut core, at(2));
        assert!(
            told.starts_with("System: Your summon_orchestrator could not be carried out: ")
                && told.contains(why),
            "{words}: {told}"
        );
    }
}
