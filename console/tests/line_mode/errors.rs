//! What goes wrong is said on stderr: a malformed log entry is skipped, an
//! invalid session id and an unreachable server are refused.

use std::time::Duration;

use pretty_assertions::assert_eq;

use crate::harness::{Console, Coordinator, arbiter, entry, idle_status};

#[tokio::test]
async fn a_malformed_entry_is_reported_and_skipped() {
    let coordinator = Coordinator::start().await;
    let session_id = "garbled";
    coordinator
        .log(&[entry(session_id, 1, arbiter("Before."))])
        .await;
    coordinator.log_raw(session_id, b"{not json").await;
    coordinator
        .log(&[entry(session_id, 2, arbiter("After."))])
        .await;
    coordinator.store_status(&idle_status(session_id, 2)).await;

    let console = Console::spawn(
        &["--session", session_id, "--nats-url", coordinator.url()],
        false,
    );
    let done = console.finish().await;
    done.assert_success();
    assert_eq!(done.stdout, "Arbiter: Before.\nArbiter: After.\n");
    let skipped: Vec<&String> = done
        .stderr
        .iter()
        .filter(|l| l.starts_with("! malformed log entry skipped: "))
        .collect();
    assert_eq!(skipped.len(), 1, "{done:#?}");
    done.assert_resume_hint(session_id);
}

#[tokio::test]
async fn an_invalid_session_id_is_refused() {
    let console = Console::spawn(
        &["--session", "a.b", "--nats-url", "nats://127.0.0.1:1"],
        false,
    );
    let done = console.finish().await;
    assert!(!done.status.success(), "{done:#?}");
    assert_eq!(done.stdout, "");
    let all = done.stderr.join("\n");
    assert!(all.contains("invalid session id \"a.b\""), "{all}");
    assert!(!all.contains("resume:"), "{all}");
}

#[tokio::test]
async fn an_unreachable_server_fails_fast_and_names_the_url() {
    let started = std::time::Instant::now();
    let console = Console::spawn(&["--nats-url", "nats://127.0.0.1:1"], false);
    let done = console.finish().await;
    assert!(!done.status.success(), "{done:#?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(done.stdout, "");
    let all = done.stderr.join("\n");
    assert!(
        all.contains("cannot connect to NATS at nats://127.0.0.1:1"),
        "{all}"
    );
    assert!(
        !all.contains("resume:"),
        "no session was reached, none to resume: {all}"
    );
}
