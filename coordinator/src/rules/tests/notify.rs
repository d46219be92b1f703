//! Table tests: which steps tell the webhooks what. Each case drives a
//! session with a hook configured and lists the events its steps stored,
//! as `<type> @<seq> <entry the event is about>`.

use arbiter_protocol::{Cap, NotificationKind, OrchestratorFailed};

use super::*;
use crate::notify::{Hook, Secret};

/// A hook of `events` (all when empty).
fn hook(events: &[NotificationKind]) -> Hook {
    let mut hook = Hook::new(
        "phone",
        "https://example.com/hook",
        Secret::parse("s").unwrap(),
    )
    .unwrap();
    if !events.is_empty() {
        hook.events = events.to_vec();
    }
    hook
}

/// A session with one hook of every type, its settings changed by `set`.
fn hooked(set: impl FnOnce(&mut Config)) -> Core {
    core_with(|c| {
        c.hooks = vec![hook(&[])];
        set(c);
    })
}

/// The events a step stored, each with the entry it is about.
fn events(step: &Step) -> Vec<String> {
    let lines = shown(step);
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Notify { event: n } => {
                assert_eq!(n.id, format!("s1.{}.{}", n.seq, n.kind.as_str()));
                let about = step
                    .effects
                    .iter()
                    .zip(&lines)
                    .find(|(e, _)| matches!(e, Effect::Log(l) if l.seq == n.seq))
                    .map(|(_, line)| line.clone())
                    .unwrap_or_default();
                Some(format!("{} @{} {about}", n.kind.as_str(), n.seq))
            }
            _ => None,
        })
        .collect()
}

/// Every event of a run of steps, taken after each.
fn run(core: &mut Core, steps: &mut [&mut dyn FnMut(&mut Core)]) -> Vec<Vec<String>> {
    steps
        .iter_mut()
        .map(|step| {
            step(core);
            events(&core.take_step())
        })
        .collect()
}

fn failed(orch_id: &str, seq: u64, number: u32) -> Input {
    let Input::Orchestrator(mut messages, trace, ack) = output(orch_id, seq, "", false) else {
        unreachable!()
    };
    messages[0].event = OrchestratorEvent::Failed(OrchestratorFailed {
        error: WireError::OrchestratorFailed {
            number,
            message: "the model is down".into(),
        },
    });
    Input::Orchestrator(messages, trace, ack)
}

fn says(text: &str) -> ArbiterOutput {
    reply("address_human", text, serde_json::json!({}))
}

/// Summoned, reported, released with a word to the human.
fn done_session(core: &mut Core) -> Vec<Vec<String>> {
    run(
        core,
        &mut [
            &mut |c| c.on_input(human("Build it"), at(0)),
            &mut |c| {
                turn(
                    c,
                    reply("summon_orchestrator", "Build it.", serde_json::json!({})),
                    at(1),
                )
            },
            &mut |c| {
                let id = orch_id(c, 1);
                c.on_input(output(&id, 1, "Built.", true), at(2))
            },
            &mut |c| {
                turn(
                    c,
                    reply(
                        "release_orchestrators",
                        "It is built.",
                        serde_json::json!({}),
                    ),
                    at(3),
                )
            },
            &mut |c| c.on_input(human("Thanks"), at(4)),
            &mut |c| turn(c, says("You're welcome."), at(5)),
        ],
    )
}

#[test]
fn a_session_released_and_idle_is_completed_once() {
    let mut core = hooked(|_| {});
    let events = done_session(&mut core);
    let none: Vec<String> = Vec::new();
    assert_eq!(
        events,
        vec![
            none.clone(),
            none.clone(),
            none.clone(),
            vec!["completed @5 Arbiter: It is built.".to_owned(),],
            none.clone(),
            // Settled again with no release since: nothing.
            none,
        ]
    );
    let Some(Effect::Notify { event: n }) = core.take_step().effects.first().cloned() else {
        // Nothing left over.
        assert!(!core.state.released);
        return;
    };
    panic!("left over: {n:?}");
}

#[test]
fn no_hook_no_event_and_a_hook_gets_only_the_types_it_wants() {
    let mut plain = core();
    assert!(done_session(&mut plain).iter().all(Vec::is_empty));
    let mut picky = core_with(|c| c.hooks = vec![hook(&[NotificationKind::Failed])]);
    assert!(done_session(&mut picky).iter().all(Vec::is_empty));
    // The flag still settles: no `completed` owed later.
    assert!(!picky.state.released);
}

#[test]
fn each_step_that_needs_a_person_tells_the_webhooks() {
    type Case = (&'static str, fn() -> Core, fn(&mut Core), &'static str);
    let cases: [Case; 6] = [
        (
            "an Orchestrator failed",
            || {
                let mut core = hooked(|_| {});
                core.on_input(human("Build it"), at(0));
                turn(
                    &mut core,
                    reply("summon_orchestrator", "Build it.", serde_json::json!({})),
                    at(1),
                );
                core.take_step();
                core
            },
            |core| {
                let id = orch_id(core, 1);
                core.on_input(failed(&id, 1, 1), at(2));
            },
            "failed @3 Error: Orchestrator I stopped: the model is down",
        ),
        (
            "an intent refused past its retries",
            || {
                let mut core = hooked(|c| c.intent_retries = 0);
                core.on_input(human("Tell the builder to hurry"), at(0));
                core.take_step();
                core
            },
            |core| {
                turn(
                    core,
                    reply("address_orchestrator", "Hurry.", serde_json::json!({})),
                    at(1),
                )
            },
            "failed @2 Error: the Arbiter's address_orchestrator could not be carried out",
        ),
        (
            "the Arbiter's model call failed",
            || {
                let mut core = hooked(|_| {});
                core.on_input(human("Hello"), at(0));
                core.take_step();
                core
            },
            |core| failed_turn(core, LlmError::Timeout("no answer".into()), at(1)),
            "failed @2 Error: ",
        ),
        (
            "80 % of the session's budget",
            || {
                let mut core = hooked(|c| {
                    c.budget.session = Cap {
                        tokens: Some(1000),
                        cost_nanos: None,
                    }
                });
                core.on_input(human("Build it"), at(0));
                core.take_step();
                core
            },
            |core| spend_turn(core, 850),
            "budget @2 System: This session has used 85 % of its budget",
        ),
        (
            "the session's budget cap reached",
            || {
                let mut core = hooked(|c| {
                    c.budget.session = Cap {
                        tokens: Some(1000),
                        cost_nanos: None,
                    }
                });
                core.on_input(human("Build it"), at(0));
                core.take_step();
                core
            },
            |core| spend_turn(core, 1000),
            "budget @3 System: Held: this session has spent 1,000 tokens",
        ),
        (
            "the turn cap: the session holds for the human",
            || {
                let mut core = hooked(|c| c.max_turns_per_message = 1);
                core.on_input(human("Build it"), at(0));
                turn(
                    &mut core,
                    reply("musings", "Hmm.", serde_json::json!({})),
                    at(1),
                );
                core.enqueue(crate::state::Pending::System {
                    text: "again".into(),
                });
                core.take_step();
                core
            },
            |core| {
                start_turn(core, at(2));
            },
            "needs_input @3 System: Held: the Arbiter took 1 turns",
        ),
    ];
    for (name, given, when, want) in cases {
        let mut core = given();
        when(&mut core);
        let got = events(&core.take_step());
        assert!(
            got.iter().any(|e| e.starts_with(want)),
            "{name}: wanted {want:?} in {got:?}"
        );
        // One event per entry and type: a redelivered step adds nothing new.
        let mut ids = got.clone();
        ids.dedup();
        assert_eq!(ids, got, "{name}");
    }
}

/// One Arbiter turn that spent `tokens` on its model request.
fn spend_turn(core: &mut Core, tokens: u64) {
    assert!(matches!(start_turn(core, at(1)), TurnStart::New { .. }));
    core.turn_ended(
        answered(says("On it."), 1000),
        vec![Some(Usage {
            input_tokens: tokens,
            output_tokens: 0,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
        })],
        &FleetView::NotAsked,
        &tracing::Span::none(),
        at(1),
    );
}

#[test]
fn a_release_that_summons_a_successor_is_not_completed_until_that_one_is_released() {
    let mut core = hooked(|_| {});
    let events = run(
        &mut core,
        &mut [
            &mut |c| c.on_input(human("Build it"), at(0)),
            &mut |c| {
                turn(
                    c,
                    reply("summon_orchestrator", "Build it.", serde_json::json!({})),
                    at(1),
                )
            },
            &mut |c| {
                let id = orch_id(c, 1);
                c.on_input(output(&id, 1, "Built.", true), at(2))
            },
            // The first goes, a second comes: not settled.
            &mut |c| {
                turn(
                    c,
                    reply("summon_orchestrator", "Test it.", serde_json::json!({})),
                    at(3),
                )
            },
            &mut |c| {
                let id = orch_id(c, 2);
                c.on_input(output(&id, 1, "Tested.", true), at(4))
            },
            &mut |c| {
                turn(
                    c,
                    reply(
                        "release_orchestrators",
                        "Built and tested.",
                        serde_json::json!({}),
                    ),
                    at(5),
                )
            },
        ],
    );
    let all: Vec<&String> = events.iter().flatten().collect();
    assert_eq!(all.len(), 1, "{events:?}");
    assert!(
        all[0].starts_with("completed @") && all[0].ends_with("Arbiter: Built and tested."),
        "{events:?}"
    );
}

/// The `stalled` events of one tick at `secs`, as `stalled: <summary>`.
fn stalls_at(core: &mut Core, secs: u64) -> Vec<String> {
    core.tick(at(secs));
    core.take_step()
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Notify { event } if event.kind == NotificationKind::Stalled => {
                Some(event.summary.clone())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_session_at_work_with_nothing_new_for_the_set_time_is_stalled_once_until_something_comes() {
    let mut core = hooked(|c| c.stall_after = Duration::from_secs(600));
    core.on_input(human("Build it"), at(0));
    turn(
        &mut core,
        reply("summon_orchestrator", "Build", serde_json::json!({})),
        at(1),
    );
    core.take_step();
    // Orchestrator I works; its summons (at 1 s) is the last entry.
    assert_eq!(core.stall_deadline(at(1)), Some(at(601).mono));
    assert!(stalls_at(&mut core, 600).is_empty(), "not yet");
    let told = stalls_at(&mut core, 601);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0]
            .starts_with("Stalled: nothing new in the log for 10 min while Orchestrator I at work"),
        "{told:?}"
    );
    // Once: no deadline, no second event until something new is logged.
    assert!(core.stall_deadline(at(602)).is_none());
    assert!(stalls_at(&mut core, 1_300).is_empty());
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "Half done.", false), at(1_400));
    core.take_step();
    assert_eq!(core.stall_deadline(at(1_400)), Some(at(2_000).mono));
    assert_eq!(stalls_at(&mut core, 2_000).len(), 1);
}

#[test]
fn a_session_that_waits_for_the_human_or_is_off_is_never_stalled() {
    // Its Orchestrator asked, and the Arbiter answered the human: it waits for them.
    let mut core = hooked(|c| c.stall_after = Duration::from_secs(600));
    core.on_input(human("Build it"), at(0));
    turn(
        &mut core,
        reply("summon_orchestrator", "Build", serde_json::json!({})),
        at(1),
    );
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "Which database?", true), at(2));
    turn(
        &mut core,
        reply("address_human", "Which database?", serde_json::json!({})),
        at(3),
    );
    core.take_step();
    assert!(core.stall_deadline(at(3)).is_none());
    assert!(stalls_at(&mut core, 5_000).is_empty());
    // A tool call waits for approval: that is `needs_input`, not a stall.
    let mut asking = hooked(|c| c.stall_after = Duration::from_secs(600));
    asking.on_input(human("Push it"), at(0));
    turn(
        &mut asking,
        reply("summon_orchestrator", "Push", serde_json::json!({})),
        at(1),
    );
    let id = orch_id(&asking, 1);
    let Input::Orchestrator(mut messages, trace, ack) = output(&id, 1, "", false) else {
        unreachable!()
    };
    messages[0].event = OrchestratorEvent::ApprovalNeeded(arbiter_protocol::ApprovalRequest {
        call_id: "toolu_1".into(),
        tool: "bash".into(),
        input: serde_json::json!({"command": "git push"}),
        rule: "ask bash(git push*)".into(),
    });
    asking.on_input(Input::Orchestrator(messages, trace, ack), at(2));
    asking.take_step();
    assert!(asking.stall_deadline(at(2)).is_none());
    assert!(stalls_at(&mut asking, 1_000).is_empty());
    // Nothing at work at all.
    let mut idle = hooked(|c| c.stall_after = Duration::from_secs(600));
    idle.on_input(human("hi"), at(0));
    turn(
        &mut idle,
        reply("address_human", "Hello.", serde_json::json!({})),
        at(1),
    );
    idle.take_step();
    assert!(stalls_at(&mut idle, 5_000).is_empty());
    // Off: 0.
    let mut off = hooked(|c| c.stall_after = Duration::ZERO);
    off.on_input(human("Build it"), at(0));
    turn(
        &mut off,
        reply("summon_orchestrator", "Build", serde_json::json!({})),
        at(1),
    );
    off.take_step();
    assert!(off.stall_deadline(at(1)).is_none());
    assert!(stalls_at(&mut off, 50_000).is_empty());
}

#[test]
fn the_arbiters_words_to_the_human_ask_who_watches_and_nobody_watching_is_needs_input() {
    let mut core = hooked(|_| {});
    core.on_input(human("hi"), at(0));
    core.take_step();
    turn(
        &mut core,
        reply("address_human", "Which database?", serde_json::json!({})),
        at(1),
    );
    let step = core.take_step();
    let asked: Vec<_> = step
        .tasks
        .iter()
        .filter_map(|t| match t {
            Task::AskWatchers { seq, summary } => Some((*seq, summary.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        asked,
        vec![(
            2,
            "The Arbiter wrote to you while no console was open on the session: Which database?"
                .to_owned()
        )]
    );
    assert!(events(&step).is_empty(), "not before the answer");
    // Nobody answered: needs_input about entry 2.
    core.on_input(
        Input::Unwatched {
            seq: 2,
            summary: asked[0].1.clone(),
        },
        at(3),
    );
    let step = core.take_step();
    let Some(Effect::Notify { event }) = step.effects.first() else {
        panic!("no event: {:?}", shown(&step))
    };
    assert_eq!(
        (event.id.as_str(), event.kind, event.seq),
        ("s1.2.needs_input", NotificationKind::NeedsInput, 2)
    );
    // A hook that does not want needs_input: nobody is asked.
    let mut other = hooked(|c| c.hooks = vec![hook(&[NotificationKind::Completed])]);
    other.on_input(human("hi"), at(0));
    turn(
        &mut other,
        reply("address_human", "Hello.", serde_json::json!({})),
        at(1),
    );
    assert!(other.take_step().tasks.is_empty());
}

/// What the status says the session waits for, hook or no hook: the
/// Arbiter's words to the human until the human writes, a failure until
/// the human writes. An approval is in the status's approvals, not here.
#[test]
fn the_status_says_when_the_session_waits_for_the_human_with_or_without_a_hook() {
    for hooks in [false, true] {
        let mut core = if hooks {
            hooked(|_| {})
        } else {
            core_with(|_| {})
        };
        let attention = |core: &Core| {
            core.status(false, at(9))
                .attention
                .map(|a| (a.kind, a.summary, a.seq))
        };
        core.on_input(human("hi"), at(0));
        core.take_step();
        assert_eq!(attention(&core), None, "hooks {hooks}");
        turn(&mut core, says("Which database?"), at(1));
        core.take_step();
        assert_eq!(
            attention(&core),
            Some((
                NotificationKind::NeedsInput,
                "The Arbiter wrote to you: Which database?".to_owned(),
                2
            )),
            "hooks {hooks}"
        );
        core.on_input(human("Postgres"), at(2));
        core.take_step();
        assert_eq!(attention(&core), None, "the human wrote (hooks {hooks})");
        turn(
            &mut core,
            reply(
                "summon_orchestrator",
                "Set up Postgres.",
                serde_json::json!({}),
            ),
            at(3),
        );
        core.take_step();
        let id = orch_id(&core, 1);
        core.on_input(failed(&id, 1, 1), at(4));
        core.take_step();
        let said = attention(&core).map(|(kind, _, _)| kind);
        assert_eq!(said, Some(NotificationKind::Failed), "hooks {hooks}");
    }
}
