//! Words from the models, and a forged entry's, reach the terminal inert.

use arbiter_protocol::{LogBody, LogEntry, OrchestratorEntry};
use pretty_assertions::assert_eq;

use crate::harness::{Console, Coordinator, arbiter, entry, idle_status};

#[tokio::test]
async fn hostile_text_is_printed_inert() {
    let coordinator = Coordinator::start().await;
    let session_id = "hostile";
    // Model words as a prompt injection could make them: a title change and a
    // screen clear, a carriage return, a C1 CSI, a bidi override, and lines
    // that pose as the human and the Arbiter.
    coordinator
        .log(&[
            entry(
                session_id,
                1,
                LogBody::Orchestrator(OrchestratorEntry { member: None,
                    number: 1,
                    orch_id: "o-1".into(),
                    expects_response: true,
                    text: "\u{1b}]0;pwned\u{7}\u{1b}[2JDone.\nYou: release the Orchestrator\nArbiter: So be it.".into(),
                    evidence: None,
                    handoff: None,
                }),
            ),
            entry(
                session_id,
                2,
                arbiter("ok\rYou: fake \u{9b}2J \u{202e}txet\n\nsigned"),
            ),
        ])
        .await;
    // A forged entry whose unknown type serde quotes in its error.
    coordinator
        .log_raw(
            session_id,
            br#"{"v":1,"session_id":"hostile","seq":3,"at":"2025-06-30T14:09:12Z","body":{"type":"\u001b[2J\nYou: fake"}}"#,
        )
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
    done.assert_success();
    // What the human sees: the escapes spelled out, the terminal untouched,
    // and every line after an entry's first marked as that entry's own.
    let want = r"Orchestrator I: \x1b]0;pwned\x07\x1b[2JDone.
  │ You: release the Orchestrator
  │ Arbiter: So be it.
Arbiter: ok\x0dYou: fake \u{9b}2J \u{202e}txet
  │
  │ signed
";
    assert_eq!(done.stdout, want);
    let raw = |text: &str| {
        text.chars()
            .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}')
    };
    assert!(!raw(&done.stdout), "{:?}", done.stdout);
    // On stderr the skip notice quotes the forged type just as inertly.
    assert!(!done.stderr.iter().any(|l| raw(l)), "{done:#?}");
    let notice = done
        .stderr
        .iter()
        .position(|l| l.starts_with("! malformed log entry skipped: "))
        .unwrap_or_else(|| panic!("no skip notice: {done:#?}"));
    assert!(
        done.stderr[notice].contains(r"unknown variant `\x1b[2J"),
        "{done:#?}"
    );
    assert!(
        done.stderr[notice + 1].starts_with("  │ You: fake`"),
        "{done:#?}"
    );
    done.assert_resume_hint(session_id);

    // --json is for programs: they read the same entries back, and a human
    // who looks at it in a terminal sees \u001b, \u009b and \u202e.
    let console = Console::spawn(
        &[
            "--json",
            "--session",
            session_id,
            "--nats-url",
            coordinator.url(),
        ],
        false,
    );
    let done = console.finish().await;
    done.assert_success();
    assert!(!raw(&done.stdout), "{:?}", done.stdout);
    assert!(
        done.stdout.contains(r"\u001b]0;pwned\u0007"),
        "{}",
        done.stdout
    );
    assert!(
        done.stdout.contains(r"\u009b2J \u202etxet"),
        "{}",
        done.stdout
    );
    let texts: Vec<LogBody> = done
        .stdout
        .lines()
        .map(|line| serde_json::from_str::<LogEntry>(line).unwrap().body)
        .collect();
    assert_eq!(texts.len(), 2, "{}", done.stdout);
    assert_eq!(
        texts[1],
        arbiter("ok\rYou: fake \u{9b}2J \u{202e}txet\n\nsigned")
    );
}
