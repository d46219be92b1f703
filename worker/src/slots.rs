//! A worker's Orchestrator slots: a semaphore bounds how many run at once,
//! and a registry of the running ones feeds the presence service.
//!
//! An Orchestrator that has waited for the Arbiter long enough is
//! **parked**: it gives its slot back (the worker may take another summons
//! with it) but keeps its lease and its input consumer. When input comes it
//! takes a slot again ([`Seat::take_back`]), ahead of new summonses: the
//! summons loop hands its slot over to it ([`Slots::hand_over`]). How many
//! may be parked at once is bounded; past that, a waiting Orchestrator keeps
//! its slot.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};

/// What a worker tells the fleet about itself: the `presence` endpoint's
/// answer and the `data` of its `$SRV.STATS` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WorkerPresence {
    pub worker_id: String,
    pub pool: String,
    pub slots_total: usize,
    pub slots_used: usize,
    pub slots_free: usize,
    /// The Orchestrators running here (in a slot), by orch id.
    pub orchestrators: Vec<String>,
    /// The Orchestrators parked here: waiting for the Arbiter without a
    /// slot, their lease still held.
    #[serde(default)]
    pub parked: Vec<String>,
}

/// The slots of one worker.
pub(crate) struct Slots {
    worker_id: String,
    pool: String,
    total: usize,
    max_parked: usize,
    semaphore: Arc<Semaphore>,
    running: Mutex<Vec<String>>,
    parked: Mutex<Vec<String>>,
    /// Parked Orchestrators waiting for a slot, each ready to be handed one.
    handoff: Mutex<VecDeque<oneshot::Sender<OwnedSemaphorePermit>>>,
    /// Told whenever one starts waiting for a slot.
    wanted: Notify,
}

/// One occupied slot; freed when dropped.
pub(crate) struct Slot {
    slots: Arc<Slots>,
    orch_id: String,
    _permit: OwnedSemaphorePermit,
}

/// A place among the parked; given up when dropped.
pub(crate) struct Parked {
    slots: Arc<Slots>,
    orch_id: String,
}

impl Slots {
    pub(crate) fn new(worker_id: &str, pool: &str, total: usize, max_parked: usize) -> Arc<Self> {
        Arc::new(Self {
            worker_id: worker_id.to_owned(),
            pool: pool.to_owned(),
            total,
            max_parked,
            semaphore: Arc::new(Semaphore::new(total)),
            running: Mutex::new(Vec::new()),
            parked: Mutex::new(Vec::new()),
            handoff: Mutex::new(VecDeque::new()),
            wanted: Notify::new(),
        })
    }

    /// Waits for a free slot. `None` only if the semaphore was closed.
    pub(crate) async fn free(&self) -> Option<OwnedSemaphorePermit> {
        self.semaphore.clone().acquire_owned().await.ok()
    }

    /// Marks a slot taken by `orch_id` for as long as the returned guard lives.
    pub(crate) fn occupy(self: &Arc<Self>, permit: OwnedSemaphorePermit, orch_id: &str) -> Slot {
        lock(&self.running).push(orch_id.to_owned());
        Slot {
            slots: self.clone(),
            orch_id: orch_id.to_owned(),
            _permit: permit,
        }
    }

    /// Resolves when a parked Orchestrator may be waiting for a slot (see
    /// [`Slots::hand_over`]).
    pub(crate) async fn wanted(&self) {
        self.wanted.notified().await;
    }

    /// Gives a free slot to a parked Orchestrator waiting for one, if there
    /// is one (`None`); otherwise hands the slot back.
    pub(crate) fn hand_over(&self, permit: OwnedSemaphorePermit) -> Option<OwnedSemaphorePermit> {
        let mut permit = permit;
        let mut waiting = lock(&self.handoff);
        while let Some(tx) = waiting.pop_front() {
            match tx.send(permit) {
                Ok(()) => return None,
                // It got a slot another way meanwhile.
                Err(back) => permit = back,
            }
        }
        Some(permit)
    }

    /// A place among the parked, if fewer than the most allowed are parked.
    fn park(self: &Arc<Self>, orch_id: &str) -> Option<Parked> {
        let mut parked = lock(&self.parked);
        if parked.len() >= self.max_parked {
            return None;
        }
        parked.push(orch_id.to_owned());
        Some(Parked {
            slots: self.clone(),
            orch_id: orch_id.to_owned(),
        })
    }

    /// Waits for a slot for a parked Orchestrator: a free one, or the one
    /// the summons loop holds while it waits for a summons.
    async fn take_back(self: Arc<Self>) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = self.semaphore.clone().try_acquire_owned() {
            return Some(permit);
        }
        let (tx, rx) = oneshot::channel();
        lock(&self.handoff).push_back(tx);
        self.wanted.notify_one();
        tokio::select! {
            permit = self.semaphore.clone().acquire_owned() => permit.ok(),
            permit = rx => permit.ok(),
        }
    }

    pub(crate) fn presence(&self) -> WorkerPresence {
        let orchestrators = lock(&self.running).clone();
        let parked = lock(&self.parked).clone();
        let used = orchestrators.len();
        WorkerPresence {
            worker_id: self.worker_id.clone(),
            pool: self.pool.clone(),
            slots_total: self.total,
            slots_used: used,
            slots_free: self.total.saturating_sub(used),
            orchestrators,
            parked,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn remove(list: &Mutex<Vec<String>>, orch_id: &str) {
    let mut list = lock(list);
    if let Some(i) = list.iter().position(|id| id == orch_id) {
        list.remove(i);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        remove(&self.slots.running, &self.orch_id);
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        remove(&self.slots.parked, &self.orch_id);
    }
}

/// Where one Orchestrator sits: in a slot, or parked.
pub(crate) struct Seat {
    slots: Arc<Slots>,
    orch_id: String,
    slot: Option<Slot>,
    parked: Option<Parked>,
}

impl Seat {
    pub(crate) fn new(slot: Slot) -> Self {
        Self {
            slots: slot.slots.clone(),
            orch_id: slot.orch_id.clone(),
            slot: Some(slot),
            parked: None,
        }
    }

    pub(crate) fn is_parked(&self) -> bool {
        self.parked.is_some()
    }

    /// Takes a place among the parked; false when as many Orchestrators as
    /// allowed are parked already. The slot is kept until [`Seat::give_back`],
    /// so that the status can say it is parked before another takes the slot.
    pub(crate) fn park(&mut self) -> bool {
        if self.parked.is_none() {
            self.parked = self.slots.park(&self.orch_id);
        }
        self.parked.is_some()
    }

    /// Gives the slot back, once parked.
    pub(crate) fn give_back(&mut self) {
        if self.parked.is_some() {
            self.slot = None;
        }
    }

    /// A future that waits for a slot; it borrows nothing, so the parked
    /// Orchestrator can take input meanwhile. Give its result to [`Seat::sit`].
    pub(crate) fn take_back(&self) -> impl Future<Output = Option<OwnedSemaphorePermit>> + use<> {
        self.slots.clone().take_back()
    }

    /// Sits in the slot `permit` stands for: no longer parked.
    pub(crate) fn sit(&mut self, permit: OwnedSemaphorePermit) {
        self.slot = Some(self.slots.occupy(permit, &self.orch_id));
        self.parked = None;
    }

    /// Leaves for good: the slot (or the place among the parked) is freed.
    pub(crate) fn leave(&mut self) {
        self.slot = None;
        self.parked = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_are_counted_while_occupied() {
        let slots = Slots::new("w1", "gpu", 2, 4);
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
                parked: Vec::new(),
            }
        );
        assert!(slots.semaphore.available_permits() == 0);
        drop(a);
        assert_eq!(slots.presence().slots_free, 1);
        assert_eq!(slots.presence().orchestrators, vec!["o-b".to_owned()]);
        assert!(slots.free().await.is_some());
    }

    #[tokio::test]
    async fn a_parked_orchestrator_frees_its_slot_and_takes_one_back() {
        let slots = Slots::new("w1", "gpu", 1, 1);
        let mut a = Seat::new(slots.occupy(slots.free().await.unwrap(), "o-a"));
        assert!(a.park());
        assert_eq!(slots.presence().slots_free, 0);
        a.give_back();
        let p = slots.presence();
        assert_eq!((p.slots_free, p.orchestrators.len()), (1, 0));
        assert_eq!(p.parked, vec!["o-a".to_owned()]);

        // B takes the slot; a second Orchestrator cannot park past the bound.
        let mut b = Seat::new(slots.occupy(slots.free().await.unwrap(), "o-b"));
        assert!(!b.park());
        assert_eq!(slots.presence().orchestrators, vec!["o-b".to_owned()]);

        // A wants its slot back and gets it once B leaves.
        let take = tokio::spawn(a.take_back());
        tokio::task::yield_now().await;
        assert!(!take.is_finished());
        b.leave();
        a.sit(take.await.unwrap().unwrap());
        let p = slots.presence();
        assert_eq!(p.orchestrators, vec!["o-a".to_owned()]);
        assert!(p.parked.is_empty());
        assert_eq!(p.slots_free, 0);
    }

    #[tokio::test]
    async fn the_summons_loop_hands_its_slot_to_a_parked_orchestrator() {
        let slots = Slots::new("w1", "gpu", 1, 1);
        let mut a = Seat::new(slots.occupy(slots.free().await.unwrap(), "o-a"));
        assert!(a.park());
        a.give_back();
        // The summons loop holds the free slot while it waits for a summons.
        let held = slots.free().await.unwrap();
        // Nobody waits yet: the slot stays with the loop.
        let held = slots.hand_over(held).unwrap();
        let take = tokio::spawn(a.take_back());
        slots.wanted().await;
        assert!(slots.hand_over(held).is_none());
        a.sit(take.await.unwrap().unwrap());
        assert_eq!(slots.presence().orchestrators, vec!["o-a".to_owned()]);
    }
}
