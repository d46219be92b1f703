//! Table tests: the approval rule. An Orchestrator's request is numbered,
//! logged and listed; the first answer (a console, the wait, an earlier
//! "allow for this session") is the Orchestrator's next input; a request
//! seen again is not asked twice; `/policy` rides on the next summons.

use arbiter_protocol::{ApprovalDecision, ApprovalReply, ApprovalRequest, Policy};

use super::*;

/// Orchestrator `orch_id`'s output `seq`: its `bash` call `call_id` of
/// `command` waits for approval.
fn asks(orch_id: &str, seq: u64, call_id: &str, command: &str) -> Input {
    let Input::Orchestrator(mut messages, trace, ack) = output(orch_id, seq, "", false) else {
        unreachable!()
    };
    messages[0].event = OrchestratorEvent::ApprovalNeeded(ApprovalRequest {
        call_id: call_id.into(),
        tool: "bash".into(),
        input: serde_json::json!({ "command": command }),
        rule: "ask bash(git push*)".into(),
    });
    Input::Orchestrator(messages, trace, ack)
}

/// Console `console`'s answer to approval `n`.
fn answer(n: u32, decision: ApprovalDecision, reason: Option<&str>, console: &str) -> Input {
    let mut message = human_message(&format!("m-answer-{n}-{console}"), "/allow");
    message.approval = Some(ApprovalReply {
        approval: n,
        decision,
        reason: reason.map(Into::into),
    });
    Input::Human {
        message: Box::new(message),
        console: console.into(),
        trace: TraceContext::none(),
        ack: None,
    }
}

fn with_timeout(secs: u64) -> Core {
    let mut core = core_with(|c| c.approval_timeout = Duration::from_secs(secs));
    core.on_input(human("Build it"), at(0));
    turn(
        &mut core,
        reply("summon_orchestrator", "Push it", serde_json::json!({})),
        at(1),
    );
    core.take_step();
    core
}

#[test]
fn a_request_is_numbered_logged_and_listed_and_the_answer_is_the_orchestrators_input() {
    let mut core = summoned("Push it");
    let id = orch_id(&core, 1);
    core.on_input(asks(&id, 1, "toolu_1", "git push origin main"), at(2));
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            "Approval 1 asked: Orchestrator I asks to run bash: git push origin main \
             (ask bash(git push*))"
        ]
    );
    let status = core.status(false, at(2));
    assert_eq!(status.approvals.len(), 1);
    assert_eq!(status.approvals[0].summary, "git push origin main");
    assert_eq!(
        status.approvals[0].deadline - status.approvals[0].asked_at,
        chrono::Duration::minutes(30),
        "the default wait"
    );
    // The Arbiter is not asked anything: the turn waits for nobody.
    assert!(!core.turn_due());

    core.on_input(answer(1, ApprovalDecision::AllowOnce, None, "alice"), at(5));
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![format!(
            "Approval 1 (input 1 to {id}): allowed once by console alice"
        )]
    );
    assert!(core.status(false, at(5)).approvals.is_empty());
    assert!(!core.turn_due(), "an answer is no words for the Arbiter");
    // The Arbiter's next words to it are input 2.
    assert_eq!(core.state.member(&id).unwrap().inputs_sent, 1);
}

#[test]
fn a_denial_carries_the_humans_reason_and_a_second_answer_changes_nothing() {
    let mut core = summoned("Push it");
    let id = orch_id(&core, 1);
    core.on_input(asks(&id, 1, "toolu_1", "git push origin main"), at(2));
    core.take_step();
    core.on_input(
        answer(1, ApprovalDecision::Deny, Some("use a branch"), "bob"),
        at(3),
    );
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![format!(
            "Approval 1 (input 1 to {id}): denied by console bob: use a branch"
        )]
    );
    // Too late, and no such approval: said, nothing sent.
    core.on_input(answer(1, ApprovalDecision::AllowOnce, None, "alice"), at(4));
    core.on_input(answer(7, ApprovalDecision::AllowOnce, None, "alice"), at(4));
    assert_eq!(
        shown(&core.take_step()),
        vec![
            "System: Approval 1 is not waiting any more (answered already, or its \
             Orchestrator ended): console alice's answer changed nothing.",
            "System: There is no approval 7 in this session.",
        ]
    );
    assert_eq!(core.state.member(&id).unwrap().inputs_sent, 1);
}

#[test]
fn a_request_asked_again_after_a_takeover_is_not_asked_twice() {
    let mut core = summoned("Push it");
    let id = orch_id(&core, 1);
    core.on_input(asks(&id, 1, "toolu_1", "git push origin main"), at(2));
    core.take_step();
    // A worker that took the Orchestrator over asks again (a new seq).
    core.on_input(asks(&id, 2, "toolu_1", "git push origin main"), at(3));
    assert!(shown(&core.take_step()).is_empty());
    core.on_input(answer(1, ApprovalDecision::AllowOnce, None, "alice"), at(4));
    core.take_step();
    // And once answered, a late repeat is not asked again either.
    core.on_input(asks(&id, 3, "toolu_1", "git push origin main"), at(5));
    assert!(shown(&core.take_step()).is_empty());
    assert!(core.state.approvals.waiting.is_empty());
}

#[test]
fn nobody_answering_within_the_wait_denies_the_call() {
    let mut core = with_timeout(60);
    let id = orch_id(&core, 1);
    core.on_input(asks(&id, 1, "toolu_1", "git push origin main"), at(2));
    core.take_step();
    let deadline = core.approval_deadline(at(2)).expect("a deadline");
    assert_eq!(deadline, at(62).mono);
    core.tick(at(61));
    assert!(shown(&core.take_step()).is_empty(), "not yet");
    core.tick(at(62));
    let lines = shown(&core.take_step());
    assert_eq!(
        lines,
        vec![format!(
            "Approval 1 (input 1 to {id}): denied by no answer in time: nobody answered \
             within 60 s; the call did not run. Go on without it, or ask the Arbiter to have \
             the human approve it."
        )]
    );
    assert!(core.approval_deadline(at(63)).is_none());
}

#[test]
fn allowed_for_the_session_answers_the_same_call_now_and_later_but_not_another() {
    let mut core = summoned("Push it");
    let id = orch_id(&core, 1);
    core.on_input(asks(&id, 1, "toolu_1", "git push origin main"), at(2));
    core.on_input(asks(&id, 2, "toolu_2", "git push origin main"), at(2));
    core.take_step();
    core.on_input(
        answer(1, ApprovalDecision::AllowSession, None, "alice"),
        at(3),
    );
    // The second request of the same call is answered by the new rule.
    assert_eq!(
        shown(&core.take_step()),
        vec![
            format!(
                "Approval 1 (input 1 to {id}): allowed for this session \
                 (`allow bash(git push origin main)`) by console alice"
            ),
            format!(
                "Approval 2 (input 2 to {id}): allowed once by the session's \
                 `allow bash(git push origin main)`"
            ),
        ]
    );
    // Later: the same call is logged and answered at once; another asks.
    core.on_input(asks(&id, 3, "toolu_3", "git push origin main"), at(4));
    core.on_input(asks(&id, 4, "toolu_4", "git push --force"), at(4));
    let lines = shown(&core.take_step());
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[1].contains("allowed once by the session's"),
        "{lines:?}"
    );
    assert!(lines[2].starts_with("Approval 4 asked"), "{lines:?}");
    assert_eq!(core.state.approvals.waiting.len(), 1);
}

#[test]
fn an_orchestrator_that_ends_withdraws_its_approvals() {
    let mut core = summoned("Push it");
    let id = orch_id(&core, 1);
    core.on_input(asks(&id, 1, "toolu_1", "git push origin main"), at(2));
    core.take_step();
    let Input::Orchestrator(mut messages, trace, ack) = output(&id, 2, "", false) else {
        unreachable!()
    };
    messages[0].event = OrchestratorEvent::Failed(arbiter_protocol::OrchestratorFailed {
        error: WireError::OrchestratorFailed {
            number: 1,
            message: "the worker's disk is full".into(),
        },
    });
    core.on_input(Input::Orchestrator(messages, trace, ack), at(3));
    let lines = shown(&core.take_step());
    assert!(
        lines.contains(
            &"System: Approval 1 is withdrawn: Orchestrator I ended, and its bash call never ran."
                .to_owned()
        ),
        "{lines:?}"
    );
    assert!(core.status(false, at(3)).approvals.is_empty());
    core.on_input(answer(1, ApprovalDecision::AllowOnce, None, "alice"), at(4));
    assert!(shown(&core.take_step())[0].contains("is not waiting any more"));
}

#[test]
fn the_sessions_policy_rides_on_the_next_summons() {
    let mut core = core();
    let mut message = human_message("m-policy", "/policy mode ask");
    message.policy = Some(Policy::parse("mode ask; deny bash(curl *)").unwrap());
    core.on_input(
        Input::Human {
            message: Box::new(message),
            console: "alice".into(),
            trace: TraceContext::none(),
            ack: None,
        },
        at(0),
    );
    let lines = shown(&core.take_step());
    assert_eq!(
        lines,
        vec![
            "You: /policy mode ask".to_owned(),
            "System: Console alice set the session's policy to `mode ask; deny bash(curl *)`: \
             Orchestrators summoned from now on follow it (it can only tighten their workers' \
             own)."
                .to_owned(),
        ]
    );
    assert!(!core.turn_due(), "a policy is no words for the Arbiter");
    core.on_input(human("Build it"), at(1));
    turn(
        &mut core,
        reply("summon_orchestrator", "Build", serde_json::json!({})),
        at(2),
    );
    let step = core.take_step();
    let summons = step
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Summon(s) => Some(s.clone()),
            _ => None,
        })
        .expect("a summons");
    assert_eq!(
        summons.policy.map(|p| p.to_string()).as_deref(),
        Some("mode ask; deny bash(curl *)")
    );
}

#[test]
fn the_arbiters_policy_rides_on_its_summons_and_one_that_does_not_read_is_refused() {
    let mut core = core();
    core.on_input(human("Deploy it, carefully"), at(0));
    turn(
        &mut core,
        reply(
            "summon_orchestrator",
            "Deploy",
            serde_json::json!({"policy": "mode ask; deny bash(curl *)"}),
        ),
        at(1),
    );
    let step = core.take_step();
    let summons = step
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Summon(s) => Some(s.clone()),
            _ => None,
        })
        .expect("a summons");
    assert_eq!(summons.policy, None, "no session policy");
    assert_eq!(
        summons.arbiter_policy.map(|p| p.to_string()).as_deref(),
        Some("mode ask; deny bash(curl *)")
    );

    let mut refused = super::core();
    refused.on_input(human("Deploy it"), at(0));
    turn(
        &mut refused,
        reply(
            "summon_orchestrator",
            "Deploy",
            serde_json::json!({"policy": "permit everything"}),
        ),
        at(1),
    );
    let step = refused.take_step();
    assert!(
        !step.effects.iter().any(|e| matches!(e, Effect::Summon(_))),
        "nothing summoned"
    );
    let lines = shown(&step);
    assert!(
        lines.iter().any(|l| l.contains(
            "Your summon_orchestrator could not be carried out: its policy `permit everything`: \
             a rule starts with allow, ask or deny"
        )),
        "{lines:?}"
    );
}
