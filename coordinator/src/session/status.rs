//! The session's status: published on every change and, while nothing
//! changes, every [`STATUS_HEARTBEAT`] (consoles take it as a heartbeat),
//! except while the session is settled: then nothing is republished until
//! it changes (a console shows a settled session's Arbiter idle whatever
//! it hears, so a heartbeat would tell it nothing).
//! The bucket `arbiter_sessions` gets a change at once when the session
//! settles (the Arbiter idle with nothing queued, and no Orchestrator at
//! work: none active, or its question waits, or the session holds) or wakes
//! from settled, when its active Orchestrator, the number summoned or its
//! budget changes, or when it last got one a heartbeat or more ago. The
//! rest (thinking or not between two Orchestrator turns, the log seq,
//! context and spend figures) is coalesced into the next heartbeat's put,
//! so the bucket never shows a session settled that is not. A busy session thus costs the bucket at most
//! one stored message per heartbeat, not several per turn, and the bucket
//! is never more than a heartbeat behind.
//!
//! The bucket is written by a task of the session's own ([`StatusWriter`]),
//! so the actor never waits for its ack: an Arbiter reply that comes while
//! the status of the step before is being stored is routed at once.

use std::time::Instant;

use bytes::Bytes;
use tokio::sync::watch;

use arbiter_protocol::{SessionStatus, subjects};

use super::*;
use crate::rules::status::Shape;

/// How often status is republished while nothing changes (consoles use it as a heartbeat).
pub(super) const STATUS_HEARTBEAT: Duration = Duration::from_secs(2);
/// How long a put the bucket refused waits before it is tried again.
const PUT_RETRY: Duration = Duration::from_millis(500);
/// How long a stopping session waits for its last status to be stored.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Puts a session's status in the bucket `arbiter_sessions`, one put at a
/// time, always the newest value handed to it (an older one is never put
/// after a newer one). A put that fails is tried again, with whatever is
/// newest then.
pub(super) struct StatusWriter {
    newest: watch::Sender<Option<Bytes>>,
    task: tokio::task::JoinHandle<()>,
}

impl StatusWriter {
    pub(super) fn start(kv: async_nats::jetstream::kv::Store, key: String) -> Self {
        let (newest, mut rx) = watch::channel::<Option<Bytes>>(None);
        let task = tokio::spawn(async move {
            let mut retry = false;
            loop {
                if !retry && rx.changed().await.is_err() {
                    return;
                }
                retry = false;
                let Some(bytes) = rx.borrow_and_update().clone() else {
                    continue;
                };
                if let Err(e) = kv.put(&key, bytes).await {
                    tracing::warn!(session.id = %key, error = %e, "could not store the session status; trying again");
                    tokio::time::sleep(PUT_RETRY).await;
                    retry = true;
                }
            }
        });
        Self { newest, task }
    }

    fn put(&self, bytes: Bytes) {
        self.newest.send_replace(Some(bytes));
    }

    /// Stores what was handed over last, waiting at most [`FLUSH_WAIT`]
    /// (the next owner of the session puts its own soon after).
    pub(super) async fn finish(self) {
        let Self { newest, mut task } = self;
        drop(newest);
        if tokio::time::timeout(FLUSH_WAIT, &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// Publishes a session's status on every change and heartbeat, and puts
/// it in the bucket when the module's rule says so.
#[derive(Default)]
pub(super) struct StatusPublisher {
    /// The status changed since it was last published.
    dirty: bool,
    /// The status changed since it was last put in the bucket.
    unstored: bool,
    /// When the bucket last got the status.
    stored_at: Option<Instant>,
    /// The status last put in the bucket was settled.
    stored_settled: bool,
    /// Its active Orchestrator, number summoned and budget.
    stored_shape: Option<Shape>,
    /// Puts the status in the bucket (started with the first put).
    writer: Option<StatusWriter>,
    /// The status last published was settled.
    published_settled: bool,
}

impl StatusPublisher {
    pub(super) fn new() -> Self {
        Self {
            dirty: true,
            ..Self::default()
        }
    }

    /// The status changed: it goes out at the next publish.
    pub(super) fn touch(&mut self) {
        self.dirty = true;
    }

    pub(super) fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Publishes `status`; `changed`: it is published for a change (not
    /// as a heartbeat), `settled`: the core says nothing happens until a
    /// human writes.
    pub(super) async fn publish(
        &mut self,
        bus: &arbiter_bus::Bus,
        status: &SessionStatus,
        settled: bool,
        changed: bool,
    ) {
        if !changed && settled && self.published_settled && !self.dirty {
            // A heartbeat of a settled session repeats what every reader
            // already holds, and a console shows its Arbiter idle however
            // long it is silent: none is sent, so idle sessions cost no
            // messages (at 10,000 that was 5,000 a second).
            return;
        }
        if changed {
            self.dirty = false;
            self.unstored = true;
        }
        self.published_settled = settled;
        let shape = crate::rules::status::shape(status);
        let due = self
            .stored_at
            .is_none_or(|at| at.elapsed() >= STATUS_HEARTBEAT);
        if self.unstored
            && (settled
                || self.stored_settled
                || self.stored_shape.as_ref() != Some(&shape)
                || due
                || !changed)
        {
            match serde_json::to_vec(status) {
                Ok(bytes) => {
                    self.writer
                        .get_or_insert_with(|| {
                            StatusWriter::start(bus.sessions_kv.clone(), status.session_id.clone())
                        })
                        .put(bytes.into());
                    self.unstored = false;
                    self.stored_at = Some(Instant::now());
                    self.stored_settled = settled;
                    self.stored_shape = Some(shape);
                }
                Err(e) => tracing::error!(error = %e, "could not encode the session status"),
            }
        }
        if let Err(e) = bus
            .publish_core(subjects::session_status(&status.session_id), status)
            .await
        {
            tracing::warn!(error = %e, "could not publish the session status");
        }
    }

    /// Stores the last status handed over (see [`StatusWriter::finish`]).
    pub(super) async fn finish(self) {
        if let Some(writer) = self.writer {
            writer.finish().await;
        }
    }
}
