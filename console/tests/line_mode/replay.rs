//! Attaching to a session replays its log: every kind of entry, each seq
//! once; the console then exits, or with `--follow` stays for what comes next.

use std::time::Duration;

use arbiter_protocol::{
    ArbiterToOrchestratorEntry, ErrorEntry, HumanEntry, LogBody, LogEntry, ModelErrorKind,
    MusingEntry, OrchestratorEntry, ReleasedEntry, Role, SummonedEntry, SystemEntry, WireError,
};
use pretty_assertions::assert_eq;

use crate::harness::{Console, Coordinator, arbiter, entry, idle_status};

/// A log with an entry of every kind, and the plain lines it prints (musing hidden).
fn full_log(session_id: &str) -> (Vec<LogEntry>, Vec<&'static str>) {
    let bodies = vec![
        LogBody::Human(HumanEntry {
            message_id: "m-1".into(),
            text: "Build me a bridge.".into(),
        }),
        LogBody::Musing(MusingEntry {
            text: "A bridge needs an engineer.".into(),
        }),
        LogBody::Summoned(SummonedEntry {
            member: None,
            number: 1,
            orch_id: "o-1".into(),
            pool: "default".into(),
            brief: "Design a bridge.".into(),
        }),
        LogBody::Orchestrator(OrchestratorEntry {
            member: None,
            number: 1,
            orch_id: "o-1".into(),
            expects_response: false,
            text: "Surveying the river.".into(),
            evidence: None,
            handoff: None,
        }),
        LogBody::Orchestrator(OrchestratorEntry {
            member: None,
            number: 1,
            orch_id: "o-1".into(),
            expects_response: true,
            text: "Stone or steel?".into(),
            evidence: None,
            handoff: None,
        }),
        LogBody::ArbiterToOrchestrator(ArbiterToOrchestratorEntry {
            member: None,
            number: 1,
            orch_id: "o-1".into(),
            text: "Stone.".into(),
            input_seq: None,
            budget: None,
        }),
        LogBody::Summoned(SummonedEntry {
            member: None,
            number: 2,
            orch_id: "o-2".into(),
            pool: "default".into(),
            brief: "Build the bridge\nfrom the design.".into(),
        }),
        LogBody::Error(ErrorEntry {
            error: WireError::OrchestratorFailed {
                number: 2,
                message: "the worker went away".into(),
            },
        }),
        LogBody::Released(ReleasedEntry {
            member: None,
            numbers: vec![1, 2],
        }),
        LogBody::System(SystemEntry {
            text: "No Orchestrator is active.".into(),
        }),
        LogBody::Error(ErrorEntry {
            error: WireError::Model {
                role: Role::Arbiter,
                class: ModelErrorKind::Overloaded,
                message: "529 overloaded".into(),
            },
        }),
        LogBody::Summoned(SummonedEntry {
            member: None,
            number: 3,
            orch_id: "o-3".into(),
            pool: "default".into(),
            brief: "Finish it.".into(),
        }),
        LogBody::Released(ReleasedEntry {
            member: None,
            numbers: vec![3],
        }),
        arbiter("The bridge stands."),
    ];
    let entries = bodies
        .into_iter()
        .zip(1..)
        .map(|(body, seq)| entry(session_id, seq, body))
        .collect();
    let lines = vec![
        "You: Build me a bridge.",
        "· Orchestrator I summoned: Design a bridge.",
        "Orchestrator I (note): Surveying the river.",
        "Orchestrator I: Stone or steel?",
        "Arbiter → Orchestrator I: Stone.",
        "· Orchestrator II summoned: Build the bridge\n  │ from the design.",
        "! Error: Orchestrator II stopped: the worker went away",
        "· Orchestrator I, II released.",
        "· System: No Orchestrator is active.",
        "! Error: the Arbiter's model call failed: 529 overloaded",
        "· Orchestrator III summoned: Finish it.",
        "· Orchestrator III released.",
        "Arbiter: The bridge stands.",
    ];
    (entries, lines)
}

#[tokio::test]
async fn attaching_replays_the_whole_log_in_order() {
    let coordinator = Coordinator::start().await;
    let session_id = "replayed";
    let (entries, lines) = full_log(session_id);
    coordinator.log(&entries).await;
    coordinator
        .store_status(&idle_status(session_id, entries.len() as u64))
        .await;

    let console = Console::spawn(
        &["--session", session_id, "--nats-url", coordinator.url()],
        false,
    );
    let done = console.finish().await;
    done.assert_success();
    assert_eq!(done.stdout, lines.join("\n") + "\n");
    assert_eq!(
        done.stderr.first().map(String::as_str),
        Some("session replayed")
    );
    done.assert_resume_hint(session_id);

    // With --show-musings the musing shows in its place.
    let console = Console::spawn(
        &[
            "--session",
            session_id,
            "--show-musings",
            "--nats-url",
            coordinator.url(),
        ],
        false,
    );
    let done = console.finish().await;
    done.assert_success();
    let mut with_musing = lines.clone();
    with_musing.insert(1, "Arbiter (musing): A bridge needs an engineer.");
    assert_eq!(done.stdout, with_musing.join("\n") + "\n");
}

#[tokio::test]
async fn a_new_session_with_no_input_exits_after_the_replay() {
    let coordinator = Coordinator::start().await;
    let started = std::time::Instant::now();
    let console = Console::spawn(&["--nats-url", coordinator.url()], false);
    let done = console.finish().await;
    done.assert_success();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(done.stdout, "");
    assert_eq!(done.stderr.len(), 2, "{done:#?}");
}

#[tokio::test]
async fn follow_keeps_going_until_interrupted() {
    let coordinator = Coordinator::start().await;
    let session_id = "followed";
    coordinator
        .log(&[entry(session_id, 1, arbiter("First."))])
        .await;
    coordinator.idle(session_id, 1).await;

    let mut console = Console::spawn(
        &[
            "--follow",
            "--session",
            session_id,
            "--nats-url",
            coordinator.url(),
        ],
        false,
    );
    assert_eq!(console.session_id().await, session_id);
    coordinator
        .log(&[entry(session_id, 2, arbiter("Second."))])
        .await;
    coordinator.idle(session_id, 2).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(console.is_running(), "--follow exited on its own");

    console.interrupt();
    let done = console.finish().await;
    done.assert_success();
    assert_eq!(done.stdout, "Arbiter: First.\nArbiter: Second.\n");
    done.assert_resume_hint(session_id);
}

#[tokio::test]
async fn a_duplicate_seq_is_printed_once() {
    let coordinator = Coordinator::start().await;
    let session_id = "twice";
    let first = entry(session_id, 1, arbiter("Once."));
    let second = entry(session_id, 2, arbiter("Twice?"));
    coordinator.log(&[first.clone(), second.clone()]).await;
    coordinator.log_again(&second).await;
    // A copy with other words under a seq already shown is not shown either.
    coordinator
        .log_again(&entry(session_id, 1, arbiter("Forged.")))
        .await;
    coordinator
        .log(&[entry(session_id, 3, arbiter("Thrice."))])
        .await;
    coordinator.store_status(&idle_status(session_id, 3)).await;

    let console = Console::spawn(
        &[
            "--plain",
            "--session",
            session_id,
            "--nats-url",
            coordinator.url(),
        ],
        false,
    );
    let done = console.finish().await;
    // The human sees each entry once, and the console still settles and exits.
    done.assert_success();
    assert_eq!(
        done.stdout,
        "Arbiter: Once.\nArbiter: Twice?\nArbiter: Thrice.\n"
    );
    done.assert_resume_hint(session_id);
}
