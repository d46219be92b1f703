//! What the tests share: the test playing the coordinator over a real
//! nats-server, the console binary it runs, and the log entries it writes.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use arbiter_bus::{Bus, TraceContext};
use arbiter_protocol::{
    ArbiterEntry, HumanEntry, HumanMessage, LogBody, LogEntry, SessionState, SessionStatus,
    VERSION, subjects,
};
use arbiter_tests::NatsServer;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use chrono::Utc;
use futures::StreamExt;
use pretty_assertions::assert_eq;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::timeout;

/// Upper bound for any single wait; a broken console fails the test instead of hanging it.
const WAIT: Duration = Duration::from_secs(20);

/// A nats-server and the test's own connection, through which it plays the coordinator.
pub(crate) struct Coordinator {
    nats: NatsServer,
    bus: Bus,
}

impl Coordinator {
    pub(crate) async fn start() -> Self {
        arbiter_tests::init_tracing();
        let nats = NatsServer::start().await;
        let client = arbiter_bus::connect(nats.url(), "test-coordinator", false)
            .await
            .unwrap();
        let bus = Bus::setup(client).await.unwrap();
        Self { nats, bus }
    }

    pub(crate) fn url(&self) -> &str {
        self.nats.url()
    }

    /// Appends entries to the session log.
    pub(crate) async fn log(&self, entries: &[LogEntry]) {
        for entry in entries {
            let id = format!("{}-{}", entry.session_id, entry.seq);
            self.bus
                .publish_js(
                    subjects::session_log(&entry.session_id),
                    &id,
                    &TraceContext::none(),
                    entry,
                )
                .await
                .unwrap();
        }
    }

    /// Publishes raw bytes on the session log.
    pub(crate) async fn log_raw(&self, session_id: &str, payload: &'static [u8]) {
        let ack = self
            .bus
            .js
            .publish(subjects::session_log(session_id), payload.into())
            .await
            .unwrap();
        ack.await.unwrap();
    }

    /// Publishes `entry` again without a message id, as a coordinator
    /// restarted after the server's dedupe window would: the server keeps both.
    pub(crate) async fn log_again(&self, entry: &LogEntry) {
        let payload = serde_json::to_vec(entry).unwrap();
        let ack = self
            .bus
            .js
            .publish(subjects::session_log(&entry.session_id), payload.into())
            .await
            .unwrap();
        ack.await.unwrap();
    }

    /// An idle status with `last_seq`, live and in the bucket.
    pub(crate) async fn idle(&self, session_id: &str, last_seq: u64) {
        let status = idle_status(session_id, last_seq);
        self.store_status(&status).await;
        self.bus
            .publish_core(subjects::session_status(session_id), &status)
            .await
            .unwrap();
        self.bus.client.flush().await.unwrap();
    }

    /// A status in the bucket only, as a console attaching later finds it.
    pub(crate) async fn store_status(&self, status: &SessionStatus) {
        let bytes = serde_json::to_vec(status).unwrap();
        self.bus
            .sessions_kv
            .put(&status.session_id, bytes.into())
            .await
            .unwrap();
    }

    /// The console's human messages, read from the human intake as the
    /// coordinator would (stored under the console's name; each names its
    /// session in its payload).
    pub(crate) async fn human_messages(&self) -> pull::Stream {
        let consumer = self
            .bus
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
            .unwrap();
        consumer.messages().await.unwrap()
    }
}

pub(crate) async fn next_human(messages: &mut pull::Stream) -> HumanMessage {
    let message = timeout(WAIT, messages.next())
        .await
        .expect("timed out waiting for a human message")
        .unwrap()
        .unwrap();
    message.ack().await.unwrap();
    serde_json::from_slice(&message.payload).unwrap()
}

pub(crate) fn entry(session_id: &str, seq: u64, body: LogBody) -> LogEntry {
    LogEntry {
        v: VERSION,
        session_id: session_id.to_owned(),
        seq,
        at: Utc::now(),
        body,
    }
}

pub(crate) fn human(message: &HumanMessage) -> LogBody {
    LogBody::Human(HumanEntry {
        message_id: message.message_id.clone(),
        text: message.text.clone(),
    })
}

pub(crate) fn arbiter(text: &str) -> LogBody {
    LogBody::Arbiter(ArbiterEntry { text: text.into() })
}

pub(crate) fn idle_status(session_id: &str, last_seq: u64) -> SessionStatus {
    SessionStatus {
        team: Vec::new(),
        spend: Default::default(),
        archived_at: None,
        budget: Default::default(),
        approvals: Vec::new(),
        attention: None,
        v: VERSION,
        session_id: session_id.to_owned(),
        state: SessionState::Idle,
        queued: 0,
        arbiter_context_pct: 1.5,
        arbiter_context_tokens: 3_000,
        active: None,
        summoned: 0,
        last_seq,
        created_at: Utc::now(),
        at: Utc::now(),
    }
}

/// A running console process.
pub(crate) struct Console {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: JoinHandle<String>,
    stderr: mpsc::UnboundedReceiver<String>,
}

/// A console process that has exited.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: Vec<String>,
}

impl Console {
    /// Starts the real binary with stdin piped (`stdin: true`) or closed.
    pub(crate) fn spawn(args: &[&str], stdin: bool) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_arbiter-console"));
        command
            .args(args)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            // The warning a plain server on this machine gets once
            // (docs/security.md) is not what these tests read on stderr.
            .env("RUST_LOG", "warn,arbiter_bus::connect=error")
            .stderr(Stdio::piped())
            .kill_on_drop(true);
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
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take();
        let mut out = child.stdout.take().unwrap();
        let stdout = tokio::spawn(async move {
            let mut text = String::new();
            out.read_to_string(&mut text).await.unwrap();
            text
        });
        let (tx, stderr) = mpsc::unbounded_channel();
        let mut err = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = err.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            stdout,
            stderr,
        }
    }

    /// The id from the `session <id>` line the console starts with.
    pub(crate) async fn session_id(&mut self) -> String {
        let line = timeout(WAIT, self.stderr.recv())
            .await
            .expect("timed out waiting for the session line")
            .expect("stderr closed before the session line");
        line.strip_prefix("session ")
            .unwrap_or_else(|| panic!("first stderr line is not `session <id>`: {line:?}"))
            .to_owned()
    }

    pub(crate) async fn type_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is not piped");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
    }

    pub(crate) fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Sends SIGINT, as Ctrl-C in a terminal would.
    pub(crate) fn interrupt(&self) {
        let pid = self.child.id().expect("console already reaped");
        let status = std::process::Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit (or fails after [`WAIT`]) and collects its output.
    pub(crate) async fn finish(mut self) -> Finished {
        self.close_stdin();
        let status = match timeout(WAIT, self.child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => {
                self.child.start_kill().unwrap();
                let stdout = timeout(WAIT, self.stdout).await.unwrap().unwrap();
                let stderr = drain(&mut self.stderr).await;
                panic!(
                    "the console did not exit within {WAIT:?}\nstdout:\n{stdout}\nstderr:\n{}",
                    stderr.join("\n")
                );
            }
        };
        let stdout = timeout(WAIT, self.stdout).await.unwrap().unwrap();
        let stderr = drain(&mut self.stderr).await;
        Finished {
            status,
            stdout,
            stderr,
        }
    }

    /// Whether the process is still running.
    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

async fn drain(rx: &mut mpsc::UnboundedReceiver<String>) -> Vec<String> {
    let mut lines = Vec::new();
    while let Ok(Some(line)) = timeout(WAIT, rx.recv()).await {
        lines.push(line);
    }
    lines
}

impl Finished {
    pub(crate) fn assert_success(&self) {
        assert!(self.status.success(), "console failed: {self:#?}");
    }

    pub(crate) fn assert_resume_hint(&self, session_id: &str) {
        let hint = format!("resume: arbiter-console --session {session_id}");
        assert_eq!(self.stderr.last(), Some(&hint), "{self:#?}");
    }
}
