//! The conversation loop end to end, over a real nats-server and the mock
//! model: the example flow of seed 004, asserted entry by entry and request
//! by request.

use crate::common;

use arbiter_protocol::{LogBody, SessionState};
use arbiter_tests::{Gate, MockReply};
use common::*;
use pretty_assertions::assert_eq;
use serde_json::json;

const BRIEF: &str = "Build an authentication system in src/auth/: Google and GitHub OAuth, \
                     JWT access tokens that expire after 48 hours.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_example_flow_end_to_end() {
    seed_flow(System::start().await).await;
}

/// The same flow as deployed securely: the server runs from the config
/// `arbiter-admin init` wrote (TLS that verifies clients, JWT operator mode),
/// and the coordinator, the worker and the human's console each connect with
/// their own role's credential, under the permissions of `protocol::roles`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_example_flow_over_tls_with_a_credential_per_role() {
    let sys = System::start_with(Options {
        secure: true,
        ..Default::default()
    })
    .await;
    assert!(sys.nats.url().starts_with("tls://"));
    seed_flow(sys).await;
}

async fn seed_flow(sys: System) {
    let s = "s-seed";
    let log = sys.watch_log(s).await;
    let arb = arbiter_lane("Build me an auth system");
    let orch_lane = orch_lane(BRIEF);

    // 1. A clarifying question to the human.
    sys.mock.push(
        &arb,
        arbiter("address_human", "What OAuth providers? Token expiry?"),
    );
    sys.send(s, "Build me an auth system").await;
    log.wait_len(2).await;

    // 2. The answer; Orchestrator I is summoned with the brief and asks a question,
    //    which the Arbiter answers; I writes a file and sends a note.
    sys.mock.push(&arb, arbiter("summon_orchestrator", BRIEF));
    sys.mock.push(
        &orch_lane,
        orch(true, "Clarifying: shared session store or stateless?"),
    );
    sys.mock
        .push(&arb, arbiter("address_orchestrator", "Stateless."));
    sys.mock.push(
        &orch_lane,
        MockReply::tool_use(
            "write",
            json!({"path": "src/auth/config.ts", "content": "providers: google, github\n"}),
        ),
    );
    sys.mock.push(
        &orch_lane,
        orch(false, "Creating provider configurations now."),
    );
    // I's next call is held until the human's interjection has reached it.
    let hold = Gate::new();
    sys.mock.push(
        &orch_lane,
        MockReply::tool_use(
            "write",
            json!({"path": "src/auth/jwt.ts", "content": "expiry: 48h\n"}),
        )
        .gated(hold.clone()),
    );
    sys.send(s, "Google and GitHub. 48hr tokens.").await;
    log.wait_for(
        "the note",
        |b| matches!(b, LogBody::Orchestrator(o) if !o.expects_response),
    )
    .await;

    // 3. The human interjects; the Arbiter relays it to I.
    sys.mock.push(
        &arb,
        arbiter(
            "address_orchestrator",
            "The mortal speaks. Heed: refresh tokens shall rotate.",
        ),
    );
    sys.send(s, "Add refresh token rotation").await;
    log.wait_len(9).await;
    let orch_id = match &log.bodies()[3] {
        LogBody::Summoned(summoned) => summoned.orch_id.clone(),
        other => panic!("expected the summons at index 3, got {other:?}"),
    };
    arbiter_tests::eventually(WAIT, "the worker to take the relayed words", || async {
        (sys.orch_inputs_taken(&orch_id).await >= 2).then_some(())
    })
    .await;

    // 4. I finishes and reports; the Arbiter releases it and tells the human.
    sys.mock.push(
        &orch_lane,
        MockReply::tool_use(
            "write",
            json!({"path": "src/auth/rotation.ts", "content": "rotate refresh tokens\n"}),
        ),
    );
    sys.mock.push(
        &orch_lane,
        orch(true, "Complete. Auth system in /src/auth/."),
    );
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));
    hold.open();
    let status = sys.settled(s, 12).await;
    assert_eq!(status.state, SessionState::Idle);
    assert_eq!(status.summoned, 1);

    // The log, in its exact order, with gapless sequence numbers.
    let entries = log.entries();
    assert_eq!(
        entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=12).collect::<Vec<u64>>()
    );
    assert_eq!(
        briefs(&log.bodies()),
        vec![
            pair("You", "Build me an auth system"),
            pair("Arbiter", "What OAuth providers? Token expiry?"),
            pair("You", "Google and GitHub. 48hr tokens."),
            pair("Summoned Orchestrator I", BRIEF),
            pair(
                "Orchestrator I",
                "Clarifying: shared session store or stateless?"
            ),
            pair("Arbiter → Orchestrator I", "Stateless."),
            pair(
                "Orchestrator I (note)",
                "Creating provider configurations now."
            ),
            pair("You", "Add refresh token rotation"),
            pair(
                "Arbiter → Orchestrator I",
                "The mortal speaks. Heed: refresh tokens shall rotate."
            ),
            pair("Orchestrator I", "Complete. Auth system in /src/auth/."),
            pair("Released", "I"),
            pair("Arbiter", "It is done."),
        ]
    );

    // What each Arbiter request carried: the human's words plain, then tagged
    // while I was active; I's question; the note as a digest riding with the
    // interjection; the report. Never any tool traffic.
    let arbiter_requests = sys.mock.requests_for(&arb);
    assert_eq!(
        arbiter_requests
            .iter()
            .map(|r| r.last_user_text())
            .collect::<Vec<_>>(),
        vec![
            "Build me an auth system".to_owned(),
            "Google and GitHub. 48hr tokens.".to_owned(),
            format!(
                "Orchestrator I: Clarifying: shared session store or stateless?\n{}",
                "[Evidence from the worker, not written by Orchestrator I: 0 tool calls, 0 files changed]"
            ),
            "Notes sent while working:\n- Orchestrator I: Creating provider configurations now.\n\n\
             Human: Add refresh token rotation"
                .to_owned(),
            format!(
                "Orchestrator I: Complete. Auth system in /src/auth/.\n{}",
                "[Evidence from the worker, not written by Orchestrator I: 3 tool calls (write 3), 3 files changed (created: src/auth/config.ts, src/auth/jwt.ts, src/auth/rotation.ts)]"
            ),
        ]
    );
    for (i, request) in arbiter_requests.iter().enumerate() {
        assert_eq!(request.header("x-api-key"), Some(API_KEY));
        assert!(request.header("anthropic-version").is_some());
        assert!(request.is_stream());
        assert!(request.system_text().contains("Arbiter"));
        assert!(request.tool_names().is_empty(), "the Arbiter has no tools");
        let schema = &request.body["output_config"]["format"]["schema"];
        assert_eq!(
            schema["properties"]["intent"]["enum"]
                .as_array()
                .unwrap()
                .len(),
            5
        );
        // The form by intent, flattened for Anthropic (no union at the
        // root), only the decision required (rules/form.rs).
        assert!(schema.get("anyOf").is_none(), "{schema}");
        assert_eq!(schema["required"], serde_json::json!(["intent", "message"]));
        // The transcript grows by one exchange per turn: user, assistant, … user.
        assert_eq!(request.messages().len(), 2 * i + 1);
        let text = request.all_text();
        assert!(
            !text.contains("tool_result") && !text.contains("providers: google"),
            "{text}"
        );
    }
    // The brief went to I verbatim: the summons turn's reply is in later requests.
    assert!(
        arbiter_requests[2]
            .all_text()
            .contains("summon_orchestrator")
    );

    // What each Orchestrator request carried.
    let orch_requests = sys.mock.requests_for(&orch_lane);
    assert_eq!(orch_requests.len(), 6);
    assert_eq!(orch_requests[0].last_user_text(), BRIEF);
    assert_eq!(orch_requests[1].last_user_text(), "Stateless.");
    assert_eq!(
        orch_requests[2].last_user_text(),
        "wrote 26 bytes to src/auth/config.ts"
    );
    assert!(
        orch_requests[3]
            .last_user_text()
            .contains("Your note was shown")
    );
    assert_eq!(
        orch_requests[4].last_user_text(),
        "wrote 12 bytes to src/auth/jwt.ts\nThe mortal speaks. Heed: refresh tokens shall rotate."
    );
    assert_eq!(
        orch_requests[5].last_user_text(),
        "wrote 22 bytes to src/auth/rotation.ts"
    );
    for request in &orch_requests {
        assert_eq!(
            request.tool_names(),
            vec!["read", "write", "edit", "glob", "grep", "bash", "task"]
        );
        assert!(request.system_text().contains("Orchestrator"));
        let schema = &request.body["output_config"]["format"]["schema"];
        assert_eq!(schema["properties"]["expects_response"]["type"], "boolean");
        assert!(
            !request.all_text().contains("Build me an auth system"),
            "the human's words reach I only through the Arbiter"
        );
    }

    // The work is really on disk, in the session's workspace.
    let ws = sys.workspace(s);
    assert_eq!(
        std::fs::read_to_string(ws.join("src/auth/config.ts")).unwrap(),
        "providers: google, github\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("src/auth/jwt.ts")).unwrap(),
        "expiry: 48h\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("src/auth/rotation.ts")).unwrap(),
        "rotate refresh tokens\n"
    );

    inputs_stored_once_and_sealed(&sys, s, &orch_id).await;
}

/// Protocol v3: each input to I is stored once, as the log entry that shows
/// it, on its own subject; nothing went on `orch.<id>.in` (I's worker said
/// with its first output, before any input, that it reads the log). The
/// step record that rides on an input is sealed: what a worker reads there
/// holds the input and an opaque `sealed` field, never the Arbiter's record,
/// which the coordinators' key opens.
async fn inputs_stored_once_and_sealed(sys: &System, s: &str, orch_id: &str) {
    use arbiter_protocol::subjects;
    let sessions = sys
        .bus
        .js
        .get_stream(subjects::SESSIONS_STREAM)
        .await
        .unwrap();
    let key = sys
        .bus
        .js
        .get_key_value(subjects::COORDINATOR_LEASES_BUCKET)
        .await
        .unwrap()
        .get(arbiter_bus::seal::KEY_NAME)
        .await
        .unwrap()
        .expect("the coordinators' sealing key");
    let sealer = arbiter_bus::seal::Sealer::from_stored(&key).unwrap();
    let mut sealed = 0;
    for (n, text) in [
        (1, "Stateless."),
        (2, "The mortal speaks. Heed: refresh tokens shall rotate."),
    ] {
        let msg = sessions
            .direct_get_last_for_subject(subjects::session_input(s, orch_id, n))
            .await
            .unwrap_or_else(|e| panic!("input {n} is not on its subject: {e}"));
        let carrier: serde_json::Value = serde_json::from_slice(&msg.payload).unwrap();
        assert_eq!(carrier["body"]["type"], "arbiter_to_orchestrator");
        assert_eq!(carrier["body"]["input_seq"], n);
        assert_eq!(carrier["body"]["text"], text);
        assert!(
            carrier.get("step").is_none(),
            "a record in the clear: {carrier}"
        );
        let raw = String::from_utf8_lossy(&msg.payload);
        assert!(
            !raw.contains("snapshot") && !raw.contains("Build me an auth system"),
            "{raw}"
        );
        if let Some(record) = carrier["sealed"].as_str() {
            sealed += 1;
            let record: serde_json::Value =
                serde_json::from_slice(&sealer.open(s, record).unwrap()).unwrap();
            assert!(record["rev"].as_u64().unwrap() > 0 && record.get("snapshot").is_some());
            assert!(
                sealer
                    .open("another-session", carrier["sealed"].as_str().unwrap())
                    .is_err()
            );
        }
    }
    assert!(sealed > 0, "no input carried its step's record");
    let orch = sys.bus.js.get_stream(subjects::ORCH_STREAM).await.unwrap();
    assert!(
        orch.get_last_raw_message_by_subject(&subjects::orch_in(orch_id))
            .await
            .is_err(),
        "an input went on orch.<id>.in too"
    );
}
