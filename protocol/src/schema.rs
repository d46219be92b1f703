//! The JSON Schemas of every wire message, generated from the Rust types.
//! `docs/schemas/*.json` holds them; a test fails when the two drift.

use schemars::{JsonSchema, Schema, schema_for};

use crate::{
    ArbiterDelta, ArbiterOutput, Control, HumanMessage, LogEntry, MemoryEntry, OrchestratorInput,
    OrchestratorMessage, OrchestratorOutput, OrchestratorStatus, SessionStatus, Summon,
};

fn named<T: JsonSchema>(name: &'static str) -> (&'static str, Schema) {
    (name, schema_for!(T))
}

/// Every documented schema, by file stem.
pub fn all() -> Vec<(&'static str, Schema)> {
    vec![
        named::<ArbiterOutput>("arbiter_output"),
        named::<OrchestratorOutput>("orchestrator_output"),
        named::<crate::ArbiterPacket>("arbiter_packet"),
        named::<HumanMessage>("human_message"),
        named::<LogEntry>("log_entry"),
        named::<SessionStatus>("session_status"),
        named::<ArbiterDelta>("arbiter_delta"),
        named::<Summon>("summon"),
        named::<OrchestratorInput>("orchestrator_input"),
        named::<OrchestratorMessage>("orchestrator_message"),
        named::<OrchestratorStatus>("orchestrator_status"),
        named::<Control>("control"),
        named::<MemoryEntry>("memory_entry"),
        named::<crate::Notification>("notification"),
    ]
}

/// A schema as the pretty JSON text checked into `docs/schemas/`.
pub fn to_pretty(schema: &Schema) -> String {
    let mut text = serde_json::to_string_pretty(schema.as_value()).unwrap_or_default();
    text.push('\n');
    text
}
