//! The core's table cases: next, store-before-call.

use super::*;

#[test]
fn with_no_reply_pending_the_next_step_is_a_model_call() {
    let core = core();
    assert_eq!(core.next(), Next::CallModel);
}

#[test]
fn a_reply_with_tool_calls_not_answered_runs_them_next_and_only_those() {
    let mut core = core();
    core.transcript.push(Message::user("go"));
    let reply = tool_reply(&[
        ("c1", "bash", json!({"command": "ls"})),
        ("c2", "read", json!({"path": "a"})),
    ]);
    assert!(matches!(core.take_reply(reply), Replied::Tools));
    assert_eq!(
        core.next(),
        Next::RunTools(vec![
            call("c1", "bash", json!({"command": "ls"})),
            call("c2", "read", json!({"path": "a"}))
        ])
    );
    let first = call("c1", "bash", json!({"command": "ls"}));
    let rest = [call("c2", "read", json!({"path": "a"}))];
    let cleared = core.clear(&first, &rest).unwrap();
    core.called(&first, cleared, true, ok("a.txt"), &rest);
    assert_eq!(
        core.next(),
        Next::RunTools(vec![call("c2", "read", json!({"path": "a"}))])
    );
}

#[test]
fn a_reply_is_stored_before_its_tools_run() {
    let mut core = core();
    core.transcript.push(Message::user("go"));
    core.stored_now();
    core.take_reply(tool_reply(&[("c1", "bash", json!({"command": "ls"}))]));
    assert!(core.unstored(), "the reply must be stored before c1 runs");
    core.stored_now();
    assert!(!core.unstored());
}

#[test]
fn inputs_taken_alone_are_not_stored_before_the_call_the_stream_holds_them() {
    let mut core = core();
    core.stored_now();
    assert!(!core.take_words(input(1, "hello"), true));
    assert!(core.unstored());
    assert!(!core.store_before_call());
    // Anything else new (a repair's message) is stored first.
    core.transcript.push(Message::user("[system] fix it"));
    assert!(core.store_before_call());
}

#[test]
fn an_input_while_a_tool_runs_goes_to_the_stored_inbox_then_into_the_next_request() {
    let mut core = core();
    assert!(core.take_words(input(1, "also do b"), false));
    assert_eq!(core.snap.inbox, ["also do b"]);
    assert_eq!(core.snap.in_seq, 1);
    core.stored_now();
    core.take_inbox();
    assert!(core.snap.inbox.is_empty());
    assert_eq!(last_texts(&core), ["also do b"]);
    assert!(!core.store_before_call());
}

#[test]
fn an_input_with_a_budget_sets_the_allowance_from_then_on() {
    let mut core = core();
    let mut with_cap = input(1, "go on, within 10 tokens");
    with_cap.budget = Some(Cap {
        tokens: Some(10),
        cost_nanos: None,
    });
    core.take_words(with_cap, true);
    assert_eq!(core.snap.budget.unwrap().tokens, Some(10));
}
