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
