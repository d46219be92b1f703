//! The core's table cases: tool calls: repeats, failures, warnings.

use super::*;

#[test]
fn the_same_call_at_the_stop_count_is_not_run_and_the_arbiter_gets_a_report() {
    let mut core = core();
    let ls = call("c", "bash", json!({"command": "ls"}));
    for i in 1..=4 {
        let cleared = core.clear(&ls, &[]).unwrap();
        let warned = matches!(cleared.repeated, super::repeats::Verdict::Warn(_));
        assert_eq!(warned, i == 3, "call {i}");
        assert_eq!(
            core.called(&ls, cleared, true, ok("a.txt"), &[]),
            AfterCall::Store
        );
        if i == 3 {
            assert!(last_texts(&core).iter().any(|t| t.contains("[system]")));
        }
    }
    let rest = [call("d", "read", json!({"path": "a"}))];
    let report = core.clear(&ls, &rest).unwrap_err();
    assert!(report.contains("ls"), "{report}");
    // It and the calls after it are answered as not run.
    let results: Vec<_> = core
        .transcript
        .messages()
        .last()
        .unwrap()
        .content
        .iter()
        .filter_map(|b| match b {
            Block::ToolResult {
                tool_use_id,
                is_error,
                content,
            } => Some((
                tool_use_id.clone(),
                *is_error,
                content.starts_with("Not run"),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        results[results.len() - 2..],
        [("c".to_owned(), true, true), ("d".to_owned(), true, true)]
    );
    let out = Core::circling(report);
    assert!(out.expects_response);
}

#[test]
fn a_call_that_waited_for_approval_before_a_takeover_is_not_counted_again() {
    let mut core = core();
    let push = call("c", "bash", json!({"command": "git push"}));
    for _ in 0..4 {
        let cleared = core.clear(&push, &[]).unwrap();
        core.called(&push, cleared, true, ok(""), &[]);
    }
    core.snap.approval = Some(crate::approval::Pending {
        call_id: "c".into(),
        tool: "bash".into(),
        rule: "ask bash(git push*)".into(),
        answer: None,
    });
    assert!(
        core.clear(&push, &[]).is_ok(),
        "the fifth would stop; resumed, it runs"
    );
}

/// Moved down from e2e `runaway::an_orchestrator_whose_calls_keep_failing_…`
/// (the wiring of a stop on a circle stays there, in the repeated call's test).
#[test]
fn twelve_failures_in_a_row_stop_the_work_and_the_calls_after_are_not_run() {
    let mut core = core();
    let mut last = AfterCall::Store;
    for i in 0..12 {
        let c = call(
            &format!("c{i}"),
            "read",
            json!({"path": format!("notes-{i}.txt")}),
        );
        let rest = [call("after", "bash", json!({"command": "true"}))];
        let cleared = core.clear(&c, &rest).unwrap();
        last = core.called(&c, cleared, true, failed("no such file"), &rest);
        // The results merge into one user message: the warning is in it
        // once from the 6th failure on.
        let warned = last_texts(&core)
            .iter()
            .filter(|t| t.contains("Your last 6 tool calls all failed"))
            .count();
        assert_eq!(
            warned,
            usize::from(i >= 5),
            "told at the 6th failure, call {i}"
        );
    }
    match last {
        AfterCall::Circling(report) => assert!(
            report.starts_with(
                "Stopped: my last 12 tool calls all failed (the last was read \
                 {\"path\":\"notes-11.txt\"})"
            ),
            "{report}"
        ),
        other => panic!("{other:?}"),
    }
    let not_run = core
        .transcript
        .messages()
        .last()
        .unwrap()
        .content
        .iter()
        .any(|b| matches!(b, Block::ToolResult { tool_use_id, .. } if tool_use_id == "after"));
    assert!(not_run);
}

#[test]
fn a_call_the_policy_refused_is_no_failure_of_the_model_and_not_in_the_evidence() {
    let mut core = core();
    for i in 0..13 {
        let c = call(
            &format!("c{i}"),
            "bash",
            json!({"command": format!("rm {i}")}),
        );
        let cleared = core.clear(&c, &[]).unwrap();
        assert_eq!(
            core.called(&c, cleared, false, failed("denied"), &[]),
            AfterCall::Store
        );
    }
    assert_eq!(core.snap.tool_count, 13);
    assert!(
        evidence(&core, FileChanges::default()).tools.is_empty(),
        "refused calls did not run"
    );
}

#[test]
fn the_last_result_of_a_reply_carries_the_context_warning() {
    let mut core = core();
    core.snap.context_tokens = 75_000;
    let a = call("a", "read", json!({"path": "a"}));
    let b = call("b", "read", json!({"path": "b"}));
    let cleared = core.clear(&a, std::slice::from_ref(&b)).unwrap();
    core.called(&a, cleared, true, ok("x"), std::slice::from_ref(&b));
    assert!(last_texts(&core).is_empty(), "not on the first of two");
    let cleared = core.clear(&b, &[]).unwrap();
    core.called(&b, cleared, true, ok("y"), &[]);
    assert_eq!(last_texts(&core).len(), 1);
    assert!(
        last_texts(&core)[0].contains("75"),
        "{:?}",
        last_texts(&core)
    );
}

#[test]
fn a_subagents_spend_counts_toward_the_allowance_and_80_percent_is_said_once() {
    let mut core = core();
    core.snap.budget = Some(Cap {
        tokens: Some(1_000),
        cost_nanos: None,
    });
    let task = call("t", "task", json!({"description": "x", "prompt": "y"}));
    let mut outcome = ok("done");
    outcome.spend.input_tokens = 850;
    let cleared = core.clear(&task, &[]).unwrap();
    core.called(&task, cleared, true, outcome, &[]);
    assert_eq!(core.snap.spend.input_tokens, 850);
    let told = last_texts(&core);
    assert!(
        told.iter()
            .any(|t| t.contains("You have used 85 % of your budget")),
        "{told:?}"
    );
    assert_eq!(
        core.subagent_allowance().unwrap().tokens,
        Some(150),
        "a subagent started now may spend what is left"
    );
    let again = call("t2", "read", json!({"path": "a"}));
    let cleared = core.clear(&again, &[]).unwrap();
    core.called(&again, cleared, true, ok("a"), &[]);
    let said = last_texts(&core)
        .iter()
        .filter(|t| t.contains("of your budget"))
        .count();
    assert_eq!(said, 1, "said once");
}

#[test]
fn at_the_allowance_no_new_model_request_starts() {
    let mut core = core();
    assert!(core.over_budget().is_none());
    core.snap.budget = Some(Cap {
        tokens: Some(1_000),
        cost_nanos: None,
    });
    core.snap.spend.input_tokens = 1_000;
    match core.over_budget() {
        Some(WireError::OrchestratorFailed { number, message }) => {
            assert_eq!(number, 2);
            assert!(
                message.starts_with(super::budget::BUDGET_PREFIX),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}
