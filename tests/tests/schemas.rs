//! Every JSON Schema in `docs/schemas/` is generated from the Rust types of
//! the record it describes: the wire messages (`arbiter-protocol`), the
//! session state records (`arbiter-coordinator`), the Orchestrator state
//! records and presence (`arbiter-worker`). This test regenerates them and
//! fails when a checked-in file differs; and every JSON example of
//! `docs/protocol.md` must decode with the type its section documents and
//! validate against that type's checked-in schema (with `jsonschema`).
//!
//! Regenerate with `UPDATE_SCHEMAS=1 cargo test -p arbiter-tests --test e2e schemas::`.

use std::path::{Path, PathBuf};

use arbiter_protocol::{
    ArbiterDelta, Control, Evidence, HumanMessage, LogEntry, OrchestratorInput,
    OrchestratorMessage, OrchestratorStatus, SessionStatus, Summon,
};
use serde::de::DeserializeOwned;

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn all_schemas() -> Vec<(&'static str, schemars::Schema)> {
    let mut all = arbiter_protocol::schema::all();
    all.extend(arbiter_coordinator::schemas());
    all.extend(arbiter_worker::schemas());
    all
}

#[test]
fn every_checked_in_schema_is_generated_from_its_type() {
    let dir = repo().join("docs/schemas");
    let update = std::env::var_os("UPDATE_SCHEMAS").is_some();
    let mut drifted = Vec::new();
    let mut names = Vec::new();
    for (name, schema) in all_schemas() {
        let path = dir.join(format!("{name}.json"));
        let want = arbiter_protocol::schema::to_pretty(&schema);
        names.push(format!("{name}.json"));
        if update {
            std::fs::write(&path, &want).unwrap();
        } else if std::fs::read_to_string(&path).unwrap_or_default() != want {
            drifted.push(name);
        }
    }
    assert!(
        drifted.is_empty(),
        "docs/schemas drifted from the types for {drifted:?}; \
         run UPDATE_SCHEMAS=1 cargo test -p arbiter-tests --test e2e schemas::"
    );
    // No stale file: every schema in the folder is one the types generate.
    let mut stale: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !names.contains(n))
        .collect();
    stale.sort();
    assert!(
        stale.is_empty(),
        "docs/schemas has files no type generates: {stale:?}"
    );
}

/// A ```json block of a document, with the heading it sits under.
pub(crate) struct Example {
    pub line: usize,
    heading: String,
    text: String,
}

pub(crate) fn examples(path: &Path) -> Vec<Example> {
    let doc = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut open: Option<(usize, String)> = None;
    for (i, line) in doc.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            Some((start, text)) => {
                if trimmed.starts_with("```") {
                    out.push(Example {
                        line: *start,
                        heading: heading.clone(),
                        text: std::mem::take(text),
                    });
                    open = None;
                } else {
                    text.push_str(trimmed);
                    text.push('\n');
                }
            }
            None => {
                if line.starts_with('#') {
                    heading = line.to_owned();
                } else if trimmed.starts_with("```json") {
                    open = Some((i + 1, String::new()));
                }
            }
        }
    }
    out
}

fn decode<T: DeserializeOwned>(value: &serde_json::Value) -> Result<(), String> {
    serde_json::from_value::<T>(value.clone())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The type an example documents (by the section it is in) and its JSON:
/// a fragment's (`"evidence":{…}`, one field of a message) is its value.
pub(crate) fn typed(example: &Example) -> Result<(&'static str, serde_json::Value), String> {
    let text = example.text.trim();
    if !text.starts_with('{') {
        let value: serde_json::Value =
            serde_json::from_str(&format!("{{{text}}}")).map_err(|e| e.to_string())?;
        let (key, value) = value
            .as_object()
            .and_then(|o| o.iter().next())
            .ok_or("an empty fragment")?;
        let ty = match key.as_str() {
            "evidence" => "Evidence",
            "handoff" => "Handoff",
            "spend" => "Spend",
            other => {
                return Err(format!(
                    "a fragment of `{other}`, which no type is known for"
                ));
            }
        };
        return Ok((ty, value.clone()));
    }
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let h = example.heading.as_str();
    let ty = if h.contains(".in.<orch_id>.<n>`") {
        // An input as protocol v3 stores it: a log entry.
        "LogEntry"
    } else if h.contains(".summon.") {
        "Summon"
    } else if h.contains(".in`") {
        "OrchestratorInput"
    } else if h.contains(".out`") {
        "OrchestratorMessage"
    } else if h.contains("orch_id>.status`") {
        "OrchestratorStatus"
    } else if h.contains(".ctl`") {
        "Control"
    } else if h.contains(".human.") {
        "HumanMessage"
    } else if h.contains(".log`") {
        "LogEntry"
    } else if h.contains(".delta`") {
        "ArbiterDelta"
    } else if h.contains("session_id>.status`") {
        "SessionStatus"
    } else if h.contains("Conversation rules") {
        // The Arbiter's reply (never on NATS, but its schema is checked in).
        "ArbiterOutput"
    } else if h.contains("Writing a worker") {
        "WorkerPresence"
    } else {
        return Err("no type is known for this section".into());
    };
    Ok((ty, value))
}

/// Decodes one example with the type of the section it documents.
fn check(example: &Example) -> Result<&'static str, String> {
    let (ty, value) = typed(example)?;
    let decoded = match ty {
        "Evidence" => decode::<Evidence>(&value),
        "Handoff" => decode::<arbiter_protocol::Handoff>(&value),
        "Spend" => decode::<arbiter_protocol::Spend>(&value),
        "LogEntry" => decode::<LogEntry>(&value),
        "Summon" => decode::<Summon>(&value),
        "OrchestratorInput" => decode::<OrchestratorInput>(&value),
        "OrchestratorMessage" => decode::<OrchestratorMessage>(&value),
        "OrchestratorStatus" => decode::<OrchestratorStatus>(&value),
        "Control" => decode::<Control>(&value),
        "HumanMessage" => decode::<HumanMessage>(&value),
        "ArbiterDelta" => decode::<ArbiterDelta>(&value),
        "SessionStatus" => decode::<SessionStatus>(&value),
        "ArbiterOutput" => decode::<arbiter_protocol::ArbiterOutput>(&value),
        "WorkerPresence" => decode::<arbiter_worker::WorkerPresence>(&value),
        other => Err(format!("{other}: no decoder")),
    };
    decoded.map(|()| ty)
}

/// The checked-in schema a type's examples must validate against (the
/// file, and the definition inside it for a part of a message).
fn schema_of(ty: &str) -> serde_json::Value {
    let (file, def) = match ty {
        "Evidence" => ("orchestrator_message", Some("Evidence")),
        "Spend" => ("orchestrator_message", Some("Spend")),
        "Handoff" => ("orchestrator_message", Some("Handoff")),
        "WorkerPresence" => ("worker_presence", None),
        other => {
            let snake: String = other
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let lower = c.to_ascii_lowercase();
                    if c.is_ascii_uppercase() && i > 0 {
                        vec!['_', lower]
                    } else {
                        vec![lower]
                    }
                })
                .collect();
            return read_schema(&snake);
        }
    };
    let schema = read_schema(file);
    match def {
        // Only the definition: the message's own keywords do not apply.
        Some(def) => serde_json::json!({
            "$schema": schema["$schema"],
            "$ref": format!("#/$defs/{def}"),
            "$defs": schema["$defs"],
        }),
        None => schema,
    }
}

fn read_schema(stem: &str) -> serde_json::Value {
    let path = repo().join(format!("docs/schemas/{stem}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Validates an example against the checked-in schema of its type.
fn validate(ty: &str, example: &Example) -> Result<(), String> {
    let text = example.text.trim();
    let value: serde_json::Value = if text.starts_with('{') {
        serde_json::from_str(text).map_err(|e| e.to_string())?
    } else {
        let wrapped: serde_json::Value =
            serde_json::from_str(&format!("{{{text}}}")).map_err(|e| e.to_string())?;
        wrapped
            .as_object()
            .and_then(|o| o.values().next().cloned())
            .unwrap_or_default()
    };
    let schema = schema_of(ty);
    let validator = jsonschema::validator_for(&schema).map_err(|e| e.to_string())?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| e.to_string())
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "does not validate against the schema of {ty}: {}",
            errors.join("; ")
        ))
    }
}

#[test]
fn every_json_example_of_the_protocol_decodes_and_validates_against_its_schema() {
    let examples = examples(&repo().join("docs/protocol.md"));
    assert!(
        examples.len() >= 11,
        "only {} examples found",
        examples.len()
    );
    let mut failures = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for example in &examples {
        match check(example).and_then(|ty| validate(ty, example).map(|()| ty)) {
            Ok(ty) => {
                seen.insert(ty);
            }
            Err(e) => failures.push(format!(
                "docs/protocol.md:{} (under {}): {e}",
                example.line, example.heading
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every message on the wire has an example.
    for ty in [
        "Summon",
        "OrchestratorInput",
        "OrchestratorMessage",
        "OrchestratorStatus",
        "Control",
        "HumanMessage",
        "LogEntry",
        "ArbiterDelta",
        "SessionStatus",
        "WorkerPresence",
        "Evidence",
    ] {
        assert!(seen.contains(ty), "docs/protocol.md has no example of {ty}");
    }
}
