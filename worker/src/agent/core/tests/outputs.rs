//! The core's table cases: outputs.

use super::*;

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
