//! The real `arbiter-console` binary in its full-screen view, in a
//! pseudo-terminal read through a vt100 emulator, against a real nats-server,
//! the mock model and an in-process coordinator and worker.

use crate::common;

use std::io::{Read, Write};
use std::num::NonZeroU16;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbiter_protocol::{
    ArbiterDelta, ArbiterEntry, ArbiterIntent, LogBody, LogEntry, SessionState, SessionStatus,
    VERSION, subjects,
};
use arbiter_tests::{NatsServer, bin, eventually};
use common::*;
use portable_pty::{Child, CommandBuilder, MasterPty, PtySize, native_pty_system};

const ROWS: u16 = 30;
const COLS: u16 = 100;
const CTRL_C: &str = "\x03";

/// `arbiter-console` running in a pseudo-terminal of [`COLS`]×[`ROWS`].
struct Console {
    child: Box<dyn Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    /// What the terminal shows, as a vt100 emulator understands the output.
    parser: Arc<Mutex<vt100::Parser>>,
    /// Every byte the console wrote, for what is printed after the screen is left.
    raw: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    master: Box<dyn MasterPty + Send>,
    _log: tempfile::TempDir,
}

impl Console {
    fn spawn(args: &[&str]) -> Self {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: ROWS,
                cols: COLS,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        let log = tempfile::tempdir().unwrap();
        let mut command = CommandBuilder::new(bin("arbiter-console"));
        command.args(args);
        for var in [
            "NATS_URL",
            "ARBITER_SESSION",
            "ARBITER_CONSOLE_PLAIN",
            "ARBITER_CONSOLE_JSON",
            "ARBITER_SHOW_MUSINGS",
            "ARBITER_FOLLOW",
        ] {
            command.env_remove(var);
        }
        command.env("TERM", "xterm-256color");
        command.env("RUST_LOG", "debug,async_nats=info");
        command.env("ARBITER_CONSOLE_LOG", log.path().join("console.log"));
        let child = pair.slave.spawn_command(command).unwrap();
        drop(pair.slave);

        let parser = Arc::new(Mutex::new(vt100::Parser::new(
            NonZeroU16::new(ROWS).unwrap(),
            NonZeroU16::new(COLS).unwrap(),
            0,
        )));
        let raw = Arc::new(Mutex::new(Vec::new()));
        let mut output = pair.master.try_clone_reader().unwrap();
        let (screen, bytes) = (parser.clone(), raw.clone());
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            // Ends with EOF (or EIO on Linux) once the console has exited.
            while let Ok(n @ 1..) = output.read(&mut buf) {
                screen.lock().unwrap().process(&buf[..n]);
                bytes.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let writer = pair.master.take_writer().unwrap();
        Self {
            child,
            writer,
            parser,
            raw,
            reader: Some(reader),
            master: pair.master,
            _log: log,
        }
    }

    fn screen(&self) -> String {
        self.parser.lock().unwrap().screen().contents()
    }

    /// Waits until the screen shows every one of `texts`, and returns it.
    async fn wait_for(&self, texts: &[&str]) -> String {
        self.wait(&format!("the screen to show {texts:?}"), |screen| {
            texts.iter().all(|t| screen.contains(t))
        })
        .await
    }

    /// Waits until the screen no longer shows `text`.
    async fn wait_gone(&self, text: &str) -> String {
        self.wait(&format!("{text:?} to leave the screen"), |screen| {
            !screen.contains(text)
        })
        .await
    }

    /// Polls the screen until `done` holds; fails with the screen after [`WAIT`].
    async fn wait(&self, what: &str, mut done: impl FnMut(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("timed out after {WAIT:?} waiting for {what}; the screen:\n{screen}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Resizes the terminal, as dragging its window would.
    fn resize(&self, rows: u16, cols: u16) {
        // The emulator first, so that the redraw lands on a screen of the new size.
        self.parser.lock().unwrap().set_size(
            NonZeroU16::new(rows).unwrap(),
            NonZeroU16::new(cols).unwrap(),
        );
        self.master
            .resize(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
    }

    /// Types keys as a human would (`\r` is Enter).
    fn type_keys(&mut self, keys: &str) {
        self.writer.write_all(keys.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    /// Waits for the process to exit, then returns whether it succeeded and
    /// everything it wrote.
    async fn exit(mut self) -> (bool, String, vt100::Screen) {
        let status = eventually(WAIT, "the console to exit", || {
            let status = self.child.try_wait().unwrap();
            async move { status }
        })
        .await;
        if let Some(reader) = self.reader.take() {
            tokio::task::spawn_blocking(move || reader.join())
                .await
                .unwrap()
                .unwrap();
        }
        let raw = String::from_utf8_lossy(&self.raw.lock().unwrap()).into_owned();
        let screen = self.parser.lock().unwrap().screen().clone();
        (status.success(), raw, screen)
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// The terminal is as the console found it: main screen, cursor shown,
/// mouse reporting and bracketed paste off.
/// Publishes the session's first log entry, the Arbiter saying `text`, as
/// the coordinator would.
async fn log_arbiter_words(url: &str, session: &str, text: &str) {
    log_arbiter_words_at(url, session, 1, text).await;
}

/// As [`log_arbiter_words`], as the session's log entry `seq`.
async fn log_arbiter_words_at(url: &str, session: &str, seq: u64, text: &str) {
    let client = arbiter_bus::connect(url, "test", false).await.unwrap();
    let bus = arbiter_bus::Bus::setup(client).await.unwrap();
    let entry = LogEntry {
        v: VERSION,
        session_id: session.into(),
        seq,
        at: chrono::Utc::now(),
        body: LogBody::Arbiter(ArbiterEntry { text: text.into() }),
    };
    bus.publish_js(
        subjects::session_log(session),
        &format!("{session}:log:{seq}"),
        &arbiter_bus::TraceContext::none(),
        &entry,
    )
    .await
    .unwrap();
}

fn assert_restored(screen: &vt100::Screen) {
    assert!(!screen.alternate_screen(), "still on the alternate screen");
    assert!(!screen.hide_cursor(), "the cursor is still hidden");
    assert_eq!(
        screen.mouse_protocol_mode(),
        vt100::MouseProtocolMode::None,
        "mouse reporting is still on"
    );
    assert!(!screen.bracketed_paste(), "bracketed paste is still on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_a_message_shows_the_arbiters_answer() {
    let sys = System::start().await;
    let s = "s-tui";
    sys.mock.push(
        &arbiter_lane("Hello, Arbiter"),
        arbiter("address_human", "Speak your purpose, mortal."),
    );
    let mut console = Console::spawn(&["--session", s, "--nats-url", sys.nats.url()]);
    console
        .wait_for(&[
            "THE ARBITER",
            "Nothing has been said yet.",
            "Awaiting your command.",
        ])
        .await;

    console.type_keys("Hello, Arbiter\r");
    let screen = console
        .wait_for(&[
            "You: Hello, Arbiter",
            "Arbiter: Speak your purpose, mortal.",
            "Awaiting your command.",
        ])
        .await;
    assert!(
        !screen.contains('⋯'),
        "the log confirmed the message:\n{screen}"
    );

    // A narrower window: the layout follows, the subtitle gives way.
    console.resize(20, 50);
    let screen = console
        .wait("the layout redrawn for 50 columns", |screen| {
            screen
                .lines()
                .next()
                .is_some_and(|top| top.chars().count() == 50 && top.ends_with('╗'))
                && screen.contains("Arbiter: Speak your purpose")
        })
        .await;
    assert!(!screen.contains("OF THAT WHICH WAS"), "{screen}");
    assert!(screen.contains("THE ARBITER"), "{screen}");

    console.type_keys(CTRL_C);
    let (success, raw, screen) = console.exit().await;
    assert!(success, "{raw}");
    assert_restored(&screen);
    assert!(
        raw.contains(&format!("resume: arbiter-console --session {s}")),
        "{raw}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attaching_replays_the_log_and_consoles_share_a_session() {
    let sys = System::start().await;
    let s = "s-tui-attach";
    let lane = arbiter_lane("Build me a greeting");
    sys.mock
        .push(&lane, arbiter("address_human", "What shall it say?"));
    sys.send(s, "Build me a greeting").await;
    sys.settled(s, 2).await;

    // The history is on the screen of a console that attaches later.
    let mut first = Console::spawn(&["--session", s, "--nats-url", sys.nats.url()]);
    first
        .wait_for(&[
            "You: Build me a greeting",
            "Arbiter: What shall it say?",
            &format!("session {s}"),
        ])
        .await;

    // The Arbiter's words appear as they are written (deltas by hand: the
    // coordinator does not publish them yet) ...
    for (i, piece) in ["So it", " shall"].into_iter().enumerate() {
        let delta = ArbiterDelta {
            v: VERSION,
            session_id: s.into(),
            turn: 2,
            attempt: 0,
            intent: (i == 0).then_some(ArbiterIntent::AddressHuman),
            text: piece.into(),
            at: chrono::Utc::now(),
        };
        sys.bus
            .publish_core(subjects::session_delta(s), &delta)
            .await
            .unwrap();
    }
    first.wait_for(&["Arbiter: So it shall▍"]).await;

    // ... and a second console on the same session sees what the first sends.
    let second = Console::spawn(&["--session", s, "--nats-url", sys.nats.url()]);
    second.wait_for(&["Arbiter: What shall it say?"]).await;
    sys.mock
        .push(&lane, arbiter("address_human", "So it shall say hello."));
    first.type_keys("It shall say hello\r");
    for console in [&first, &second] {
        console
            .wait_for(&["You: It shall say hello", "Arbiter: So it shall say hello."])
            .await;
    }
    let screen = first.wait_gone("▍").await;
    assert!(
        !screen.contains("So it shall▍"),
        "the log entry replaced the streamed words:\n{screen}"
    );

    // Up recalls what was sent; Ctrl-D quits as Ctrl-C does.
    first.type_keys("\x1b[A");
    first.wait_for(&["> It shall say hello"]).await;
    for console in [first, second] {
        let mut console = console;
        console.type_keys("\x04");
        let (success, raw, screen) = console.exit().await;
        assert!(success, "{raw}");
        assert_restored(&screen);
        assert!(raw.contains(&format!("resume: arbiter-console --session {s}")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_banner_shows_while_nats_is_unreachable() {
    arbiter_tests::init_tracing();
    let mut nats = NatsServer::start().await;
    let s = "s-tui-outage";
    // The coordinator has made the streams; consoles only bind to them.
    let client = arbiter_bus::connect(nats.url(), "test", false)
        .await
        .unwrap();
    arbiter_bus::Bus::setup(client).await.unwrap();
    let console = Console::spawn(&["--session", s, "--nats-url", nats.url()]);
    // Attached (the log is followed), so that the outage comes after the
    // first connection: a loaded machine can start the console slowly.
    log_arbiter_words(nats.url(), s, "Before the outage.").await;
    console.wait_for(&["Arbiter: Before the outage."]).await;

    nats.stop().await;
    console
        .wait_for(&["NATS unreachable at", "reconnecting"])
        .await;
    nats.restart().await;
    console.wait_gone("NATS unreachable").await;

    // The log is followed again after the outage.
    log_arbiter_words_at(nats.url(), s, 2, "I am still here.").await;
    console.wait_for(&["Arbiter: I am still here."]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_starts_before_nats_and_attaches_once_it_is_up() {
    arbiter_tests::init_tracing();
    let mut nats = NatsServer::start().await;
    let s = "s-tui-late";
    // Something was said before; then the server goes down (its store and
    // port stay), and only then do consoles start.
    log_arbiter_words(nats.url(), s, "Spoken before the outage.").await;
    nats.stop().await;

    // A console that gives up before the server comes back never reached the
    // session: it leaves no resume hint.
    let mut early = Console::spawn(&["--session", s, "--nats-url", nats.url()]);
    // Never connected yet: "connecting", not "reconnecting".
    early
        .wait_for(&[
            "NATS unreachable at",
            ": connecting (",
            "Arbiter · unknown: console offline",
        ])
        .await;
    early.type_keys(CTRL_C);
    let (success, raw, screen) = early.exit().await;
    assert!(success, "{raw}");
    assert_restored(&screen);
    assert!(!raw.contains("resume:"), "{raw}");

    // One that waits attaches once the server is up, and replays the log.
    let mut console = Console::spawn(&["--session", s, "--nats-url", nats.url()]);
    console
        .wait_for(&["NATS unreachable at", ": connecting ("])
        .await;
    nats.restart().await;
    let screen = console
        .wait_for(&["Arbiter: Spoken before the outage."])
        .await;
    assert!(!screen.contains("console offline"), "{screen}");
    console.wait_gone("NATS unreachable").await;
    console.type_keys(CTRL_C);
    let (success, raw, screen) = console.exit().await;
    assert!(success, "{raw}");
    assert_restored(&screen);
    assert!(
        raw.contains(&format!("resume: arbiter-console --session {s}")),
        "{raw}"
    );
}

/// A thinking session status as its coordinator would publish it, `age` old.
fn thinking_status(session: &str, age: chrono::Duration) -> SessionStatus {
    let now = chrono::Utc::now();
    SessionStatus {
        team: Vec::new(),
        v: VERSION,
        session_id: session.into(),
        state: SessionState::Thinking,
        queued: 0,
        arbiter_context_pct: 3.0,
        arbiter_context_tokens: 6_000,
        active: None,
        summoned: 0,
        last_seq: 1,
        created_at: now - age,
        at: now - age,
        spend: Default::default(),
        archived_at: None,
        budget: Default::default(),
        approvals: Vec::new(),
        attention: None,
    }
}

/// The bucket holds a session's status as of its last change. A console that
/// attaches while its coordinator is dead must not show the Arbiter thinking
/// on the word of that old record: it says it has no heartbeat yet, then that
/// nothing was heard since the record was written. A heartbeat, once one
/// comes, is believed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_attach_a_stored_status_older_than_a_heartbeat_is_not_shown_as_live() {
    arbiter_tests::init_tracing();
    let nats = NatsServer::start().await;
    let s = "s-tui-stale";
    let client = arbiter_bus::connect(nats.url(), "test", false)
        .await
        .unwrap();
    let bus = arbiter_bus::Bus::setup(client).await.unwrap();
    // Thinking, a minute ago; the coordinator has been gone since.
    let stored = thinking_status(s, chrono::Duration::seconds(60));
    bus.sessions_kv
        .put(s, serde_json::to_vec(&stored).unwrap().into())
        .await
        .unwrap();
    log_arbiter_words(nats.url(), s, "Working on it.").await;

    let console = Console::spawn(&["--session", s, "--nats-url", nats.url()]);
    let mut seen_unknown = false;
    let screen = console
        .wait("the Arbiter shown silent for a minute", |screen| {
            // Never "thinking" on the record's word alone.
            assert!(!screen.contains("thinking"), "{screen}");
            seen_unknown |= screen.contains("Arbiter · unknown: no heartbeat yet");
            screen.contains("Arbiter: Working on it.")
                && screen.contains("Arbiter · no status for ")
        })
        .await;
    assert!(seen_unknown, "{screen}");

    // The coordinator is back: its first heartbeat shows it thinking.
    bus.publish_core(
        subjects::session_status(s),
        &thinking_status(s, chrono::Duration::zero()),
    )
    .await
    .unwrap();
    let screen = console.wait_for(&["Arbiter · thinking"]).await;
    assert!(!screen.contains("no status for"), "{screen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrators_status_shows_while_it_works() {
    let sys = System::start().await;
    let s = "s-tui-orch";
    let brief = "Brief: write hello.txt saying hello.";
    let arb = arbiter_lane("Write a greeting");
    let orch_lane = orch_lane(brief);
    sys.mock.push(&arb, arbiter("summon_orchestrator", brief));
    sys.mock.push(
        &orch_lane,
        arbiter_tests::MockReply::tool_use(
            "write",
            serde_json::json!({"path": "hello.txt", "content": "hello\n"}),
        ),
    );
    // The model call after the tool is held, so the Orchestrator stays at work.
    let hold = arbiter_tests::Gate::new();
    sys.mock.push(
        &orch_lane,
        orch(true, "Wrote hello.txt.").gated(hold.clone()),
    );
    sys.mock
        .push(&arb, arbiter("release_orchestrators", "It is done."));

    let mut console = Console::spawn(&["--session", s, "--nats-url", sys.nats.url()]);
    console.wait_for(&["Awaiting your command."]).await;
    console.type_keys("Write a greeting\r");
    let screen = console
        .wait("Orchestrator I at work after one tool call", |screen| {
            screen.contains("· Orchestrator I summoned.")
                // Its cost beside its bar: the mock model has no price.
                && screen.contains("Orchestrator I · cost unknown ─")
                && screen.contains("working")
                && (screen.contains("◇ 1 tool call") || screen.contains("(1)"))
        })
        .await;
    assert!(!screen.contains("Awaiting your command."), "{screen}");

    hold.open();
    console
        .wait_for(&[
            "Orchestrator I: Wrote hello.txt.",
            "· Orchestrator I released.",
            "Arbiter: It is done.",
            "Awaiting your command.",
        ])
        .await;
    console.wait_gone("Orchestrator I · cost unknown ─").await;
    console.type_keys(CTRL_C);
    let (success, raw, screen) = console.exit().await;
    assert!(success, "{raw}");
    assert_restored(&screen);
}

/// A session archived while nobody watched: the console on a terminal does
/// not open the full-screen view (nothing can be sent to it); it prints the
/// log from the archive, says the session is archived, and exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archived_session_prints_its_log_and_says_it_is_archived() {
    let sys = System::start().await;
    let s = "s-tui-archived";
    let lane = arbiter_lane("Build me a farewell");
    sys.mock
        .push(&lane, arbiter("address_human", "It shall say goodbye."));
    sys.send(s, "Build me a farewell").await;
    sys.settled(s, 2).await;
    arbiter_bus::retention::archive(&sys.bus, s, false)
        .await
        .unwrap();

    let console = Console::spawn(&["--session", s, "--nats-url", sys.nats.url()]);
    let (ok, raw, screen) = console.exit().await;
    assert!(ok, "{raw}");
    assert!(raw.contains(&format!("session {s} is archived")), "{raw}");
    assert!(raw.contains("It shall say goodbye."), "{raw}");
    assert!(
        !screen.alternate_screen(),
        "no full-screen view for a read-only session"
    );
}

/// Publishes `body` as the session's log entry `seq`, as the coordinator would.
async fn log_entry(bus: &arbiter_bus::Bus, session: &str, seq: u64, body: LogBody) {
    let entry = LogEntry {
        v: VERSION,
        session_id: session.into(),
        seq,
        at: chrono::Utc::now(),
        body,
    };
    bus.publish_js(
        subjects::session_log(session),
        &format!("{session}:log:{seq}"),
        &arbiter_bus::TraceContext::none(),
        &entry,
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_approval_rings_once_and_y_allows_it() {
    use arbiter_protocol::{
        Answerer, ApprovalAnsweredEntry, ApprovalAskedEntry, ApprovalDecision, ApprovalReply,
        ApprovalRequest, HumanMessage,
    };
    use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
    use futures::StreamExt;

    arbiter_tests::init_tracing();
    let nats = NatsServer::start().await;
    let s = "s-tui-approval";
    let client = arbiter_bus::connect(nats.url(), "test", false)
        .await
        .unwrap();
    let bus = arbiter_bus::Bus::setup(client).await.unwrap();
    // The console's lines, read as the coordinator would.
    let mut inbox = bus
        .js
        .create_consumer_on_stream(
            pull::Config {
                filter_subject: subjects::human_intake(arbiter_console::DEFAULT_IDENTITY),
                deliver_policy: DeliverPolicy::All,
                ack_policy: AckPolicy::Explicit,
                ..Default::default()
            },
            subjects::HUMAN_STREAM,
        )
        .await
        .unwrap()
        .messages()
        .await
        .unwrap();

    let mut console = Console::spawn(&["--session", s, "--nats-url", nats.url()]);
    log_arbiter_words(nats.url(), s, "Proceed.").await;
    console.wait_for(&["Arbiter: Proceed."]).await;
    let bells = |console: &Console| {
        console
            .raw
            .lock()
            .unwrap()
            .iter()
            .filter(|b| **b == 0x07)
            .count()
    };
    assert_eq!(bells(&console), 0, "nothing waits yet");

    // Orchestrator I asks to push; the model's arguments carry an escape.
    log_entry(
        &bus,
        s,
        2,
        LogBody::ApprovalAsked(ApprovalAskedEntry {
            approval: 1,
            number: 1,
            member: None,
            orch_id: "o-1".into(),
            request: ApprovalRequest {
                call_id: "call-1".into(),
                tool: "bash".into(),
                input: serde_json::json!({ "command": "git push origin main\u{1b}[2J" }),
                rule: "ask bash(git push*)".into(),
            },
            deadline: chrono::Utc::now() + chrono::Duration::minutes(10),
        }),
    )
    .await;
    let screen = console
        .wait_for(&[
            "Allow bash: git push origin main\\x1b[2J? [y]es once / [a]lways / [n]o",
            "? Approval 1: Orchestrator I asks to run bash: git push origin main\\x1b[2J",
        ])
        .await;
    assert!(
        screen.contains("Arbiter: Proceed."),
        "not cleared: {screen}"
    );
    eventually(WAIT, "the bell", || {
        let rung = bells(&console) == 1;
        async move { rung.then_some(()) }
    })
    .await;

    console.type_keys("y");
    let message = tokio::time::timeout(WAIT, inbox.next())
        .await
        .expect("no line from the console")
        .unwrap()
        .unwrap();
    message.ack().await.unwrap();
    let message: HumanMessage = serde_json::from_slice(&message.payload).unwrap();
    assert_eq!(
        (
            message.session_id.as_str(),
            message.text.as_str(),
            message.approval
        ),
        (
            s,
            "/allow 1",
            Some(ApprovalReply {
                approval: 1,
                decision: ApprovalDecision::AllowOnce,
                reason: None,
            })
        )
    );
    console.wait_for(&["your answer is on its way"]).await;

    log_entry(
        &bus,
        s,
        3,
        LogBody::ApprovalAnswered(ApprovalAnsweredEntry {
            approval: 1,
            number: 1,
            member: None,
            orch_id: "o-1".into(),
            call_id: "call-1".into(),
            decision: ApprovalDecision::AllowOnce,
            reason: None,
            by: Answerer::Console {
                name: arbiter_console::DEFAULT_IDENTITY.into(),
            },
            rule: None,
            input_seq: 1,
        }),
    )
    .await;
    console
        .wait_for(&["· Approval 1: allowed once by console local"])
        .await;
    console.wait_gone("your answer is on its way").await;
    // The key answered; it was not typed.
    assert!(!console.screen().contains(" > y"), "{}", console.screen());

    console.type_keys(CTRL_C);
    let (success, raw, screen) = console.exit().await;
    assert!(success, "{raw}");
    assert_restored(&screen);
    assert_eq!(raw.matches('\u{7}').count(), 1, "the bell rang once");
}
