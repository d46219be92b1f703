//! The core's table cases: approvals.

use super::*;

#[test]
fn with_no_policy_every_call_runs() {
    let mut core = core();
    assert!(matches!(
        core.gate("c", "bash", &json!({"command": "rm -rf /"}), now()),
        Gate::Run
    ));
}

#[test]
fn a_denied_call_does_not_run_and_the_model_reads_why() {
    let mut core = core();
    with_policy(&mut core, "deny bash(rm *)");
    match core.gate("c", "bash", &json!({"command": "rm a"}), now()) {
        Gate::Refused(outcome) => {
            assert!(outcome.is_error);
            assert!(outcome.content.contains("rm *"), "{}", outcome.content);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_ask_is_stored_as_a_request_then_awaited_not_asked_again() {
    let mut core = core();
    with_policy(&mut core, "ask bash(git push*)");
    let input = json!({"command": "git push origin main"});
    let Gate::Ask(request) = core.gate("c1", "bash", &input, now()) else {
        panic!("asks")
    };
    match &request.event {
        OrchestratorEvent::ApprovalNeeded(r) => {
            assert_eq!(r.call_id, "c1");
            assert_eq!(r.rule, "ask bash(git push*)");
            assert_eq!(r.input, input);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(core.snap.approval.as_ref().unwrap().call_id, "c1");
    assert_eq!(core.answered("bash"), None, "no answer yet");
    // After a takeover: the same call is awaited, not asked again.
    assert!(matches!(
        core.gate("c1", "bash", &input, now()),
        Gate::Await
    ));
}

#[test]
fn an_answer_is_taken_for_the_waiting_call_only() {
    let mut core = core();
    with_policy(&mut core, "ask bash(git push*)");
    core.gate("c1", "bash", &json!({"command": "git push"}), now());
    assert!(!core.take_answer(3, answer("other", ApprovalDecision::AllowOnce)));
    assert_eq!(core.snap.in_seq, 3, "passed over, but read");
    assert_eq!(core.answered("bash"), None);
    assert!(core.take_answer(4, answer("c1", ApprovalDecision::Deny)));
    match core.answered("bash") {
        Some(Some(outcome)) => {
            assert!(outcome.is_error);
            assert!(outcome.content.contains("not now"), "{}", outcome.content);
        }
        other => panic!("{other:?}"),
    }
    // Answered once: a second answer is passed over.
    assert!(!core.take_answer(5, answer("c1", ApprovalDecision::AllowOnce)));
}

#[test]
fn allow_for_the_session_adds_the_rule_and_the_same_call_runs_after() {
    let mut core = core();
    with_policy(&mut core, "ask bash(git push*)");
    let input = json!({"command": "git push"});
    core.gate("c1", "bash", &input, now());
    let mut always = answer("c1", ApprovalDecision::AllowSession);
    always.rule = Some(arbiter_protocol::approval::Rule::exactly("bash", &input));
    assert!(core.take_answer(4, always));
    assert_eq!(core.answered("bash"), Some(None));
    let c = call("c1", "bash", input.clone());
    let cleared = core.clear(&c, &[]).unwrap();
    core.called(&c, cleared, true, ok(""), &[]);
    assert!(core.snap.approval.is_none(), "cleared with the result");
    assert!(matches!(core.gate("c2", "bash", &input, now()), Gate::Run));
}
