//! Table tests: the budget rule.

use arbiter_protocol::{BudgetChange, BudgetLimit, BudgetScope, Cap, Spend};

use super::*;

/// `/budget …` typed at console `alice`.
fn budget(text: &str, scope: BudgetScope, limit: BudgetLimit) -> Input {
    let mut message = human_message(&format!("m-{text}"), text);
    message.budget = Some(BudgetChange { scope, limit });
    Input::Human {
        message: Box::new(message),
        console: "alice".into(),
        trace: TraceContext::none(),
        ack: None,
    }
}

fn tokens(n: u64) -> Cap {
    Cap {
        tokens: Some(n),
        cost_nanos: None,
    }
}

/// An Arbiter turn that answers `output` with a model request of `spent` tokens.
fn costly_turn(core: &mut Core, output: ArbiterOutput, spent: u64, now: Now) {
    assert!(matches!(start_turn(core, now), TurnStart::New { .. }));
    core.turn_ended(
        answered(output, 1000),
        vec![Some(Usage {
            input_tokens: spent,
            output_tokens: 0,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
        })],
        &FleetView::NotAsked,
        &tracing::Span::none(),
        now,
    );
}

/// A note `seq` of `orch_id` whose worker says it has spent `spent` tokens.
fn spending(orch_id: &str, seq: u64, text: &str, spent: u64) -> Input {
    let Input::Orchestrator(mut messages, trace, ack) = output(orch_id, seq, text, false) else {
        unreachable!()
    };
    messages[0].spend = Some(Spend {
        requests: 1,
        input_tokens: spent,
        ..Spend::default()
    });
    Input::Orchestrator(messages, trace, ack)
}

fn says(text: &str) -> ArbiterOutput {
    reply("address_human", text, serde_json::json!({}))
}

/// A session capped at `cap` tokens that has spent them all on one turn.
fn held_at(cap: u64) -> Core {
    let mut core = core_with(|c| c.budget.session = tokens(cap));
    core.on_input(human("Build it"), at(0));
    costly_turn(&mut core, says("On it."), cap, at(1));
    core.take_step();
    core
}

#[test]
fn a_budget_change_is_logged_and_sets_the_sessions_cap() {
    let mut core = core();
    core.on_input(
        budget(
            "/budget session 2M tokens",
            BudgetScope::Session,
            BudgetLimit::Tokens(2_000_000),
        ),
        at(0),
    );
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            "You: /budget session 2M tokens",
            "System: Budget set by console alice: the session's cap is now 2,000,000 tokens \
             (2,000,000 tokens of 2,000,000 tokens left; spent 0 tokens, $0.0000)."
        ]
    );
    assert!(step.changed);
    assert_eq!(core.budget().session, tokens(2_000_000));
    assert_eq!(core.state.budget.session, Some(tokens(2_000_000)));
    assert!(
        !core.turn_due(),
        "a /budget line is not the Arbiter's to read"
    );
}

#[test]
fn an_orchestrator_cap_reaches_the_live_orchestrators_allowance() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    assert_eq!(core.allowance(&id), None, "no cap was ever set");
    core.on_input(
        budget(
            "/budget orchestrator $5",
            BudgetScope::Orchestrator,
            BudgetLimit::CostNanos(5_000_000_000),
        ),
        at(2),
    );
    let lines = shown(&core.take_step());
    assert_eq!(
        lines[1],
        "System: Budget set by console alice: each Orchestrator's cap is now $5.00, counted \
         from its summons (the active one gets it with the Arbiter's next message)."
    );
    let five = Cap {
        tokens: None,
        cost_nanos: Some(5_000_000_000),
    };
    assert_eq!(core.budget().orchestrator, five);
    assert_eq!(core.budget().session, Cap::NONE);
    assert_eq!(core.allowance(&id), Some(five));
}

#[test]
fn budget_off_removes_the_cap() {
    let mut core = core_with(|c| c.budget.session = tokens(1000));
    core.on_input(
        budget(
            "/budget session off",
            BudgetScope::Session,
            BudgetLimit::Off,
        ),
        at(0),
    );
    let lines = shown(&core.take_step());
    assert!(
        lines[1].starts_with(
            "System: Budget set by console alice: the session's cap is now none (no cap;"
        ),
        "{lines:?}"
    );
    assert_eq!(core.budget().session, Cap::NONE);
}

#[test]
fn the_sessions_80_percent_note_is_said_once_and_read_with_the_next_turn() {
    let mut core = core_with(|c| c.budget.session = tokens(1000));
    core.on_input(human("Build it"), at(0));
    core.take_step();
    costly_turn(&mut core, says("On it."), 850, at(1));
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with(
            "System: This session has used 85 % of its budget (850 tokens of 1,000 tokens). \
             Wrap up:"
        ),
        "{lines:?}"
    );
    assert_eq!(lines[1], "Arbiter: On it.");
    assert_eq!(core.state.budget.noted, vec!["session:tokens:1000"]);
    // Past it again: not said twice.
    core.on_input(human("And the tests?"), at(2));
    core.take_step();
    costly_turn(&mut core, says("Those too."), 50, at(3));
    assert_eq!(shown(&core.take_step()), vec!["Arbiter: Those too."]);
    // The Arbiter read it once, with the turn after the note.
    let asked = &core.transcript[2].text;
    assert!(
        asked.starts_with("System: This session has used 85 % of its budget"),
        "{asked}"
    );
    assert!(asked.ends_with("And the tests?"), "{asked}");
    assert!(core.state.budget.notes.is_empty());
}

#[test]
fn an_orchestrators_80_percent_note_is_said_once() {
    let mut core = core_with(|c| c.budget.orchestrator = tokens(1000));
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
    core.on_input(spending(&id, 1, "Halfway.", 900), at(2));
    let lines = shown(&core.take_step());
    assert_eq!(
        lines,
        vec![
            "Orchestrator I (note): Halfway.",
            "System: Orchestrator I has used 90 % of its budget (900 tokens of 1,000 tokens); \
             at the cap its worker stops it. Have it wrap up and report, with its handoff packet."
        ]
    );
    core.on_input(spending(&id, 2, "Nearly.", 950), at(3));
    assert_eq!(
        shown(&core.take_step()),
        vec!["Orchestrator I (note): Nearly."]
    );
    assert_eq!(core.state.budget.notes.len(), 1);
    assert_eq!(core.state.spend.total.tokens(), 950);
}

#[test]
fn a_new_cap_is_told_at_its_own_80_percent() {
    let mut core = core_with(|c| c.budget.session = tokens(1000));
    core.on_input(human("Build it"), at(0));
    costly_turn(&mut core, says("On it."), 850, at(1));
    core.take_step();
    core.on_input(
        budget(
            "/budget session 1050 tokens",
            BudgetScope::Session,
            BudgetLimit::Tokens(1050),
        ),
        at(2),
    );
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[2].starts_with(
            "System: This session has used 80 % of its budget (850 tokens of 1,050 tokens)."
        ),
        "{lines:?}"
    );
    assert_eq!(core.state.budget.noted, vec!["session:tokens:1050"]);
}

#[test]
fn at_the_session_cap_the_session_holds_and_says_how_to_raise_it() {
    let mut core = core_with(|c| c.budget.session = tokens(1000));
    core.on_input(human("Build it"), at(0));
    core.take_step();
    costly_turn(&mut core, says("On it."), 1000, at(1));
    let lines = shown(&core.take_step());
    assert!(
        lines[0].starts_with("System: This session has used 100 % of its budget"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with(
            "System: Held: this session has spent 1,000 tokens; its budget is 1,000 tokens, so \
             no new model request starts."
        ),
        "{lines:?}"
    );
    assert!(
        lines[1].contains("/budget session 2,000 tokens"),
        "{lines:?}"
    );
    assert_eq!(lines[2], "Arbiter: On it.");
    assert!(core.budget().held);
    // What the human writes now waits with the hold.
    core.on_input(human("Go on"), at(2));
    assert_eq!(shown(&core.take_step()), vec!["You: Go on"]);
    assert!(!core.turn_due());
    assert!(core.state.queue.is_empty());
    assert_eq!(core.state.hold.as_ref().map(|h| h.waiting.len()), Some(1));
    assert_eq!(core.turn_start(at(3)), TurnStart::Held);
    assert!(shown(&core.take_step()).is_empty(), "the hold is said once");
}

#[test]
fn a_turn_due_past_the_cap_is_held_at_its_start_and_the_log_says_so() {
    let mut core = core_with(|c| c.budget.session = tokens(0));
    core.on_input(human("Build it"), at(0));
    core.take_step();
    assert!(core.turn_due());
    assert_eq!(core.turn_start(at(1)), TurnStart::Held);
    let step = core.take_step();
    let lines = shown(&step);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0]
            .starts_with("System: Held: this session has spent 0 tokens; its budget is 0 tokens"),
        "{lines:?}"
    );
    assert!(step.changed);
    assert!(!core.turn_due());
    assert!(!core.state.turn_in_flight);
}

#[test]
fn raising_the_cap_ends_the_hold_and_what_waited_goes_on() {
    let mut core = held_at(1000);
    core.on_input(human("Go on"), at(2));
    core.take_step();
    core.on_input(
        budget(
            "/budget session 5000 tokens",
            BudgetScope::Session,
            BudgetLimit::Tokens(5000),
        ),
        at(3),
    );
    let lines = shown(&core.take_step());
    assert_eq!(
        lines,
        vec![
            "You: /budget session 5000 tokens",
            "System: Budget set by console alice: the session's cap is now 5,000 tokens (4,000 \
             tokens of 5,000 tokens left; spent 1,000 tokens, $0.0000).",
            "System: The session goes on under its new budget."
        ]
        .into_iter()
        .map(|l| {
            // The cost of the turn depends on the model's price.
            l.replace("$0.0000", &core.state.spend.total.cost_text())
        })
        .collect::<Vec<_>>()
    );
    assert!(!core.budget().held);
    assert!(core.turn_due());
    assert!(matches!(
        start_turn(&mut core, at(4)),
        TurnStart::New { .. }
    ));
    assert!(core.transcript.last().unwrap().text.ends_with("Go on"));
}

#[test]
fn a_summons_decided_at_the_cap_waits_and_goes_once_the_cap_is_raised() {
    let mut core = core_with(|c| c.budget.session = tokens(1000));
    core.on_input(human("Build it"), at(0));
    core.take_step();
    costly_turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Build the auth module",
            serde_json::json!({}),
        ),
        1000,
        at(1),
    );
    let lines = shown(&core.take_step());
    assert!(
        has(&lines, "Summoned Orchestrator I: Build the auth module"),
        "{lines:?}"
    );
    assert!(
        !has(&lines, "summons "),
        "held: nothing is published: {lines:?}"
    );
    assert!(core.state.budget.deferred.is_some());
    core.on_input(
        budget(
            "/budget session 3000 tokens",
            BudgetScope::Session,
            BudgetLimit::Tokens(3000),
        ),
        at(2),
    );
    let step = core.take_step();
    let lines = shown(&step);
    assert!(
        has(&lines, "System: The session goes on under its new budget."),
        "{lines:?}"
    );
    assert!(
        has(&lines, "summons Orchestrator I to default"),
        "{lines:?}"
    );
    let allowance = step.effects.iter().find_map(|e| match e {
        Effect::Summon(s) => Some(s.budget),
        _ => None,
    });
    assert_eq!(
        allowance,
        Some(Some(tokens(2000))),
        "what the session has left"
    );
    assert!(core.state.budget.deferred.is_none());
}

#[test]
fn a_summons_carries_what_the_session_has_left() {
    let mut core = core_with(|c| c.budget.session = tokens(10_000));
    core.on_input(human("Build it"), at(0));
    core.take_step();
    costly_turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Build the auth module",
            serde_json::json!({}),
        ),
        4000,
        at(1),
    );
    let step = core.take_step();
    let summons: Vec<_> = step
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Summon(s) => Some(s.budget),
            _ => None,
        })
        .collect();
    assert_eq!(summons, vec![Some(tokens(6000))]);
}

#[test]
fn a_team_that_does_not_fit_the_budget_is_refused() {
    let mut core = core_with(|c| {
        c.budget.session = tokens(10_000);
        c.budget.orchestrator = tokens(5000);
    });
    core.on_input(human("Review it three ways"), at(0));
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
    let lines = shown(&step);
    let why = "a team of 3 at up to 5,000 tokens each could spend 15,000 tokens in all, more \
               than the session has left (10,000 tokens of 10,000 tokens), so nothing was \
               summoned.";
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with(&format!("Strategy: parallel x0 refused: {why}")),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with(&format!(
            "System: Your summon_orchestrator could not be carried out: {why}"
        )),
        "{lines:?}"
    );
    assert!(core.state.team.is_empty());
    assert!(step.tasks.is_empty());
    assert!(core.turn_due(), "the refusal goes back to the Arbiter");
}

#[test]
fn a_team_that_fits_the_budget_is_summoned() {
    let mut core = core_with(|c| {
        c.budget.session = tokens(10_000);
        c.budget.orchestrator = tokens(5000);
    });
    core.on_input(human("Review it two ways"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Review the parser.",
            serde_json::json!({"strategy": "parallel", "count": 2}),
        ),
        at(1),
    );
    let lines = shown(&core.take_step());
    assert!(has(&lines, "Strategy: parallel x2"), "{lines:?}");
    assert_eq!(core.state.team.len(), 2);
}

// Moved from the end-to-end suite (tests/tests/budget.rs, team_budget.rs).

fn usd(dollars: u64) -> Cap {
    Cap {
        tokens: None,
        cost_nanos: Some(dollars * 1_000_000_000),
    }
}

#[test]
fn a_team_that_could_pass_the_sessions_dollars_is_refused_with_the_figures_and_two_go() {
    let mut core = core_with(|c| {
        c.budget.orchestrator = usd(5);
        c.budget.session = usd(12);
    });
    core.on_input(human("Split the work three ways"), at(0));
    core.take_step();
    let team = |n: usize| {
        reply(
            "summon_orchestrator",
            "Write the parts.",
            serde_json::json!({
                "strategy": "parallel",
                "briefs": (1..=n).map(|k| format!("Write part {k}.")).collect::<Vec<_>>(),
            }),
        )
    };
    turn(&mut core, team(3), at(1));
    let step = core.take_step();
    let why = "a team of 3 at up to $5.00 each could spend $15.00 in all, more than the session \
               has left ($12.00 of $12.00)";
    let lines = shown(&step);
    assert!(
        lines[0].starts_with(&format!("Strategy: parallel x0 refused: {why}")),
        "{lines:?}"
    );
    assert!(!has(&lines, "summons "), "no member started: {lines:?}");
    assert!(next_asked(&mut core, at(2)).contains(why));
    // Told why, the Arbiter asks for two: they fit, and go.
    core.turn_ended(
        answered(team(2), 1000),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        at(2),
    );
    let lines = shown(&core.take_step());
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("summons ")).count(),
        2,
        "{lines:?}"
    );
    assert_eq!(core.state.team.len(), 2);
}

#[test]
fn the_80_percent_note_starts_no_turn_and_opens_the_next_one() {
    let mut core = core_with(|c| c.budget.session = tokens(1000));
    core.on_input(human("Hello"), at(0));
    core.take_step();
    costly_turn(&mut core, says("Hi."), 850, at(1));
    let lines = shown(&core.take_step());
    assert!(
        has(&lines, "System: This session has used 85 %"),
        "{lines:?}"
    );
    assert!(!core.turn_due(), "the note starts no request by itself");
    core.on_input(human("And now?"), at(2));
    core.take_step();
    assert_eq!(
        next_asked(&mut core, at(3)),
        "System: This session has used 85 % of its budget (850 tokens of 1,000 tokens). Wrap \
         up: have the work finished and reported, and tell the human where things stand; at \
         the cap no new model request starts until the human raises it.\n\nAnd now?"
    );
}

#[test]
fn a_summons_decided_at_the_cap_publishes_nothing_and_no_error_until_raised() {
    let mut core = core_with(|c| c.budget.session = tokens(1000));
    core.on_input(human("Build me a greeting"), at(0));
    core.take_step();
    costly_turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Brief: write hello.txt saying hello.",
            serde_json::json!({}),
        ),
        1100,
        at(1),
    );
    let step = core.take_step();
    let lines = shown(&step);
    assert!(
        has(&lines, "System: Held: this session has spent 1,100 tokens"),
        "{lines:?}"
    );
    assert!(has(&lines, "Summoned Orchestrator I"), "{lines:?}");
    assert!(
        !step.effects.iter().any(|e| matches!(e, Effect::Summon(_))),
        "a summons went out: {lines:?}"
    );
    assert!(!has(&lines, "Error"), "{lines:?}");
    // Nobody is asked for a worker of a summons that did not go out.
    assert!(step.tasks.is_empty(), "{:?}", step.tasks);
    core.on_input(
        budget(
            "/budget session 5k tokens",
            BudgetScope::Session,
            BudgetLimit::Tokens(5000),
        ),
        at(2),
    );
    let step = core.take_step();
    assert_eq!(
        step.effects
            .iter()
            .filter(|e| matches!(e, Effect::Summon(_)))
            .count(),
        1
    );
    assert!(core.state.hold.is_none());
    // Asked once it goes out.
    assert_eq!(
        step.tasks,
        vec![Task::CheckPool {
            orch_id: orch_id(&core, 1),
            pool: "default".into()
        }]
    );
}

#[test]
fn a_stop_while_held_at_the_cap_says_that_raising_it_goes_on_not_writing() {
    let mut core = held_at(1000);
    core.on_input(human("And the tests?"), at(2));
    core.take_step();
    assert_eq!(core.turn_start(at(3)), TurnStart::Held);
    core.take_step();
    let mut message = human_message("m-stop", "/stop");
    message.command = Some(arbiter_protocol::HumanCommand::Stop);
    core.on_input(
        Input::Human {
            message: Box::new(message),
            console: "alice".into(),
            trace: TraceContext::none(),
            ack: None,
        },
        at(4),
    );
    let lines = shown(&core.take_step());
    assert!(
        has(
            &lines,
            "System: Stopped by console alice: nothing was running. The session is held at \
             its budget cap: raise it (/budget) to go on."
        ),
        "{lines:?}"
    );
    // And so it is: the human's next line waits with the hold.
    core.on_input(human("Go on"), at(5));
    core.take_step();
    assert!(core.state.hold.is_some());
    assert!(!core.turn_due());
}
