//! The lease on a running Orchestrator. The lease *is* its summons: the
//! worker leaves the summons unacknowledged while the Orchestrator runs and
//! renews it with `AckKind::Progress` every third of the pool consumer's
//! `ack_wait`. A worker that stops renewing (killed, cut off, paused) loses
//! it: the server hands the summons to another worker of the pool, which
//! resumes the Orchestrator from its stored state. Before a renewal the lease
//! checks that the last state record is still its own; once another worker
//! has written, it stops the Orchestrator (fencing). The summons is acked
//! only when the Orchestrator has ended and that is stored.
//!
//! The check is a request to the server (a direct get), so it is made only
//! when the lease may have been lost, or when a stale holder could do harm:
//!
//! - before every renewal while the Orchestrator works (a model call or a
//!   tool may be running, and a tool's side effects are not fenced);
//! - while it waits for the Arbiter, only when this worker may have missed a
//!   renewal (the loop woke late, after a pause; the last renewal failed;
//!   the connection was made again since), and otherwise every
//!   [`WAITING_CHECK`] as a backstop. Another worker can only have taken it
//!   if the server went [`Lease`]'s ack wait without a renewal; and a waiting
//!   holder that was taken over anyway (say the server lost its renewals
//!   without dropping the connection) does nothing but wait until the
//!   backstop: an input would wake it to a model call whose reply it could
//!   not store (the write is fenced), so no tool runs.
//!
//! At 1,000 waiting Orchestrators this is 400 direct gets a second fewer
//! (one every 10 s, not every 2 s, each).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use arbiter_protocol::OrchestratorState;
use async_nats::jetstream::{AckKind, Message};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::state::Fence;
use crate::status::StatusHandle;
use crate::stop::{Cause, Stopper};

/// How often a waiting Orchestrator's lease checks its fence when nothing
/// says the lease may have been lost.
pub(crate) const WAITING_CHECK: Duration = Duration::from_secs(10);

/// Attempts to acknowledge a summons at the end.
const ACK_ATTEMPTS: u64 = 5;

pub(crate) struct Lease {
    /// The summons' stream sequence: the same for every delivery of it.
    seq: u64,
    /// The latest delivery of the summons (a redelivery to this worker replaces it).
    msg: Mutex<Message>,
    /// Set once the Orchestrator is claimed: the fence to check, the
    /// Orchestrator to stop, and its status (whether it waits).
    watch: Mutex<Option<Watch>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Lease {
    /// Holds `msg` and renews it every `every` from now on. `reconnects`
    /// changes each time the connection is made again (see [`arbiter_bus::Alarms::reconnects`]).
    pub(crate) fn start(
        msg: Message,
        every: Duration,
        reconnects: watch::Receiver<u64>,
    ) -> Arc<Self> {
        let lease = Arc::new(Self {
            seq: stream_seq(&msg),
            msg: Mutex::new(msg),
            watch: Mutex::new(None),
            task: Mutex::new(None),
        });
        let task = tokio::spawn(renew(Arc::downgrade(&lease), every, reconnects));
        *lock(&lease.task) = Some(task);
        lease
    }

    /// The stream sequence of the summons held.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// From now on, a renewal first checks `fence` when it must (see the
    /// module's comment; `status` tells whether the Orchestrator waits) and
    /// stops the Orchestrator if it fails.
    pub(crate) fn watch(&self, fence: Fence, stopper: Stopper, status: StatusHandle) {
        *lock(&self.watch) = Some(Watch {
            fence,
            stopper,
            status,
        });
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

#[derive(Clone)]
struct Watch {
    fence: Fence,
    stopper: Stopper,
    status: StatusHandle,
}

/// Why a renewal checks the fence first, if it does (see the module's comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Working,
    /// The loop woke late (a pause), or the last renewal failed.
    Missed,
    Reconnected,
    Backstop,
}

/// What the renewal loop knows since its last fence check.
struct Renewals {
    every: Duration,
    /// When the last renewal was sent, if it was.
    renewed: Option<Instant>,
    checked: Instant,
    reconnects: watch::Receiver<u64>,
}

impl Renewals {
    /// Whether this renewal must check the fence first, and why.
    fn check(&mut self, waiting: bool) -> Option<Check> {
        let check = if !waiting {
            Some(Check::Working)
        } else if self.renewed.is_none_or(|at| at.elapsed() >= self.every * 2) {
            // A renewal is due every `every`; the server lets the lease go
            // after three. One late by a whole period is a pause.
            Some(Check::Missed)
        } else if self.reconnects.has_changed().unwrap_or(false) {
            Some(Check::Reconnected)
        } else if self.checked.elapsed() >= WAITING_CHECK {
            Some(Check::Backstop)
        } else {
            None
        };
        if check.is_some() {
            self.reconnects.mark_unchanged();
            self.checked = Instant::now();
        }
        check
    }
}

async fn renew(lease: Weak<Lease>, every: Duration, reconnects: watch::Receiver<u64>) {
    let mut renewals = Renewals {
        every,
        renewed: Some(Instant::now()),
        checked: Instant::now(),
        reconnects,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(lease) = lease.upgrade() else {
            return;
        };
        let watch = lock(&lease.watch).clone();
        if let Some(Watch {
            fence,
            stopper,
            status,
        }) = watch
            && let Some(why) = renewals.check(status.state() == OrchestratorState::Waiting)
            && fence.holds().await == Some(false)
        {
            tracing::warn!(check = ?why, "another worker holds this Orchestrator now; stopping it here");
            stopper.stop(Cause::Fenced);
            return;
        }
        let msg = lock(&lease.msg).clone();
        renewals.renewed = match msg.ack_with(AckKind::Progress).await {
            Ok(()) => Some(Instant::now()),
            Err(e) => {
                tracing::debug!(error = %e, "renewing the lease failed; trying again next time");
                None
            }
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: Duration = Duration::from_secs(2);

    fn renewals(reconnects: watch::Receiver<u64>) -> Renewals {
        Renewals {
            every: EVERY,
            renewed: Some(Instant::now()),
            checked: Instant::now(),
            reconnects,
        }
    }

    fn ago(d: Duration) -> Instant {
        Instant::now()
            .checked_sub(d)
            .expect("a monotonic clock this old")
    }

    #[test]
    fn a_working_orchestrator_checks_before_every_renewal() {
        let (_tx, rx) = watch::channel(0);
        let mut r = renewals(rx);
        assert_eq!(r.check(false), Some(Check::Working));
        assert_eq!(r.check(false), Some(Check::Working));
    }

    #[test]
    fn a_waiting_one_checks_only_when_a_renewal_may_have_been_missed_or_at_the_backstop() {
        let (tx, rx) = watch::channel(0);
        let mut r = renewals(rx);
        // Renewed on time, connection steady: no request to the server.
        assert_eq!(r.check(true), None);
        // Woke a whole period late (a pause).
        r.renewed = Some(ago(EVERY * 2));
        assert_eq!(r.check(true), Some(Check::Missed));
        // The last renewal failed.
        r.renewed = None;
        assert_eq!(r.check(true), Some(Check::Missed));
        r.renewed = Some(Instant::now());
        assert_eq!(r.check(true), None);
        // The connection was made again: once.
        tx.send_replace(1);
        assert_eq!(r.check(true), Some(Check::Reconnected));
        assert_eq!(r.check(true), None);
        // Nothing said the lease could be lost, but the backstop is due.
        r.checked = ago(WAITING_CHECK);
        assert_eq!(r.check(true), Some(Check::Backstop));
        assert_eq!(r.check(true), None);
    }

    #[test]
    fn a_check_made_for_work_counts_towards_the_backstop() {
        let (_tx, rx) = watch::channel(0);
        let mut r = renewals(rx);
        r.checked = ago(WAITING_CHECK);
        assert_eq!(r.check(false), Some(Check::Working));
        assert_eq!(r.check(true), None);
    }
}
