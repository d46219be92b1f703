//! A line typed on stdin goes to the coordinator, and the answer comes back
//! printed: as plain text, or as one log entry per line with `--json`.

use std::time::Duration;

use arbiter_protocol::{LogBody, LogEntry, MusingEntry, VERSION};
use futures::StreamExt;
use pretty_assertions::assert_eq;
use tokio::time::timeout;

use crate::harness::{Console, Coordinator, arbiter, entry, human, next_human};

#[tokio::test]
async fn plain_mode_sends_a_line_and_prints_the_answer() {
    let coordinator = Coordinator::start().await;
    let mut console = Console::spawn(&["--plain", "--nats-url", coordinator.url()], true);
    let session_id = console.session_id().await;
    let mut inbox = coordinator.human_messages().await;

    console.type_line("hello").await;
    console.type_line("   ").await;
    console.close_stdin();
    let message = next_human(&mut inbox).await;
    assert_eq!(message.session_id, session_id);
    assert_eq!(message.text, "hello");
    assert_eq!(message.v, VERSION);

    coordinator
        .log(&[
            entry(&session_id, 1, human(&message)),
            entry(&session_id, 2, arbiter("So it shall be.")),
        ])
        .await;
    coordinator.idle(&session_id, 2).await;

    let done = console.finish().await;
    done.assert_success();
    assert_eq!(done.stdout, "You: hello\nArbiter: So it shall be.\n");
    done.assert_resume_hint(&session_id);
    // The blank line was not sent.
    let more = timeout(Duration::from_millis(500), inbox.next()).await;
    assert!(more.is_err(), "unexpected second message: {more:?}");
}

#[tokio::test]
async fn json_mode_prints_one_log_entry_per_line() {
    let coordinator = Coordinator::start().await;
    let session_id = "json-session";
    let mut inbox = coordinator.human_messages().await;
    let mut console = Console::spawn(
        &[
            "--json",
            "--session",
            session_id,
            "--nats-url",
            coordinator.url(),
        ],
        true,
    );
    assert_eq!(console.session_id().await, session_id);
    console.type_line("What now?").await;
    console.close_stdin();
    let message = next_human(&mut inbox).await;
    assert_eq!(message.session_id, session_id);

    let entries = vec![
        entry(session_id, 1, human(&message)),
        entry(
            session_id,
            2,
            LogBody::Musing(MusingEntry {
                text: "They ask much.".into(),
            }),
        ),
        entry(session_id, 3, arbiter("Wait.\nThen act.")),
    ];
    coordinator.log(&entries).await;
    coordinator.idle(session_id, 3).await;

    let done = console.finish().await;
    done.assert_success();
    let printed: Vec<LogEntry> = done
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(printed, entries);
    assert_eq!(done.stdout.lines().count(), 3, "{}", done.stdout);
    done.assert_resume_hint(session_id);
}
