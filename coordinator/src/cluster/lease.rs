//! Which coordinator owns which session, in the KV bucket
//! `arbiter_coordinator_leases`. What it costs grows with the number of
//! coordinators, never with the number of sessions:
//!
//! - **Liveness**: one key per coordinator (`coordinator.<id>`, value: how
//!   many sessions it owns) with a per-key TTL ([`LEASE_TTL`]), renewed every
//!   third of it, fenced on its revision, `Nats-TTL` on every write (an update
//!   without it would make the key permanent). When it runs out the server
//!   leaves a delete marker; a graceful stop deletes it.
//! - **Ownership**: one key per session (`session.<id>`, value: the owner's
//!   id) with **no** TTL, written only when ownership changes (first contact,
//!   takeover, hand-over), each write fenced on the key's revision, so two
//!   coordinators can never both take it. An owner is valid while its
//!   coordinator key is alive: an idle session costs nothing.
//!
//! Each coordinator keeps the whole bucket in memory from one watch of it.
//! When a coordinator key goes, every session it owned is sent on the `free`
//! channel, to be taken over (fenced on the session key's revision). A take
//! only says who *should* write: the session's fenced step records enforce it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbiter_bus::Bus;
use arbiter_protocol::subjects;
use async_nats::HeaderMap;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::kv::{self, Operation};
use async_nats::jetstream::message::PublishMessage;
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a coordinator's liveness key lives unless renewed: a dead
/// coordinator's sessions move after this (plus up to ~1 s for the marker
/// and the takeover).
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(4);
/// How often the liveness key is renewed.
pub(crate) const RENEW_EVERY: Duration = Duration::from_millis(LEASE_TTL.as_millis() as u64 / 3);

/// Who owns a session, as the bucket says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Owner {
    /// Another live coordinator.
    Other(String),
    /// This coordinator, which runs it.
    Me,
    /// Nobody (no key, handed over, or its owner is gone; or it is this
    /// coordinator's but not running here): a take is fenced on this
    /// revision of the session's key (0: it has none).
    Free(u64),
}

/// The sessions this coordinator owns, those the other live coordinators
/// own, and the coordinators up (this one included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Share {
    pub(crate) mine: usize,
    pub(crate) others: usize,
    pub(crate) live: usize,
}

impl Share {
    /// The sessions of live coordinators over the coordinators up, rounded up.
    pub(crate) fn fair(self) -> usize {
        (self.mine + self.others).div_ceil(self.live.max(1))
    }

    /// This coordinator owns more than its fair share: a free session is
    /// left to the others first.
    pub(crate) fn over(self) -> bool {
        self.mine > self.fair()
    }

    /// One more session taken here.
    pub(crate) fn took(&mut self) {
        self.mine += 1;
    }
}

struct Held {
    /// Revision of the session's key as this coordinator wrote it.
    rev: u64,
    /// Cancelled when the session is lost: its actor stops.
    lost: CancellationToken,
}

/// The bucket as this coordinator's watch has seen it.
#[derive(Default)]
struct Map {
    /// Session → revision of its key and its owner (`None`: handed over).
    sessions: HashMap<String, (u64, Option<String>)>,
    /// Live coordinators → revision of their key.
    live: HashMap<String, u64>,
}

impl Map {
    /// Applies one entry of the watch; what it means for this coordinator.
    fn apply(&mut self, entry: &kv::Entry) -> Change {
        if let Some(id) = entry.key.strip_prefix("coordinator.") {
            return match entry.operation {
                Operation::Put => {
                    self.live.insert(id.to_owned(), entry.revision);
                    Change::None
                }
                Operation::Delete | Operation::Purge => match self.live.remove(id) {
                    Some(_) => Change::Gone(id.to_owned()),
                    None => Change::None,
                },
            };
        }
        let Some(session_id) = entry.key.strip_prefix("session.") else {
            return Change::None;
        };
        if self
            .sessions
            .get(session_id)
            .is_some_and(|(rev, _)| *rev >= entry.revision)
        {
            return Change::None;
        }
        let owner = (entry.operation == Operation::Put)
            .then(|| String::from_utf8_lossy(&entry.value).into_owned());
        self.sessions
            .insert(session_id.to_owned(), (entry.revision, owner.clone()));
        Change::Session(session_id.to_owned(), entry.revision, owner)
    }

    /// The sessions `coordinator` owns, with their keys' revisions.
    fn owned_by(&self, coordinator: &str) -> Vec<(String, u64)> {
        self.sessions
            .iter()
            .filter(|(_, (_, owner))| owner.as_deref() == Some(coordinator))
            .map(|(id, (rev, _))| (id.clone(), *rev))
            .collect()
    }
}

/// What an entry of the watch changed.
enum Change {
    None,
    /// A coordinator's key ran out or was deleted.
    Gone(String),
    /// A session's key was written (owner) or deleted (`None`).
    Session(String, u64, Option<String>),
}

/// This coordinator's own liveness key.
#[derive(Default)]
struct Alive {
    /// Revision of the key as last written (0: not written, or lost).
    rev: u64,
    /// When the last write that the server stored was sent.
    renewed: Option<Instant>,
    /// Sessions held when liveness was last lost, taken back (if still this
    /// coordinator's) once it is alive again.
    lost: Vec<String>,
}

/// This coordinator's view of who owns what.
#[derive(Clone)]
pub(crate) struct Leases {
    pub id: String,
    bus: Bus,
    kv: kv::Store,
    held: Arc<Mutex<HashMap<String, Held>>>,
    map: Arc<Mutex<Map>>,
    me: Arc<Mutex<Alive>>,
    /// Renewals failed in a row: the first is a warning, the rest (an
    /// election, a stream deleted under it) are quiet until one succeeds.
    failures: Arc<std::sync::atomic::AtomicU32>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Leases {
    pub(crate) async fn open(bus: &Bus, id: String) -> Result<Self, arbiter_bus::BusError> {
        let kv = bus
            .js
            .get_key_value(subjects::COORDINATOR_LEASES_BUCKET)
            .await
            .map_err(|e| arbiter_bus::js_error("opening the coordinator leases bucket", e))?;
        Ok(Self {
            id,
            bus: bus.clone(),
            kv,
            held: Arc::default(),
            map: Arc::default(),
            me: Arc::default(),
            failures: Arc::default(),
        })
    }

    fn subject(key: &str) -> String {
        subjects::kv_subject(subjects::COORDINATOR_LEASES_BUCKET, key)
    }

    /// One write of a key fenced on `expect`, with the liveness TTL when
    /// `ttl`; the revision it got, `Ok(None)` when the fence refused it.
    async fn write(
        &self,
        key: &str,
        value: Bytes,
        expect: u64,
        ttl: bool,
    ) -> Result<Option<u64>, String> {
        let mut headers = HeaderMap::new();
        if ttl {
            headers.insert("Nats-TTL", LEASE_TTL.as_secs().to_string().as_str());
        }
        headers.insert(
            async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
            expect.to_string().as_str(),
        );
        let message = PublishMessage::build().payload(value).headers(headers);
        let ack = self
            .bus
            .js
            .send_publish(Self::subject(key), message)
            .await
            .map_err(|e| e.to_string())?;
        match ack.await {
            Ok(ack) => Ok(Some(ack.sequence)),
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Who owns `session_id` now, as the watch has seen the bucket.
    pub(crate) fn owner(&self, session_id: &str) -> Owner {
        if self.holds(session_id) {
            return Owner::Me;
        }
        let map = lock(&self.map);
        match map.sessions.get(session_id) {
            None => Owner::Free(0),
            Some((_, Some(owner))) if *owner != self.id && map.live.contains_key(owner) => {
                Owner::Other(owner.clone())
            }
            // Handed over, its owner gone, or ours but not running here.
            Some((rev, _)) => Owner::Free(*rev),
        }
    }

    /// Reads a session's key afresh (after a refused take: the watch is behind).
    async fn refresh(&self, session_id: &str) {
        let key = subjects::session_lease_key(session_id);
        match self.kv.entry(key).await {
            Ok(None) => {
                lock(&self.map).sessions.remove(session_id);
            }
            Ok(Some(entry)) => {
                let owner = (entry.operation == Operation::Put)
                    .then(|| String::from_utf8_lossy(&entry.value).into_owned());
                lock(&self.map)
                    .sessions
                    .insert(session_id.to_owned(), (entry.revision, owner));
            }
            Err(e) => {
                tracing::warn!(session.id = %session_id, error = %e, "could not read the session's owner");
            }
        }
    }

    /// Whether this coordinator's liveness key is known to be alive.
    fn alive(&self) -> bool {
        let me = lock(&self.me);
        me.rev != 0 && me.renewed.is_some_and(|at| at.elapsed() < LEASE_TTL)
    }

    /// Takes `session_id`, fenced on `expect`; the token (a child of
    /// `parent`) is cancelled should it be lost. `None` when another
    /// coordinator took it first (the key is read afresh) or this one is not
    /// known alive.
    pub(crate) async fn take(
        &self,
        session_id: &str,
        expect: u64,
        parent: &CancellationToken,
    ) -> Result<Option<CancellationToken>, String> {
        if !self.alive() {
            return Ok(None);
        }
        let key = subjects::session_lease_key(session_id);
        let Some(rev) = self
            .write(&key, Bytes::from(self.id.clone()), expect, false)
            .await?
        else {
            self.refresh(session_id).await;
            return Ok(None);
        };
        let lost = parent.child_token();
        lock(&self.held).insert(
            session_id.to_owned(),
            Held {
                rev,
                lost: lost.clone(),
            },
        );
        lock(&self.map)
            .sessions
            .insert(session_id.to_owned(), (rev, Some(self.id.clone())));
        tracing::info!(session.id = %session_id, coordinator = %self.id, "session taken");
        Ok(Some(lost))
    }

    pub(crate) fn holds(&self, session_id: &str) -> bool {
        lock(&self.held).contains_key(session_id)
    }

    pub(crate) fn count(&self) -> usize {
        lock(&self.held).len()
    }

    /// Coordinators up, this one included.
    pub(crate) fn live(&self) -> usize {
        let map = lock(&self.map);
        map.live.keys().filter(|id| **id != self.id).count() + 1
    }

    /// This coordinator's fair share: the sessions owned by all live
    /// coordinators, over the coordinators up.
    pub(crate) fn fair_share(&self) -> usize {
        self.share().fair()
    }

    /// What the fair share is made of, now (one pass over the bucket).
    pub(crate) fn share(&self) -> Share {
        let mine = self.count();
        let map = lock(&self.map);
        let others = map
            .sessions
            .values()
            .filter(|(_, owner)| {
                owner
                    .as_ref()
                    .is_some_and(|o| *o != self.id && map.live.contains_key(o))
            })
            .count();
        let live = map.live.keys().filter(|id| **id != self.id).count() + 1;
        Share { mine, others, live }
    }

    /// Hands a session over (after its actor stopped): its key is deleted,
    /// fenced on its revision, so the other coordinators see it free at once.
    pub(crate) async fn release(&self, session_id: &str) {
        let Some(held) = lock(&self.held).remove(session_id) else {
            return;
        };
        let key = subjects::session_lease_key(session_id);
        if let Err(e) = self.kv.delete_expect_revision(&key, Some(held.rev)).await {
            tracing::warn!(session.id = %session_id, error = %e, "could not hand the session over; it is taken by the next message for it");
        }
    }

    /// Forgets a session that stopped without being handed over (it was
    /// taken by another coordinator, or liveness was lost).
    pub(crate) fn forget(&self, session_id: &str) {
        lock(&self.held).remove(session_id);
    }

    /// Every session held stops: this coordinator's key ran out or was taken.
    fn lose_all(&self, why: &str) {
        let held: Vec<(String, Held)> = lock(&self.held).drain().collect();
        tracing::warn!(
            coordinator = %self.id,
            sessions = held.len(),
            why,
            "this coordinator is not known alive any more: its sessions stop here (the others may take them)"
        );
        let mut me = lock(&self.me);
        me.rev = 0;
        for (session_id, held) in held {
            held.lost.cancel();
            me.lost.push(session_id);
        }
    }

    /// Writes this coordinator's liveness key once (renewal, or announcement
    /// when not alive), fenced on its revision, with `Nats-TTL`. After an
    /// announcement that follows a loss, the sessions it had that are still
    /// its own are sent on `free`, to be taken back.
    pub(crate) async fn renew(&self, free: &mpsc::Sender<(String, u64)>) {
        let key = subjects::coordinator_presence_key(&self.id);
        let (rev, renewed) = {
            let me = lock(&self.me);
            (me.rev, me.renewed)
        };
        if rev != 0 && renewed.is_none_or(|at| at.elapsed() >= LEASE_TTL) {
            self.lose_all("its key was not renewed in time");
            return;
        }
        let expect = if rev != 0 {
            rev
        } else {
            // Announcing: on top of whatever the key holds (nothing, the
            // marker of one that ran out, a previous run under this id).
            match self.kv.entry(&key).await {
                Ok(None) => 0,
                Ok(Some(entry)) => entry.revision,
                Err(e) => {
                    self.failed(&format!("could not read this coordinator's key: {e}"));
                    return;
                }
            }
        };
        let sent = Instant::now();
        let count = self.count().to_string();
        match self.write(&key, Bytes::from(count), expect, true).await {
            Ok(Some(new_rev)) => {
                if self.failures.swap(0, std::sync::atomic::Ordering::Relaxed) > 0 {
                    tracing::info!("this coordinator's key is renewed again");
                }
                let back = {
                    let mut me = lock(&self.me);
                    me.rev = new_rev;
                    me.renewed = Some(sent);
                    std::mem::take(&mut me.lost)
                };
                lock(&self.map).live.insert(self.id.clone(), new_rev);
                if rev == 0 {
                    tracing::info!(coordinator = %self.id, "this coordinator is up");
                }
                let back: Vec<(String, u64)> = {
                    let map = lock(&self.map);
                    back.into_iter()
                        .filter_map(|id| match map.sessions.get(&id) {
                            Some((rev, Some(owner))) if *owner == self.id => Some((id, *rev)),
                            _ => None,
                        })
                        .collect()
                };
                for entry in back {
                    let _ = free.send(entry).await;
                }
            }
            Ok(None) if rev != 0 => self.lose_all("its key ran out or was written by another"),
            Ok(None) => {
                tracing::warn!(coordinator = %self.id, "this coordinator's key changed while it was announced; trying again");
            }
            Err(e) => self.failed(&format!("could not renew this coordinator's key: {e}")),
        }
    }

    /// A renewal that failed: said once per run of failures, then quietly.
    fn failed(&self, what: &str) {
        if self
            .failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            == 0
        {
            tracing::warn!("{what}; trying again (quietly until it works)");
        } else {
            tracing::debug!("{what}; trying again");
        }
    }

    /// Renews the liveness key every [`RENEW_EVERY`] until `stop`.
    pub(crate) async fn keep(&self, free: mpsc::Sender<(String, u64)>, stop: CancellationToken) {
        let mut tick = tokio::time::interval_at(Instant::now() + RENEW_EVERY, RENEW_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => self.renew(&free).await,
            }
        }
    }

    /// Follows the whole bucket: keeps the map, sends on `free` the sessions
    /// that come free (handed over, or their owner's key went), and stops a
    /// session held here that another coordinator took. `ready` fires once
    /// the map has caught up with the bucket.
    pub(crate) async fn watch(
        &self,
        free: mpsc::Sender<(String, u64)>,
        ready: tokio::sync::oneshot::Sender<()>,
        stop: CancellationToken,
    ) {
        let mut ready = Some(ready);
        let mut failing = false;
        loop {
            let mut watch = match self
                .kv
                .watch_with_history(subjects::ALL_COORDINATOR_LEASE_KEYS)
                .await
            {
                Ok(watch) => {
                    failing = false;
                    watch
                }
                Err(e) => {
                    if std::mem::replace(&mut failing, true) {
                        tracing::debug!(error = %e, "could not watch the coordinator leases; retrying");
                    } else {
                        tracing::warn!(error = %e, "could not watch the coordinator leases; retrying (quietly until it works)");
                    }
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(RENEW_EVERY) => continue,
                    }
                }
            };
            // The bucket as it is now is read into a fresh map; coordinators
            // that went while no watch ran are found by comparing.
            let mut snapshot = Some(Map::default());
            loop {
                let entry = tokio::select! {
                    () = stop.cancelled() => return,
                    entry = watch.next() => entry,
                };
                let Some(Ok(entry)) = entry else { break };
                if let Some(map) = snapshot.as_mut() {
                    map.apply(&entry);
                    if !entry.seen_current {
                        continue;
                    }
                    let Some(map) = snapshot.take() else { continue };
                    let gone: Vec<String> = {
                        let mut old = lock(&self.map);
                        let gone = old
                            .live
                            .keys()
                            .filter(|id| !map.live.contains_key(*id))
                            .cloned()
                            .collect();
                        *old = map;
                        gone
                    };
                    for id in gone {
                        self.on_change(Change::Gone(id), &free).await;
                    }
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                    continue;
                }
                let change = lock(&self.map).apply(&entry);
                self.on_change(change, &free).await;
            }
        }
    }

    async fn on_change(&self, change: Change, free: &mpsc::Sender<(String, u64)>) {
        let freed = match change {
            Change::None => return,
            Change::Gone(id) if id == self.id => return,
            Change::Gone(id) => {
                tracing::info!(coordinator = %id, "a coordinator is gone: its sessions are taken over");
                lock(&self.map).owned_by(&id)
            }
            Change::Session(session_id, rev, owner) => {
                if owner.as_deref() == Some(self.id.as_str()) {
                    return;
                }
                if let Some(held) = lock(&self.held).remove(&session_id) {
                    tracing::warn!(session.id = %session_id, owner = ?owner, "the session was taken by another coordinator: the session stops here");
                    held.lost.cancel();
                }
                if owner.is_some() {
                    return;
                }
                vec![(session_id, rev)]
            }
        };
        for entry in freed {
            if free.send(entry).await.is_err() {
                return;
            }
        }
    }

    /// At a graceful stop, once every session here has stopped: this
    /// coordinator's key is deleted, and the others take its sessions at once.
    pub(crate) async fn withdraw(&self) {
        let key = subjects::coordinator_presence_key(&self.id);
        if let Err(e) = self.kv.delete(&key).await {
            tracing::warn!(error = %e, "could not withdraw this coordinator; its sessions move when its key runs out");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Share;

    /// How many of `free` sessions a coordinator takes at once, one at a
    /// time, before it is over its share.
    fn taken_at_once(mut share: Share, free: usize) -> usize {
        let mut taken = 0;
        while taken < free && !share.over() {
            share.took();
            taken += 1;
        }
        taken
    }

    #[test]
    fn a_lone_coordinator_takes_every_free_session_at_once() {
        // The dead coordinator's sessions count for nobody: its key is gone.
        let share = Share {
            mine: 0,
            others: 0,
            live: 1,
        };
        assert!(!share.over());
        assert_eq!(taken_at_once(share, 10_000), 10_000);
    }

    #[test]
    fn beside_a_busier_coordinator_one_takes_until_it_is_past_its_share() {
        // B owns 100; A owns none and 300 sessions are free. A takes one
        // while what it owns is no more than (its own + 100) / 2, rounded
        // up: at 101 it still is (101 of 201), at 102 not (102 > 101).
        let share = Share {
            mine: 0,
            others: 100,
            live: 2,
        };
        assert_eq!(taken_at_once(share, 300), 102);
        // One already over its share takes none at once.
        let over = Share {
            mine: 60,
            others: 10,
            live: 2,
        };
        assert!(over.over());
        assert_eq!(taken_at_once(over, 5), 0);
        assert_eq!(over.fair(), 35);
    }
}
