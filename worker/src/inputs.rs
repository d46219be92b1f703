//! An Orchestrator's inputs (`orch.<id>.in`) and control (`orch.<id>.ctl`),
//! read straight from the stream, with no consumer on the server.
//!
//! The stream is the only source: messages are read in stream order by
//! direct get (`next_by_subj` from the last one read), starting from the
//! first input the stored state has not taken yet. Core subscriptions on
//! the two subjects only wake the reader: a message they bring is read again
//! from the stream (where it may appear a moment later, on a follower of a
//! cluster even later), so nothing the server did not store is ever taken.
//! A wake-up lost (a slow subscriber, a reconnect) is made good by the next
//! wake-up, by a reconnect of the connection, or by a poll every
//! [`POLL`]. Nothing is acknowledged: what the Orchestrator has taken is the
//! `in_seq` of its stored state, and a worker that takes it over reads on
//! from there. So claiming an Orchestrator creates and deletes nothing on
//! the server (protocol.md, "Orchestrator inputs").

use std::time::Duration;

use arbiter_bus::{Bus, TraceContext};
use arbiter_protocol::{Control, OrchestratorInput, subjects};
use async_nats::jetstream::stream::{DirectGetErrorKind, Stream};
use async_nats::{Subscriber, jetstream::message::StreamMessage};
use futures::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::stop::{Cause, Stopper};

/// Longest time a stored input can go unseen when its wake-up was lost.
pub(crate) const POLL: Duration = Duration::from_secs(5);
/// First wait before looking again for an input announced but not readable yet.
const FIRST_RETRY: Duration = Duration::from_millis(2);
/// Wait after a failed read (the server restarting, an election).
const READ_RETRY: Duration = Duration::from_millis(250);

/// One message from the Arbiter.
pub(crate) struct Input {
    pub seq: u64,
    pub text: String,
    /// The Orchestrator's allowance from this input on, if it carries one.
    pub budget: Option<arbiter_protocol::Cap>,
    /// Its sequence in the stream: the same however often it is read.
    pub stream_seq: u64,
    /// The trace context it was published with.
    pub trace: TraceContext,
}

/// What reading an Orchestrator's inputs needs, opened before its first turn.
pub(crate) struct Feed {
    stream: Stream<()>,
    orch_id: String,
    wake_in: Subscriber,
    wake_ctl: Subscriber,
    reconnects: watch::Receiver<u64>,
}

/// Subscribes to the wake-ups (before anything is read, so none is missed).
pub(crate) async fn open(bus: &Bus, orch_id: &str) -> Result<Feed, String> {
    let stream = bus
        .js
        .get_stream_no_info(subjects::ORCH_STREAM)
        .await
        .map_err(|e| format!("opening the Orchestrator stream: {e}"))?;
    let wake_in = bus
        .client
        .subscribe(subjects::orch_in(orch_id))
        .await
        .map_err(|e| format!("subscribing to the inputs: {e}"))?;
    let wake_ctl = bus
        .client
        .subscribe(subjects::orch_ctl(orch_id))
        .await
        .map_err(|e| format!("subscribing to control: {e}"))?;
    Ok(Feed {
        stream,
        orch_id: orch_id.to_owned(),
        wake_in,
        wake_ctl,
        reconnects: bus.alarms.reconnects(),
    })
}

/// Hands the agent every input past `taken` (the stored `in_seq`) in stream
/// order, and turns a release or cancel into a stop. Malformed messages are
/// logged and passed over.
pub(crate) async fn read(
    mut feed: Feed,
    taken: u64,
    inputs: mpsc::Sender<Input>,
    stopper: Stopper,
) {
    let stop = stopper.token().clone();
    let mut reader = Reader::new(&feed, taken);
    reader.skip_taken(&feed.stream).await;
    // The highest input seq announced by a wake-up, and how long to wait
    // before looking for it again while the stream does not show it yet.
    let mut announced = 0;
    let mut retry = FIRST_RETRY;
    let mut check_control = true;
    loop {
        if !reader.drain(&feed.stream, &inputs, &stop).await {
            return;
        }
        if check_control {
            if let Some(action) = reader.control(&feed.stream).await {
                tracing::info!(?action, "control received");
                stopper.stop(Cause::Control { action });
                return;
            }
            check_control = false;
        }
        let behind = announced > reader.last_input;
        let wait = if behind { retry } else { POLL };
        tokio::select! {
            () = stop.cancelled() => return,
            woke = feed.wake_in.next() => {
                let Some(msg) = woke else { return };
                if let Ok(input) = serde_json::from_slice::<OrchestratorInput>(&msg.payload) {
                    announced = announced.max(input.seq);
                    retry = FIRST_RETRY;
                }
            }
            woke = feed.wake_ctl.next() => {
                if woke.is_none() { return }
                check_control = true;
            }
            changed = feed.reconnects.changed() => {
                if changed.is_err() { return }
                check_control = true;
            }
            () = tokio::time::sleep(wait) => {
                if behind {
                    retry = (retry * 2).min(POLL);
                } else {
                    check_control = true;
                }
            }
        }
    }
}

/// Where reading stands.
struct Reader {
    in_subject: String,
    ctl_subject: String,
    /// Stored `in_seq`: inputs up to it were taken already.
    taken: u64,
    /// The stream sequence of the last input read.
    cursor: u64,
    /// The seq of the last input read (or taken).
    last_input: u64,
    /// The stream sequence of a malformed control message already reported.
    bad_control: u64,
}

impl Reader {
    fn new(feed: &Feed, taken: u64) -> Self {
        Self {
            in_subject: subjects::orch_in(&feed.orch_id),
            ctl_subject: subjects::orch_ctl(&feed.orch_id),
            taken,
            cursor: 0,
            last_input: taken,
            bad_control: 0,
        }
    }

    /// When the newest input was taken already (a takeover of an
    /// Orchestrator that was waiting), reading starts after it rather than
    /// from the first.
    async fn skip_taken(&mut self, stream: &Stream<()>) {
        if self.taken == 0 {
            return;
        }
        if let Ok(last) = stream
            .direct_get_last_for_subject(self.in_subject.as_str())
            .await
            && let Ok(input) = serde_json::from_slice::<OrchestratorInput>(&last.payload)
            && input.seq <= self.taken
        {
            self.cursor = last.sequence;
        }
    }

    /// Reads every input stored after the cursor. False when the reading is over.
    async fn drain(
        &mut self,
        stream: &Stream<()>,
        inputs: &mpsc::Sender<Input>,
        stop: &tokio_util::sync::CancellationToken,
    ) -> bool {
        loop {
            if stop.is_cancelled() {
                return false;
            }
            let msg = match stream
                .direct_get_next_for_subject(self.in_subject.as_str(), Some(self.cursor + 1))
                .await
            {
                Ok(msg) => msg,
                Err(e) if e.kind() == DirectGetErrorKind::NotFound => return true,
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the inputs; trying again");
                    tokio::select! {
                        () = stop.cancelled() => return false,
                        () = tokio::time::sleep(READ_RETRY) => continue,
                    }
                }
            };
            self.cursor = msg.sequence;
            let Some(input) = self.input(&msg) else {
                continue;
            };
            self.last_input = self.last_input.max(input.seq);
            if input.seq <= self.taken {
                continue;
            }
            if inputs.send(input).await.is_err() {
                return false;
            }
        }
    }

    fn input(&self, msg: &StreamMessage) -> Option<Input> {
        let subject = msg.subject.as_str();
        match arbiter_bus::decode::<OrchestratorInput>(subject, &msg.payload) {
            Ok(input) => {
                arbiter_bus::metrics::hop_since(msg.time, "coordinator→orchestrator");
                Some(Input {
                    seq: input.seq,
                    text: input.message,
                    budget: input.budget,
                    stream_seq: msg.sequence,
                    trace: TraceContext::from_headers(Some(&msg.headers)),
                })
            }
            Err(error) => {
                tracing::error!(%subject, stream_seq = msg.sequence, %error, "malformed input passed over");
                None
            }
        }
    }

    /// The release or cancel stored for this Orchestrator, if any.
    async fn control(&mut self, stream: &Stream<()>) -> Option<arbiter_protocol::ControlAction> {
        let msg = match stream
            .direct_get_last_for_subject(self.ctl_subject.as_str())
            .await
        {
            Ok(msg) => msg,
            Err(e) if e.kind() == DirectGetErrorKind::NotFound => return None,
            Err(e) => {
                // Looked at again at the next wake-up or poll.
                tracing::warn!(error = %e, "could not read control");
                return None;
            }
        };
        match arbiter_bus::decode::<Control>(msg.subject.as_str(), &msg.payload) {
            Ok(control) => Some(control.action),
            Err(error) => {
                if self.bad_control != msg.sequence {
                    self.bad_control = msg.sequence;
                    tracing::error!(subject = %msg.subject, %error, "malformed control message passed over");
                }
                None
            }
        }
    }
}
