//! An Orchestrator's status (context %, tokens, current tool, tool count,
//! state): kept by its agent loop, published on core NATS after every change
//! of state or tool (a reply's spend and context go with the next one) and,
//! while nothing changes, as a heartbeat.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arbiter_bus::Bus;
use arbiter_protocol::{OrchestratorState, OrchestratorStatus, subjects};
use chrono::Utc;

/// Status is republished this often while nothing changes.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(2);

/// A cloneable handle on one Orchestrator's status.
#[derive(Clone)]
pub(crate) struct StatusHandle {
    inner: Arc<Inner>,
}

struct Inner {
    current: Mutex<OrchestratorStatus>,
    /// `None` in unit tests: the status is kept but not published.
    bus: Option<Bus>,
    /// Publishes go out one at a time, so they arrive in the order of the changes.
    publishing: tokio::sync::Mutex<()>,
}

impl StatusHandle {
    pub(crate) fn new(initial: OrchestratorStatus, bus: Option<Bus>) -> Self {
        Self {
            inner: Arc::new(Inner {
                current: Mutex::new(initial),
                bus,
                publishing: tokio::sync::Mutex::new(()),
            }),
        }
    }

    pub(crate) fn get(&self) -> OrchestratorStatus {
        self.inner
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What the Orchestrator is doing now.
    pub(crate) fn state(&self) -> OrchestratorState {
        self.inner
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .state
    }

    /// Changes the status and publishes it.
    pub(crate) async fn update(&self, f: impl FnOnce(&mut OrchestratorStatus)) {
        self.note(f);
        self.publish().await;
    }

    /// Changes the status without publishing it: the change goes out with
    /// the next publish (a change of state or tool, which follows a model
    /// reply at once, or else the heartbeat).
    pub(crate) fn note(&self, f: impl FnOnce(&mut OrchestratorStatus)) {
        let mut current = self
            .inner
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f(&mut current);
        current.at = Utc::now();
    }

    /// Publishes the latest status.
    pub(crate) async fn publish(&self) {
        let Some(bus) = &self.inner.bus else {
            return;
        };
        let _turn = self.inner.publishing.lock().await;
        let status = self.get();
        let subject = subjects::orch_status(&status.orch_id);
        if let Err(e) = bus.publish_core(subject, &status).await {
            tracing::debug!(error = %e, "status publish failed");
        }
    }

    /// Republishes the status every [`HEARTBEAT`] until it is `Stopped`.
    pub(crate) fn spawn_heartbeat(&self) -> tokio::task::JoinHandle<()> {
        let handle = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(HEARTBEAT).await;
                if handle.get().state == OrchestratorState::Stopped {
                    return;
                }
                handle.publish().await;
            }
        })
    }
}
