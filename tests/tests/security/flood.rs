//! A console cannot fill the streams (issue #38, item 5). Before, a console
//! publishing human lines as fast as it could filled `ARBITER_SESSIONS` in
//! about 10 s, and from then on every human line, and the coordinator's own
//! log writes, were refused ("maximum bytes exceeded"). Now human lines go
//! to the human intake (`ARBITER_HUMAN`), stored under their console's name
//! with at most 64 of them per console, and the coordinator says a limit's
//! refusals once per run, not once per line.
//!
//! Here, in the secure deployment (a real nats-server from `arbiter-admin
//! init`'s config, every process on its own credential), console `mallory`
//! sends 100 KiB lines as fast as it can for 20 s, each to a session of its
//! own (so no per-session bound could hold it), while console `console`
//! talks to the Arbiter in another session.

use std::time::{Duration, Instant};

use arbiter_bus::setup::{HUMAN_MAX_MESSAGE_BYTES, HUMAN_PENDING_PER_CONSOLE};
use arbiter_bus::{Bus, Reach, TraceContext};
use arbiter_coordinator::ConsoleCaps;
use arbiter_protocol::roles::NatsRole;
use arbiter_protocol::{HumanMessage, LogBody, LogEntry, VERSION, subjects};
use futures::StreamExt as _;

use arbiter_tests::eventually;

use crate::common::*;

/// How long the flood lasts.
const FLOOD: Duration = Duration::from_secs(20);
/// Publishes the flooding console has in flight at once.
const IN_FLIGHT: usize = 128;
/// The text of each flooding line.
const LINE_BYTES: usize = 100 * 1024;
/// `--stream-max-bytes` of every stream here.
const STREAM_MAX_BYTES: i64 = 64 * 1024 * 1024;

/// What the flooding console's publishes came to.
#[derive(Debug, Default)]
struct Sent {
    attempted: u64,
    stored: u64,
    /// Refused by the server: the console's lines already in the intake.
    refused_full: u64,
    other_errors: u64,
    /// What the console prints for the first refusal by the server.
    first_refusal: Option<String>,
    /// An error other than the expected one, if any.
    first_other: Option<String>,
}

/// The most the human intake held while the flood went on.
#[derive(Debug, Default)]
struct Peak {
    messages: u64,
    bytes: u64,
    /// Stored under `human.mallory` at once.
    mallory: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_flooding_for_20_s_fills_no_stream_and_others_are_answered() {
    let mut sys = System::start_with(Options {
        secure: true,
        coordinator: false,
        workers: 0,
        ..Default::default()
    })
    .await;
    let admin = sys.admin.as_ref().expect("a secure system");
    arbiter_admin::issue(
        admin.path(),
        NatsRole::Console,
        "mallory",
        arbiter_admin::Scope::default(),
        30,
    )
    .unwrap();
    // The console limits as shipped: 30 messages a minute in bursts of 10,
    // 16 sessions at work. Streams of 64 MiB, which the flood's lines would
    // fill several times over were they stored where sessions keep theirs.
    let mut config = sys.coordinator_config();
    config.console_caps = ConsoleCaps::default();
    config.retention.limits.stream_max_bytes = STREAM_MAX_BYTES;
    sys.spawn_coordinator_with(config);
    // The Arbiter answers whatever of the flood reaches it.
    sys.mock.set_responder(|request| {
        request
            .lane
            .starts_with(&arbiter_lane("flood"))
            .then(|| arbiter("address_human", "Noted."))
    });
    // The other console is answered before the flood, as a baseline.
    let bob = sys.watch_log("s-bob").await;
    sys.mock.push(
        &arbiter_lane("hello before the flood"),
        arbiter("address_human", "Hello, Bob."),
    );
    sys.mock.push(
        &arbiter_lane("hello before the flood"),
        arbiter("address_human", "Still here."),
    );
    sys.send("s-bob", "hello before the flood").await;
    sys.settled("s-bob", 2).await;
    let sessions_before = stream_state(&sys.bus, subjects::SESSIONS_STREAM).await;

    let conn = arbiter_bus::connect_with(&sys.nats_options("mallory"), "flood", Reach::FailFast)
        .await
        .unwrap();
    let mallory = Bus::open(conn, NatsRole::Console, Reach::FailFast)
        .await
        .unwrap();
    let filler = "x".repeat(LINE_BYTES);
    let started = Instant::now();
    let flood = flood(&mallory, &filler, started + FLOOD);
    let watch = watch_intake(&sys.bus, started + FLOOD);
    // Halfway through, the other console speaks in its own session.
    let other = async {
        tokio::time::sleep(FLOOD / 2).await;
        let sent = Instant::now();
        sys.send("s-bob", "are you there during the flood?").await;
        bob.wait_for(
            "the other console's line stored",
            |b| matches!(b, LogBody::Human(h) if h.text == "are you there during the flood?"),
        )
        .await;
        let stored = sent.elapsed();
        bob.wait_for(
            "the Arbiter's answer to it",
            |b| matches!(b, LogBody::Arbiter(a) if a.text == "Still here."),
        )
        .await;
        (stored, sent.elapsed())
    };
    let (sent, peak, (bob_stored, bob_answered)) = tokio::join!(flood, watch, other);
    let took = started.elapsed();

    // What the streams hold: the intake never more than the cap of one
    // console, the session stream nowhere near full.
    let intake = stream_state(&sys.bus, subjects::HUMAN_STREAM).await;
    let sessions = stream_state(&sys.bus, subjects::SESSIONS_STREAM).await;
    let (logged, mallory_humans, told) = mallory_entries(&sys.bus).await;
    eprintln!(
        "flood for {took:.1?}: {} lines attempted, {} stored by the server ({} MiB through \
         the intake), {} refused by it (the console's lines already waiting), {} other \
         errors; sampled every 100 ms, the intake held at most {} \
         messages and {} bytes (max {}), and at most {} of mallory's lines at once (cap 64); \
         the session stream {} → {} bytes of {} \
         ({:.3} % full); mallory's sessions got {} log entries: {} of its lines taken, {} \
         refusals; the other console's line stored after {bob_stored:.1?}, answered after \
         {bob_answered:.1?}",
        sent.attempted,
        sent.stored,
        sent.stored * LINE_BYTES as u64 / (1024 * 1024),
        sent.refused_full,
        sent.other_errors,
        peak.messages,
        peak.bytes,
        intake.max_bytes,
        peak.mallory,
        sessions_before.bytes,
        sessions.bytes,
        sessions.max_bytes,
        100.0 * sessions.bytes as f64 / sessions.max_bytes as f64,
        logged,
        mallory_humans,
        told.len(),
    );
    if let Some(first) = &sent.first_refusal {
        eprintln!("what the flooding console prints: {first}");
    }
    assert!(sent.attempted > 1000, "{sent:?}");
    assert!(sent.stored > 1000, "{sent:?}");
    assert_eq!(sent.other_errors, 0, "{sent:?}");
    assert!(peak.mallory <= HUMAN_PENDING_PER_CONSOLE as u64, "{peak:?}");
    assert!(
        peak.bytes
            <= HUMAN_PENDING_PER_CONSOLE as u64 * HUMAN_MAX_MESSAGE_BYTES as u64 + 1024 * 1024,
        "{peak:?}"
    );
    assert!(peak.bytes < STREAM_MAX_BYTES as u64 / 2, "{peak:?}");
    // Every line taken left the intake.
    eventually(WAIT, "the intake to be empty", || async {
        (stream_state(&sys.bus, subjects::HUMAN_STREAM)
            .await
            .messages
            == 0)
            .then_some(())
    })
    .await;
    // The flood went through the intake several times its size; the
    // session stream grew by what the coordinator let through (a few dozen
    // 100 KiB lines, three copies each: entry, transcript, record) and one
    // refusal per run: far from full.
    assert_eq!(intake.max_bytes, STREAM_MAX_BYTES);
    assert!(
        sent.stored * LINE_BYTES as u64 > 2 * STREAM_MAX_BYTES as u64,
        "{sent:?}"
    );
    assert!(
        sessions.bytes < sessions.max_bytes as u64 / 4,
        "the session stream holds {} of {} bytes",
        sessions.bytes,
        sessions.max_bytes
    );

    // The other console was stored and answered, in its own session.
    assert_eq!(
        briefs(&bob.bodies()),
        vec![
            pair("You", "hello before the flood"),
            pair("Arbiter", "Hello, Bob."),
            pair("You", "are you there during the flood?"),
            pair("Arbiter", "Still here."),
        ]
    );

    // What the flooding console's human reads: in the log of a session it
    // sent to, once per run of refusals (never one per line),
    let rate = "Message refused: console \"mallory\" is sending faster than 30/min,burst=10 \
        messages. Wait a moment and send it again, or raise the limit (arbiter-coordinator \
        --console-rate, or ARBITER_CONSOLE_RATE). Until it slows down, any more messages it \
        sends are refused as well, and not logged one by one.";
    assert!(told.iter().any(|t| t == rate), "{told:#?}");
    assert!(
        told.len() as u64 <= 2 * (mallory_humans + 1),
        "{} refusals logged for {mallory_humans} lines taken",
        told.len()
    );
    // and, for a line the server refused because 64 of its lines were
    // still waiting, what `arbiter-console` prints on stderr:
    // `! message not sent: the server already holds 64 lines of this
    // console that no coordinator has taken yet, the most it keeps for one
    // console. Wait until they are taken (is a coordinator running?) and
    // send it again (JetStream publish to … failed: publish failed: maximum
    // messages per subject exceeded (code 503, error code 10077))`.
    if let Some(said) = &sent.first_refusal {
        assert!(
            said.starts_with(
                "! message not sent: the server already holds 64 lines of this console that \
                 no coordinator has taken yet"
            ),
            "{said}"
        );
    }
}

/// Publishes lines of `filler` as console `mallory`, [`IN_FLIGHT`] at a
/// time, each to a session of its own, until `until`.
async fn flood(mallory: &Bus, filler: &str, until: Instant) -> Sent {
    futures::stream::iter(0u64..)
        .take_while(|_| std::future::ready(Instant::now() < until))
        .map(|n| async move {
            let session = format!("flood-{n}");
            let message_id = uuid::Uuid::now_v7().to_string();
            let message = HumanMessage {
                v: VERSION,
                session_id: session.clone(),
                message_id: message_id.clone(),
                text: format!("flood {n} {filler}"),
                sent_at: chrono::Utc::now(),
                command: None,
                budget: None,
                workspace: None,
                approval: None,
                policy: None,
                rewind: None,
            };
            mallory
                .publish_js(
                    subjects::session_human_from(&session, "mallory"),
                    &message_id,
                    &TraceContext::none(),
                    &message,
                )
                .await
        })
        .buffer_unordered(IN_FLIGHT)
        .fold(Sent::default(), |mut sent, result| {
            sent.attempted += 1;
            match result {
                Ok(()) => sent.stored += 1,
                Err(e) if e.to_string().contains("10077") => {
                    sent.refused_full += 1;
                    sent.first_refusal.get_or_insert_with(|| {
                        format!(
                            "! message not sent: {}",
                            arbiter_console::not_sent::reason(&e)
                        )
                    });
                }
                Err(e) => {
                    sent.other_errors += 1;
                    sent.first_other.get_or_insert_with(|| e.to_string());
                }
            }
            std::future::ready(sent)
        })
        .await
}

/// Samples the human intake every 100 ms until `until`.
async fn watch_intake(admin: &Bus, until: Instant) -> Peak {
    let mut peak = Peak::default();
    let stream = admin.js.get_stream(subjects::HUMAN_STREAM).await.unwrap();
    let mallory = subjects::human_intake("mallory");
    while Instant::now() < until {
        if let Ok(mut info) = stream.info_with_subjects(&mallory).await {
            peak.messages = peak.messages.max(info.info.state.messages);
            peak.bytes = peak.bytes.max(info.info.state.bytes);
            while let Some(Ok((subject, held))) = info.next().await {
                if subject == mallory {
                    peak.mallory = peak.mallory.max(held as u64);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    peak
}

/// Bytes and messages a stream holds, and its byte limit.
struct StreamState {
    messages: u64,
    bytes: u64,
    max_bytes: i64,
}

async fn stream_state(admin: &Bus, name: &str) -> StreamState {
    let mut stream = admin.js.get_stream(name).await.unwrap();
    let info = stream.info().await.unwrap();
    StreamState {
        messages: info.state.messages,
        bytes: info.state.bytes,
        max_bytes: info.config.max_bytes,
    }
}

/// Over the logs of every session of the flood: how many entries there
/// are, how many are lines of its taken, and the refusals said.
async fn mallory_entries(admin: &Bus) -> (u64, u64, Vec<String>) {
    let filters = vec![subjects::ALL_SESSION_LOG.to_owned()];
    let (messages, _) = admin
        .replay_subjects(subjects::SESSIONS_STREAM, &filters)
        .await
        .unwrap()
        .unwrap_or_default();
    let mut entries = 0;
    let mut humans = 0;
    let mut told = Vec::new();
    for msg in messages {
        let entry: LogEntry = serde_json::from_slice(&msg.payload).unwrap();
        if !entry.session_id.starts_with("flood-") || matches!(entry.body, LogBody::Step(_)) {
            continue;
        }
        entries += 1;
        match entry.body {
            LogBody::Human(_) => humans += 1,
            LogBody::System(s) if s.text.starts_with("Message refused") => told.push(s.text),
            _ => {}
        }
    }
    (entries, humans, told)
}
