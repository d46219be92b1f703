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

mod approval;
mod next;
mod outputs;
mod reply;
mod runtime;
mod tools;
mod window;
