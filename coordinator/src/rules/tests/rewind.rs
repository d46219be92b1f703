//! Table tests: the human's `/rewind` (see `rules/rewind.rs`).

use arbiter_protocol::{HumanCommand, Rewind, Summon};

use super::*;
use crate::state::Pending;

const CHECKPOINT: &str = "1a2b3c4d5e6f1a2b3c4d5e6f1a2b3c4d5e6f1a2b";

/// `/rewind [--stop] <checkpoint>` typed at console `alice`.
fn rewind(checkpoint: &str, stop: bool) -> Input {
    let id = format!("m-rewind-{checkpoint}-{stop}");
    let mut message = human_message(&id, &format!("/rewind {checkpoint}"));
    message.rewind = Some(Rewind {
        checkpoint: checkpoint.into(),
    });
    if stop {
        message.command = Some(HumanCommand::Stop);
    }
    Input::Human {
        message: Box::new(message),
        console: "alice".into(),
        trace: TraceContext::none(),
        ack: None,
    }
}

fn summonses(step: &Step) -> Vec<Summon> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Summon(s) => Some(s.clone()),
            _ => None,
        })
        .collect()
}

/// A session whose Orchestrator I reported and was released.
fn settled() -> Core {
    let mut core = summoned("Build the parser");
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "The parser is built.", true), at(2));
    turn(
        &mut core,
        reply("release_orchestrators", "Built.", serde_json::json!({})),
        at(3),
    );
    core.take_step();
    core
}

#[test]
fn a_rewind_is_logged_holds_the_session_and_goes_with_the_next_summons_only() {
    let mut core = settled();
    core.on_input(rewind(CHECKPOINT, false), at(4));
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            format!("You: /rewind {CHECKPOINT}"),
            format!("Rewound: {CHECKPOINT} by alice"),
        ]
    );
    assert!(!step.abandon_turn);
    assert!(!core.turn_due(), "held until the human writes");
    assert_eq!(core.state.rewind.as_deref(), Some(CHECKPOINT));
    // The human's next words reach the Arbiter with the note first.
    core.on_input(human("Redo step two"), at(5));
    core.take_step();
    let asked = next_asked(&mut core, at(6));
    assert!(
        asked.contains("The human rewound the workspace to checkpoint 1a2b3c4d5e6f")
            && asked.contains("Redo step two"),
        "{asked}"
    );
    core.turn_ended(
        answered(
            reply(
                "summon_orchestrator",
                "Step two again",
                serde_json::json!({}),
            ),
            1000,
        ),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        at(7),
    );
    let sent = summonses(&core.take_step());
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].start_from.as_deref(), Some(CHECKPOINT));
    assert_eq!(core.state.rewind, None, "carried once");
}

#[test]
fn a_rewind_while_an_orchestrator_works_is_refused_unless_it_stops_the_work() {
    let mut core = summoned("Build the parser");
    core.on_input(rewind(CHECKPOINT, false), at(2));
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            format!("You: /rewind {CHECKPOINT}"),
            "System: The rewind to 1a2b3c4d5e6f was not done: Orchestrator I is still at work \
             in the workspace. Stop the work first (/stop), or rewind with /rewind --stop."
                .to_owned(),
        ]
    );
    assert_eq!(core.state.rewind, None);
    assert_eq!(core.state.team.len(), 1);

    core.on_input(rewind(CHECKPOINT, true), at(3));
    let step = core.take_step();
    let lines = shown(&step);
    assert!(has(&lines, "Released: I"), "{lines:?}");
    assert!(has(&lines, "Rewound: 1a2b3c4d5e6f"), "{lines:?}");
    assert!(step.effects.iter().any(|e| matches!(
        e,
        Effect::Control(c) if c.action == arbiter_protocol::ControlAction::Cancel
    )));
    assert!(core.state.team.is_empty());
    assert_eq!(core.state.rewind.as_deref(), Some(CHECKPOINT));
}

#[test]
fn a_rewind_that_names_no_commit_is_refused_and_the_last_packet_is_dropped_by_one_that_does() {
    let mut core = settled();
    core.on_input(rewind("1a2b", false), at(4));
    let lines = shown(&core.take_step());
    assert!(
        has(
            &lines,
            "System: The rewind was not done: \"1a2b\" is not a checkpoint's full"
        ),
        "{lines:?}"
    );
    assert_eq!(core.state.rewind, None);
    core.state.handoff = Some(arbiter_protocol::PriorHandoff {
        number: 1,
        orch_id: "o1".into(),
        packet: arbiter_protocol::Handoff {
            done: Vec::new(),
            open: Vec::new(),
            decisions: Vec::new(),
            questions: Vec::new(),
            next_step: "Go on.".into(),
        },
    });
    core.on_input(rewind(CHECKPOINT, false), at(5));
    core.take_step();
    assert_eq!(core.state.handoff, None);
    let waiting = &core.state.hold.as_ref().expect("held").waiting;
    assert!(waiting.iter().any(|p| matches!(
        p,
        Pending::System { text } if text.contains("handoff packet is not passed on")
    )));
}
