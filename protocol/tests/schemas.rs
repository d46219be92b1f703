//! Wire types keep their shape: tags, strictness, additive fields.
//! (The checked-in JSON Schemas are compared with the types in
//! `tests/tests/schemas.rs`, which sees every crate's records.)

#[test]
fn a_log_entry_round_trips_with_its_tag() {
    use arbiter_protocol::*;
    let entry = LogEntry {
        v: VERSION,
        session_id: "s".into(),
        seq: 3,
        at: chrono::DateTime::UNIX_EPOCH,
        body: LogBody::Orchestrator(OrchestratorEntry {
            number: 2,
            orch_id: "o".into(),
            expects_response: false,
            text: "working".into(),
            evidence: None,
        }),
    };
    let json = serde_json::to_value(&entry).unwrap();
    assert_eq!(json["body"]["type"], "orchestrator");
    assert_eq!(json["body"]["expects_response"], false);
    let back: LogEntry = serde_json::from_value(json).unwrap();
    assert_eq!(back, entry);
}

#[test]
fn arbiter_output_rejects_unknown_intents_and_fields() {
    use arbiter_protocol::ArbiterOutput;
    let ok: ArbiterOutput = serde_json::from_str(r#"{"intent":"musings","message":"hm"}"#).unwrap();
    assert_eq!(ok.intent, arbiter_protocol::ArbiterIntent::Musings);
    assert!(serde_json::from_str::<ArbiterOutput>(r#"{"intent":"shout","message":"x"}"#).is_err());
    assert!(
        serde_json::from_str::<ArbiterOutput>(r#"{"intent":"musings","message":"x","extra":1}"#)
            .is_err()
    );
}

#[test]
fn evidence_is_additive_on_orchestrator_output() {
    use arbiter_protocol::*;
    // An older worker's output, without evidence, still decodes.
    let old = r#"{"v":1,"session_id":"s","orch_id":"o","seq":1,
        "event":{"type":"output","expects_response":true,"message":"Done."},
        "sent_at":"2025-06-30T14:09:12Z"}"#;
    let message: OrchestratorMessage = serde_json::from_str(old).unwrap();
    assert_eq!(message.evidence, None);
    // Absent evidence is not written, so older readers see what they knew.
    let json = serde_json::to_value(&message).unwrap();
    assert!(json.get("evidence").is_none(), "{json}");
    // Evidence sits on the envelope, next to the event: the event itself
    // (an `OrchestratorOutput`, `deny_unknown_fields`) is unchanged.
    let with = OrchestratorMessage {
        spend: Default::default(),
        evidence: Some(Evidence {
            tools: vec![ToolCalls {
                tool: "write".into(),
                calls: 1,
                failed: 0,
            }],
            files: FileChanges {
                created: vec!["hello.py".into()],
                ..FileChanges::default()
            },
            commands: vec![CommandRun {
                command: "python3 hello.py".into(),
                exit_code: Some(0),
            }],
            commands_more: 0,
        }),
        ..message
    };
    let json = serde_json::to_value(&with).unwrap();
    assert_eq!(json["evidence"]["files"]["created"][0], "hello.py");
    assert_eq!(json["evidence"]["commands"][0]["exit_code"], 0);
    let back: OrchestratorMessage = serde_json::from_value(json).unwrap();
    assert_eq!(back, with);
}
