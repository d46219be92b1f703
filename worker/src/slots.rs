//! A worker's Orchestrator slots: a semaphore bounds how many run at once,
//! and a registry of the running ones feeds the presence service.

use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What a worker tells the fleet about itself: the `presence` endpoint's
/// answer and the `data` of its `$SRV.STATS` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerPresence {
    pub worker_id: String,
    pub pool: String,
    pub slots_total: usize,
    pub slots_used: usize,
    pub slots_free: usize,
    /// The Orchestrators running here, by orch id.
    pub orchestrators: Vec<String>,
}

/// The slots of one worker.
pub(crate) struct Slots {
    worker_id: String,
    pool: String,
    total: usize,
    semaphore: Arc<Semaphore>,
    running: Mutex<Vec<String>>,
}

/// One occupied slot; freed when dropped.
pub(crate) struct Slot {
    slots: Arc<Slots>,
    orch_id: String,
    _permit: OwnedSemaphorePermit,
}

impl Slots {
    pub(crate) fn new(worker_id: &str, pool: &str, total: usize) -> Arc<Self> {
        Arc::new(Self {
            worker_id: worker_id.to_owned(),
            pool: pool.to_owned(),
            total,
            semaphore: Arc::new(Semaphore::new(total)),
            running: Mutex::new(Vec::new()),
        })
    }

    /// Waits for a free slot. `None` only if the semaphore was closed.
    pub(crate) async fn free(&self) -> Option<OwnedSemaphorePermit> {
        self.semaphore.clone().acquire_owned().await.ok()
    }

    /// Marks a slot taken by `orch_id` for as long as the returned guard lives.
    pub(crate) fn occupy(self: &Arc<Self>, permit: OwnedSemaphorePermit, orch_id: &str) -> Slot {
        self.lock().push(orch_id.to_owned());
        Slot {
            slots: self.clone(),
            orch_id: orch_id.to_owned(),
            _permit: permit,
        }
    }

    pub(crate) fn presence(&self) -> WorkerPresence {
        let orchestrators = self.lock().clone();
        let used = orchestrators.len();
        WorkerPresence {
            worker_id: self.worker_id.clone(),
            pool: self.pool.clone(),
            slots_total: self.total,
            slots_used: used,
            slots_free: self.total.saturating_sub(used),
            orchestrators,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut running = self.slots.lock();
        if let Some(i) = running.iter().position(|id| *id == self.orch_id) {
            running.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_are_counted_while_occupied() {
        let slots = Slots::new("w1", "gpu", 2);
        let a = slots.occupy(slots.free().await.unwrap(), "o-a");
        let _b = slots.occupy(slots.free().await.unwrap(), "o-b");
        assert_eq!(
            slots.presence(),
            WorkerPresence {
                worker_id: "w1".into(),
                pool: "gpu".into(),
                slots_total: 2,
                slots_used: 2,
                slots_free: 0,
                orchestrators: vec!["o-a".into(), "o-b".into()],
            }
        );
        assert!(slots.semaphore.available_permits() == 0);
        drop(a);
        assert_eq!(slots.presence().slots_free, 1);
        assert_eq!(slots.presence().orchestrators, vec!["o-b".to_owned()]);
        assert!(slots.free().await.is_some());
    }
}
