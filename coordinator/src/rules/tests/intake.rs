//! What the core makes of each input by itself.

use super::*;

#[test]
fn a_human_line_is_logged_queued_and_makes_a_turn_due() {
    let mut core = core();
    core.on_input(human("Build me an auth system"), at(0));
    let step = core.take_step();
    assert_eq!(shown(&step), vec!["You: Build me an auth system"]);
    assert!(step.changed);
    assert_eq!(core.state.log_seq, 1);
    assert!(core.turn_due());
    assert_eq!(core.state.owner.as_deref(), Some("alice"));
}

#[test]
fn the_same_human_message_delivered_twice_is_taken_once() {
    let mut core = core();
    core.on_input(human("once"), at(0));
    core.take_step();
    core.on_input(human("once"), at(1));
    let step = core.take_step();
    assert!(shown(&step).is_empty(), "{:?}", shown(&step));
    assert_eq!(core.state.queue.len(), 1);
}

#[test]
fn a_log_entry_carries_the_time_it_was_decided_at() {
    let mut core = core();
    core.on_input(human("hello"), at(42));
    let step = core.take_step();
    let Effect::Log(entry) = &step.effects[0] else {
        panic!("a log entry");
    };
    assert_eq!(entry.at, at(42).wall);
    assert_eq!(entry.seq, 1);
}

#[test]
fn a_malformed_message_is_an_error_entry_and_nothing_is_queued() {
    let mut core = core();
    core.on_input(
        Input::Malformed(
            WireError::MalformedMessage {
                subject: "session.s1.human".into(),
                detail: "expected value at line 1".into(),
            },
            None,
        ),
        at(0),
    );
    let lines = shown(&core.take_step());
    assert!(has(&lines, "Error:"), "{lines:?}");
    assert!(!core.turn_due());
}

#[test]
fn messages_put_back_for_a_full_inbox_are_said_once_and_none_is_lost() {
    let mut core = core();
    core.put_back(3, at(0));
    core.put_back(0, at(1));
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("System: 3 message(s)"), "{lines:?}");
}

#[test]
fn no_worker_is_said_for_a_summons_nobody_took() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(
        Input::NoWorker {
            orch_id: id,
            pool: "default".into(),
        },
        at(5),
    );
    let lines = shown(&core.take_step());
    assert_eq!(
        lines,
        vec![
            "System: No worker of pool default answered: Orchestrator I waits in the queue \
             until one is up (arbiter-worker --pool default)."
        ]
    );
}

#[test]
fn no_worker_is_not_said_once_the_orchestrator_was_heard_from() {
    let mut core = summoned("Build the auth module");
    let id = orch_id(&core, 1);
    core.on_input(output(&id, 1, "Working on it.", false), at(2));
    core.take_step();
    core.on_input(
        Input::NoWorker {
            orch_id: id,
            pool: "default".into(),
        },
        at(5),
    );
    assert!(shown(&core.take_step()).is_empty());
}

#[test]
fn no_worker_is_not_said_for_an_orchestrator_released_since() {
    let mut core = core();
    core.on_input(
        Input::NoWorker {
            orch_id: "o-gone".into(),
            pool: "default".into(),
        },
        at(5),
    );
    assert!(shown(&core.take_step()).is_empty());
}
