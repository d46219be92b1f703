//! Table tests of the core: given a [`Core`] and an input (at a given
//! time), the [`Step`] it decides: what the log shows, what is published,
//! and what the snapshot holds after. No bus, no model, no clock: each case
//! runs in microseconds, and the end-to-end suite keeps one wiring test
//! per feature.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arbiter_bus::TraceContext;
use arbiter_llm::structured::Structured;
use arbiter_llm::{LlmError, Response, StopReason, Usage};
use arbiter_protocol::{
    ArbiterOutput, ControlAction, HumanMessage, LogBody, OrchestratorEvent, OrchestratorMessage,
    OrchestratorOutput, VERSION, WireError, member_name, roman,
};
use chrono::{DateTime, Utc};

use super::*;
use crate::rules::summons::FleetView;
use crate::rules::turn::TurnStart;
use crate::state::Effect;

/// The time `secs` seconds into a case.
pub(crate) fn at(secs: u64) -> Now {
    static START: OnceLock<(DateTime<Utc>, tokio::time::Instant)> = OnceLock::new();
    let (wall, mono) = *START.get_or_init(|| (Utc::now(), tokio::time::Instant::now()));
    Now {
        wall: wall + chrono::Duration::seconds(secs as i64),
        mono: mono + Duration::from_secs(secs),
    }
}

/// A new session's core with the default settings, changed by `set`.
pub(crate) fn core_with(set: impl FnOnce(&mut Config)) -> Core {
    let mut config = Config::default();
    set(&mut config);
    Core::new(
        "s1".into(),
        Arc::new(config),
        Arc::new(serde_json::json!({"type": "object"})),
        at(0),
    )
}

pub(crate) fn core() -> Core {
    core_with(|_| {})
}

pub(crate) fn human_message(id: &str, text: &str) -> HumanMessage {
    HumanMessage {
        v: VERSION,
        session_id: "s1".into(),
        message_id: id.into(),
        text: text.into(),
        sent_at: at(0).wall,
        command: None,
        budget: None,
        workspace: None,
        approval: None,
        policy: None,
        rewind: None,
    }
}

/// A human line from console `alice`.
pub(crate) fn human(text: &str) -> Input {
    human_from(text, "alice")
}

pub(crate) fn human_from(text: &str, console: &str) -> Input {
    Input::Human {
        message: Box::new(human_message(&format!("m-{text}"), text)),
        console: console.into(),
        trace: TraceContext::none(),
        ack: None,
    }
}

/// The Arbiter's reply: `{"intent": …, "message": …}` and `more` fields.
pub(crate) fn reply(intent: &str, message: &str, more: serde_json::Value) -> ArbiterOutput {
    let mut value = serde_json::json!({"intent": intent, "message": message});
    if let (Some(map), Some(more)) = (value.as_object_mut(), more.as_object()) {
        map.extend(more.clone());
    }
    serde_json::from_value(value).expect("a valid ArbiterOutput")
}

/// A turn's result: `output`, the model having said it filled `context` tokens.
pub(crate) fn answered(
    output: ArbiterOutput,
    context: u64,
) -> Result<Structured<ArbiterOutput>, LlmError> {
    Ok(Structured {
        raw: serde_json::to_string(&output).unwrap(),
        value: output,
        response: Response {
            content: Vec::new(),
            stop_reason: StopReason::EndTurn,
            usage: Some(Usage {
                input_tokens: context,
                output_tokens: 10,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 0,
            }),
        },
        repairs: 0,
    })
}

/// Starts the turn that is due, as the shell does (no memory read).
pub(crate) fn start_turn(core: &mut Core, now: Now) -> TurnStart {
    let start = core.turn_start(now);
    if let TurnStart::New { .. } = start {
        core.begin_turn(None, now);
    }
    start
}

/// Runs one whole Arbiter turn that answers `output`: started, ended.
pub(crate) fn turn(core: &mut Core, output: ArbiterOutput, now: Now) {
    assert!(core.turn_due(), "a turn is due");
    assert!(matches!(start_turn(core, now), TurnStart::New { .. }));
    core.turn_ended(
        answered(output, 1000),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        now,
    );
}

/// An Orchestrator's output `seq` (a report when `expects_response`).
pub(crate) fn output(orch_id: &str, seq: u64, text: &str, expects_response: bool) -> Input {
    let output: OrchestratorOutput = serde_json::from_value(serde_json::json!({
        "message": text,
        "expects_response": expects_response,
    }))
    .expect("a valid OrchestratorOutput");
    Input::Orchestrator(
        vec![OrchestratorMessage {
            v: VERSION,
            session_id: "s1".into(),
            orch_id: orch_id.into(),
            seq,
            event: OrchestratorEvent::Output(output),
            evidence: None,
            handoff: None,
            spend: None,
            session_inputs: true,
            sent_at: at(0).wall,
        }],
        TraceContext::none(),
        None,
    )
}

/// One line per effect, as a reader of the step would tell it.
pub(crate) fn shown(step: &Step) -> Vec<String> {
    step.effects.iter().map(line).collect()
}

fn line(effect: &Effect) -> String {
    match effect {
        Effect::Log(entry) => match &entry.body {
            LogBody::Human(e) => format!("You: {}", e.text),
            LogBody::Arbiter(e) => format!("Arbiter: {}", e.text),
            LogBody::ArbiterToOrchestrator(e) => {
                format!("Arbiter → {}: {}", member_name(e.number, e.member), e.text)
            }
            LogBody::Orchestrator(e) if e.expects_response => {
                format!("{}: {}", member_name(e.number, e.member), e.text)
            }
            LogBody::Orchestrator(e) => {
                format!("{} (note): {}", member_name(e.number, e.member), e.text)
            }
            LogBody::Musing(e) => format!("Musing: {}", e.text),
            LogBody::Summoned(e) => {
                format!("Summoned {}: {}", member_name(e.number, e.member), e.brief)
            }
            LogBody::Released(e) => format!(
                "Released: {}",
                e.numbers
                    .iter()
                    .map(|n| roman(*n))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            LogBody::System(e) => format!("System: {}", e.text),
            LogBody::Rewound(e) => format!("Rewound: {} by {}", e.checkpoint, e.console),
            LogBody::Error(e) => format!("Error: {}", e.error),
            LogBody::ArbiterHandoff(e) => format!("Handoff: generation {}", e.generation),
            LogBody::Strategy(e) => format!(
                "Strategy: {} x{}{}",
                e.strategy.as_str(),
                e.members,
                e.rejected
                    .as_deref()
                    .map(|r| format!(" refused: {r}"))
                    .unwrap_or_default()
            ),
            LogBody::Consensus(e) => format!("Consensus: {}", e.summary()),
            LogBody::Step(_) => "Step".into(),
            LogBody::ApprovalAsked(e) => format!("Approval {} asked: {}", e.approval, e.line()),
            LogBody::ApprovalAnswered(e) => format!(
                "Approval {} (input {} to {}): {}",
                e.approval,
                e.input_seq,
                e.orch_id,
                e.line()
            ),
        },
        Effect::Summon(s) => format!("summons {} to {}", member_name(s.number, s.member), s.pool),
        Effect::Input(i) => format!("input to {}: {}", i.orch_id, i.message),
        Effect::Control(c) => format!(
            "{} {}",
            match c.action {
                ControlAction::Release => "release",
                ControlAction::Cancel => "cancel",
            },
            c.orch_id
        ),
        Effect::Memory(m) => format!("memory: {}", m.text),
        Effect::Notify { event: n } => format!("notify {}: {}", n.kind.as_str(), n.summary),
    }
}

/// Whether some line of `lines` starts with `prefix`.
pub(crate) fn has(lines: &[String], prefix: &str) -> bool {
    lines.iter().any(|l| l.starts_with(prefix))
}

/// The orch_id of the live Orchestrator number `number` (first member).
pub(crate) fn orch_id(core: &Core, number: u32) -> String {
    core.state
        .team
        .iter()
        .find(|a| a.number == number)
        .map(|a| a.orch_id.clone())
        .expect("that Orchestrator is live")
}

/// A session whose Orchestrator I works on `brief`.
pub(crate) fn summoned(brief: &str) -> Core {
    let mut core = core();
    core.on_input(human("Build it"), at(0));
    turn(
        &mut core,
        reply("summon_orchestrator", brief, serde_json::json!({})),
        at(1),
    );
    core.take_step();
    core
}

/// Runs one whole Arbiter turn that answers `output`, the session having
/// seen the workers `fleet` before routing it (a directed summons).
pub(crate) fn turn_seeing(core: &mut Core, output: ArbiterOutput, fleet: &FleetView, now: Now) {
    assert!(matches!(start_turn(core, now), TurnStart::New { .. }));
    core.turn_ended(
        answered(output, 1000),
        Vec::new(),
        fleet,
        &tracing::Span::none(),
        now,
    );
}

/// Runs one whole Arbiter turn whose model call fails with `error`.
pub(crate) fn failed_turn(core: &mut Core, error: LlmError, now: Now) {
    assert!(matches!(start_turn(core, now), TurnStart::New { .. }));
    core.turn_ended(
        Err(error),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        now,
    );
}

/// What the next Arbiter turn is asked (its last user message), the turn
/// started as the shell starts it.
pub(crate) fn next_asked(core: &mut Core, now: Now) -> String {
    assert!(matches!(start_turn(core, now), TurnStart::New { .. }));
    core.transcript.last().expect("a user turn").text.clone()
}

mod approval;
mod budget;
mod consensus;
mod guard;
mod handoff;
mod intake;
mod memory;
mod notify;
mod outputs;
mod rewind;
mod routing;
mod team;
