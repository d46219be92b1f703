//! Reads the coordinator's two durable consumers (human messages, Orchestrator
//! output) and hands each message to its session's actor, creating sessions
//! on first contact. Malformed messages are rejected here, never routed.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arbiter_bus::{TraceContext, decode};
use arbiter_protocol::roles::NatsRole;
use arbiter_protocol::{HumanMessage, OrchestratorMessage, WireError, subjects};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::{self, AckKind};
use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::session::{Input, Refused, SessionHandle};
use crate::state;
use crate::{Error, Result, Shared};

/// How long a message may stay unacknowledged before the server sends it again.
/// A session acknowledges right after storing the step that took it, so this only
/// bounds how long a killed coordinator delays what it had taken but not stored.
const ACK_WAIT: Duration = Duration::from_secs(10);
// Output held for a gap must outlast one redelivery of what is missing.
const _: () = assert!(ACK_WAIT.as_secs() < crate::DEFAULT_OUTPUT_GAP_WAIT.as_secs());
/// Messages the coordinator may hold unacknowledged at once, per consumer.
const MAX_ACK_PENDING: i64 = 20_000;
/// The longest human message taken, in bytes (about 64k tokens): larger
/// ones are refused with an error in the log. The log entry, the Arbiter's
/// transcript and the step record each carry a copy, and a NATS message is
/// capped at 1 MB by default.
pub(crate) const MAX_HUMAN_BYTES: usize = 256 * 1024;
/// The start-up scan of stored sessions is retried with doubling pauses
/// until a pause would reach this (about 25 s in all).
const SCAN_GIVE_UP: Duration = Duration::from_secs(15);

/// Opens (or creates) a durable consumer. One made by an older version with
/// other filters is updated to these.
async fn consumer(
    shared: &Shared,
    stream: &str,
    name: &str,
    filters: &[&str],
) -> Result<PullConsumer> {
    let stream = shared
        .bus
        .js
        .get_stream(stream)
        .await
        .map_err(|e| js_error(format!("opening stream {stream}"), e))?;
    let (filter_subject, filter_subjects) = match filters {
        [one] => ((*one).to_owned(), Vec::new()),
        many => (
            String::new(),
            many.iter().map(|f| (*f).to_owned()).collect(),
        ),
    };
    let config = pull::Config {
        durable_name: Some(name.into()),
        filter_subject,
        filter_subjects,
        ack_policy: AckPolicy::Explicit,
        deliver_policy: DeliverPolicy::All,
        ack_wait: ACK_WAIT,
        max_ack_pending: MAX_ACK_PENDING,
        ..Default::default()
    };
    let consumer: PullConsumer = stream
        .get_or_create_consumer(name, config.clone())
        .await
        .map_err(|e| js_error(format!("creating consumer {name}"), e))?;
    let have = &consumer.cached_info().config;
    let mut had: Vec<&str> = std::iter::once(have.filter_subject.as_str())
        .chain(have.filter_subjects.iter().map(String::as_str))
        .filter(|f| !f.is_empty())
        .collect();
    let mut wanted = filters.to_vec();
    had.sort_unstable();
    wanted.sort_unstable();
    if had == wanted {
        return Ok(consumer);
    }
    tracing::info!(
        consumer = name,
        ?had,
        ?wanted,
        "updating the consumer's filters"
    );
    stream
        .update_consumer(config)
        .await
        .map_err(|e| js_error(format!("updating consumer {name}"), e))
}

fn js_error(what: String, e: impl std::fmt::Display) -> Error {
    Error::Bus(arbiter_bus::BusError::JetStream {
        what,
        message: e.to_string(),
    })
}

/// The live sessions of this coordinator.
struct Registry {
    shared: Arc<Shared>,
    sessions: HashMap<String, SessionHandle>,
    cancel: CancellationToken,
    tasks: tokio::task::JoinSet<()>,
}

impl Registry {
    async fn handle(&mut self, session_id: &str) -> &SessionHandle {
        if !self.sessions.contains_key(session_id) {
            let handle = crate::session::spawn(
                self.shared.clone(),
                session_id.to_owned(),
                self.cancel.child_token(),
                &mut self.tasks,
            )
            .await;
            self.sessions.insert(session_id.to_owned(), handle);
        }
        &self.sessions[session_id]
    }

    /// Sessions an earlier run left with work undone start at once: nobody
    /// else would wake them.
    async fn resume_unfinished(&mut self) {
        let mut delay = Duration::from_millis(100);
        let unfinished = loop {
            match state::unfinished(&self.shared.bus).await {
                Ok(ids) => break ids,
                Err(e) if delay < SCAN_GIVE_UP => {
                    tracing::warn!(error = %e, ?delay, "could not scan the stored sessions; retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(e) => {
                    tracing::error!(error = %e, "could not scan the stored sessions; unfinished ones wait for their next message");
                    return;
                }
            }
        };
        for session_id in unfinished {
            tracing::info!(session.id = %session_id, "resuming an unfinished session");
            self.handle(&session_id).await;
        }
    }

    /// Hands `input` to its session without waiting: a session whose inbox
    /// is full must not stall the others. Its message goes back to the
    /// server, to come again; the session's log says so.
    async fn deliver(&mut self, session_id: &str, input: Input) {
        let handle = self.handle(session_id).await;
        match handle.offer(input) {
            Ok(()) => {}
            Err(Refused::Full(input)) => {
                tracing::warn!(
                    session.id = session_id,
                    "session inbox full; message put back"
                );
                if matches!(*input, Input::Human { .. }) {
                    // Admitted but not taken: it is admitted again when it comes back.
                    self.shared.caps.taken(session_id);
                }
                if let Some(msg) = input.into_ack() {
                    let delay = Some(crate::session::PUT_BACK_DELAY);
                    if let Err(e) = msg.ack_with(AckKind::Nak(delay)).await {
                        tracing::warn!(error = %e, "could not put a message back; it comes again after the ack wait");
                    }
                }
            }
            Err(Refused::Stopped) => tracing::error!(
                session.id = session_id,
                "session actor has stopped; input dropped"
            ),
        }
    }

    /// After a consumer error: a stream deleted under the running
    /// coordinator is an error that stops it (the sessions it holds in
    /// memory no longer match what is stored); it never spins on it.
    async fn stop_if_deleted(&mut self) -> Result<()> {
        let check = arbiter_bus::setup::missing_stream(&self.shared.bus, NatsRole::Coordinator);
        match check.await {
            Ok(Some(stream)) => Err(arbiter_bus::BusError::Deleted { stream }.into()),
            _ => Ok(()),
        }
    }

    /// After a consumer's messages ended (it asks no more): a deleted stream
    /// is the reason given once that has held for `arbiter_bus::RIDE_OUT`.
    async fn stop_if_ended_by_deletion(&mut self) -> Result<()> {
        let check =
            arbiter_bus::setup::missing_stream_settled(&self.shared.bus, NatsRole::Coordinator);
        match check.await {
            Ok(Some(stream)) => Err(arbiter_bus::BusError::Deleted { stream }.into()),
            _ => Ok(()),
        }
    }

    async fn on_human(&mut self, msg: jetstream::Message) {
        let subject = msg.subject.to_string();
        let subject = subject.as_str();
        let Some((session_id, console)) = subjects::human_of(subject) else {
            tracing::error!(subject, "human message on an unexpected subject; rejected");
            ack(&msg).await;
            return;
        };
        arbiter_bus::metrics::hop(&msg, "console→coordinator");
        let trace = TraceContext::from_headers(msg.headers.as_ref());
        let rejected = |error: WireError| {
            tracing::error!(subject, %error, "malformed human message rejected");
            error
        };
        // The session acknowledges the message once the step that took it is stored.
        let input = match decode::<HumanMessage>(subject, &msg.payload) {
            Ok(human) if human.session_id != session_id => Input::Malformed(
                rejected(WireError::MalformedMessage {
                    subject: subject.to_owned(),
                    detail: format!(
                        "its session_id {:?} does not match the subject",
                        human.session_id
                    ),
                }),
                Some(msg),
            ),
            Ok(human) if human.text.len() > MAX_HUMAN_BYTES => Input::Malformed(
                rejected(WireError::MessageTooLarge {
                    subject: subject.to_owned(),
                    bytes: human.text.len() as u64,
                    limit: MAX_HUMAN_BYTES as u64,
                }),
                Some(msg),
            ),
            Ok(message) => match self.shared.caps.admit(console, session_id, Instant::now()) {
                Ok(()) => Input::Human {
                    message,
                    console: console.to_owned(),
                    trace,
                    ack: Some(msg),
                },
                Err(refusal) => {
                    tracing::warn!(subject, %refusal, "human message refused by a console limit");
                    Input::Refused {
                        message,
                        refusal,
                        ack: Some(msg),
                    }
                }
            },
            Err(error) => Input::Malformed(rejected(error), Some(msg)),
        };
        self.deliver(session_id, input).await;
    }

    async fn on_orchestrator(&mut self, msg: jetstream::Message) {
        let subject = msg.subject.to_string();
        let subject = subject.as_str();
        arbiter_bus::metrics::hop(&msg, "worker→coordinator");
        let trace = TraceContext::from_headers(msg.headers.as_ref());
        let decoded = decode::<OrchestratorMessage>(subject, &msg.payload).and_then(|m| {
            let subject_orch = subjects::id_of(subject, "orch", "out");
            if subject_orch != Some(m.orch_id.as_str()) || !subjects::is_valid_token(&m.session_id)
            {
                return Err(WireError::MalformedMessage {
                    subject: subject.to_owned(),
                    detail: "its orch_id or session_id does not match the subject".into(),
                });
            }
            Ok(m)
        });
        match decoded {
            Ok(message) => {
                let session_id = message.session_id.clone();
                self.deliver(
                    &session_id,
                    Input::Orchestrator(Box::new(message), trace, Some(msg)),
                )
                .await;
            }
            Err(error) => {
                tracing::error!(subject, %error, "malformed Orchestrator message rejected");
                // When the session can still be told, its log shows the rejection.
                let session = serde_json::from_slice::<serde_json::Value>(&msg.payload)
                    .ok()
                    .and_then(|v| v.get("session_id")?.as_str().map(str::to_owned))
                    .filter(|id| subjects::is_valid_token(id));
                match session {
                    Some(session_id) => {
                        self.deliver(&session_id, Input::Malformed(error, Some(msg)))
                            .await
                    }
                    None => ack(&msg).await,
                }
            }
        }
    }
}

/// Runs both consumers until shutdown, then stops every session and waits for them.
pub(crate) async fn run(shared: Arc<Shared>, shutdown: impl Future<Output = ()>) -> Result<()> {
    let human = consumer(
        &shared,
        subjects::SESSIONS_STREAM,
        subjects::COORDINATOR_HUMAN_CONSUMER,
        &[
            subjects::ALL_SESSION_HUMAN,
            subjects::ALL_SESSION_HUMAN_FROM,
        ],
    )
    .await?;
    let orch = consumer(
        &shared,
        subjects::ORCH_STREAM,
        subjects::COORDINATOR_ORCH_CONSUMER,
        &[subjects::ALL_ORCH_OUT],
    )
    .await?;
    let mut human_msgs = arbiter_bus::follow(&human)
        .await
        .map_err(|e| js_error("reading human messages".into(), e))?;
    let mut orch_msgs = arbiter_bus::follow(&orch)
        .await
        .map_err(|e| js_error("reading Orchestrator output".into(), e))?;
    let mut registry = Registry {
        shared,
        sessions: HashMap::new(),
        cancel: CancellationToken::new(),
        tasks: tokio::task::JoinSet::new(),
    };
    registry.resume_unfinished().await;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            next = human_msgs.next() => match next {
                Some(Ok(msg)) => registry.on_human(msg).await,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "human consumer hiccup");
                    registry.stop_if_deleted().await?;
                }
                None => {
                    registry.stop_if_ended_by_deletion().await?;
                    return Err(js_error("reading human messages".into(), "the consumer stream ended"));
                }
            },
            next = orch_msgs.next() => match next {
                Some(Ok(msg)) => registry.on_orchestrator(msg).await,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "Orchestrator consumer hiccup");
                    registry.stop_if_deleted().await?;
                }
                None => {
                    registry.stop_if_ended_by_deletion().await?;
                    return Err(js_error("reading Orchestrator output".into(), "the consumer stream ended"));
                }
            },
        }
    }
    tracing::info!("coordinator shutting down");
    registry.cancel.cancel();
    drop(registry.sessions);
    while registry.tasks.join_next().await.is_some() {}
    Ok(())
}

/// Acknowledges a message no session will take (it was rejected), so it is
/// not delivered forever.
async fn ack(msg: &jetstream::Message) {
    if let Err(e) = msg.ack_with(AckKind::Ack).await {
        tracing::warn!(subject = %msg.subject, error = %e, "ack failed; the message may come again");
    }
}
