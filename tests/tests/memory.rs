//! Memory across sessions, end to end on a real nats-server with the mock
//! model: what a session on a workspace keeps (its Arbiter's `memory` field,
//! its Orchestrators' handoff decisions) opens the first Arbiter prompt of
//! the next session on that workspace and of no other; `arbiter-console
//! memory list|show|forget` shows and removes entries; an entry that looks
//! like a secret is refused with a reason and never stored.

use crate::common;

use std::process::Output;

use arbiter_protocol::{LogBody, MemoryEntry, MemoryKind};
use arbiter_tests::{MockReply, eventually};
use common::*;
use serde_json::{Value, json};

const W: &str = "proj-memory";
const FACT: &str = "The human wants every config file in TOML, never YAML.";
const DECISION: &str = "Sessions are stored in SQLite";
const WHY: &str = "one file, no server to run";
const BRIEF: &str = "Brief: T1, lay out the config module.";

/// The lane of a request as [`lane_of`] gives it, with the memory block
/// that opens a session's first prompt cut off: the scripts stay keyed on
/// the human's first words.
fn lane_without_memory(body: &Value) -> String {
    let lane = lane_of(body);
    match lane.split_once(":[Memory of workspace ") {
        Some((model, rest)) => format!(
            "{model}:{}",
            rest.split_once("\n\n").map_or("", |(_, words)| words)
        ),
        None => lane,
    }
}

/// The first user message of a request, as text.
fn first_user_text(request: &arbiter_tests::RecordedRequest) -> String {
    let first = request
        .messages()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap();
    match &first["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The entries of `workspace`, read from the bucket, newest first.
async fn stored(sys: &System, workspace: &str) -> Vec<MemoryEntry> {
    let store = arbiter_bus::memory::open(&sys.bus.js).await.unwrap();
    let mut entries = arbiter_bus::memory::entries(&store, workspace)
        .await
        .unwrap();
    entries.sort_by(|a, b| b.at.cmp(&a.at).then_with(|| a.id.cmp(&b.id)));
    entries
}

/// Runs `arbiter-console` with `args` as the console credential.
async fn console(sys: &System, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(arbiter_tests::bin("arbiter-console"));
    command
        .env_clear()
        .envs(sys.nats_env("console"))
        .args(args)
        .stdin(std::process::Stdio::null());
    tokio::time::timeout(WAIT, command.output())
        .await
        .expect("the console answers in time")
        .unwrap()
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "console failed: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Session A on workspace W keeps a fact (its Arbiter's `memory`) and a
/// decision (its Orchestrator's handoff; a second decision holding a token
/// is refused, and the log says why). Session B on W starts with both in its
/// first Arbiter request; sessions on another workspace, or none, do not.
/// The console lists, shows and forgets them (text and `--json`), on the
/// secure deployment (the console's own credential), and session C on W
/// starts without the forgotten fact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fact_kept_on_a_workspace_opens_its_next_session_and_forget_removes_it() {
    let sys = System::start_with(Options {
        secure: true,
        ..Default::default()
    })
    .await;
    sys.mock.set_lane_fn(lane_without_memory);

    // Session A: a fact from the Arbiter, a decision from the handoff.
    let a = "s-memory-a";
    let log_a = sys.watch_log(a).await;
    let arb_a = arbiter_lane("Plan the config work.");
    sys.mock.push(
        &arb_a,
        MockReply::json(&json!({
            "intent": "summon_orchestrator", "message": BRIEF, "memory": [FACT],
        })),
    );
    let packet = json!({
        "done": [{"id": "T1", "what": "config module laid out", "files": ["src/config.rs"]}],
        "open": [],
        "decisions": [
            {"decision": DECISION, "why": WHY},
            {"decision": "Deploy with ghp_0123456789abcdefghijABCDEFGHIJ", "why": "it works"},
        ],
        "questions": [],
        "next_step": "Nothing: T1 is done.",
    });
    sys.mock.push(
        &orch_lane(BRIEF),
        MockReply::json(&json!({
            "expects_response": true, "message": "T1 is done.", "handoff": packet,
        })),
    );
    sys.mock
        .push(&arb_a, arbiter("release_orchestrators", "It is done."));
    sys.send_in(W, a, "Plan the config work.").await;
    log_a
        .wait_for(
            "the Arbiter's last word",
            |b| matches!(b, LogBody::Arbiter(e) if e.text == "It is done."),
        )
        .await;
    // What the human reads of the refused decision: why, never the token.
    let refusal = log_a
        .bodies()
        .into_iter()
        .find_map(|b| match b {
            LogBody::System(s) if s.text.starts_with("Memory not kept") => Some(s.text),
            _ => None,
        })
        .expect("the refusal is in the log");
    assert!(
        refusal.starts_with(
            "Memory not kept from the handoff of Orchestrator I: the entry was refused: it \
             looks like it holds a secret (a GitHub token (ghp_…)); memory never keeps keys, \
             tokens or credentials"
        ),
        "{refusal}"
    );
    assert!(!refusal.contains("ghp_0123"), "{refusal}");
    let kept = eventually(WAIT, "two entries kept on W", || async {
        let entries = stored(&sys, W).await;
        (entries.len() == 2).then_some(entries)
    })
    .await;
    let fact = kept.iter().find(|e| e.kind == MemoryKind::Fact).unwrap();
    let decision = kept
        .iter()
        .find(|e| e.kind == MemoryKind::Decision)
        .unwrap();
    assert_eq!(
        (
            fact.text.as_str(),
            fact.by.as_str(),
            fact.session_id.as_str()
        ),
        (FACT, "Arbiter", a)
    );
    assert_eq!(decision.text, format!("{DECISION} (why: {WHY})"));
    assert_eq!(decision.by, "Orchestrator I");
    assert!(
        !stored(&sys, W)
            .await
            .iter()
            .any(|e| e.text.contains("ghp_")),
        "a refused entry is never stored"
    );

    // Session B on W: both open its first Arbiter request.
    let b = "s-memory-b";
    let log_b = sys.watch_log(b).await;
    let arb_b = arbiter_lane("Next: the CLI.");
    sys.mock.push(&arb_b, arbiter("address_human", "Speak."));
    sys.send_in(W, b, "Next: the CLI.").await;
    let first = &sys.mock.wait_for_requests(&arb_b, 1, WAIT).await[0];
    let opening = first_user_text(first);
    assert!(
        opening.starts_with(&format!("[Memory of workspace {W}: ")),
        "{opening}"
    );
    assert!(opening.contains(FACT), "{opening}");
    assert!(
        opening.contains(&format!("{DECISION} (why: {WHY})")),
        "{opening}"
    );
    assert!(opening.ends_with("\n\nNext: the CLI."), "{opening}");
    log_b
        .wait_for("the memory line", |b| {
            matches!(b, LogBody::System(s) if s.text.starts_with(
                "Memory of workspace proj-memory: 2 of 2 entries put in the Arbiter's first prompt"))
        })
        .await;

    // Another workspace, and no workspace at all: nothing of W. The other
    // workspace keeps a fact of its own.
    let o = "s-memory-other";
    let arb_o = arbiter_lane("Another project.");
    sys.mock.push(
        &arb_o,
        MockReply::json(&json!({
            "intent": "address_human", "message": "Speak.",
            "memory": ["The other project ships on Fridays."],
        })),
    );
    sys.send_in("other", o, "Another project.").await;
    let none = "s-memory-none";
    let arb_none = arbiter_lane("No workspace here.");
    sys.mock.push(&arb_none, arbiter("address_human", "Speak."));
    sys.send(none, "No workspace here.").await;
    for lane in [&arb_o, &arb_none] {
        let first = &sys.mock.wait_for_requests(lane, 1, WAIT).await[0];
        let all = first.all_text();
        assert!(!all.contains(FACT) && !all.contains(DECISION), "{all}");
        assert!(!all.contains("[Memory of workspace"), "{all}");
    }
    let other = eventually(WAIT, "the other workspace's fact", || async {
        let entries = stored(&sys, "other").await;
        (entries.len() == 1).then_some(entries)
    })
    .await;

    // The console: list, show, forget; text and JSON.
    let list = ok(&console(&sys, &["memory", "list", "--workspace", W]).await);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 3, "{list}");
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("KIND"),
        "{list}"
    );
    for e in &kept {
        let row = lines.iter().find(|l| l.starts_with(&e.id)).unwrap();
        assert!(
            row.contains(e.kind.as_str()) && row.contains(&e.by),
            "{row}"
        );
    }
    let json_list = ok(&console(&sys, &["memory", "list", "--workspace", W, "--json"]).await);
    let listed: Vec<MemoryEntry> = json_list
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed, kept);
    let shown = ok(&console(&sys, &["memory", "show", &fact.id, "--workspace", W]).await);
    assert!(
        shown.starts_with(&format!("id:        {}\n", fact.id)),
        "{shown}"
    );
    assert!(shown.contains("kind:      fact"), "{shown}");
    assert!(
        shown.contains(&format!("by Arbiter in session {a}")),
        "{shown}"
    );
    assert!(shown.trim_end().ends_with(FACT), "{shown}");
    let shown_json = ok(&console(
        &sys,
        &["memory", "show", &decision.id, "--workspace", W, "--json"],
    )
    .await);
    assert_eq!(
        serde_json::from_str::<MemoryEntry>(shown_json.trim()).unwrap(),
        *decision
    );
    let forgot = ok(&console(&sys, &["memory", "forget", &fact.id, "--workspace", W]).await);
    assert_eq!(
        forgot,
        format!("forgotten: {} (workspace {W}): {FACT}\n", fact.id)
    );
    assert_eq!(stored(&sys, W).await, vec![decision.clone()]);
    let forgot_json = ok(&console(
        &sys,
        &[
            "memory",
            "forget",
            &other[0].id,
            "--workspace",
            "other",
            "--json",
        ],
    )
    .await);
    let value: Value = serde_json::from_str(forgot_json.trim()).unwrap();
    assert_eq!(
        serde_json::from_value::<MemoryEntry>(value["forgotten"].clone()).unwrap(),
        other[0]
    );
    let empty = console(&sys, &["memory", "list", "--workspace", "other"]).await;
    assert_eq!(ok(&empty), "");
    assert!(text(&empty.stderr).contains("no memory in workspace other"));
    assert_eq!(
        ok(&console(&sys, &["memory", "list", "--workspace", "other", "--json"]).await),
        ""
    );
    // Bad input: what the human sees.
    let gone = console(&sys, &["memory", "show", &fact.id, "--workspace", W]).await;
    assert!(!gone.status.success());
    assert!(
        text(&gone.stderr).contains(&format!(
            "memory of workspace {W}: no entry {} (see `arbiter-console memory list --workspace {W}`)",
            fact.id
        )),
        "{}",
        text(&gone.stderr)
    );
    let bad = console(&sys, &["memory", "list", "--workspace", "a.b"]).await;
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("invalid workspace \"a.b\""),
        "{}",
        text(&bad.stderr)
    );

    // Session C on W: the decision still, the forgotten fact no more.
    let c = "s-memory-c";
    let arb_c = arbiter_lane("And the docs.");
    sys.mock.push(&arb_c, arbiter("address_human", "Speak."));
    sys.send_in(W, c, "And the docs.").await;
    let first = &sys.mock.wait_for_requests(&arb_c, 1, WAIT).await[0];
    let opening = first_user_text(first);
    assert!(opening.contains(DECISION), "{opening}");
    assert!(!first.all_text().contains(FACT), "{opening}");
}

// Decisions tested as table cases in coordinator/src/rules/tests/memory.rs.

/// Memory lives in NATS, not in a coordinator: what one coordinator
/// process kept, another reads after the first is killed with SIGKILL. The
/// second runs with `ARBITER_MEMORY_TOKENS=120`: its first prompt takes the
/// newest entry that fits and says that the older, longer one was left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_coordinator_reads_the_memory_within_the_budget_it_is_given() {
    let sys = System::start_with(Options {
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    sys.mock.set_lane_fn(lane_without_memory);
    let w = "proj-budget";
    let parts: Vec<String> = (1..=40)
        .map(|i| format!("part {i} of {}", 1000 + i * i))
        .collect();
    let long = format!("The release checklist: {}.", parts.join(", "));
    let short = "The human reviews every release note.";
    let mut first = sys.coordinator_process();
    for (s, words, fact) in [
        ("s-memory-k1", "Keep the checklist.", long.as_str()),
        ("s-memory-k2", "Keep the review rule.", short),
    ] {
        let lane = arbiter_lane(words);
        sys.mock.push(
            &lane,
            MockReply::json(&json!({
                "intent": "address_human", "message": "Kept.", "memory": [fact],
            })),
        );
        sys.send_in(w, s, words).await;
        let text = fact.trim().to_owned();
        eventually(WAIT, "the fact kept", || {
            let text = text.clone();
            let sys = &sys;
            async move {
                stored(sys, w)
                    .await
                    .iter()
                    .any(|e| e.text == text)
                    .then_some(())
            }
        })
        .await;
    }
    first.start_kill().unwrap();
    first.wait().await.unwrap();

    let _second = sys.coordinator_process_with(&[("ARBITER_MEMORY_TOKENS", "120".as_ref())]);
    let s = "s-memory-k3";
    let log = sys.watch_log(s).await;
    let lane = arbiter_lane("What do we know?");
    sys.mock.push(&lane, arbiter("address_human", "Speak."));
    sys.send_in(w, s, "What do we know?").await;
    let request = &sys.mock.wait_for_requests(&lane, 1, WAIT).await[0];
    let opening = first_user_text(request);
    assert!(opening.contains(short), "{opening}");
    assert!(!opening.contains("release checklist"), "{opening}");
    assert!(
        opening.contains("- (1 more left out: over the memory budget of 120 tokens)"),
        "{opening}"
    );
    log.wait_for("the memory line", |b| {
        matches!(b, LogBody::System(e) if e.text.starts_with(
            "Memory of workspace proj-budget: 1 of 2 entries put in the Arbiter's first prompt (120 tokens at most)"))
    })
    .await;
}
