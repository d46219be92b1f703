//! A latch that holds scripted mock replies until the test opens it.

use std::sync::Arc;

use tokio::sync::watch;

/// A latch a test opens to let gated replies through (see [`MockReply::gated`](crate::MockReply::gated)).
///
/// Clones share the latch; once opened it stays open.
#[derive(Clone, Debug)]
pub struct Gate {
    tx: Arc<watch::Sender<bool>>,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate {
            tx: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Opens the gate: every reply waiting on it (now or later) is sent.
    pub fn open(&self) {
        self.tx.send_replace(true);
    }

    /// Whether [`Gate::open`] has been called.
    pub fn is_open(&self) -> bool {
        *self.tx.borrow()
    }

    /// Resolves once the gate is open.
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives in `self`, so this cannot fail.
        let _ = rx.wait_for(|open| *open).await;
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}
