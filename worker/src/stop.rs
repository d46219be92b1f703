//! Why a running Orchestrator stops: released (or cancelled) by the
//! coordinator, fenced (its lease went to another worker), or the worker is
//! shutting down. One token stops its model call, tools and subagents; the
//! first cause given is the one that counts.

use std::sync::{Arc, Mutex, PoisonError};

use arbiter_protocol::ControlAction;
use tokio_util::sync::CancellationToken;

pub(crate) enum Cause {
    /// A release or cancel stored for it.
    Control { action: ControlAction },
    /// Another worker took the Orchestrator over.
    Fenced,
    /// The worker is shutting down: the Orchestrator goes back to the pool.
    Shutdown,
}

#[derive(Clone)]
pub(crate) struct Stopper {
    token: CancellationToken,
    /// The worker's own shutdown.
    parent: CancellationToken,
    cause: Arc<Mutex<Option<Cause>>>,
}

impl Stopper {
    /// A stopper that also fires (as a shutdown) when `parent` is cancelled.
    pub(crate) fn new(parent: &CancellationToken) -> Self {
        Self {
            token: parent.child_token(),
            parent: parent.clone(),
            cause: Arc::new(Mutex::new(None)),
        }
    }

    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Stops the Orchestrator for `cause`, unless it was already stopped for another.
    pub(crate) fn stop(&self, cause: Cause) {
        {
            let mut current = self.cause.lock().unwrap_or_else(PoisonError::into_inner);
            if current.is_none() {
                *current = Some(cause);
            }
        }
        self.token.cancel();
    }

    /// The cause it stopped for. Without one it is the worker shutting down,
    /// or, if not, something cut the Orchestrator off: then it is treated as
    /// fenced, the cautious choice (nothing more is written or acknowledged).
    pub(crate) fn take_cause(&self) -> Cause {
        let cause = self
            .cause
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match cause {
            Some(cause) => cause,
            None if self.parent.is_cancelled() => Cause::Shutdown,
            None => Cause::Fenced,
        }
    }
}
