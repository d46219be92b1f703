//! The core's table cases: a model reply.

use super::*;

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
