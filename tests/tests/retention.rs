//! Bounded disk, end to end on a real nats-server: an ended Orchestrator's
//! records are one snapshot; `arbiter-admin sessions list|archive|delete`
//! work and refuse what they must; an archived session's log still reads in
//! `arbiter-console`; and a soak of sessions created and left idle keeps the
//! streams' bytes under the configured bound.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use arbiter_protocol::subjects;
use arbiter_tests::{Gate, bin, eventually};
use common::*;
use tokio::process::Command;

/// Runs `arbiter-admin sessions <args>` against the test server: (success, stdout, stderr).
async fn admin(sys: &System, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin("arbiter-admin"))
        .arg("sessions")
        .args(args)
        .args(["--nats-url", sys.nats.url()])
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until the session is idle, with no Orchestrator and at least `n` entries.
async fn idle(sys: &System, s: &str, n: u64) {
    eventually(WAIT, "the session to be idle", || async {
        sys.status(s).await.filter(|st| {
            st.state == arbiter_protocol::SessionState::Idle
                && st.queued == 0
                && st.active.is_none()
                && st.last_seq >= n
        })
    })
    .await;
}

/// Messages stored on `subject` of `stream` now.
async fn count(sys: &System, stream: &str, subject: &str) -> usize {
    sys.bus
        .replay_subject(stream, subject)
        .await
        .unwrap()
        .map_or(0, |(msgs, _)| msgs.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_archives_and_deletes_sessions_and_the_console_still_reads_an_archive() {
    let sys = System::start().await;
    let s = "s-archived";
    let arb = arbiter_lane("Write the parser");
    sys.mock.push(
        &arb,
        arbiter("summon_orchestrator", "Brief: write the parser."),
    );
    sys.mock.push(
        &orch_lane("Brief: write the parser."),
        orch(true, "Parser written."),
    );
    sys.mock.push(
        &arb,
        arbiter("release_orchestrators", "The parser is written."),
    );
    sys.send(s, "Write the parser").await;
    idle(&sys, s, 4).await;

    // The ended Orchestrator's records were rolled up into one snapshot that
    // still holds its whole transcript.
    let orch_id = eventually(WAIT, "the Orchestrator's records rolled up", || async {
        let (msgs, _) = sys
            .bus
            .replay_subject(subjects::ORCH_STATE_STREAM, &orch_subject(&sys, s).await?)
            .await
            .unwrap()?;
        (msgs.len() == 1).then(|| {
            let record: serde_json::Value = serde_json::from_slice(&msgs[0].payload).unwrap();
            assert!(
                record["append"].as_array().unwrap().len() >= 2,
                "the snapshot holds the transcript: {record}"
            );
            assert_eq!(record["snapshot"]["phase"], "ended");
            record["orch_id"].as_str().unwrap().to_owned()
        })
    })
    .await;

    // A live session (its Orchestrator works, held by a gate) is refused with the reason.
    let live = "s-live";
    let never = Gate::new();
    sys.mock.push(
        &arbiter_lane("Keep working"),
        arbiter("summon_orchestrator", "Brief: keep working."),
    );
    sys.mock.push(
        &orch_lane("Brief: keep working."),
        orch(true, "never").gated(never.clone()),
    );
    sys.send(live, "Keep working").await;
    eventually(WAIT, "the Orchestrator to be active", || async {
        sys.status(live).await.filter(|st| st.active.is_some())
    })
    .await;
    let (ok, _, err) = admin(&sys, &["archive", live]).await;
    // What the admin sees: why it is refused, and how to go on.
    assert!(!ok);
    assert!(err.contains("is live") && err.contains("--force"), "{err}");

    // A bad id is a clear error.
    let (ok, _, err) = admin(&sys, &["archive", "no-such-session"]).await;
    assert!(!ok);
    assert!(err.contains("no session \"no-such-session\""), "{err}");

    // The idle one is archived: the admin sees the counts and bytes.
    let (ok, out, err) = admin(&sys, &["archive", s]).await;
    assert!(ok, "{err}");
    assert!(out.contains(&format!("session {s} archived")), "{out}");
    assert_eq!(
        count(&sys, subjects::SESSIONS_STREAM, &subjects::session_log(s)).await,
        0
    );
    assert_eq!(
        count(&sys, subjects::STATE_STREAM, &subjects::session_state(s)).await,
        0
    );
    assert_eq!(
        count(
            &sys,
            subjects::ORCH_STATE_STREAM,
            &subjects::orch_state(&orch_id)
        )
        .await,
        0
    );
    let (ok, out, _) = admin(&sys, &["list"]).await;
    assert!(ok);
    let row = out.lines().find(|l| l.starts_with(s)).unwrap();
    assert!(row.contains("archived"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with(live) && l.contains("live")),
        "{out}"
    );

    // The console prints the archived log and says it is archived, sending nothing.
    let out = Command::new(bin("arbiter-console"))
        .args(["--plain", "--session", s, "--nats-url", sys.nats.url()])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("session {s} is archived")),
        "{stderr}"
    );
    assert!(stdout.contains("Write the parser"), "{stdout}");
    assert!(stdout.contains("The parser is written."), "{stdout}");

    // Deleted: the status and the archive are gone; the console finds nothing.
    let (ok, out, err) = admin(&sys, &["delete", s]).await;
    assert!(ok, "{err}");
    assert!(out.contains(&format!("session {s} deleted")), "{out}");
    assert!(sys.status(s).await.is_none());
    let (ok, _, err) = admin(&sys, &["delete", s]).await;
    assert!(!ok);
    assert!(err.contains(&format!("no session \"{s}\"")), "{err}");
    never.open();
}

/// The id of the first Orchestrator summoned in session `s`, from its log.
async fn orch_subject(sys: &System, s: &str) -> Option<String> {
    let (msgs, _) = sys
        .bus
        .replay_subject(subjects::SESSIONS_STREAM, &subjects::session_log(s))
        .await
        .unwrap()?;
    msgs.iter().find_map(|m| {
        let v: serde_json::Value = serde_json::from_slice(&m.payload).ok()?;
        let id = v["body"]["orch_id"].as_str()?;
        Some(subjects::orch_state(id))
    })
}

/// Bytes the session-holding streams store now.
async fn live_bytes(sys: &System) -> u64 {
    arbiter_bus::retention::stream_bytes(&sys.bus.js)
        .await
        .unwrap()
        .into_iter()
        .filter(|(name, _, _)| {
            [
                subjects::SESSIONS_STREAM,
                subjects::STATE_STREAM,
                subjects::ORCH_STREAM,
                subjects::ORCH_STATE_STREAM,
            ]
            .contains(&name.as_str())
        })
        .map(|(_, bytes, _)| bytes)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_of_sessions_left_idle_keeps_the_streams_under_the_bound() {
    const BOUND: u64 = 512 * 1024;
    let mut sys = System::start_with(Options {
        coordinator: false,
        ..Default::default()
    })
    .await;
    let mut config = sys.coordinator_config();
    config.retention = arbiter_coordinator::retention::Retention {
        limits: arbiter_bus::retention::Limits {
            stream_max_bytes: 1024 * 1024,
        },
        archive_after: Some(Duration::from_secs(1)),
        delete_after: None,
        sweep_every: Duration::from_secs(1),
    };
    sys.spawn_coordinator_with(config);

    // Sessions come at a steady rate, at most one per PACE: what stays live
    // is what arrived within about an archive age and a sweep, so the bound
    // holds for a rate, not for however fast this machine opens sessions
    // (unpaced, a quiet run opened 18 a second and peaked 0.4 % over it).
    const PACE: Duration = Duration::from_millis(100);
    let started = Instant::now();
    let (mut sessions, mut peak, mut per_session) = (0u64, 0u64, 0u64);
    while started.elapsed() < Duration::from_secs(25) {
        let due = started + PACE * u32::try_from(sessions).unwrap();
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let s = format!("s-soak-{sessions}");
        // A long line: each session stores it in its log entry and its record.
        let first = format!(
            "Task number {sessions}: say hello at length. {}",
            "Some context. ".repeat(100)
        );
        let words = format!("Hello number {sessions}. {}", "hello ".repeat(40));
        sys.mock
            .push(&arbiter_lane(&first), arbiter("address_human", &words));
        let before = live_bytes(&sys).await;
        sys.send(&s, &first).await;
        idle(&sys, &s, 2).await;
        let after = live_bytes(&sys).await;
        if sessions == 0 {
            per_session = after.saturating_sub(before);
        }
        peak = peak.max(after);
        sessions += 1;
    }
    // Everything ends archived, still readable.
    let last = format!("s-soak-{}", sessions - 1);
    eventually(WAIT, "the last session archived", || async {
        sys.status(&last).await.filter(|s| s.archived_at.is_some())
    })
    .await;
    let archive = arbiter_bus::retention::read_archive(&sys.bus, &last)
        .await
        .unwrap();
    assert_eq!(archive.log.len(), 2);
    // The sweeper archives newest first: wait for the pass to finish.
    let end = eventually(WAIT, "every session archived", || async {
        let bytes = live_bytes(&sys).await;
        (bytes < per_session).then_some(bytes)
    })
    .await;
    eprintln!(
        "soak: {sessions} sessions, {per_session} live bytes each, peak {peak} bytes, {end} at the end (bound {BOUND})"
    );
    // Kept forever, they would have passed the bound several times over.
    assert!(
        sessions * per_session > 2 * BOUND,
        "{sessions} x {per_session}"
    );
    assert!(peak <= BOUND, "peak {peak} > bound {BOUND}");
    assert!(end < per_session, "{end} bytes left live");
}

/// Deployed securely (TLS, a credential per role): the coordinator's sweeper
/// archives an idle session with its own credential (read the log and the
/// Orchestrators' records, write the archive, purge), and a console with
/// the console credential still reads it. A permission missing from
/// `protocol::roles` would fail here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_and_the_console_work_under_their_own_credentials() {
    let mut sys = System::start_with(Options {
        secure: true,
        coordinator: false,
        ..Default::default()
    })
    .await;
    let mut config = sys.coordinator_config();
    config.retention.archive_after = Some(Duration::from_secs(2));
    config.retention.sweep_every = Duration::from_secs(1);
    sys.spawn_coordinator_with(config);
    let s = "s-secure-archive";
    let arb = arbiter_lane("Write the lexer");
    sys.mock.push(
        &arb,
        arbiter("summon_orchestrator", "Brief: write the lexer."),
    );
    sys.mock.push(
        &orch_lane("Brief: write the lexer."),
        orch(true, "Lexer written."),
    );
    sys.mock.push(
        &arb,
        arbiter("release_orchestrators", "The lexer is written."),
    );
    sys.send(s, "Write the lexer").await;
    idle(&sys, s, 4).await;
    let status = eventually(WAIT, "the sweeper to archive the idle session", || async {
        sys.status(s).await.filter(|st| st.archived_at.is_some())
    })
    .await;
    assert!(status.last_seq >= 4);
    // The sweeper marks the session archived, then purges its live log.
    eventually(WAIT, "the sweeper to purge the archived log", || async {
        (count(&sys, subjects::SESSIONS_STREAM, &subjects::session_log(s)).await == 0).then_some(())
    })
    .await;

    let out = Command::new(bin("arbiter-console"))
        .args(["--plain", "--session", s])
        .envs(sys.nats_env("console"))
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // What the human sees: the notice, then the conversation as it was.
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("is archived"), "{stderr}");
    assert!(stdout.contains("The lexer is written."), "{stdout}");

    // The admin credential lists and deletes it.
    let admin = |args: &'static [&'static str]| {
        let env = sys.nats_env("admin");
        async move {
            let out = Command::new(bin("arbiter-admin"))
                .arg("sessions")
                .args(args)
                .envs(env)
                .output()
                .await
                .unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    let (ok, out, err) = admin(&["list"]).await;
    assert!(ok, "{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with(s) && l.contains("archived")),
        "{out}"
    );
    let (ok, out, err) = admin(&["delete", "s-secure-archive"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("deleted"), "{out}");
    assert!(sys.status(s).await.is_none());
}

/// Streams made by an older version (no limits) get them by an explicit
/// update, once; an operator sees which streams changed in the log.
#[tokio::test]
async fn existing_streams_get_the_limits_by_an_explicit_update() {
    let nats = arbiter_tests::NatsServer::start().await;
    let js = nats.jetstream().await;
    arbiter_bus::setup::declare(&js).await.unwrap();
    let orch_state = |js: async_nats::jetstream::Context| async move {
        js.get_stream(subjects::ORCH_STATE_STREAM)
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .config
            .clone()
    };
    let before = orch_state(js.clone()).await;
    assert_eq!(before.max_bytes, -1, "declare alone sets no limit");
    assert!(!before.allow_rollup);

    let limits = arbiter_bus::retention::Limits {
        stream_max_bytes: 64 * 1024 * 1024,
    };
    let changed = arbiter_bus::retention::apply_limits(&js, &limits)
        .await
        .unwrap();
    assert_eq!(changed, arbiter_protocol::roles::all_streams());
    let after = orch_state(js.clone()).await;
    assert_eq!(after.max_bytes, 64 * 1024 * 1024);
    assert!(after.allow_rollup);
    let orch = js
        .get_stream(subjects::ORCH_STREAM)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .config
        .clone();
    assert_eq!(orch.max_messages_per_subject, 1000);
    // Applying them again changes nothing.
    let again = arbiter_bus::retention::apply_limits(&js, &limits)
        .await
        .unwrap();
    assert!(again.is_empty(), "{again:?}");
}

/// A server that cannot reserve the bytes asked for (its `max_file_store`
/// is smaller) keeps those streams as they were, with a warning rather than
/// a refusal to start, and still allows the rollup of ended Orchestrators.
#[tokio::test]
async fn a_server_short_of_storage_keeps_its_streams_but_allows_rollups() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("small.conf");
    std::fs::write(&config, "jetstream { max_file_store: 2GB }\n").unwrap();
    let nats = arbiter_tests::NatsServer::start_with_config(&config).await;
    let js = nats.jetstream().await;
    arbiter_bus::setup::declare(&js).await.unwrap();
    let limits = arbiter_bus::retention::Limits {
        stream_max_bytes: 1024 * 1024 * 1024,
    };
    let changed = arbiter_bus::retention::apply_limits(&js, &limits)
        .await
        .unwrap();
    assert!(
        changed.len() < arbiter_protocol::roles::all_streams().len(),
        "{changed:?}"
    );
    let orch_state = js
        .get_stream(subjects::ORCH_STATE_STREAM)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .config
        .clone();
    assert!(orch_state.allow_rollup);
}

/// Reading a subject back while it is purged (the sweeper archiving a
/// session, a rollup) ends with what was there or nothing, never waits for
/// the purged messages: CI once hung here for an hour, the test below it
/// reading a log the sweeper had just purged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_racing_a_purge_ends_instead_of_waiting_forever() {
    let nats = arbiter_tests::NatsServer::start().await;
    let conn = arbiter_bus::connect_with(
        &arbiter_bus::NatsOptions::url(nats.url()),
        "test",
        arbiter_bus::Reach::FailFast,
    )
    .await
    .unwrap();
    let bus = arbiter_bus::Bus::open(
        conn,
        arbiter_protocol::roles::NatsRole::Admin,
        arbiter_bus::Reach::FailFast,
    )
    .await
    .unwrap();
    arbiter_bus::setup::declare(&bus.js).await.unwrap();
    let stream = bus.js.get_stream(subjects::STATE_STREAM).await.unwrap();
    for round in 0..25 {
        let subject = subjects::session_state(&format!("s-race-{round}"));
        for i in 0..5 {
            bus.js
                .publish(subject.clone(), format!("{{\"i\":{i}}}").into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
        let replay = tokio::time::timeout(
            Duration::from_secs(10),
            bus.replay_subject(subjects::STATE_STREAM, &subject),
        );
        let purge = async {
            // Let the replay read the last sequence first, some rounds.
            tokio::time::sleep(Duration::from_millis(round % 5)).await;
            stream.purge().filter(&subject).await.unwrap();
        };
        let (replayed, ()) = tokio::join!(replay, purge);
        let replayed = replayed
            .unwrap_or_else(|_| panic!("round {round}: the replay still waits 10 s after a purge"))
            .unwrap();
        assert!(replayed.is_none_or(|(msgs, _)| msgs.len() <= 5));
    }
}

/// A line sent to a session the admin archived while a coordinator held it
/// in memory changes nothing: the coordinator's stale step is fenced out
/// (its records were purged), the line comes back and is dropped as
/// addressed to an archived session. The human still reads the archive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_to_a_session_archived_by_the_admin_changes_nothing() {
    let sys = System::start().await;
    let s = "s-rearchived";
    let arb = arbiter_lane("First words");
    sys.mock
        .push(&arb, arbiter("address_human", "First answer."));
    sys.send(s, "First words").await;
    idle(&sys, s, 2).await;
    arbiter_bus::retention::archive(&sys.bus, s, false)
        .await
        .unwrap();

    sys.send(s, "Second words").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(sys.status(s).await.unwrap().archived_at.is_some());
    assert_eq!(
        count(&sys, subjects::SESSIONS_STREAM, &subjects::session_log(s)).await,
        0,
        "nothing was written live"
    );
    let archive = arbiter_bus::retention::read_archive(&sys.bus, s)
        .await
        .unwrap();
    let seqs: Vec<u64> = archive
        .log
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![1, 2]);
    assert!(
        sys.mock
            .requests_for(&arbiter_lane("Second words"))
            .is_empty()
    );
}

/// A deployment made by an older version: `ARBITER_ORCH` lists
/// `orch.*.out` (with the coordinator's durable on it). Declaring takes the
/// subject from it and gives it to `ARBITER_ORCH_STATE`.
#[tokio::test]
async fn an_older_orch_stream_hands_the_outputs_subject_to_the_state_stream() {
    let nats = arbiter_tests::NatsServer::start().await;
    let js = nats.jetstream().await;
    let old = |name: &str, subjects: &[&str]| async_nats::jetstream::stream::Config {
        name: name.into(),
        subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    };
    let orch = js
        .create_stream(old(
            subjects::ORCH_STREAM,
            &[
                subjects::ALL_ORCH_IN,
                subjects::ALL_ORCH_OUT,
                subjects::ALL_ORCH_CTL,
            ],
        ))
        .await
        .unwrap();
    orch.create_consumer(async_nats::jetstream::consumer::pull::Config {
        durable_name: Some(subjects::COORDINATOR_ORCH_CONSUMER.into()),
        filter_subject: subjects::ALL_ORCH_OUT.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    js.create_stream(old(
        subjects::ORCH_STATE_STREAM,
        &[subjects::ALL_ORCH_STATE],
    ))
    .await
    .unwrap();

    for _ in 0..2 {
        arbiter_bus::setup::declare(&js).await.unwrap();
        let subjects_of = |name: &'static str| {
            let js = js.clone();
            async move {
                js.get_stream(name)
                    .await
                    .unwrap()
                    .info()
                    .await
                    .unwrap()
                    .config
                    .subjects
                    .clone()
            }
        };
        assert_eq!(
            subjects_of(subjects::ORCH_STREAM).await,
            vec![subjects::ALL_ORCH_IN, subjects::ALL_ORCH_CTL]
        );
        assert_eq!(
            subjects_of(subjects::ORCH_STATE_STREAM).await,
            vec![subjects::ALL_ORCH_STATE, subjects::ALL_ORCH_OUT]
        );
    }
}
