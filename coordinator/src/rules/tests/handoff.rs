//! Table tests: the Arbiter's own handoff to its next generation.

use arbiter_llm::{Block, MessageRole};
use arbiter_protocol::{ArbiterHandoffEntry, ArbiterPacket, GenerationLine};

use super::*;
use crate::state::TurnRole;

/// A core that hands off past 60 % of a 10,000-token context: 6,000.
fn handing() -> Core {
    core_with(|c| {
        c.context_budget = 10_000;
        c.arbiter_handoff_pct = 60;
    })
}

/// One exchange: the human's `text`, the Arbiter's answer, after which its
/// context is `context` tokens. The step, as shown.
fn exchange(core: &mut Core, text: &str, context: u64, now: Now) -> Vec<String> {
    core.on_input(human(text), now);
    assert!(matches!(start_turn(core, now), TurnStart::New { .. }));
    core.turn_ended(
        answered(
            reply(
                "address_human",
                &format!("re: {text}"),
                serde_json::json!({}),
            ),
            context,
        ),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        now,
    );
    shown(&core.take_step())
}

/// A session whose third exchange took its context past the threshold.
fn due() -> Core {
    let mut core = handing();
    for (i, q) in ["q1", "q2", "q3"].into_iter().enumerate() {
        exchange(&mut core, q, 7000, at(i as u64));
    }
    assert!(core.handoff_due());
    core
}

fn packet() -> ArbiterPacket {
    ArbiterPacket {
        goal: "An auth system with OAuth.".into(),
        preferences: vec!["Rust only".into()],
        decisions: vec![],
        orchestrators: vec![],
        open: vec![],
        active: None,
    }
}

fn handoff_entry(step: &Step) -> &ArbiterHandoffEntry {
    step.effects
        .iter()
        .find_map(|e| match e {
            Effect::Log(entry) => match &entry.body {
                LogBody::ArbiterHandoff(h) => Some(h),
                _ => None,
            },
            _ => None,
        })
        .expect("a handoff entry")
}

fn text(message: &arbiter_llm::Message) -> String {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

const ASKED: &str = "System: Arbiter, generation 1: its context is 70 % full (it hands off past \
                     60 %). It is asked for its packet, and Arbiter, generation 2 takes over \
                     from it. What comes meanwhile waits; the Orchestrator at work goes on.";

#[test]
fn no_handoff_while_the_kept_exchanges_are_all_there_is() {
    let mut core = handing();
    for (i, q) in ["q1", "q2"].into_iter().enumerate() {
        let lines = exchange(&mut core, q, 9000, at(i as u64));
        assert!(!has(&lines, "System: Arbiter, generation"), "{lines:?}");
    }
    assert!(!core.handoff_due());
    assert!(core.state.arbiter.pending.is_none());
}

#[test]
fn past_the_threshold_after_a_turn_a_handoff_is_asked_for() {
    let mut core = handing();
    exchange(&mut core, "q1", 7000, at(0));
    exchange(&mut core, "q2", 7000, at(1));
    let lines = exchange(&mut core, "q3", 7000, at(2));
    assert_eq!(lines, vec!["You: q3", "Arbiter: re: q3", ASKED]);
    assert!(core.handoff_due());
    assert_eq!(
        core.state
            .arbiter
            .pending
            .as_ref()
            .map(|p| p.context_tokens),
        Some(7000)
    );
}

#[test]
fn below_the_threshold_no_handoff_is_asked_for() {
    let mut core = handing();
    for (i, q) in ["q1", "q2", "q3", "q4"].into_iter().enumerate() {
        let lines = exchange(&mut core, q, 5999, at(i as u64));
        assert!(!has(&lines, "System: Arbiter, generation"), "{lines:?}");
    }
    assert!(!core.handoff_due());
}

#[test]
fn a_handoff_share_of_0_never_hands_off() {
    let mut core = core_with(|c| {
        c.context_budget = 10_000;
        c.arbiter_handoff_pct = 0;
    });
    for (i, q) in ["q1", "q2", "q3", "q4"].into_iter().enumerate() {
        exchange(&mut core, q, 10_000, at(i as u64));
    }
    assert!(!core.handoff_due());
}

#[test]
fn what_comes_while_a_handoff_is_due_waits_for_it() {
    let mut core = due();
    core.on_input(human("q4"), at(5));
    assert_eq!(shown(&core.take_step()), vec!["You: q4"]);
    assert!(!core.turn_due(), "no turn before the handoff");
    core.handoff_ended(Vec::new(), Ok(packet()), at(6));
    core.take_step();
    assert!(core.turn_due());
}

#[test]
fn the_packet_request_is_the_transcript_then_the_ask() {
    let core = due();
    let ask = core.handoff_ask();
    let messages = &ask.request.messages;
    assert_eq!(messages.len(), core.transcript.len() + 1);
    assert_eq!(text(&messages[0]), "q1");
    let last = messages.last().unwrap();
    assert_eq!(last.role, MessageRole::User);
    assert!(
        text(last).starts_with(
            "[System: your context is 70 % full. Before anything else, write your Arbiter \
             packet. Arbiter, generation 2 takes over from it: it gets the system prompt, this \
             packet and your last 2 exchanges verbatim"
        ),
        "{}",
        text(last)
    );
    assert!(ask.request.output_schema.is_some());
    assert_eq!(ask.repairs, core.config.schema_repairs);
}

#[test]
fn a_valid_packet_replaces_the_transcript_and_logs_the_generation() {
    let mut core = due();
    let before = core.transcript.clone();
    assert_eq!(before.len(), 6);
    core.handoff_ended(Vec::new(), Ok(packet()), at(5));
    let step = core.take_step();
    assert_eq!(shown(&step), vec!["Handoff: generation 2"]);
    assert!(step.replace_transcript);
    assert!(step.changed);
    let entry = handoff_entry(&step);
    assert_eq!(*entry.packet, packet());
    assert_eq!(entry.built_by_coordinator, None);
    assert_eq!(entry.kept_exchanges, 2);
    assert_eq!(entry.context_tokens_before, 7000);
    assert_eq!(core.state.context_tokens, entry.context_tokens_after);
    // The packet, then the last two exchanges verbatim.
    assert_eq!(core.transcript.len(), 4);
    assert_eq!(core.transcript[0].role, TurnRole::User);
    assert!(
        core.transcript[0]
            .text
            .starts_with("[You are Arbiter generation 2."),
        "{}",
        core.transcript[0].text
    );
    assert!(
        core.transcript[0]
            .text
            .contains("An auth system with OAuth.")
    );
    assert!(core.transcript[0].text.ends_with("\n\nq2"));
    assert_eq!(core.transcript[1..], before[3..]);
    assert_eq!(core.state.arbiter.handoffs, 1);
    assert_eq!(core.state.arbiter.generation(), 2);
    assert_eq!(core.state.arbiter.since_turn, 3);
    assert!(core.state.arbiter.pending.is_none());
    assert!(!core.handoff_due());
}

#[test]
fn no_valid_packet_the_coordinator_builds_one_from_the_records() {
    let mut core = due();
    core.handoff_ended(
        Vec::new(),
        Err(LlmError::SchemaViolation {
            attempts: 3,
            detail: "goal must say what the human wants".into(),
        }),
        at(5),
    );
    let step = core.take_step();
    let lines = shown(&step);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0]
            .starts_with("Error: the Arbiter's reply did not match its schema after 3 attempts"),
        "{lines:?}"
    );
    assert_eq!(lines[1], "Handoff: generation 2");
    assert!(step.replace_transcript);
    let entry = handoff_entry(&step);
    assert!(
        entry
            .built_by_coordinator
            .as_deref()
            .is_some_and(|why| why.starts_with("the Arbiter gave no valid packet:")),
        "{:?}",
        entry.built_by_coordinator
    );
    // The human's first words are the goal of the first generation.
    assert_eq!(entry.packet.goal, "q1");
    assert!(entry.packet.active.is_none());
    assert_eq!(core.state.arbiter.handoffs, 1);
}

#[test]
fn a_built_packet_names_the_orchestrator_at_work() {
    let core = summoned("Build the auth module");
    let packet = core.built_packet();
    assert_eq!(packet.goal, "Build it");
    assert_eq!(
        packet.orchestrators,
        vec![GenerationLine {
            number: 1,
            line: "at work; no handoff packet yet".into()
        }]
    );
    assert_eq!(packet.active.as_ref().map(|a| a.number), Some(1));
}

#[test]
fn the_next_generation_is_not_handed_off_again_before_it_has_had_its_turns() {
    let mut core = due();
    core.handoff_ended(Vec::new(), Ok(packet()), at(5));
    core.take_step();
    for (i, q) in ["q4", "q5"].into_iter().enumerate() {
        let lines = exchange(&mut core, q, 9000, at(6 + i as u64));
        assert!(!has(&lines, "System: Arbiter, generation"), "{lines:?}");
    }
    let lines = exchange(&mut core, "q6", 9000, at(8));
    assert_eq!(
        lines.last().map(String::as_str),
        Some(
            "System: Arbiter, generation 2: its context is 90 % full (it hands off past 60 %). \
             It is asked for its packet, and Arbiter, generation 3 takes over from it. What \
             comes meanwhile waits; the Orchestrator at work goes on."
        )
    );
}
