//! The NATS side of the full-screen console: everything the session says
//! (the log, replayed then live; the session and Orchestrator statuses; the
//! Arbiter's words as they are written) arrives as [`FeedEvent`]s on one
//! channel, and human messages are published from here.

use std::sync::atomic::Ordering;
use std::time::Duration;

use arbiter_bus::{Bus, TraceContext};
use arbiter_protocol::{
    ArbiterDelta, HumanMessage, LogEntry, OrchestratorStatus, SessionStatus, VERSION, WireError,
    subjects,
};
use async_nats::connection::State;
use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use chrono::Utc;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::app::FeedEvent;
use crate::session::{CLIENT_NAME, open_log_from, stored_status};
use crate::{ConsoleError, Result};

/// Events the channel holds before the feed waits for the screen.
const CAPACITY: usize = 1024;
/// How often the connection state is looked at.
const CONNECTION_POLL: Duration = Duration::from_millis(250);
/// Errors in a row after which the log consumer is replaced.
const MAX_LOG_ERRORS: u32 = 10;
/// Pause before a replaced log consumer is opened (and between failed tries).
const REOPEN_AFTER: Duration = Duration::from_secs(1);
/// A publish not acknowledged by then is reported as not sent.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// A running feed; its tasks stop when it is dropped.
pub(crate) struct Feed {
    bus: Bus,
    session_id: String,
    pub(crate) events: mpsc::Receiver<FeedEvent>,
    tx: mpsc::Sender<FeedEvent>,
    _tasks: JoinSet<()>,
}

impl Feed {
    /// Connects (failing fast if the server cannot be reached), subscribes to
    /// the live subjects before reading anything stored, then opens the log
    /// from its first entry.
    pub(crate) async fn start(url: &str, session_id: &str) -> Result<Self> {
        let client = arbiter_bus::connect(url, CLIENT_NAME, false).await?;
        let bus = Bus::setup(client).await?;
        let subscribe = |subject: String| {
            let client = bus.client.clone();
            async move {
                client
                    .subscribe(subject.clone())
                    .await
                    .map_err(|e| ConsoleError::Subscribe {
                        subject,
                        message: e.to_string(),
                    })
            }
        };
        let session_sub = subscribe(subjects::session_status(session_id)).await?;
        let delta_sub = subscribe(subjects::session_delta(session_id)).await?;
        let orch_sub = subscribe(subjects::ALL_ORCH_STATUS.to_owned()).await?;
        bus.client
            .flush()
            .await
            .map_err(|e| ConsoleError::Subscribe {
                subject: subjects::session_status(session_id),
                message: e.to_string(),
            })?;

        let (tx, events) = mpsc::channel(CAPACITY);
        if let Some(status) = stored_status(&bus, session_id).await? {
            // The channel is empty and has room.
            let _ = tx.try_send(FeedEvent::Session(status));
        }
        let log = open_log_from(&bus, session_id, DeliverPolicy::All).await?;

        let (reconnected_tx, reconnected) = watch::channel(0);
        let mut tasks = JoinSet::new();
        tasks.spawn(follow_log(
            bus.clone(),
            session_id.to_owned(),
            log,
            tx.clone(),
            reconnected,
        ));
        tasks.spawn(forward(
            session_sub,
            tx.clone(),
            |_: &SessionStatus| true,
            FeedEvent::Session,
        ));
        tasks.spawn(forward(
            delta_sub,
            tx.clone(),
            |_: &ArbiterDelta| true,
            FeedEvent::Delta,
        ));
        let id = session_id.to_owned();
        tasks.spawn(forward(
            orch_sub,
            tx.clone(),
            move |s: &OrchestratorStatus| s.session_id == id,
            FeedEvent::Orchestrator,
        ));
        tasks.spawn(watch_connection(
            bus.client.clone(),
            tx.clone(),
            reconnected_tx,
        ));
        Ok(Self {
            bus,
            session_id: session_id.to_owned(),
            events,
            tx,
            _tasks: tasks,
        })
    }

    /// Publishes what the human typed, in the background; a failure comes
    /// back as [`FeedEvent::NotSent`].
    pub(crate) fn send(&self, message_id: String, text: String) {
        let bus = self.bus.clone();
        let tx = self.tx.clone();
        let message = HumanMessage {
            v: VERSION,
            session_id: self.session_id.clone(),
            message_id: message_id.clone(),
            text,
            sent_at: Utc::now(),
        };
        tokio::spawn(async move {
            let sent = tokio::time::timeout(
                SEND_TIMEOUT,
                bus.publish_js(
                    subjects::session_human(&message.session_id),
                    &message_id,
                    &TraceContext::new_root(),
                    &message,
                ),
            )
            .await;
            let error = match sent {
                Ok(Ok(())) => return,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer from NATS within {} s", SEND_TIMEOUT.as_secs()),
            };
            tracing::warn!(%error, "human message not sent");
            let _ = tx
                .send(FeedEvent::NotSent {
                    message_id,
                    text: message.text,
                    error,
                })
                .await;
        });
    }
}

/// Decodes every message of a subscription and forwards those `keep` accepts.
async fn forward<T: DeserializeOwned>(
    mut sub: async_nats::Subscriber,
    tx: mpsc::Sender<FeedEvent>,
    keep: impl Fn(&T) -> bool,
    event: fn(T) -> FeedEvent,
) {
    while let Some(message) = sub.next().await {
        match arbiter_bus::decode::<T>(&message.subject, &message.payload) {
            Ok(value) if keep(&value) => {
                if tx.send(event(value)).await.is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "status ignored"),
        }
    }
}

/// Forwards the log. A consumer that keeps failing (or ends) is replaced by
/// one that starts after the last entry forwarded, for as long as it takes;
/// so is one that lived through a reconnection, which would otherwise take
/// several missed heartbeats to notice that it must start over.
async fn follow_log(
    bus: Bus,
    session_id: String,
    mut log: pull::Ordered,
    tx: mpsc::Sender<FeedEvent>,
    mut reconnected: watch::Receiver<u64>,
) {
    let mut errors = 0;
    let mut last_stream_seq = None;
    loop {
        tokio::select! {
            message = log.next() => match message {
                Some(Ok(message)) => {
                    errors = 0;
                    if let Ok(info) = message.info() {
                        last_stream_seq = Some(info.stream_sequence);
                    }
                    let event = match arbiter_bus::decode::<LogEntry>(&message.subject, &message.payload) {
                        Ok(entry) => FeedEvent::Log(entry),
                        Err(e) => {
                            tracing::warn!(error = %e, "malformed log entry");
                            FeedEvent::Malformed { detail: detail(e) }
                        }
                    };
                    if tx.send(event).await.is_err() {
                        return;
                    }
                    continue;
                }
                Some(Err(e)) => {
                    errors += 1;
                    tracing::warn!(error = %e, errors, "log consumer error");
                    if errors < MAX_LOG_ERRORS {
                        continue;
                    }
                }
                None => tracing::warn!("the log consumer stopped"),
            },
            changed = reconnected.changed() => {
                if changed.is_err() {
                    return;
                }
                tracing::info!("reconnected: the log consumer starts over");
            }
        }
        let deliver_policy = match last_stream_seq {
            Some(seq) => DeliverPolicy::ByStartSequence {
                start_sequence: seq + 1,
            },
            None => DeliverPolicy::All,
        };
        let mut first_try = true;
        loop {
            if !first_try {
                tokio::time::sleep(REOPEN_AFTER).await;
            }
            first_try = false;
            if tx.is_closed() {
                return;
            }
            match open_log_from(&bus, &session_id, deliver_policy).await {
                Ok(new) => {
                    tracing::info!("log consumer reopened");
                    log = new;
                    errors = 0;
                    break;
                }
                Err(e) => tracing::warn!(error = %e, "cannot reopen the log yet"),
            }
        }
    }
}

/// Reports every change of the connection to NATS, and every reconnection
/// (even one too quick to be seen as down between two looks).
async fn watch_connection(
    client: async_nats::Client,
    tx: mpsc::Sender<FeedEvent>,
    reconnected: watch::Sender<u64>,
) {
    let stats = client.statistics();
    let connects = || stats.connects.load(Ordering::Relaxed);
    let mut seen_connects = connects();
    let mut up = true;
    let mut tick = tokio::time::interval(CONNECTION_POLL);
    loop {
        tick.tick().await;
        if tx.is_closed() {
            return;
        }
        let now_up = client.connection_state() == State::Connected;
        if now_up && connects() != seen_connects {
            seen_connects = connects();
            reconnected.send_modify(|n| *n += 1);
        }
        if now_up != up {
            up = now_up;
            tracing::info!(up, "NATS connection changed");
            if tx.send(FeedEvent::Connection { up }).await.is_err() {
                return;
            }
        }
    }
}

fn detail(e: WireError) -> String {
    match e {
        WireError::MalformedMessage { detail, .. } => detail,
        other => other.to_string(),
    }
}
