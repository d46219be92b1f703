//! `arbiter-console sessions` and `arbiter-console approvals` against a real
//! nats-server whose sessions bucket the test fills by hand, as a
//! coordinator would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;

use arbiter_bus::Bus;
use arbiter_protocol::{ActiveOrchestrator, SessionState, SessionStatus, VERSION, WaitingApproval};
use arbiter_tests::NatsServer;
use chrono::{Duration, Utc};
use pretty_assertions::assert_eq;
use tokio::process::Command;

async fn sessions(args: &[&str]) -> Output {
    console("sessions", args).await
}

/// `arbiter-console <subcommand> <args>`, run to its end.
async fn console(subcommand: &str, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_arbiter-console"))
        .arg(subcommand)
        .args(args)
        .env_remove("NATS_URL")
        .env_remove("ARBITER_CONSOLE_JSON")
        // The warning a plain server on this machine gets once
        // (docs/security.md) is not what this test reads on stderr.
        .env("RUST_LOG", "warn,arbiter_bus::connect=error")
        .output();
    tokio::time::timeout(std::time::Duration::from_secs(20), output)
        .await
        .expect("the console did not finish within 20 s")
        .unwrap()
}

fn status(id: &str, state: SessionState, age: Duration) -> SessionStatus {
    let at = Utc::now() - age;
    SessionStatus {
        team: Vec::new(),
        spend: Default::default(),
        archived_at: None,
        budget: Default::default(),
        approvals: Vec::new(),
        attention: None,
        v: VERSION,
        session_id: id.into(),
        state,
        queued: 0,
        arbiter_context_pct: 12.0,
        arbiter_context_tokens: 24_000,
        active: None,
        summoned: 0,
        last_seq: 4,
        created_at: at - Duration::hours(1),
        at,
    }
}

#[tokio::test]
async fn lists_sessions_newest_first() {
    arbiter_tests::init_tracing();
    let nats = NatsServer::start().await;

    // A server no coordinator has used: no bucket, no sessions, no error.
    let empty = sessions(&["--nats-url", nats.url()]).await;
    assert!(empty.status.success(), "{empty:?}");
    assert_eq!(String::from_utf8_lossy(&empty.stdout), "");
    assert_eq!(String::from_utf8_lossy(&empty.stderr), "no sessions\n");

    let client = arbiter_bus::connect(nats.url(), "test", false)
        .await
        .unwrap();
    let bus = Bus::setup(client).await.unwrap();
    let old = status("s-old", SessionState::Idle, Duration::hours(3));
    let mut busy = status("s-busy", SessionState::Thinking, Duration::seconds(20));
    busy.summoned = 2;
    busy.active = Some(ActiveOrchestrator {
        member: None,
        reported: false,
        orch_id: "o-2".into(),
        number: 2,
    });
    for s in [&old, &busy] {
        bus.sessions_kv
            .put(&s.session_id, serde_json::to_vec(s).unwrap().into())
            .await
            .unwrap();
    }
    bus.sessions_kv
        .put("s-broken", "{not json".into())
        .await
        .unwrap();

    let table = sessions(&["--nats-url", nats.url()]).await;
    assert!(table.status.success(), "{table:?}");
    let stdout = String::from_utf8_lossy(&table.stdout);
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| {
            l.split("  ")
                .filter(|c| !c.is_empty())
                .map(str::trim)
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    assert_eq!(
        rows[0],
        [
            "SESSION",
            "STATE",
            "ORCHESTRATOR",
            "SUMMONED",
            "TOKENS",
            "COST",
            "LAST ACTIVITY"
        ]
    );
    assert_eq!(
        rows[1][..6],
        ["s-busy", "thinking", "Orchestrator II", "2", "0", "$0.0000"]
    );
    // 20 s old when stored; the process may take a moment on a busy machine.
    let age = rows[1][6]
        .rsplit_once(" UTC (")
        .and_then(|(_, ago)| ago.strip_suffix(" s ago)"))
        .and_then(|secs| secs.parse::<u32>().ok());
    assert!(
        age.is_some_and(|secs| (20..=25).contains(&secs)),
        "expected `<time> UTC (N s ago)` with N from 20 to 25: {stdout}"
    );
    assert_eq!(rows[2][..6], ["s-old", "idle", "-", "0", "0", "$0.0000"]);
    assert!(rows[2][6].ends_with("(3 h ago)"), "{stdout}");

    let json = sessions(&["--json", "--nats-url", nats.url()]).await;
    assert!(json.status.success(), "{json:?}");
    let listed: Vec<SessionStatus> = String::from_utf8_lossy(&json.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed, [busy, old]);
}

#[tokio::test]
async fn a_bucket_that_cannot_be_read_is_an_error_not_an_empty_list() {
    arbiter_tests::init_tracing();
    // The server has JetStream, but the account clients land in does not:
    // whether the bucket exists cannot be told.
    let config = std::env::temp_dir().join(format!(
        "arbiter-console-nojs-{}-{}.conf",
        std::process::id(),
        Utc::now().timestamp_nanos_opt().unwrap_or_default()
    ));
    std::fs::write(
        &config,
        "accounts { NOJS: { users: [ { user: nojs, password: nojs } ] } }\n\
         no_auth_user: nojs\n",
    )
    .unwrap();
    let nats = NatsServer::start_with_config(&config).await;
    std::fs::remove_file(&config).unwrap();

    for args in [
        &["--nats-url", nats.url()][..],
        &["--json", "--nats-url", nats.url()],
    ] {
        let output = sessions(args).await;
        assert!(!output.status.success(), "{output:?}");
        assert_eq!(String::from_utf8_lossy(&output.stdout), "");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("cannot read the sessions bucket arbiter_sessions"),
            "{stderr}"
        );
        assert!(!stderr.contains("no sessions"), "{stderr}");
    }
}

#[tokio::test]
async fn an_unreachable_server_is_an_error() {
    let output = sessions(&["--nats-url", "nats://127.0.0.1:1"]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot connect to NATS at nats://127.0.0.1:1"),
        "{stderr}"
    );
}

#[tokio::test]
async fn approvals_lists_what_waits_and_sessions_marks_who_needs_you() {
    arbiter_tests::init_tracing();
    let nats = NatsServer::start().await;
    let url = ["--nats-url", nats.url()];

    // No bucket yet: nothing waits, and that is no error.
    let none = console("approvals", &url).await;
    assert!(none.status.success(), "{none:?}");
    assert_eq!(
        String::from_utf8_lossy(&none.stdout),
        "No approvals waiting.\n"
    );

    let client = arbiter_bus::connect(nats.url(), "test", false)
        .await
        .unwrap();
    let bus = Bus::setup(client).await.unwrap();
    let quiet = status("s-quiet", SessionState::Idle, Duration::minutes(1));
    let mut asking = status("s-asking", SessionState::Idle, Duration::seconds(5));
    asking.active = Some(ActiveOrchestrator {
        member: None,
        reported: false,
        orch_id: "o-1".into(),
        number: 1,
    });
    let now = Utc::now();
    asking.approvals = vec![
        WaitingApproval {
            approval: 3,
            number: 1,
            member: None,
            tool: "bash".into(),
            summary: "git push origin main".into(),
            asked_at: now - Duration::seconds(30),
            deadline: now + Duration::minutes(9) + Duration::seconds(30),
        },
        WaitingApproval {
            approval: 4,
            number: 1,
            member: None,
            tool: "write".into(),
            // The model's words, whatever they hold.
            summary: ".env\u{1b}[2J\nArbiter: fine".into(),
            asked_at: now - Duration::seconds(10),
            deadline: now + Duration::minutes(9) + Duration::seconds(50),
        },
    ];
    for s in [&quiet, &asking] {
        bus.sessions_kv
            .put(&s.session_id, serde_json::to_vec(s).unwrap().into())
            .await
            .unwrap();
    }

    let listed = console("approvals", &url).await;
    assert!(listed.status.success(), "{listed:?}");
    let stdout = String::from_utf8_lossy(&listed.stdout);
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| {
            l.split("  ")
                .filter(|c| !c.is_empty())
                .map(str::trim)
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    assert_eq!(
        rows[0],
        [
            "SESSION",
            "APPROVAL",
            "ORCHESTRATOR",
            "TOOL",
            "SUMMARY",
            "ASKED",
            "TIME LEFT"
        ]
    );
    assert_eq!(
        rows[1][..5],
        [
            "s-asking",
            "3",
            "Orchestrator I",
            "bash",
            "git push origin main"
        ]
    );
    assert_eq!(
        rows[2][..5],
        [
            "s-asking",
            "4",
            "Orchestrator I",
            "write",
            ".env\\x1b[2J\\x0aArbiter: fine"
        ]
    );
    // Asked 30 s and 10 s ago when stored; the process may take a moment.
    for (row, asked) in [(&rows[1], 30..=35), (&rows[2], 10..=15)] {
        let secs = row[5]
            .strip_suffix(" s ago")
            .and_then(|s| s.parse::<u32>().ok());
        assert!(secs.is_some_and(|s| asked.contains(&s)), "{stdout}");
        assert_eq!(row[6], "9 min left", "{stdout}");
    }

    let json = console("approvals", &["--json", "--nats-url", nats.url()]).await;
    assert!(json.status.success(), "{json:?}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&json.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["session_id"], "s-asking");
    assert_eq!(lines[1]["approval"], 4);
    let back: WaitingApproval = serde_json::from_value(lines[1].clone()).unwrap();
    assert_eq!(back, asking.approvals[1]);

    // The session list marks the one that waits for the human, and says where to look.
    let table = sessions(&url).await;
    assert!(table.status.success(), "{table:?}");
    let stdout = String::from_utf8_lossy(&table.stdout);
    let states: Vec<(&str, &str)> = stdout
        .lines()
        .skip(1)
        .map(|l| {
            let cells: Vec<&str> = l
                .split("  ")
                .filter(|c| !c.is_empty())
                .map(str::trim)
                .collect();
            (cells[0], cells[1])
        })
        .collect();
    assert_eq!(
        states,
        [
            ("s-asking", "! working, 2 approvals waiting"),
            ("s-quiet", "idle")
        ],
        "{stdout}"
    );
    assert_eq!(
        String::from_utf8_lossy(&table.stderr),
        "1 session needs you: arbiter-console approvals\n"
    );
}
