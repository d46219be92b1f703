//! Table tests: the workspace's memory (kept facts, refusals, the recall).

use arbiter_protocol::handoff::Decision;
use arbiter_protocol::{ArbiterPacket, Handoff, MemoryEntry, MemoryKind};

use super::*;
use crate::rules::arbiter_handoff::PendingHandoff;
use crate::rules::memory::entry_id;
use crate::state::Pending;

/// A human line from console `alice` that names `workspace`.
fn human_in(text: &str, workspace: &str) -> Input {
    let mut message = human_message(&format!("m-{text}"), text);
    message.workspace = Some(workspace.into());
    Input::Human {
        message: Box::new(message),
        console: "alice".into(),
        trace: TraceContext::none(),
        ack: None,
    }
}

/// The Arbiter answers "Noted." and asks to keep `facts`.
fn noted(facts: &[&str]) -> ArbiterOutput {
    reply(
        "address_human",
        "Noted.",
        serde_json::json!({ "memory": facts }),
    )
}

fn kept(step: &Step) -> Vec<&MemoryEntry> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Memory(m) => Some(m),
            _ => None,
        })
        .collect()
}

fn entry(text: &str, secs: u64) -> MemoryEntry {
    MemoryEntry {
        v: VERSION,
        workspace: "acme".into(),
        id: entry_id("acme", text),
        kind: MemoryKind::Fact,
        text: text.into(),
        session_id: "s0".into(),
        by: "Arbiter".into(),
        at: at(secs).wall,
    }
}

#[test]
fn a_fact_the_arbiter_keeps_is_a_memory_effect_of_its_step() {
    let mut core = core();
    core.on_input(human_in("Use TOML", "acme"), at(0));
    core.take_step();
    turn(
        &mut core,
        noted(&["The human prefers TOML for config."]),
        at(1),
    );
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            "memory: The human prefers TOML for config.",
            "Arbiter: Noted."
        ]
    );
    let fact = kept(&step)[0];
    assert_eq!(
        *fact,
        MemoryEntry {
            v: VERSION,
            workspace: "acme".into(),
            id: entry_id("acme", "The human prefers TOML for config."),
            kind: MemoryKind::Fact,
            text: "The human prefers TOML for config.".into(),
            session_id: "s1".into(),
            by: "Arbiter".into(),
            at: at(1).wall,
        }
    );
}

#[test]
fn without_a_workspace_nothing_is_kept_and_nothing_is_said() {
    let mut core = core();
    core.on_input(human("Use TOML"), at(0));
    core.take_step();
    turn(
        &mut core,
        noted(&["The human prefers TOML for config."]),
        at(1),
    );
    assert_eq!(shown(&core.take_step()), vec!["Arbiter: Noted."]);
    assert!(!core.turn_due());
}

#[test]
fn a_secret_looking_fact_is_refused_said_and_never_quoted() {
    let secret = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123";
    let mut core = core();
    core.on_input(human_in("Deploy it", "acme"), at(0));
    core.take_step();
    let fact = format!("The deploy key is {secret}");
    turn(
        &mut core,
        noted(&[fact.as_str(), "Deploys go through CI."]),
        at(1),
    );
    let step = core.take_step();
    let lines = shown(&step);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], "memory: Deploys go through CI.");
    assert!(
        lines[1].starts_with(
            "System: Memory not kept: the entry was refused: it looks like it holds a secret \
             (an Anthropic API key (sk-ant-…)); memory never keeps keys, tokens or credentials"
        ),
        "{lines:?}"
    );
    assert_eq!(lines[2], "Arbiter: Noted.");
    assert!(lines.iter().all(|l| !l.contains(secret)), "{lines:?}");
    assert_eq!(kept(&step).len(), 1);
    // The Arbiter reads why, with its next turn.
    assert!(matches!(
        core.state.queue.front(),
        Some(Pending::System { text }) if text.starts_with("Memory not kept:")
    ));
}

#[test]
fn an_entry_too_long_is_refused_with_its_first_words() {
    let mut core = core();
    core.on_input(human_in("Remember all this", "acme"), at(0));
    core.take_step();
    let long = "word ".repeat(240);
    turn(&mut core, noted(&[long.as_str()]), at(1));
    let step = core.take_step();
    assert_eq!(
        shown(&step),
        vec![
            "System: Memory not kept: the entry \"word word word word word word\" was refused: \
             a memory entry is one fact of at most 1000 characters (this one has 1200)",
            "Arbiter: Noted.",
        ]
    );
    assert!(kept(&step).is_empty());
}

#[test]
fn the_first_turn_on_a_workspace_wants_its_memory_and_the_block_opens_the_prompt() {
    let mut core = core();
    core.on_input(human_in("Use TOML", "acme"), at(0));
    core.take_step();
    assert_eq!(
        core.turn_start(at(1)),
        TurnStart::New {
            recall: Some("acme".into())
        }
    );
    let entries = vec![
        entry("The human prefers TOML.", 0),
        entry("CI runs on every push.", 1),
    ];
    core.begin_turn(Some(("acme".into(), Ok(entries.clone()))), at(1));
    assert_eq!(
        shown(&core.take_step()),
        vec![
            "System: Memory of workspace acme: 2 of 2 entries put in the Arbiter's first prompt \
             (2000 tokens at most). See them with `arbiter-console memory list --workspace \
             acme`."
        ]
    );
    let prompt = &core.transcript[0].text;
    assert!(prompt.starts_with("[Memory of workspace acme:"), "{prompt}");
    for e in &entries {
        assert!(prompt.contains(&format!("[{}]", e.id)), "{prompt}");
    }
    assert!(prompt.ends_with("\n\nUse TOML"), "{prompt}");
}

#[test]
fn the_recalled_block_keeps_to_the_memory_budget() {
    let mut core = core_with(|c| c.memory_tokens = 150);
    let entries: Vec<MemoryEntry> = (0..20)
        .map(|i| entry(&format!("Fact number {i} about the build."), i))
        .collect();
    let block = core.recalled("acme", Ok(entries)).expect("a block");
    let lines = shown(&core.take_step());
    assert!(
        lines[0].starts_with("System: Memory of workspace acme: "),
        "{lines:?}"
    );
    assert!(
        lines[0].contains(" of 20 entries put in the Arbiter's first prompt (150 tokens at most)"),
        "{lines:?}"
    );
    assert!(!lines[0].contains(": 20 of 20"), "{lines:?}");
    assert!(
        block.contains("more left out: over the memory budget of 150 tokens"),
        "{block}"
    );
}

#[test]
fn no_recall_without_a_workspace_or_with_a_memory_budget_of_0() {
    let mut plain = core();
    plain.on_input(human("hi"), at(0));
    assert_eq!(plain.turn_start(at(1)), TurnStart::New { recall: None });
    let mut off = core_with(|c| c.memory_tokens = 0);
    off.on_input(human_in("hi", "acme"), at(0));
    assert_eq!(off.turn_start(at(1)), TurnStart::New { recall: None });
}

#[test]
fn an_unreadable_memory_is_said_and_the_session_starts_without_it() {
    let mut core = core();
    core.on_input(human_in("Use TOML", "acme"), at(0));
    core.take_step();
    assert!(matches!(core.turn_start(at(1)), TurnStart::New { .. }));
    core.begin_turn(
        Some(("acme".into(), Err("timed out after 5 s".into()))),
        at(1),
    );
    assert_eq!(
        shown(&core.take_step()),
        vec![
            "System: The memory of workspace acme could not be read (timed out after 5 s): the \
             session starts without it."
        ]
    );
    assert_eq!(core.transcript[0].text, "Use TOML");
    assert!(core.state.turn_in_flight);
}

#[test]
fn an_empty_memory_adds_nothing() {
    let mut core = core();
    core.on_input(human_in("Use TOML", "acme"), at(0));
    core.take_step();
    assert!(matches!(core.turn_start(at(1)), TurnStart::New { .. }));
    core.begin_turn(Some(("acme".into(), Ok(Vec::new()))), at(1));
    assert!(shown(&core.take_step()).is_empty());
    assert_eq!(core.transcript[0].text, "Use TOML");
}

#[test]
fn a_workspace_name_that_is_not_one_is_refused() {
    let mut core = core();
    core.on_input(human_in("hi", "bad name!"), at(0));
    assert_eq!(
        shown(&core.take_step()),
        vec![
            "You: hi",
            "System: The workspace name \"bad name!\" was refused (letters, digits, - or _, at \
             most 64 bytes): this session has no memory."
        ]
    );
    assert_eq!(core.state.workspace, None);
    assert!(core.turn_due(), "the message itself goes on");
}

#[test]
fn the_first_workspace_named_is_the_sessions() {
    let mut core = core();
    core.on_input(human_in("one", "acme"), at(0));
    core.on_input(human_in("two", "other"), at(1));
    assert_eq!(shown(&core.take_step()), vec!["You: one", "You: two"]);
    assert_eq!(core.state.workspace.as_deref(), Some("acme"));
}

#[test]
fn an_orchestrators_handoff_decisions_are_kept_as_decisions() {
    let mut core = core();
    core.on_input(human_in("Build it", "acme"), at(0));
    turn(
        &mut core,
        reply("summon_orchestrator", "Build it.", serde_json::json!({})),
        at(1),
    );
    core.take_step();
    let id = orch_id(&core, 1);
    let Input::Orchestrator(mut messages, trace, ack) =
        output(&id, 1, "Done; packet attached.", true)
    else {
        unreachable!()
    };
    let packet: Handoff = serde_json::from_value(serde_json::json!({
        "done": [{"id": "T1", "what": "config loader", "files": ["config.rs"]}],
        "open": [],
        "decisions": [{"decision": "Use TOML", "why": "the human asked"}],
        "questions": [],
        "next_step": "Nothing."
    }))
    .unwrap();
    messages[0].handoff = Some(Box::new(packet));
    core.on_input(Input::Orchestrator(messages, trace, ack), at(2));
    let step = core.take_step();
    let decisions = kept(&step);
    assert_eq!(decisions.len(), 1, "{:?}", shown(&step));
    assert_eq!(decisions[0].text, "Use TOML (why: the human asked)");
    assert_eq!(decisions[0].kind, MemoryKind::Decision);
    assert_eq!(decisions[0].by, "Orchestrator I");
}

#[test]
fn an_arbiter_handoff_keeps_its_decisions_and_the_next_generation_recalls_afresh() {
    let mut core = core();
    core.on_input(human_in("Build it", "acme"), at(0));
    turn(
        &mut core,
        reply("address_human", "Sure.", serde_json::json!({})),
        at(1),
    );
    core.take_step();
    core.state.arbiter.pending = Some(PendingHandoff {
        context_tokens: 150_000,
    });
    let packet = ArbiterPacket {
        goal: "Build it.".into(),
        preferences: vec![],
        decisions: vec![Decision {
            decision: "TOML".into(),
            why: "the human asked".into(),
        }],
        orchestrators: vec![],
        open: vec![],
        active: None,
    };
    core.handoff_ended(Vec::new(), Ok(packet), at(2));
    let step = core.take_step();
    let decisions = kept(&step);
    assert_eq!(decisions.len(), 1, "{:?}", shown(&step));
    assert_eq!(decisions[0].text, "TOML (why: the human asked)");
    assert_eq!(decisions[0].by, "Arbiter, generation 1");
    core.on_input(human("Go on"), at(3));
    assert_eq!(
        core.turn_start(at(4)),
        TurnStart::New {
            recall: Some("acme".into())
        }
    );
}

// Moved from the end-to-end suite (tests/tests/memory.rs).

#[test]
fn a_secret_beside_a_harmless_fact_only_the_harmless_one_is_kept_and_the_arbiter_reads_why() {
    let secret = "sk-ant-api03-Zx9kQ2mP7vL4wR8tY3nB6cF1";
    let harmless = "Tests run with cargo nextest.";
    let mut core = core();
    core.on_input(human_in("Keep my key handy.", "proj-secret"), at(0));
    core.take_step();
    let fact = format!("The deploy key is {secret}");
    turn(
        &mut core,
        reply(
            "address_human",
            "So it shall be.",
            serde_json::json!({"memory": [fact, harmless]}),
        ),
        at(1),
    );
    let step = core.take_step();
    let expected = "Memory not kept: the entry was refused: it looks like it holds a secret (an \
                    Anthropic API key (sk-ant-…)); memory never keeps keys, tokens or \
                    credentials: say where the secret lives instead (e.g. \"the API key is in \
                    the ANTHROPIC_API_KEY variable\")";
    assert!(
        has(&shown(&step), &format!("System: {expected}")),
        "{:?}",
        shown(&step)
    );
    // Only the harmless entry goes to the bucket; no effect of the step quotes the secret.
    let texts: Vec<&str> = kept(&step).iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, vec![harmless]);
    assert!(shown(&step).iter().all(|l| !l.contains(secret)));
    // The Arbiter reads the same reason with its next input.
    core.on_input(human("Go on."), at(2));
    core.take_step();
    let next = next_asked(&mut core, at(3));
    assert!(next.contains(&format!("System: {expected}")), "{next}");
    assert!(!next.contains(secret));
}

#[test]
fn the_next_arbiter_generation_opens_with_the_memory_its_predecessor_kept() {
    let kept_fact = "The human reviews every migration before it runs.";
    let mut core = core();
    core.on_input(human_in("First.", "proj-generations"), at(0));
    core.take_step();
    // The first generation's first turn: the workspace has no memory yet.
    assert_eq!(
        core.turn_start(at(1)),
        TurnStart::New {
            recall: Some("proj-generations".into())
        }
    );
    core.begin_turn(Some(("proj-generations".into(), Ok(Vec::new()))), at(1));
    assert!(!core.transcript[0].text.contains("[Memory of workspace"));
    core.turn_ended(
        answered(
            reply(
                "address_human",
                "One.",
                serde_json::json!({"memory": [kept_fact]}),
            ),
            1000,
        ),
        Vec::new(),
        &FleetView::NotAsked,
        &tracing::Span::none(),
        at(1),
    );
    let step = core.take_step();
    let fact = kept(&step)[0].clone();
    assert_eq!(fact.text, kept_fact);
    core.state.arbiter.pending = Some(PendingHandoff {
        context_tokens: 7000,
    });
    let packet = ArbiterPacket {
        goal: "Plan the migrations.".into(),
        preferences: vec!["reviews before runs".into()],
        decisions: vec![Decision {
            decision: "Migrations go in one file per table".into(),
            why: "short reviews".into(),
        }],
        orchestrators: vec![],
        open: vec![],
        active: None,
    };
    core.handoff_ended(Vec::new(), Ok(packet), at(2));
    let step = core.take_step();
    let decision = kept(&step)[0].clone();
    assert_eq!(
        decision.text,
        "Migrations go in one file per table (why: short reviews)"
    );
    assert_eq!(
        (decision.kind, decision.by.as_str()),
        (MemoryKind::Decision, "Arbiter, generation 1")
    );
    // The next generation's first turn recalls afresh: what the bucket
    // holds now (the fact and the decision) opens it.
    core.on_input(human_in("Fourth.", "proj-generations"), at(3));
    core.take_step();
    assert_eq!(
        core.turn_start(at(4)),
        TurnStart::New {
            recall: Some("proj-generations".into())
        }
    );
    core.begin_turn(
        Some(("proj-generations".into(), Ok(vec![fact, decision]))),
        at(4),
    );
    let opening = &core.transcript.last().unwrap().text;
    assert!(
        opening.starts_with("[Memory of workspace proj-generations: ")
            && opening.contains(kept_fact)
            && opening.contains("Migrations go in one file per table (why: short reviews)"),
        "{opening}"
    );
    assert!(opening.ends_with("Fourth."), "{opening}");
}
