//! The NATS side of the full-screen console: everything the session says
//! (the log, replayed then live; the session and Orchestrator statuses; the
//! Arbiter's words as they are written) arrives as [`FeedEvent`]s on one
//! channel, and human messages are published from here. The feed starts at
//! once and attaches in the background, however long the server takes.

use std::sync::atomic::Ordering;
use std::time::Duration;
use tracing::Instrument as _;

use arbiter_bus::direct::Follow;
use arbiter_bus::{Bus, TraceContext};
use arbiter_bus::{Connection, NatsOptions, Reach};
use arbiter_protocol::roles::NatsRole;
use arbiter_protocol::{
    ArbiterDelta, LogEntry, OrchestratorStatus, SessionStatus, WireError, subjects,
};
use async_nats::connection::State;
use async_nats::jetstream::consumer::DeliverPolicy;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::app::FeedEvent;
use crate::session::{CLIENT_NAME, open_log_from, stored_status};
use crate::{ConsoleError, Result};

/// Events the channel holds before the feed waits for the screen.
const CAPACITY: usize = 1024;
/// Pause between attempts to reach the server before the first connection.
const CONNECT_RETRY: Duration = Duration::from_secs(1);
/// How often the connection state is looked at.
const CONNECTION_POLL: Duration = Duration::from_millis(250);
/// Errors in a row after which the log consumer is replaced.
const MAX_LOG_ERRORS: u32 = 10;
/// Pause before a replaced log consumer is opened (and between failed tries).
const REOPEN_AFTER: Duration = Duration::from_secs(1);
/// How long the log consumer may deliver nothing while the session's status
/// says the log holds more than it delivered: past that it starts over. On a
/// cluster an ordered consumer whose node died while this client stayed
/// connected to another one has been seen to deliver nothing more.
const STALL: Duration = Duration::from_secs(10);
/// How often the log consumer is checked for a stall.
const STALL_CHECK: Duration = Duration::from_secs(2);
/// A publish not acknowledged by then is reported as not sent: past the
/// time the bus tries it through the loss of a server of a cluster.
const SEND_TIMEOUT: Duration = Duration::from_secs(arbiter_bus::RIDE_OUT.as_secs() + 5);
/// A message typed before the first connection waits this long for it
/// (the console usually connects within milliseconds of starting).
const FIRST_CONNECT_WAIT: Duration = Duration::from_secs(5);

/// A running feed; its tasks stop when it is dropped (and with them its
/// connection and subscriptions: nothing of it is left on the server).
pub struct Feed {
    /// The bus once the feed has attached; `None` until then.
    bus: watch::Receiver<Option<Bus>>,
    session_id: String,
    /// The console identity its messages are published under.
    identity: String,
    /// The workspace its messages name (see [`Feed::in_workspace`]).
    workspace: Option<String>,
    pub events: mpsc::Receiver<FeedEvent>,
    tx: mpsc::Sender<FeedEvent>,
    _tasks: JoinSet<()>,
}

impl Feed {
    /// Starts at once: connecting and attaching to the session go on in the
    /// background for as long as it takes. Until the server is reached the
    /// feed reports the connection down (the screen shows why it is empty);
    /// once attached it reports [`FeedEvent::Attached`].
    pub fn start(nats: &NatsOptions, session_id: &str, identity: &str) -> Self {
        Self::start_as(nats, session_id, identity, NatsRole::Console)
    }

    /// [`Feed::start`] for a process of another role than a console's
    /// (`arbiter-web`), which reads what a console reads.
    pub fn start_as(nats: &NatsOptions, session_id: &str, identity: &str, role: NatsRole) -> Self {
        let (tx, events) = mpsc::channel(CAPACITY);
        let (bus_tx, bus) = watch::channel(None);
        let mut tasks = JoinSet::new();
        tasks.spawn(run(
            nats.clone(),
            role,
            session_id.to_owned(),
            tx.clone(),
            bus_tx,
        ));
        Self {
            bus,
            session_id: session_id.to_owned(),
            identity: identity.to_owned(),
            workspace: None,
            events,
            tx,
            _tasks: tasks,
        }
    }

    /// Names `workspace` in every message sent: the session's memory is that
    /// workspace's.
    pub fn in_workspace(mut self, workspace: Option<String>) -> Self {
        self.workspace = workspace;
        self
    }

    /// Publishes what the human typed, in the background; a failure comes
    /// back as [`FeedEvent::NotSent`]. Before the first connection it waits
    /// [`FIRST_CONNECT_WAIT`] for one.
    pub fn send(&self, message_id: String, text: String) {
        let mut bus_rx = self.bus.clone();
        let tx = self.tx.clone();
        let identity = self.identity.clone();
        let message = crate::command::message(
            &self.session_id,
            &message_id,
            text,
            self.workspace.as_deref(),
        );
        tokio::spawn(async move {
            let connected = tokio::time::timeout(FIRST_CONNECT_WAIT, async {
                bus_rx
                    .wait_for(Option::is_some)
                    .await
                    .ok()
                    .and_then(|bus| bus.clone())
            });
            let error = match connected.await.ok().flatten() {
                None => "not connected to NATS yet".to_owned(),
                Some(bus) => {
                    let span = crate::line_span(&message.session_id, &message_id);
                    let sent = tokio::time::timeout(
                        SEND_TIMEOUT,
                        bus.publish_js(
                            subjects::session_human_from(&message.session_id, &identity),
                            &message_id,
                            &TraceContext::of(&span),
                            &message,
                        ),
                    )
                    .instrument(span)
                    .await;
                    match sent {
                        Ok(Ok(())) => return,
                        Ok(Err(e)) => crate::not_sent::reason(&e),
                        Err(_) => {
                            format!("no answer from NATS within {} s", SEND_TIMEOUT.as_secs())
                        }
                    }
                }
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

/// The subscriptions and the log consumer of an attached feed.
struct Attached {
    bus: Bus,
    /// The session's status from the bucket, if it has one.
    status: Option<SessionStatus>,
    session_sub: async_nats::Subscriber,
    delta_sub: async_nats::Subscriber,
    orch_sub: async_nats::Subscriber,
    watchers_sub: async_nats::Subscriber,
    log: Follow,
}

/// Where an attempt to attach stopped.
enum AttachError {
    /// The server could not be reached.
    Unreachable(ConsoleError),
    /// It was reached, but something after failed.
    Failed(ConsoleError),
}

/// Attaches (retrying every [`CONNECT_RETRY`] until it works), then runs the
/// tasks that forward what the session says, until the feed is dropped.
async fn run(
    nats: NatsOptions,
    role: NatsRole,
    session_id: String,
    tx: mpsc::Sender<FeedEvent>,
    bus_tx: watch::Sender<Option<Bus>>,
) {
    let mut up = true;
    let mut last_trouble = None;
    let attached = loop {
        let (now_up, error) = match attach(&nats, role, &session_id).await {
            Ok(attached) => break attached,
            Err(AttachError::Unreachable(e)) => (false, e),
            Err(AttachError::Failed(e)) => (true, e),
        };
        tracing::warn!(error = %error, "cannot attach to the session yet");
        if now_up != up {
            up = now_up;
            if tx.send(FeedEvent::Connection { up }).await.is_err() {
                return;
            }
        }
        let trouble = format!("cannot attach to the session yet: {error}");
        if up && last_trouble.as_ref() != Some(&trouble) {
            last_trouble = Some(trouble.clone());
            if tx.send(FeedEvent::Trouble(trouble)).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(CONNECT_RETRY).await;
        if tx.is_closed() {
            return;
        }
    };
    let Attached {
        bus,
        status,
        session_sub,
        delta_sub,
        orch_sub,
        watchers_sub,
        log,
    } = attached;
    let stored_seq = status.as_ref().map_or(0, |s| s.last_seq);
    let first = [
        (!up).then_some(FeedEvent::Connection { up: true }),
        status.map(|status| {
            // The bucket holds the last change, not the last heartbeat.
            let age = (chrono::Utc::now() - status.at)
                .to_std()
                .unwrap_or_default();
            FeedEvent::StoredSession { status, age }
        }),
        Some(FeedEvent::Attached),
    ];
    for event in first.into_iter().flatten() {
        if tx.send(event).await.is_err() {
            return;
        }
    }
    bus_tx.send_replace(Some(bus.clone()));

    let (reconnected_tx, reconnected) = watch::channel(0);
    // The last log seq the session's statuses say is stored.
    let (stored_tx, stored) = watch::channel(stored_seq);
    let mut tasks = JoinSet::new();
    tasks.spawn(follow_log(
        bus.clone(),
        session_id.clone(),
        log,
        tx.clone(),
        Watches {
            reconnected,
            stored,
        },
    ));
    tasks.spawn(forward(
        session_sub,
        tx.clone(),
        move |status: &SessionStatus| {
            stored_tx.send_if_modified(|seq| {
                let newer = status.last_seq > *seq;
                *seq = (*seq).max(status.last_seq);
                newer
            });
            true
        },
        FeedEvent::Session,
    ));
    tasks.spawn(forward(
        delta_sub,
        tx.clone(),
        |_: &ArbiterDelta| true,
        FeedEvent::Delta,
    ));
    let id = session_id.clone();
    tasks.spawn(forward(
        orch_sub,
        tx.clone(),
        move |s: &OrchestratorStatus| s.session_id == id,
        FeedEvent::Orchestrator,
    ));
    tasks.spawn(answer_watchers(bus.client.clone(), watchers_sub));
    tasks.spawn(watch_connection(bus.client.clone(), tx, reconnected_tx));
    // The tasks are aborted when this one is, with the feed.
    while tasks.join_next().await.is_some() {}
}

/// Connects (failing fast if the server cannot be reached), subscribes to
/// the live subjects before reading anything stored, then opens the log
/// from its first entry.
async fn attach(
    nats: &NatsOptions,
    role: NatsRole,
    session_id: &str,
) -> std::result::Result<Attached, AttachError> {
    let name = match role {
        NatsRole::Web => "arbiter-web",
        _ => CLIENT_NAME,
    };
    let conn = arbiter_bus::connect_with(nats, name, Reach::FailFast)
        .await
        .map_err(|e| match e {
            e @ arbiter_bus::BusError::Connect { .. } => AttachError::Unreachable(e.into()),
            // Refused credentials, TLS, unreadable files: the server answered.
            e => AttachError::Failed(e.into()),
        })?;
    subscribe_and_open(conn, role, session_id)
        .await
        .map_err(AttachError::Failed)
}

async fn subscribe_and_open(
    conn: Connection,
    role: NatsRole,
    session_id: &str,
) -> Result<Attached> {
    let bus = Bus::open(conn, role, Reach::FailFast).await?;
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
    let watchers_sub = subscribe(subjects::session_watchers(session_id)).await?;
    bus.client
        .flush()
        .await
        .map_err(|e| ConsoleError::Subscribe {
            subject: subjects::session_status(session_id),
            message: e.to_string(),
        })?;
    let status = stored_status(&bus, session_id).await?;
    let log = open_log_from(&bus, session_id, DeliverPolicy::All).await?;
    Ok(Attached {
        bus,
        status,
        session_sub,
        delta_sub,
        orch_sub,
        watchers_sub,
        log,
    })
}

/// Answers the coordinator's question whether a console follows the
/// session (`session.<id>.watchers`): while one does, the Arbiter's words
/// to the human tell no webhook that the human is needed.
pub(crate) async fn answer_watchers(client: async_nats::Client, mut sub: async_nats::Subscriber) {
    while let Some(message) = sub.next().await {
        if let Some(reply) = message.reply {
            let _ = client.publish(reply, Vec::new().into()).await;
        }
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

/// What [`follow_log`] watches besides its consumer.
struct Watches {
    /// Counts reconnections.
    reconnected: watch::Receiver<u64>,
    /// The last log seq the session's statuses say is stored.
    stored: watch::Receiver<u64>,
}

/// Whether a log consumer has stalled: the log holds entries past the last
/// one it delivered, and it has delivered nothing for [`STALL`].
pub(crate) fn stalled(stored: u64, delivered: u64, quiet: Duration) -> bool {
    stored > delivered && quiet >= STALL
}

/// Forwards the log. A consumer that keeps failing (or ends) is replaced by
/// one that starts after the last entry forwarded, for as long as it takes;
/// so is one that lived through a reconnection, which would otherwise take
/// several missed heartbeats to notice that it must start over, and one
/// that has [`stalled`].
async fn follow_log(
    bus: Bus,
    session_id: String,
    mut log: Follow,
    tx: mpsc::Sender<FeedEvent>,
    watches: Watches,
) {
    let Watches {
        mut reconnected,
        stored,
    } = watches;
    let mut errors = 0;
    let mut last_stream_seq = None;
    let mut delivered = 0;
    let mut last_delivery = tokio::time::Instant::now();
    let mut check = tokio::time::interval(STALL_CHECK);
    loop {
        tokio::select! {
            message = log.next() => match message {
                Some(Ok(message)) => {
                    errors = 0;
                    last_delivery = tokio::time::Instant::now();
                    last_stream_seq = Some(message.seq);
                    let event = match arbiter_bus::decode::<LogEntry>(&message.subject, &message.payload) {
                        Ok(entry) => {
                            delivered = delivered.max(entry.seq);
                            // A step entry only carries the coordinator's record.
                            if matches!(entry.body, arbiter_protocol::LogBody::Step(_)) {
                                continue;
                            }
                            FeedEvent::Log(entry)
                        }
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
            _ = check.tick() => {
                let stored = *stored.borrow();
                if !stalled(stored, delivered, last_delivery.elapsed()) {
                    continue;
                }
                tracing::warn!(stored, delivered, "the log consumer delivered nothing for 10 s while the log holds more: it starts over");
            }
        }
        last_delivery = tokio::time::Instant::now();
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

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_protocol::{ArbiterEntry, HumanMessage, LogBody, VERSION};
    use arbiter_tests::NatsServer;
    use chrono::Utc;

    async fn next(feed: &mut Feed) -> FeedEvent {
        tokio::time::timeout(Duration::from_secs(20), feed.events.recv())
            .await
            .expect("no feed event within 20 s")
            .expect("the feed ended")
    }

    #[test]
    fn a_consumer_is_stalled_only_when_the_log_is_ahead_and_it_is_quiet() {
        let quiet = STALL + Duration::from_millis(1);
        assert!(stalled(5, 3, quiet));
        // Quiet, but nothing more is stored: an idle session.
        assert!(!stalled(3, 3, quiet));
        assert!(!stalled(0, 0, quiet));
        // Behind, but it delivered a moment ago: it is catching up.
        assert!(!stalled(5, 3, Duration::from_secs(1)));
    }

    #[tokio::test]
    async fn a_message_typed_while_the_console_connects_is_sent() {
        let nats = NatsServer::start().await;
        // The streams exist (the coordinator made them): consoles only bind.
        let client = arbiter_bus::connect(nats.url(), "test", false)
            .await
            .unwrap();
        let bus = Bus::setup(client).await.unwrap();
        let session_id = "s-quick";
        let mut feed = Feed::start(&NatsOptions::url(nats.url()), session_id, "tester");
        // At once, before the feed has had a chance to attach.
        feed.send("m-1".into(), "typed at once".into());
        loop {
            match next(&mut feed).await {
                FeedEvent::Attached => break,
                FeedEvent::NotSent { error, .. } => panic!("not sent: {error}"),
                _ => {}
            }
        }
        // In the human intake (a work-queue stream, which takes no ordered
        // consumer), until a coordinator takes it.
        let intake = bus.js.get_stream(subjects::HUMAN_STREAM).await.unwrap();
        let sent = arbiter_tests::eventually(Duration::from_secs(10), "the message", || async {
            intake
                .get_last_raw_message_by_subject(&subjects::human_intake("tester"))
                .await
                .ok()
        })
        .await;
        let message: HumanMessage = serde_json::from_slice(&sent.payload).unwrap();
        assert_eq!(
            (
                message.session_id.as_str(),
                message.message_id.as_str(),
                message.text.as_str()
            ),
            (session_id, "m-1", "typed at once")
        );
    }

    #[tokio::test]
    async fn a_server_down_at_start_is_waited_for() {
        arbiter_tests::init_tracing();
        let mut nats = NatsServer::start().await;
        let client = arbiter_bus::connect(nats.url(), "test", false)
            .await
            .unwrap();
        drop(Bus::setup(client).await.unwrap());
        nats.stop().await;
        let session_id = "s-late";
        let mut feed = Feed::start(&NatsOptions::url(nats.url()), session_id, "tester");
        assert!(
            matches!(next(&mut feed).await, FeedEvent::Connection { up: false }),
            "the outage is reported"
        );
        feed.send("m-1".into(), "hello".into());
        match next(&mut feed).await {
            FeedEvent::NotSent {
                message_id,
                text,
                error,
            } => {
                assert_eq!(
                    (message_id.as_str(), text.as_str(), error.as_str()),
                    ("m-1", "hello", "not connected to NATS yet")
                );
            }
            other => panic!("expected NotSent, got {other:?}"),
        }

        nats.restart().await;
        let events = [next(&mut feed).await, next(&mut feed).await];
        assert!(
            matches!(
                events,
                [FeedEvent::Connection { up: true }, FeedEvent::Attached]
            ),
            "{events:?}"
        );

        // Attached as usual: the log is followed.
        let client = arbiter_bus::connect(nats.url(), "test", false)
            .await
            .unwrap();
        let bus = Bus::setup(client).await.unwrap();
        let entry = LogEntry {
            v: VERSION,
            session_id: session_id.into(),
            seq: 1,
            at: Utc::now(),
            body: LogBody::Arbiter(ArbiterEntry {
                text: "At last.".into(),
            }),
        };
        bus.publish_js(
            subjects::session_log(session_id),
            "late-1",
            &TraceContext::none(),
            &entry,
        )
        .await
        .unwrap();
        match next(&mut feed).await {
            FeedEvent::Log(got) => assert_eq!(got, entry),
            other => panic!("expected the log entry, got {other:?}"),
        }
    }
}
