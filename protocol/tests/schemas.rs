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
            member: None,
            number: 2,
            orch_id: "o".into(),
            expects_response: false,
            text: "working".into(),
            evidence: None,
            handoff: None,
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
            checkpoint: Some(arbiter_protocol::Checkpoint {
                commit: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
                git_ref: "refs/arbiter/s1/checkpoints".into(),
                files: 1,
                insertions: 3,
                deletions: 0,
                skipped: vec![arbiter_protocol::Skipped {
                    path: "target/".into(),
                    why: "ignored by .gitignore".into(),
                }],
                skipped_more: 0,
            }),
            no_checkpoint: None,
        }),
        ..message
    };
    let json = serde_json::to_value(&with).unwrap();
    assert_eq!(json["evidence"]["files"]["created"][0], "hello.py");
    assert_eq!(json["evidence"]["commands"][0]["exit_code"], 0);
    let back: OrchestratorMessage = serde_json::from_value(json).unwrap();
    assert_eq!(back, with);
}

#[test]
fn handoff_is_additive_on_the_wire() {
    use arbiter_protocol::*;
    let packet = Handoff {
        done: vec![],
        open: vec![OpenItem {
            id: "T1".into(),
            what: "all of it".into(),
        }],
        decisions: vec![],
        questions: vec![],
        next_step: "Begin.".into(),
    };
    // On `orch.<id>.out` the packet sits beside the event, whose keys stay
    // `type`, `expects_response` and `message`, so older readers decode it.
    let message = OrchestratorMessage {
        v: VERSION,
        session_id: "s".into(),
        orch_id: "o".into(),
        seq: 1,
        event: OrchestratorEvent::Output(OrchestratorOutput {
            expects_response: true,
            message: "Full.".into(),
            handoff: None,
            verdict: None,
        }),
        evidence: None,
        handoff: Some(Box::new(packet.clone())),
        spend: None,
        session_inputs: false,
        sent_at: chrono::DateTime::UNIX_EPOCH,
    };
    let json = serde_json::to_value(&message).unwrap();
    let keys: Vec<&String> = json["event"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["expects_response", "message", "type"]);
    assert_eq!(json["handoff"]["open"][0]["id"], "T1");
    // A summons from an older coordinator has no packet; one with it keeps it.
    let old = r#"{"v":1,"session_id":"s","orch_id":"o","number":2,"brief":"b","workspace":null,
        "pool":"default","summoned_at":"2025-06-30T14:09:12Z"}"#;
    let summon: Summon = serde_json::from_str(old).unwrap();
    assert_eq!(summon.handoff, None);
    assert!(
        serde_json::to_value(&summon)
            .unwrap()
            .get("handoff")
            .is_none()
    );
    // The model-facing output refuses a packet with a key it does not know.
    let bad = r#"{"expects_response":true,"message":"x","handoff":{"done":[],"open":[],
        "decisions":[],"questions":[],"next_step":"n","mood":"tired"}}"#;
    assert!(serde_json::from_str::<OrchestratorOutput>(bad).is_err());
}
