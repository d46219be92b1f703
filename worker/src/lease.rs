//! The lease on a running Orchestrator. The lease *is* its summons: the
//! worker leaves the summons unacknowledged while the Orchestrator runs and
//! renews it with `AckKind::Progress` every third of the pool consumer's
//! `ack_wait`. A worker that stops renewing (killed, cut off, paused) loses
//! it: the server hands the summons to another worker of the pool, which
//! resumes the Orchestrator from its stored state. Between renewals the lease
//! checks that the last state record is still its own; once another worker
//! has written, it stops the Orchestrator (fencing). The summons is acked
//! only when the Orchestrator has ended and that is stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use tokio::task::JoinHandle;

use crate::state::Fence;
use crate::stop::{Cause, Stopper};

/// Attempts to acknowledge a summons at the end.
const ACK_ATTEMPTS: u64 = 5;

pub(crate) struct Lease {
    /// The summons' stream sequence: the same for every delivery of it.
    seq: u64,
    /// The latest delivery of the summons (a redelivery to this worker replaces it).
    msg: Mutex<Message>,
    /// Set once the Orchestrator is claimed: the fence to check, the Orchestrator to stop.
    watch: Mutex<Option<(Fence, Stopper)>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Lease {
    /// Holds `msg` and renews it every `every` from now on.
    pub(crate) fn start(msg: Message, every: Duration) -> Arc<Self> {
        let lease = Arc::new(Self {
            seq: stream_seq(&msg),
            msg: Mutex::new(msg),
            watch: Mutex::new(None),
            task: Mutex::new(None),
        });
        let task = tokio::spawn(renew(Arc::downgrade(&lease), every));
        *lock(&lease.task) = Some(task);
        lease
    }

    /// The stream sequence of the summons held.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// From now on, every renewal first checks `fence` and stops the Orchestrator if it fails.
    pub(crate) fn watch(&self, fence: Fence, stopper: Stopper) {
        *lock(&self.watch) = Some((fence, stopper));
    }

    /// The summons came again to this worker (its lease ran out while it still
    /// held it, e.g. across a server restart): keep running under the new delivery.
    pub(crate) fn adopt(&self, msg: Message) {
        *lock(&self.msg) = msg.clone();
        tokio::spawn(async move {
            if let Err(e) = msg.ack_with(AckKind::Progress).await {
                tracing::debug!(error = %e, "renewing an adopted lease failed");
            }
        });
    }

    /// The Orchestrator ended and that is stored: the summons is done with.
    pub(crate) async fn release(&self) {
        self.stop_renewing();
        let msg = lock(&self.msg).clone();
        for attempt in 1..=ACK_ATTEMPTS {
            match msg.double_ack().await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(attempt, error = %e, "could not acknowledge the summons");
                    tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                }
            }
        }
        // It comes back to some worker, which finds the Orchestrator ended and acks it.
        tracing::warn!("summons left unacknowledged; it will be acked on redelivery");
    }

    /// This worker stops holding the Orchestrator without ending it (shutdown,
    /// or a claim that failed): another worker may take it after `delay`.
    pub(crate) async fn hand_back(&self, delay: Option<Duration>) {
        self.stop_renewing();
        let msg = lock(&self.msg).clone();
        if let Err(e) = msg.ack_with(AckKind::Nak(delay)).await {
            tracing::warn!(error = %e, "could not hand the summons back; it returns when its lease runs out");
        }
    }

    /// The lease is lost to another worker: touch the summons no more.
    pub(crate) fn abandon(&self) {
        self.stop_renewing();
    }

    fn stop_renewing(&self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop_renewing();
    }
}

async fn renew(lease: Weak<Lease>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(lease) = lease.upgrade() else {
            return;
        };
        let watch = lock(&lease.watch).clone();
        if let Some((fence, stopper)) = watch
            && fence.holds().await == Some(false)
        {
            tracing::warn!("another worker holds this Orchestrator now; stopping it here");
            stopper.stop(Cause::Fenced);
            return;
        }
        let msg = lock(&lease.msg).clone();
        if let Err(e) = msg.ack_with(AckKind::Progress).await {
            tracing::debug!(error = %e, "renewing the lease failed; trying again next time");
        }
    }
}

/// The leases this worker holds, by orch id, so that a summons delivered
/// again to the worker that runs it renews the lease instead of starting a
/// second copy.
#[derive(Clone, Default)]
pub(crate) struct Registry(Arc<Mutex<HashMap<String, Arc<Lease>>>>);

impl Registry {
    pub(crate) fn get(&self, orch_id: &str) -> Option<Arc<Lease>> {
        lock(&self.0).get(orch_id).cloned()
    }

    /// Records the lease until the returned guard is dropped.
    pub(crate) fn register(&self, orch_id: &str, lease: Arc<Lease>) -> Registered {
        lock(&self.0).insert(orch_id.to_owned(), lease);
        Registered {
            registry: self.clone(),
            orch_id: orch_id.to_owned(),
        }
    }
}

/// A lease's place in the [`Registry`]; dropping it takes it out.
pub(crate) struct Registered {
    registry: Registry,
    orch_id: String,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.registry.0).remove(&self.orch_id);
    }
}

/// A delivered summons' stream sequence (0 if the delivery carries no info).
pub(crate) fn stream_seq(msg: &Message) -> u64 {
    msg.info().map(|info| info.stream_sequence).unwrap_or(0)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
