//! The mock model's script: each session and Orchestrator has a lane of its
//! own, and these are the replies tests queue on it.

use arbiter_protocol::VERSION;
use arbiter_tests::MockReply;
use serde_json::{Value, json};

use super::{ARBITER_MODEL, ORCH_MODEL, SUB_MODEL};

/// Lanes are `<model>:<first user message>`: the Arbiter's first message is
/// the human's first words, an Orchestrator's is its brief, so each session
/// and each Orchestrator gets its own script.
pub fn lane_of(body: &Value) -> String {
    let model = body["model"].as_str().unwrap_or_default();
    // A Responses API body (the Codex CLI's): the first user text that is
    // not the CLI's own `<environment_context>`.
    if let Some(input) = body["input"].as_array() {
        let text = input
            .iter()
            .filter(|item| item["role"] == "user")
            .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
            .filter_map(|block| block["text"].as_str().map(str::to_owned))
            .find(|t| !t.starts_with('<'))
            .unwrap_or_default();
        return format!("{model}:{text}");
    }
    // The first user message (an OpenAI-style body starts with the system prompt).
    let first = body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .map_or(&Value::Null, |m| &m["content"]);
    format!("{model}:{}", arbiter_tests::first_words(first))
}

pub fn arbiter_lane(first_human_message: &str) -> String {
    format!("{ARBITER_MODEL}:{first_human_message}")
}

pub fn orch_lane(brief: &str) -> String {
    format!("{ORCH_MODEL}:{brief}")
}

pub fn sub_lane(prompt: &str) -> String {
    format!("{SUB_MODEL}:{prompt}")
}

/// A scripted Arbiter reply.
pub fn arbiter(intent: &str, message: &str) -> MockReply {
    MockReply::json(&json!({"intent": intent, "message": message}))
}

/// A scripted Arbiter summons: the brief in `message`, with `extra` fields
/// (strategy, briefs, pool, directive…).
pub fn summons(message: &str, extra: Value) -> MockReply {
    let mut reply = json!({"intent": "summon_orchestrator", "message": message});
    reply
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    MockReply::json(&reply)
}

/// An Orchestrator output that asks a question (expects a response), bare,
/// as a worker in another language publishes it on `orch.<id>.out`: no
/// evidence, no spend, no handoff.
pub fn bare_question(
    session: &str,
    orch_id: &str,
    seq: u64,
    text: &str,
) -> arbiter_protocol::OrchestratorMessage {
    arbiter_protocol::OrchestratorMessage {
        session_inputs: false,
        spend: Default::default(),
        v: VERSION,
        session_id: session.into(),
        orch_id: orch_id.into(),
        seq,
        event: arbiter_protocol::OrchestratorEvent::Output(arbiter_protocol::OrchestratorOutput {
            expects_response: true,
            message: text.into(),
            handoff: None,
            verdict: None,
        }),
        evidence: None,
        handoff: None,
        sent_at: chrono::Utc::now(),
    }
}

/// A scripted Orchestrator final reply.
pub fn orch(expects_response: bool, message: &str) -> MockReply {
    MockReply::json(&json!({"expects_response": expects_response, "message": message}))
}
