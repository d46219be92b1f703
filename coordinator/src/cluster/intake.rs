//! Reads the coordinator's two durable consumers (human messages, Orchestrator
//! output) and hands each message to its session's actor, creating sessions
//! on first contact. Malformed messages are rejected here, never routed.
//!
//! Every coordinator pulls from the same durables. A session is run by the
//! coordinator that owns it (`lease.rs`): a message of a session another
//! live coordinator owns is passed to it (`forward.rs`); one of a session
//! nobody (alive) owns makes this coordinator take it. Sessions handed over,
//! or whose owner's liveness key went, are taken by the coordinators with the
//! fewest sessions first, and a coordinator with more than its share hands
//! idle sessions over.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arbiter_bus::{TraceContext, decode, js_error};
use arbiter_protocol::roles::NatsRole;
use arbiter_protocol::{HumanMessage, WireError, subjects};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::forward::{Delivery, Forwarder, Incoming, RETRY_DELAY};
use crate::cluster::lease::{Leases, Owner};
use crate::session::{self, Input, Refused};
use crate::state;
use crate::{Error, Result, Shared};

use super::legacy::{LEGACY_BATCH, drain_legacy};
pub(crate) use super::payload::outputs_of;
use super::payload::session_named_in;

/// How often a coordinator checks whether it owns more than its share.
const REBALANCE_EVERY: Duration = Duration::from_secs(3);
/// Sessions handed over in one round of rebalancing.
const HAND_OVER_AT_ONCE: usize = 16;
/// How long a coordinator over its share (or that handed the session over
/// itself) waits before taking a free session, leaving it to the others first.
const BUSY_TAKE_DELAY: Duration = Duration::from_secs(1);
/// Free sessions whose takes are written to the bucket at once.
const TAKE_AT_ONCE: usize = 256;
/// How long start-up waits for the lease bucket to be read before routing.
const WATCH_READY_WAIT: Duration = Duration::from_secs(10);
/// How long a coordinator remembers that it handed a session over.
const HANDED_OVER_MEMORY: Duration = Duration::from_secs(10);

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
// Every line the coordinator takes fits in the human intake, escapes and all.
const _: () = assert!(2 * MAX_HUMAN_BYTES <= arbiter_bus::setup::HUMAN_MAX_MESSAGE_BYTES as usize);
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
    let stream = match shared.bus.js.get_stream(stream).await {
        Ok(opened) => opened,
        Err(e) => return Err(start_error(shared, format!("opening stream {stream}"), e).await),
    };
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
    let consumer: PullConsumer = match stream.get_or_create_consumer(name, config.clone()).await {
        Ok(consumer) => consumer,
        Err(e) => return Err(start_error(shared, format!("creating consumer {name}"), e).await),
    };
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
        .map_err(|e| js_error(format!("updating consumer {name}"), e).into())
}

/// A failure to open the consumers at start: streams deleted while the
/// coordinator started are named as such (the user's fix is the same as
/// for a deletion later on), anything else as the server said it.
async fn start_error(
    shared: &Shared,
    what: String,
    e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> Error {
    match arbiter_bus::setup::missing_stream(&shared.bus, NatsRole::Coordinator).await {
        Ok(Some(stream)) => arbiter_bus::BusError::Deleted { stream }.into(),
        _ => js_error(what, e).into(),
    }
}

/// Where a session's messages go.
enum Route {
    /// To its actor here.
    Local,
    /// To the coordinator that owns it.
    Remote(String),
    /// Nowhere for now: the message is put back, to be routed again.
    Later,
}

/// The live sessions of this coordinator.
struct Registry {
    shared: Arc<Shared>,
    leases: Leases,
    sessions: HashMap<String, session::Handle>,
    /// Sessions of other coordinators this one passes messages to.
    forwarders: HashMap<String, Forwarder>,
    /// Sessions being handed over: their lease is released when their actor ends.
    handing_over: std::collections::HashSet<String>,
    /// Sessions this coordinator handed over, and when.
    handed_over: HashMap<String, Instant>,
    cancel: CancellationToken,
    tasks: tokio::task::JoinSet<()>,
    /// Each session actor's id when it ends.
    ended_tx: mpsc::UnboundedSender<String>,
}

impl Registry {
    /// Starts the actor of a session whose lease this coordinator has just
    /// taken (`lost`: cancelled should the lease be lost).
    fn start(&mut self, session_id: &str, lost: CancellationToken) {
        let handle = crate::session::spawn(
            self.shared.clone(),
            session_id.to_owned(),
            lost,
            &mut self.tasks,
            self.ended_tx.clone(),
        );
        self.forwarders.remove(session_id);
        self.sessions.insert(session_id.to_owned(), handle);
    }

    /// Takes a session nobody owns, fenced on `expect`; true if it runs here now.
    async fn take(&mut self, session_id: &str, expect: u64) -> bool {
        match self.leases.take(session_id, expect, &self.cancel).await {
            Ok(Some(lost)) => {
                self.start(session_id, lost);
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(session.id = %session_id, error = %e, "could not take the session's lease");
                false
            }
        }
    }

    /// Where `session_id`'s messages go: here (taking the lease when nobody
    /// holds it), or to the coordinator that owns it.
    async fn route(&mut self, session_id: &str) -> Route {
        for _ in 0..3 {
            if self.sessions.contains_key(session_id) && self.leases.holds(session_id) {
                return Route::Local;
            }
            match self.leases.owner(session_id) {
                Owner::Me => {
                    if !self.sessions.contains_key(session_id) {
                        // Its actor stopped: start it again under the same key.
                        self.leases.forget(session_id);
                        continue;
                    }
                    return Route::Local;
                }
                Owner::Other(owner) => return Route::Remote(owner),
                Owner::Free(expect) => {
                    // A refused take reads the key afresh: the next round
                    // sees who took it.
                    if self.take(session_id, expect).await {
                        return Route::Local;
                    }
                }
            }
        }
        Route::Later
    }

    /// Sessions an earlier run left with work undone start at once, unless
    /// another coordinator owns them: nobody else would wake them.
    async fn resume_unfinished(&mut self) {
        let mut delay = Duration::from_millis(100);
        let unfinished = loop {
            match state::unfinished(
                &self.shared.steps,
                &self.shared.legacy_steps,
                &self.shared.sealer,
            )
            .await
            {
                Ok(ids) => break ids,
                Err(e) if delay < SCAN_GIVE_UP => {
                    // A stream deleted under a coordinator that is starting:
                    // the clock after which it counts as deleted (and the
                    // coordinator stops, `stop_if_deleted`) starts now, not
                    // once the scan has given up.
                    if self.stop_if_deleted().await.is_err() {
                        // Deleted for that long: the consumers' next hiccup
                        // stops the coordinator with the stream's name.
                        return;
                    }
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
            if let Owner::Free(expect) = self.leases.owner(&session_id)
                && self.take(&session_id, expect).await
            {
                tracing::info!(session.id = %session_id, "resuming an unfinished session");
            }
        }
    }

    /// Sessions whose lease ran out or was handed over: taken at once by
    /// a coordinator not over its share (counting those it takes),
    /// after [`BUSY_TAKE_DELAY`] by the others (`again`: this is that second
    /// try). The takes of a batch are written to the bucket concurrently: a
    /// dead coordinator's thousands of sessions move in a few round trips,
    /// not one each.
    async fn on_free(
        &mut self,
        batch: Vec<(String, u64)>,
        again: bool,
        retry: &mpsc::Sender<(String, u64)>,
    ) {
        let later = |session_id: String, expect: u64| {
            let retry = retry.clone();
            tokio::spawn(async move {
                tokio::time::sleep(BUSY_TAKE_DELAY).await;
                let _ = retry.send((session_id, expect)).await;
            });
        };
        // The share is a count over the whole bucket: read once for the
        // batch, and counted on as its sessions are taken (as if taken one
        // at a time).
        let mut share = self.leases.share();
        let several = self.leases.live() > 1;
        let mut candidates = Vec::with_capacity(batch.len());
        for (session_id, expect) in batch {
            if self.handing_over.contains(&session_id) {
                continue;
            }
            if self.sessions.contains_key(&session_id) {
                if !self.leases.holds(&session_id) {
                    // Its actor here was told to stop (this coordinator lost
                    // its liveness) and has not ended yet: looked at again later.
                    later(session_id, expect);
                }
                continue;
            }
            // Sessions this coordinator handed over itself are left to the
            // others first (if there are others); so are all past its share.
            let handed_over_here = several
                && self
                    .handed_over
                    .get(&session_id)
                    .is_some_and(|at| at.elapsed() < HANDED_OVER_MEMORY);
            if !again && (handed_over_here || share.over()) {
                later(session_id, expect);
                continue;
            }
            share.took();
            candidates.push((session_id, expect));
        }
        let this = &*self;
        let taken = futures::future::join_all(
            candidates
                .iter()
                .map(|(session_id, expect)| this.claim(session_id, *expect, again)),
        )
        .await;
        for ((session_id, _), lost) in candidates.into_iter().zip(taken) {
            if let Some(lost) = lost {
                tracing::info!(session.id = %session_id, "took over a session whose lease was free");
                self.start(&session_id, lost);
            }
        }
    }

    /// Takes a free session's lease, fenced on `expect`; a later try
    /// (`again`) reads the key first (another may have taken it, or its
    /// owner come back), and a take the fence refused reads it afresh and
    /// tries once more. The token to start its actor with, if taken.
    async fn claim(&self, session_id: &str, expect: u64, again: bool) -> Option<CancellationToken> {
        let mut expect = expect;
        for attempt in 0..2 {
            if again || attempt > 0 {
                match self.leases.owner(session_id) {
                    Owner::Free(now) => expect = now,
                    _ => return None,
                }
            }
            match self.leases.take(session_id, expect, &self.cancel).await {
                Ok(Some(lost)) => return Some(lost),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(session.id = %session_id, error = %e, "could not take the session's lease");
                }
            }
        }
        None
    }

    /// A session actor ended: its lease is handed over if it was asked to
    /// stop for that, forgotten otherwise (fenced out, lease lost).
    async fn on_ended(&mut self, session_id: String) {
        self.sessions.remove(&session_id);
        if self.handing_over.remove(&session_id) {
            self.handed_over
                .retain(|_, at| at.elapsed() < HANDED_OVER_MEMORY);
            self.handed_over.insert(session_id.clone(), Instant::now());
            self.leases.release(&session_id).await;
            tracing::info!(session.id = %session_id, "session handed over");
        } else {
            self.leases.forget(&session_id);
        }
    }

    /// Hands idle sessions over while this coordinator owns more than its share.
    fn rebalance(&mut self) {
        let owned = self.leases.count();
        let fair = self.leases.fair_share();
        if owned <= fair + 1 {
            return;
        }
        let excess = (owned - fair).min(HAND_OVER_AT_ONCE);
        let idle: Vec<String> = self
            .sessions
            .iter()
            .filter(|(id, handle)| handle.is_idle() && !self.handing_over.contains(*id))
            .map(|(id, _)| id.clone())
            .take(excess)
            .collect();
        if idle.is_empty() {
            return;
        }
        tracing::info!(
            owned,
            fair,
            handing_over = idle.len(),
            "owning more than a fair share of the sessions: handing idle ones over"
        );
        for session_id in idle {
            if let Some(handle) = self.sessions.get(&session_id) {
                handle.stop();
                self.handing_over.insert(session_id);
            }
        }
    }

    /// Hands `input` to its session, here, without waiting: a session whose
    /// inbox is full must not stall the others. Its message goes back to the
    /// server, to come again; the session's log says so.
    async fn deliver(&mut self, session_id: &str, input: Input) {
        let Some(handle) = self.sessions.get(session_id) else {
            put_back_input(session_id, input, "its session stopped here").await;
            return;
        };
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
                if let Some(delivery) = input.into_ack() {
                    delivery.put_back(crate::session::PUT_BACK_DELAY).await;
                }
            }
            Err(Refused::Stopped(input)) => {
                self.sessions.remove(session_id);
                put_back_input(session_id, *input, "its session stopped here").await;
            }
        }
    }

    /// Routes a message of `session_id`: `Some` when it is to be taken here.
    async fn admit(&mut self, session_id: &str, incoming: Incoming) -> Option<Incoming> {
        if matches!(incoming.delivery, Delivery::Forwarded { .. }) {
            // Passed here by a coordinator that saw this one own it: taken
            // if this one still does, or (its key says so, or it is free) can
            // take it now; never while another live coordinator owns it.
            if let Route::Local = self.route(session_id).await {
                return Some(incoming);
            }
            incoming.not_owner().await;
            return None;
        }
        let Delivery::Js(msg) = incoming.delivery else {
            return None;
        };
        let incoming_back = |msg| Incoming {
            subject: incoming.subject.clone(),
            payload: incoming.payload.clone(),
            headers: incoming.headers.clone(),
            delivery: Delivery::Js(msg),
        };
        match self.route(session_id).await {
            Route::Local => Some(incoming_back(msg)),
            Route::Remote(owner) => {
                let forwarder = self
                    .forwarders
                    .entry(session_id.to_owned())
                    .or_insert_with(|| {
                        Forwarder::start(
                            self.shared.bus.client.clone(),
                            session_id.to_owned(),
                            owner.clone(),
                        )
                    });
                if let Err(msg) = forwarder.offer(msg) {
                    // Stopped (its owner changed) or full: routed afresh next time.
                    self.forwarders.remove(session_id);
                    tracing::warn!(session.id = %session_id, coordinator = %owner, "could not pass a message to the session's owner now; put back to be routed again");
                    Delivery::Js(msg).put_back(RETRY_DELAY).await;
                }
                None
            }
            Route::Later => {
                tracing::warn!(session.id = %session_id, "no coordinator could take the session now; message put back to be routed again");
                Delivery::Js(msg).put_back(RETRY_DELAY).await;
                None
            }
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

    async fn on_human(&mut self, incoming: Incoming) {
        let Some(incoming) = unless_relayed(incoming, "human line").await else {
            return;
        };
        let subject = incoming.subject.clone();
        let subject = subject.as_str();
        let Some((named, console)) = subjects::human_sender(subject) else {
            tracing::error!(subject, "human message on an unexpected subject; rejected");
            incoming.delivery.ack().await;
            return;
        };
        // Every line spends a token of its console before anything is done
        // with it, and only the first of a run of refusals goes on to be
        // said: a console sending as fast as it can makes no session, no
        // lease and no log entry per line. A line another coordinator passed
        // here spent its token there.
        let mut refused = None;
        if matches!(incoming.delivery, Delivery::Js(_))
            && let Err(refusal) = self.shared.caps.spend(console, Instant::now())
        {
            if !self.shared.caps.tell(&refusal) {
                incoming.delivery.ack().await;
                return;
            }
            tracing::warn!(subject, %refusal, "human message refused by a console limit");
            refused = Some(refusal);
        }
        // The session: the subject's, or for a line the intake stores under
        // its console, the one its payload names.
        let session_id = match named {
            Some(id) => id.to_owned(),
            None => match session_named_in(&incoming.payload) {
                Some(id) => id,
                None => {
                    tracing::error!(
                        subject,
                        "human message naming no session (no readable session_id); rejected"
                    );
                    incoming.delivery.ack().await;
                    return;
                }
            },
        };
        let session_id = session_id.as_str();
        // A session this coordinator does not hold is read from the bucket
        // once: an archive made by the admin since the last sweep counts.
        if !self.sessions.contains_key(session_id)
            && !self.shared.archived.contains(session_id)
            && let Ok(Some(status)) =
                arbiter_bus::retention::status(&self.shared.bus, session_id).await
            && status.archived_at.is_some()
        {
            self.shared.archived.insert(session_id);
        }
        if self.shared.archived.contains(session_id) && matches!(incoming.delivery, Delivery::Js(_))
        {
            // Read-only: the console says so and sends nothing; a line
            // that comes anyway is dropped.
            tracing::warn!(
                session.id = session_id,
                "human line to an archived session dropped"
            );
            incoming.delivery.ack().await;
            return;
        }
        if let Delivery::Js(msg) = &incoming.delivery {
            arbiter_bus::metrics::hop(msg, "console→coordinator");
        }
        let Some(incoming) = self.admit(session_id, incoming).await else {
            return;
        };
        let msg = incoming.delivery;
        let trace = TraceContext::from_headers(incoming.headers.as_ref());
        let rejected = |error: WireError| {
            tracing::error!(subject, %error, "malformed human message rejected");
            error
        };
        let decoded = decode::<HumanMessage>(subject, &incoming.payload);
        if let Some(refusal) = refused {
            let message_id = decoded.ok().map(|human| human.message_id);
            let input = Input::Refused {
                message_id,
                refusal,
                ack: Some(msg),
            };
            self.deliver(session_id, input).await;
            return;
        }
        // The session acknowledges the message once the step that took it is stored.
        let input = match decoded {
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
            Ok(message) => match self.shared.caps.admit(console, session_id) {
                Ok(()) => Input::Human {
                    message: Box::new(message),
                    console: console.to_owned(),
                    trace,
                    ack: Some(msg),
                },
                Err(refusal) if self.shared.caps.tell(&refusal) => {
                    tracing::warn!(subject, %refusal, "human message refused by a console limit");
                    Input::Refused {
                        message_id: Some(message.message_id),
                        refusal,
                        ack: Some(msg),
                    }
                }
                Err(_) => {
                    msg.ack().await;
                    return;
                }
            },
            Err(error) => Input::Malformed(rejected(error), Some(msg)),
        };
        self.deliver(session_id, input).await;
    }

    async fn on_orchestrator(&mut self, incoming: Incoming) {
        let Some(incoming) = unless_relayed(incoming, "Orchestrator output").await else {
            return;
        };
        let subject = incoming.subject.clone();
        let subject = subject.as_str();
        if let Delivery::Js(msg) = &incoming.delivery {
            arbiter_bus::metrics::hop(msg, "worker→coordinator");
        }
        let trace = TraceContext::from_headers(incoming.headers.as_ref());
        match outputs_of(subject, &incoming.payload) {
            Ok((session_id, messages)) => {
                let Some(incoming) = self.admit(&session_id, incoming).await else {
                    return;
                };
                self.deliver(
                    &session_id,
                    Input::Orchestrator(messages, trace, Some(incoming.delivery)),
                )
                .await;
            }
            Err(error) => {
                tracing::error!(subject, %error, "malformed Orchestrator message rejected");
                // When the session can still be told, its log shows the rejection.
                let session = serde_json::from_slice::<serde_json::Value>(&incoming.payload)
                    .ok()
                    .and_then(|v| v.get("session_id")?.as_str().map(str::to_owned))
                    .filter(|id| subjects::is_valid_token(id));
                match session {
                    Some(session_id) => {
                        let Some(incoming) = self.admit(&session_id, incoming).await else {
                            return;
                        };
                        self.deliver(
                            &session_id,
                            Input::Malformed(error, Some(incoming.delivery)),
                        )
                        .await
                    }
                    None => incoming.delivery.ack().await,
                }
            }
        }
    }
}

/// `incoming`, unless it is a JetStream API answer the server stored in a
/// message's place (see [`arbiter_bus::relayed`]): such a one is acked and
/// dropped, with an error in the coordinator's log, and never reaches a
/// session. Whoever made it could make a direct get, not publish here.
async fn unless_relayed(incoming: Incoming, what: &str) -> Option<Incoming> {
    let Some(stream) = arbiter_bus::relayed(incoming.headers.as_ref()) else {
        return Some(incoming);
    };
    tracing::error!(
        subject = %incoming.subject,
        stream,
        "a {what} stored by a direct get's answer, not published by its sender, rejected"
    );
    incoming.delivery.ack().await;
    None
}

/// Runs both consumers until shutdown, then stops every session and waits for them.
pub(crate) async fn run(shared: Arc<Shared>, shutdown: impl Future<Output = ()>) -> Result<()> {
    // Lines are stored under their console (`human.<console>`), or as sent
    // by a console with no name (`session.<id>.human`).
    let human = consumer(
        &shared,
        subjects::HUMAN_STREAM,
        subjects::COORDINATOR_HUMAN_CONSUMER,
        &[subjects::ALL_HUMAN_INTAKE, subjects::ALL_SESSION_HUMAN],
    )
    .await?;
    let orch = consumer(
        &shared,
        subjects::ORCH_STATE_STREAM,
        subjects::COORDINATOR_ORCH_CONSUMER,
        &[subjects::ALL_ORCH_OUT],
    )
    .await?;
    let mut human_msgs = arbiter_bus::follow(&human)
        .await
        .map_err(|e| js_error("reading human messages", e))?;
    let mut orch_msgs = arbiter_bus::follow(&orch)
        .await
        .map_err(|e| js_error("reading Orchestrator output", e))?;
    let leases = Leases::open(&shared.bus, shared.config.id.clone()).await?;
    let forwarded = shared
        .bus
        .client
        .subscribe(subjects::coordinator_forward(&leases.id))
        .await
        .map_err(|e| js_error("listening for forwarded messages", e))?;
    let background = CancellationToken::new();
    let (free_tx, mut free_rx) = mpsc::channel::<(String, u64)>(1024);
    let (retry_tx, mut retry_rx) = mpsc::channel::<(String, u64)>(1024);
    let (ended_tx, mut ended_rx) = mpsc::unbounded_channel();
    let mut background_tasks = tokio::task::JoinSet::new();
    let (legacy_tx, mut legacy_rx) = mpsc::channel(LEGACY_BATCH);
    {
        let shared = shared.clone();
        let stop = background.clone();
        background_tasks.spawn(async move { drain_legacy(shared, legacy_tx, stop).await });
    }
    // Alive before anything is taken; the map caught up before anything is routed.
    leases.renew(&free_tx).await;
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    {
        let leases = leases.clone();
        let stop = background.clone();
        let free = free_tx.clone();
        background_tasks.spawn(async move { leases.watch(free, ready_tx, stop).await });
    }
    {
        let leases = leases.clone();
        let stop = background.clone();
        background_tasks.spawn(async move { leases.keep(free_tx, stop).await });
    }
    if tokio::time::timeout(WATCH_READY_WAIT, ready_rx)
        .await
        .is_err()
    {
        tracing::warn!("the coordinator leases were not read in time; routing with what is known");
    }
    tracing::info!(coordinator = %leases.id, "coordinator taking sessions");
    let mut registry = Registry {
        shared,
        leases,
        sessions: HashMap::new(),
        forwarders: HashMap::new(),
        handing_over: std::collections::HashSet::new(),
        handed_over: HashMap::new(),
        cancel: CancellationToken::new(),
        tasks: tokio::task::JoinSet::new(),
        ended_tx,
    };
    registry.resume_unfinished().await;
    let mut forwarded = forwarded;
    let mut rebalance = tokio::time::interval(REBALANCE_EVERY);
    rebalance.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    let client = registry.shared.bus.client.clone();
    let result = loop {
        tokio::select! {
            _ = &mut shutdown => break Ok(()),
            next = human_msgs.next() => match next {
                Some(Ok(msg)) => registry.on_human(Incoming::pulled(msg)).await,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "human consumer hiccup");
                    if let Err(e) = registry.stop_if_deleted().await {
                        break Err(e);
                    }
                }
                None => {
                    if let Err(e) = registry.stop_if_ended_by_deletion().await {
                        break Err(e);
                    }
                    break Err(js_error("reading human messages", "the consumer stream ended").into());
                }
            },
            next = orch_msgs.next() => match next {
                Some(Ok(msg)) => registry.on_orchestrator(Incoming::pulled(msg)).await,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "Orchestrator consumer hiccup");
                    if let Err(e) = registry.stop_if_deleted().await {
                        break Err(e);
                    }
                }
                None => {
                    if let Err(e) = registry.stop_if_ended_by_deletion().await {
                        break Err(e);
                    }
                    break Err(js_error("reading Orchestrator output", "the consumer stream ended").into());
                }
            },
            Some(msg) = legacy_rx.recv() => registry.on_human(Incoming::pulled(msg)).await,
            Some(msg) = forwarded.next() => {
                let subject = msg.subject.to_string();
                match Incoming::forwarded(&client, msg) {
                    Some(incoming) if subjects::human_sender(&incoming.subject).is_some() => registry.on_human(incoming).await,
                    Some(incoming) => registry.on_orchestrator(incoming).await,
                    None => tracing::warn!(subject, "a forwarded message without its subject, sequence or reply subject; dropped (its sender puts it back after its wait)"),
                }
            }
            Some(first) = free_rx.recv() => {
                registry.on_free(batch_of(first, &mut free_rx), false, &retry_tx).await;
            }
            Some(first) = retry_rx.recv() => {
                registry.on_free(batch_of(first, &mut retry_rx), true, &retry_tx).await;
            }
            Some(session_id) = ended_rx.recv() => registry.on_ended(session_id).await,
            _ = rebalance.tick() => registry.rebalance(),
        }
    };
    tracing::info!(coordinator = %registry.leases.id, sessions = registry.sessions.len(), "coordinator shutting down: stopping its sessions and handing them over");
    drop(human_msgs);
    drop(orch_msgs);
    drop(legacy_rx);
    // Nothing more is taken here: the watch never waits on these.
    drop(free_rx);
    drop(retry_rx);
    let _ = forwarded.unsubscribe().await;
    registry.cancel.cancel();
    registry.sessions.clear();
    while registry.tasks.join_next().await.is_some() {}
    background.cancel();
    while background_tasks.join_next().await.is_some() {}
    // Every actor has stopped at a step boundary: deleting this
    // coordinator's key makes the others take its sessions at once.
    registry.leases.withdraw().await;
    result
}

/// `first` and what else the channel holds now, up to [`TAKE_AT_ONCE`].
fn batch_of<T>(first: T, rx: &mut mpsc::Receiver<T>) -> Vec<T> {
    let mut batch = vec![first];
    while batch.len() < TAKE_AT_ONCE {
        match rx.try_recv() {
            Ok(next) => batch.push(next),
            Err(_) => break,
        }
    }
    batch
}

/// Puts back the message of an input that cannot be taken here now.
async fn put_back_input(session_id: &str, input: Input, why: &str) {
    tracing::warn!(session.id = %session_id, why, "message put back to be routed again");
    if let Some(delivery) = input.into_ack() {
        delivery.put_back(RETRY_DELAY).await;
    }
}
