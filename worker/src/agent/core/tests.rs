//! Table tests of the Orchestrator's core: given a [`Core`] and what the
//! I/O brought (a reply, a tool's outcome, an input, the files), the step
//! it decides. No process, no bus, no model.

use std::sync::Arc;

use arbiter_llm::{Block, Message, MessageRole, Response, StopReason, Usage};
use arbiter_protocol::{
    Answerer, ApprovalAnsweredEntry, ApprovalDecision, Cap, FileChanges, ModelErrorKind,
    OrchestratorEvent, OrchestratorOutput, WireError,
};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};

use super::approval::Gate;
use super::reply::{CutOff, Replied, Taken};
use super::tools::AfterCall;
use super::window::{AtEdge, Edge};
use super::*;
use crate::runtime::Runtime;
use crate::state::{EndReason, Phase};
use crate::tools::ToolOutcome;

fn settings(runtime: Runtime) -> Settings {
    Settings {
        session_id: "s".into(),
        orch_id: "o".into(),
        number: 2,
        runtime,
        system: "system".into(),
        tools: Arc::from(Vec::new()),
        output_schema: Arc::new(arbiter_llm::schema::for_model::<OrchestratorOutput>()),
        model: "claude-sonnet-4-5".into(),
        prices: arbiter_llm::price::PriceTable::defaults(),
        context_budget: 100_000,
        schema_repairs: 2,
        max_consecutive_notes: 3,
        repeat: (3, 5),
        stale: (15, 30),
    }
}

fn core() -> Core {
    Core::new(settings(Runtime::Native), Vec::new(), Snapshot::new())
}

fn cli_core() -> Core {
    Core::new(settings(Runtime::ClaudeCode), Vec::new(), Snapshot::new())
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 4, 12, 0, 0).unwrap()
}

fn usage(input: u64, output: u64) -> Option<Usage> {
    Some(Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    })
}

fn text_reply(text: &str, stop: StopReason) -> Response {
    Response {
        content: vec![Block::Text { text: text.into() }],
        stop_reason: stop,
        usage: usage(1_000, 50),
    }
}

fn tool_reply(calls: &[(&str, &str, Value)]) -> Response {
    Response {
        content: calls
            .iter()
            .map(|(id, name, input)| Block::ToolUse {
                id: (*id).into(),
                name: (*name).into(),
                input: input.clone(),
            })
            .collect(),
        stop_reason: StopReason::ToolUse,
        usage: usage(1_000, 50),
    }
}

fn output_json(expects_response: bool, message: &str) -> String {
    json!({"expects_response": expects_response, "message": message}).to_string()
}

fn packet() -> Value {
    json!({"done": [], "open": [{"id": "T1", "what": "the parser"}], "decisions": [],
           "questions": [], "next_step": "write the parser"})
}

fn call(id: &str, name: &str, input: Value) -> Call {
    (id.into(), name.into(), input)
}

fn ok(content: &str) -> ToolOutcome {
    ToolOutcome::ok(content.into())
}

fn failed(content: &str) -> ToolOutcome {
    ToolOutcome::error(content.into())
}

/// The texts of the transcript's last message.
fn last_texts(core: &Core) -> Vec<String> {
    core.transcript
        .messages()
        .last()
        .unwrap()
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

fn evidence(core: &Core, files: FileChanges) -> arbiter_protocol::Evidence {
    core.snap.tally.evidence(files)
}

/// A valid output through the core: shaped, evidence (no files), published.
fn publish(core: &mut Core, output: OrchestratorOutput) -> arbiter_protocol::OrchestratorMessage {
    let shaped = core.shape(output);
    let evidence = evidence(core, FileChanges::default());
    core.publish(shaped, evidence, now())
}

fn note(message: &str) -> OrchestratorOutput {
    OrchestratorOutput {
        expects_response: false,
        message: message.into(),
        handoff: None,
        verdict: None,
    }
}

fn message(text: &str) -> OrchestratorOutput {
    OrchestratorOutput {
        expects_response: true,
        ..note(text)
    }
}

fn answer(call_id: &str, decision: ApprovalDecision) -> ApprovalAnsweredEntry {
    ApprovalAnsweredEntry {
        approval: 1,
        number: 2,
        member: None,
        orch_id: "o".into(),
        call_id: call_id.into(),
        decision,
        reason: Some("not now".into()),
        by: Answerer::Console {
            name: "alice".into(),
        },
        rule: None,
        input_seq: 3,
    }
}

fn with_policy(core: &mut Core, text: &str) {
    let floor = arbiter_protocol::approval::Policy::parse(text).unwrap();
    core.snap.layers = Some(arbiter_protocol::Layers::new(floor, Vec::new()).unwrap());
}

fn input(seq: u64, text: &str) -> crate::inputs::Input {
    crate::inputs::Input {
        seq,
        text: text.into(),
        approval: None,
        budget: None,
        stream_seq: seq,
        trace: arbiter_bus::TraceContext::default(),
        hint: false,
    }
}

// ---- next, store-before-call --------------------------------------------

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

// ---- a model reply -------------------------------------------------------

#[test]
fn a_reply_is_charged_and_its_context_measured() {
    let mut core = core();
    let charged = core.charge(3, &text_reply("x", StopReason::EndTurn));
    assert_eq!(charged.tokens, Some(1_000));
    assert_eq!(core.snap.context_tokens, 1_000);
    assert_eq!(core.measured, Some((3, 1_000)));
    assert_eq!(charged.spend.requests, 1);
    assert_eq!(charged.spend.output_tokens, 50);
    assert!(charged.spend.cost_nanos > 0, "a priced model's call costs");
}

#[test]
fn a_reply_cut_off_is_asked_again_once_with_a_larger_cap() {
    let mut core = core();
    let cut = text_reply("{\"expects_resp", StopReason::MaxTokens);
    assert_eq!(
        core.cut_off(&cut),
        Some(CutOff {
            prompt: Some(1_000)
        })
    );
    core.grow(8_000);
    assert_eq!(core.request().max_output_tokens, Some(8_000));
    // Cut off again in the same turn: taken as it is (and repaired).
    assert_eq!(core.cut_off(&cut), None);
    match core.take_reply(cut) {
        Replied::Output(Err(detail)) => assert!(!detail.is_empty()),
        other => panic!("{other:?}"),
    }
    // A whole reply starts the count and the cap over.
    assert_eq!(core.cut_off(&text_reply("{}", StopReason::EndTurn)), None);
    assert_eq!(core.request().max_output_tokens, None);
}

#[test]
fn a_reply_cut_off_with_tool_calls_is_not_asked_again() {
    let mut core = core();
    let mut reply = tool_reply(&[("c1", "bash", json!({"command": "ls"}))]);
    reply.stop_reason = StopReason::MaxTokens;
    assert_eq!(core.cut_off(&reply), None);
}

#[test]
fn a_final_reply_is_the_turns_output() {
    let mut core = core();
    let reply = text_reply(
        &output_json(true, "Done: a.txt written."),
        StopReason::EndTurn,
    );
    match core.take_reply(reply) {
        Replied::Output(Ok(output)) => {
            assert!(output.expects_response);
            assert_eq!(output.message, "Done: a.txt written.");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        core.transcript.messages().last().unwrap().role,
        MessageRole::Assistant
    );
}

#[test]
fn an_invalid_output_is_repaired_twice_then_fails_with_a_schema_violation() {
    let mut core = core();
    for attempt in 1..=2 {
        let parsed = match core.take_reply(text_reply("not json", StopReason::EndTurn)) {
            Replied::Output(parsed) => parsed,
            other => panic!("{other:?}"),
        };
        assert!(matches!(core.take_output(parsed), Taken::Repair));
        assert_eq!(core.snap.repairs, attempt);
        assert_eq!(
            core.transcript.messages().last().unwrap().role,
            MessageRole::User,
            "the model is told why"
        );
    }
    match core.take_output(Err("still not json".into())) {
        Taken::Fail(WireError::SchemaViolation {
            attempts, detail, ..
        }) => {
            assert_eq!(attempts, 3);
            assert_eq!(detail, "still not json");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn past_the_critical_threshold_an_output_without_a_packet_goes_back_for_repair() {
    let mut core = core();
    core.snap.context_tokens = 90_000;
    let refused = core.check_handoff(message("done")).unwrap_err();
    assert!(refused.contains("90% of your context is used"), "{refused}");
    let mut with_packet = message("done");
    with_packet.handoff = Some(Box::new(serde_json::from_value(packet()).unwrap()));
    assert!(core.check_handoff(with_packet).is_ok());
    core.snap.context_tokens = 10_000;
    assert!(core.check_handoff(message("done")).is_ok());
}

/// Moved down from e2e `handoff::a_packet_that_fails_its_schema_is_repaired_…`
/// (the failure's wiring to the human and the Arbiter stays in
/// `bad_input::an_orchestrator_that_never_matches_its_schema_…`): each
/// malformed packet goes back with what is wrong, then the Orchestrator fails.
#[test]
fn a_malformed_packet_is_repaired_with_what_is_wrong_then_fails() {
    let mut core = core();
    let mut twice = packet();
    twice["open"] = json!([{"id": "T1", "what": "a"}, {"id": "T1", "what": "b"}]);
    let mut extra = packet();
    extra["mood"] = json!("tired");
    let mut no_next = packet();
    no_next.as_object_mut().unwrap().remove("next_step");
    let mut said = Vec::new();
    for bad in [twice, extra, no_next] {
        let reply = json!({"expects_response": true, "message": "Full.", "handoff": bad});
        let Replied::Output(parsed) =
            core.take_reply(text_reply(&reply.to_string(), StopReason::EndTurn))
        else {
            panic!("no tools")
        };
        let detail = parsed.as_ref().unwrap_err().clone();
        said.push(detail);
        match core.take_output(parsed) {
            Taken::Repair => {}
            Taken::Fail(WireError::SchemaViolation { attempts, .. }) => assert_eq!(attempts, 3),
            other => panic!("{other:?}"),
        }
    }
    assert!(said[0].contains("used twice"), "{}", said[0]);
    assert!(said[1].contains("mood"), "{}", said[1]);
    assert!(said[2].contains("next_step"), "{}", said[2]);
}

#[test]
fn a_packet_that_fails_its_check_goes_back_for_repair_whatever_the_context() {
    let core = core();
    let mut bad = message("done");
    let mut p = packet();
    p["next_step"] = json!("");
    bad.handoff = Some(Box::new(serde_json::from_value(p).unwrap()));
    assert!(core.check_handoff(bad).is_err());
}

// ---- tool calls: repeats, failures, warnings ------------------------------

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

// ---- outputs ---------------------------------------------------------------

#[test]
fn a_message_waits_for_the_arbiter_and_keeps_its_report_and_packet() {
    let mut core = core();
    core.snap.repairs = 1;
    let mut out = message(&"r".repeat(3_000));
    out.handoff = Some(Box::new(serde_json::from_value(packet()).unwrap()));
    let sent = publish(&mut core, out);
    assert_eq!(sent.seq, 1);
    assert_eq!(sent.sent_at, now());
    assert!(sent.handoff.is_some(), "the packet rides on the message");
    assert!(matches!(sent.event, OrchestratorEvent::Output(ref o) if o.handoff.is_none()));
    assert_eq!(core.snap.phase, Phase::Waiting);
    assert_eq!(core.snap.repairs, 0);
    assert_eq!(core.snap.report.as_ref().unwrap().chars().count(), 2_000);
    assert!(core.snap.handoff.is_some());
}

#[test]
fn a_note_goes_on_working_and_the_model_is_told_to_continue() {
    let mut core = core();
    let sent = publish(&mut core, note("Started on the parser."));
    assert_eq!(core.snap.phase, Phase::Working);
    assert!(matches!(sent.event, OrchestratorEvent::Output(ref o) if !o.expects_response));
    let told = last_texts(&core);
    assert!(told[0].contains("Continue your work"), "{told:?}");
    assert_eq!(core.snap.notes_in_a_row, 1);
}

#[test]
fn a_note_that_claims_work_no_tool_did_is_told_none_of_it_exists() {
    let mut core = core();
    publish(
        &mut core,
        note("Done: I wrote parser.py and all tests pass."),
    );
    let told = last_texts(&core);
    assert!(told[0].contains("none of it exists yet"), "{told:?}");
}

#[test]
fn a_note_with_files_in_the_workspace_is_asked_whether_they_are_the_work() {
    let mut core = core();
    let bash = call("c", "write", json!({"path": "a.py", "content": "x"}));
    let cleared = core.clear(&bash, &[]).unwrap();
    core.called(&bash, cleared, true, ok("written"), &[]);
    let shaped = core.shape(note("Wrote a.py."));
    let files = FileChanges {
        created: vec!["a.py".into()],
        ..FileChanges::default()
    };
    let evidence = evidence(&core, files);
    core.publish(shaped, evidence, now());
    let told = last_texts(&core);
    assert!(
        told.iter()
            .any(|t| t.contains("The worker sees this work so far")),
        "{told:?}"
    );
}

#[test]
fn notes_past_the_limit_go_to_the_arbiter_as_a_message() {
    let mut core = Core::new(settings(Runtime::ClaudeCode), Vec::new(), Snapshot::new());
    for i in 1..=3 {
        publish(&mut core, note(&format!("step {i}")));
        assert_eq!(core.snap.phase, Phase::Working);
    }
    assert!(
        last_texts(&core)
            .iter()
            .any(|t| t.contains("3 notes in a row"))
    );
    let sent = publish(&mut core, note("step 4"));
    assert!(matches!(sent.event, OrchestratorEvent::Output(ref o) if o.expects_response));
    assert_eq!(core.snap.phase, Phase::Waiting);
    assert_eq!(core.snap.notes_in_a_row, 0);
}

/// Moved down from e2e `runaway::an_orchestrator_that_only_writes_notes_…`:
/// a claim with nothing behind it is answered with that fact, the second
/// note in a row without a tool call is told notes do no work, a note after
/// a write is answered with what the worker sees, and four notes in a row
/// with no tool call go to the Arbiter as a report that it is stuck.
#[test]
fn notes_with_no_tool_call_between_them_are_warned_then_stop_the_work() {
    let mut core = core();
    core.settings.max_consecutive_notes = 10;
    // What the model is told after each note (the text appended last).
    let told = |core: &Core| last_texts(core).last().cloned().unwrap();
    publish(&mut core, note("The file hello.py is now created."));
    assert!(
        told(&core).contains("it says work is done while the worker saw no tool call"),
        "{}",
        told(&core)
    );
    publish(&mut core, note("Working on hello.py."));
    assert!(
        told(&core).contains("That is 2 notes in a row with no tool call"),
        "{}",
        told(&core)
    );
    let write = call(
        "w",
        "write",
        json!({"path": "hello.py", "content": "print('hello')\n"}),
    );
    let cleared = core.clear(&write, &[]).unwrap();
    core.called(&write, cleared, true, ok("written"), &[]);
    let shaped = core.shape(note("hello.py is written."));
    let files = FileChanges {
        created: vec!["hello.py".into()],
        ..FileChanges::default()
    };
    let evidence = evidence(&core, files);
    core.publish(shaped, evidence, now());
    let after_write = told(&core);
    assert!(
        after_write.contains(
            "The worker sees this work so far: 1 tool call (write 1), 1 file changed \
             (created: hello.py)"
        ) && after_write.contains("check it and report to the Arbiter now"),
        "{after_write}"
    );
    let mut stopped = None;
    for text in [
        "Still checking.",
        "Checking more.",
        "Almost there.",
        "All good.",
    ] {
        let sent = publish(&mut core, note(text));
        if let OrchestratorEvent::Output(o) = &sent.event
            && o.expects_response
        {
            stopped = Some(o.message.clone());
            break;
        }
    }
    assert_eq!(
        stopped.expect("the idle notes stop the work"),
        "[system] Stopped: I sent 4 notes in a row without calling a tool between them, so \
         my work has not moved. Tell me exactly which tool to call next, or release me. My \
         last note: All good."
    );
    assert_eq!(core.snap.phase, Phase::Waiting);
}

#[test]
fn a_cli_runtimes_notes_are_not_counted_as_idle() {
    let mut core = cli_core();
    core.settings.max_consecutive_notes = 10;
    for i in 1..=6 {
        let sent = publish(&mut core, note(&format!("n{i}")));
        assert!(matches!(sent.event, OrchestratorEvent::Output(ref o) if !o.expects_response));
    }
}

#[test]
fn outputs_are_numbered_one_after_another_with_approvals_and_failures() {
    let mut core = core();
    assert_eq!(publish(&mut core, note("a")).seq, 1);
    with_policy(&mut core, "ask bash(git push*)");
    let Gate::Ask(request) = core.gate("c", "bash", &json!({"command": "git push"}), now()) else {
        panic!("asks")
    };
    assert_eq!(request.seq, 2);
    let failed = core.fail(
        WireError::OrchestratorFailed {
            number: 2,
            message: "x".into(),
        },
        now(),
    );
    assert_eq!(failed.seq, 3);
    assert_eq!(
        core.snap.phase,
        Phase::Ended {
            reason: EndReason::Failed
        }
    );
    assert!(matches!(failed.event, OrchestratorEvent::Failed(_)));
}

#[test]
fn the_workspace_is_walked_again_only_after_a_tool_call() {
    let mut core = core();
    assert_eq!(core.files_known(), None);
    let files = FileChanges {
        created: vec!["a".into()],
        ..FileChanges::default()
    };
    core.files_walked(&files);
    assert_eq!(core.files_known(), Some(files));
    let c = call("c", "bash", json!({"command": "touch b"}));
    let cleared = core.clear(&c, &[]).unwrap();
    core.called(&c, cleared, true, ok(""), &[]);
    assert_eq!(core.files_known(), None);
    // A CLI runs calls the worker does not see: it always walks.
    let mut cli = cli_core();
    cli.files_walked(&FileChanges::default());
    assert_eq!(cli.files_known(), None);
}

#[test]
fn why_there_are_no_checkpoints_is_said_with_the_first_output_only() {
    let mut core = core();
    assert!(core.say_no_checkpoint());
    assert!(!core.say_no_checkpoint());
}

// ---- the edge of the window ------------------------------------------------

#[test]
fn at_the_edge_the_last_packet_written_is_handed_off() {
    let mut core = core();
    let reply = json!({"expects_response": false, "message": "a", "handoff": packet()});
    core.take_reply(text_reply(&reply.to_string(), StopReason::EndTurn));
    match core.at_edge(&Edge::Full {
        prompt: 99_000,
        window: 100_000,
    }) {
        AtEdge::HandOff(out) => {
            assert!(out.expects_response);
            assert!(out.message.contains("about 99000 of its 100000 tokens"));
            assert!(out.message.contains("the last one I wrote"));
            assert_eq!(out.handoff.unwrap().next_step, "write the parser");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn at_the_edge_with_no_packet_one_is_made_from_the_workspace() {
    let mut core = core();
    let edge = Edge::Refused("prompt is too long".into());
    assert!(matches!(core.at_edge(&edge), AtEdge::NeedsFiles));
    let files = FileChanges {
        changed: vec!["src/lib.rs".into()],
        ..FileChanges::default()
    };
    let out = Core::hand_off_with(&edge, &files);
    assert!(out.message.contains("more than the server takes"));
    assert_eq!(out.handoff.unwrap().done[0].files, ["src/lib.rs"]);
}

#[test]
fn at_the_edge_a_second_time_it_fails_with_the_context_error() {
    let mut core = core();
    let edge = Edge::Refused("too long".into());
    core.at_edge(&edge);
    match core.at_edge(&edge) {
        AtEdge::Fail(WireError::Model { class, message, .. }) => {
            assert_eq!(class, ModelErrorKind::ContextExceeded);
            assert!(message.contains("handed off at the edge already"));
        }
        other => panic!("{other:?}"),
    }
}

// ---- approvals ---------------------------------------------------------------

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

// ---- CLI runtimes ---------------------------------------------------------------

#[test]
fn a_claude_turn_counts_its_tools_and_cost_and_takes_its_structured_output() {
    let mut core = cli_core();
    let done = crate::runtime::claude::TurnDone {
        structured: Some(json!({"expects_response": true, "message": "Wrote it."})),
        tools: vec![crate::runtime::claude::ToolCall {
            name: "Write".into(),
            input: json!({"file_path": "a.txt", "content": "x"}),
            is_error: false,
        }],
        context_tokens: Some(5_000),
        usage: json!({"input_tokens": 10, "output_tokens": 20}),
        cost_usd: 0.5,
        ..Default::default()
    };
    let output = core.claude_turn(&done).unwrap();
    assert_eq!(output.message, "Wrote it.");
    assert_eq!(core.snap.tool_count, 1);
    assert_eq!(core.snap.context_tokens, 5_000);
    assert_eq!(core.snap.spend.input_tokens, 10);
    assert_eq!(core.snap.spend.cost_nanos, 500_000_000);
    assert_eq!(
        core.transcript.messages().last().unwrap().role,
        MessageRole::Assistant
    );
}

#[test]
fn a_claude_turn_without_structured_output_goes_back_for_repair() {
    let mut core = cli_core();
    let done = crate::runtime::claude::TurnDone {
        text: "I am done.".into(),
        ..Default::default()
    };
    let detail = core.claude_turn(&done).unwrap_err();
    assert!(detail.contains("without a StructuredOutput call"));
    assert!(detail.contains("I am done."));
}

#[test]
fn a_codex_turn_charges_the_difference_of_the_threads_usage() {
    let mut core = Core::new(settings(Runtime::Codex), Vec::new(), Snapshot::new());
    let turn = |usage: Value| crate::runtime::codex::TurnDone {
        thread_id: "t1".into(),
        text: Some(output_json(true, "ok")),
        tools: Vec::new(),
        usage,
    };
    core.codex_turn(
        turn(json!({"input_tokens": 100, "output_tokens": 10})),
        "r.jsonl".into(),
        Some(100),
    )
    .unwrap();
    core.codex_turn(
        turn(json!({"input_tokens": 250, "output_tokens": 30})),
        "r.jsonl".into(),
        None,
    )
    .unwrap();
    assert_eq!(core.snap.spend.requests, 2);
    assert_eq!(core.snap.spend.output_tokens, 30, "10, then 20 more");
    assert_eq!(core.snap.context_tokens, 100);
    assert_eq!(core.snap.codex.as_ref().unwrap().thread_id, "t1");
}

#[test]
fn a_cli_turn_sends_the_pending_user_message_or_says_carry_on() {
    assert_eq!(cli_core().cli_input(), "[system] Continue your work.");
    let mut core = cli_core();
    core.take_words(input(1, "a"), true);
    core.take_words(input(2, "b"), true);
    assert_eq!(core.cli_input(), "a\n\nb");
}
