//! Session leases: which coordinator owns which session. Each session has a
//! key in the KV bucket `arbiter_coordinator_leases` whose value is its
//! owner's id, written with a per-key TTL ([`LEASE_TTL`]) and renewed every
//! third of it, fenced on the key's revision, `Nats-TTL` on every write (an
//! update without it would make the key permanent). A lease that runs out
//! leaves a delete marker that the other coordinators watch for; taking
//! over is a write fenced on the marker's revision. A lease only says who
//! *should* write: the session's fenced step records enforce it.
//!
//! Each coordinator also keeps a presence key (`coordinator.<id>`, value:
//! how many sessions it owns), so each knows its fair share.

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
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a session's lease lives unless renewed: a dead coordinator's
/// sessions move after this (plus up to ~1 s for the marker and the takeover).
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(4);
/// How often leases are renewed.
pub(crate) const RENEW_EVERY: Duration = Duration::from_millis(LEASE_TTL.as_millis() as u64 / 3);

/// Who owns a session, as the bucket says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Owner {
    /// A live lease of another coordinator.
    Other(String),
    /// This coordinator's own lease.
    Me,
    /// Nobody: a take is fenced on this revision (0: the key never existed,
    /// or the revision of the delete marker).
    Free(u64),
}

struct Held {
    rev: u64,
    /// Cancelled when the lease is lost: the session stops.
    lost: CancellationToken,
    renewed: Instant,
}

/// This coordinator's leases.
#[derive(Clone)]
pub(crate) struct Leases {
    pub id: String,
    bus: Bus,
    kv: kv::Store,
    held: Arc<Mutex<HashMap<String, Held>>>,
    /// Live coordinators (own included) and how many sessions each owns.
    peers: Arc<Mutex<HashMap<String, u64>>>,
}

fn ttl_header() -> String {
    LEASE_TTL.as_secs().to_string()
}

impl Leases {
    pub(crate) async fn open(bus: &Bus, id: String) -> Result<Self, arbiter_bus::BusError> {
        let kv = bus
            .js
            .get_key_value(subjects::COORDINATOR_LEASES_BUCKET)
            .await
            .map_err(|e| arbiter_bus::BusError::JetStream {
                what: "opening the coordinator leases bucket".into(),
                message: e.to_string(),
            })?;
        Ok(Self {
            id,
            bus: bus.clone(),
            kv,
            held: Arc::default(),
            peers: Arc::default(),
        })
    }

    fn subject(key: &str) -> String {
        format!("$KV.{}.{key}", subjects::COORDINATOR_LEASES_BUCKET)
    }

    /// One write of a key with the lease's TTL, fenced on `expect` when
    /// given; the revision it got, `Ok(None)` when the fence refused it.
    async fn write(
        &self,
        key: &str,
        value: Bytes,
        expect: Option<u64>,
    ) -> Result<Option<u64>, String> {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-TTL", ttl_header().as_str());
        if let Some(expect) = expect {
            headers.insert(
                async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
                expect.to_string().as_str(),
            );
        }
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

    /// Who owns `session_id` now.
    pub(crate) async fn owner(&self, session_id: &str) -> Result<Owner, String> {
        if self.holds(session_id) {
            return Ok(Owner::Me);
        }
        let key = subjects::session_lease_key(session_id);
        match self.kv.entry(key).await.map_err(|e| e.to_string())? {
            None => Ok(Owner::Free(0)),
            Some(entry) if entry.operation != Operation::Put => Ok(Owner::Free(entry.revision)),
            Some(entry) => {
                let owner = String::from_utf8_lossy(&entry.value).into_owned();
                if owner == self.id {
                    // A lease of ours that this process no longer counts
                    // (a session that stopped): taken again on top of it.
                    Ok(Owner::Free(entry.revision))
                } else {
                    Ok(Owner::Other(owner))
                }
            }
        }
    }

    /// Takes the lease of `session_id`, fenced on `expect`; the token (a
    /// child of `parent`) is cancelled should it be lost. `None` when another
    /// coordinator took it first.
    pub(crate) async fn take(
        &self,
        session_id: &str,
        expect: u64,
        parent: &CancellationToken,
    ) -> Result<Option<CancellationToken>, String> {
        let key = subjects::session_lease_key(session_id);
        let Some(rev) = self
            .write(&key, Bytes::from(self.id.clone()), Some(expect))
            .await?
        else {
            return Ok(None);
        };
        let lost = parent.child_token();
        self.lock_held().insert(
            session_id.to_owned(),
            Held {
                rev,
                lost: lost.clone(),
                renewed: Instant::now(),
            },
        );
        tracing::info!(session.id = %session_id, coordinator = %self.id, "session lease taken");
        Ok(Some(lost))
    }

    fn lock_held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_peers(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn holds(&self, session_id: &str) -> bool {
        self.lock_held().contains_key(session_id)
    }

    pub(crate) fn count(&self) -> usize {
        self.lock_held().len()
    }

    /// Sessions this coordinator owns.
    pub(crate) fn sessions(&self) -> Vec<String> {
        self.lock_held().keys().cloned().collect()
    }

    /// Coordinators up, this one included.
    pub(crate) fn live(&self) -> usize {
        let peers = self.lock_peers();
        peers.keys().filter(|id| **id != self.id).count() + 1
    }

    /// This coordinator's fair share: the sessions owned by all, over the coordinators up.
    pub(crate) fn fair_share(&self) -> usize {
        let peers = self.lock_peers();
        let mut total: u64 = peers
            .iter()
            .filter(|(id, _)| **id != self.id)
            .map(|(_, n)| *n)
            .sum();
        total += self.count() as u64;
        let live = peers.keys().filter(|id| **id != self.id).count() as u64 + 1;
        total.div_ceil(live) as usize
    }

    /// Gives a session's lease up (after its actor stopped): deleted, fenced
    /// on its revision, so the other coordinators see it free at once.
    pub(crate) async fn release(&self, session_id: &str) {
        let Some(held) = self.lock_held().remove(session_id) else {
            return;
        };
        let key = subjects::session_lease_key(session_id);
        if let Err(e) = self.kv.delete_expect_revision(&key, Some(held.rev)).await {
            tracing::warn!(session.id = %session_id, error = %e, "could not hand the session's lease over; it runs out on its own");
        }
    }

    /// Forgets a lease whose session stopped without handing it over (it
    /// was fenced out): nothing is renewed for it any more.
    pub(crate) fn forget(&self, session_id: &str) {
        self.lock_held().remove(session_id);
    }

    /// Renews every lease once; a lease refused (another coordinator took
    /// it) or not renewed for a whole TTL is lost: its session stops.
    async fn renew_all(&self) {
        let leases: Vec<(String, u64)> = self
            .lock_held()
            .iter()
            .map(|(id, held)| (id.clone(), held.rev))
            .collect();
        let renewals = leases.into_iter().map(|(session_id, rev)| async move {
            let key = subjects::session_lease_key(&session_id);
            let result = self
                .write(&key, Bytes::from(self.id.clone()), Some(rev))
                .await;
            (session_id, result)
        });
        let results: Vec<_> = futures::stream::iter(renewals)
            .buffer_unordered(64)
            .collect()
            .await;
        let now = Instant::now();
        let mut held = self.lock_held();
        for (session_id, result) in results {
            let Some(lease) = held.get_mut(&session_id) else {
                continue;
            };
            match result {
                Ok(Some(rev)) => {
                    lease.rev = rev;
                    lease.renewed = now;
                }
                Ok(None) => {
                    tracing::warn!(session.id = %session_id, "the session's lease was taken by another coordinator: the session stops here");
                    lease.lost.cancel();
                    held.remove(&session_id);
                }
                Err(e) if now.duration_since(lease.renewed) >= LEASE_TTL => {
                    tracing::warn!(session.id = %session_id, error = %e, "the session's lease could not be renewed in time: the session stops here");
                    lease.lost.cancel();
                    held.remove(&session_id);
                }
                Err(e) => {
                    tracing::warn!(session.id = %session_id, error = %e, "could not renew the session's lease; trying again");
                }
            }
        }
    }

    /// Says this coordinator is up, with how many sessions it owns.
    async fn announce(&self) {
        let key = subjects::coordinator_presence_key(&self.id);
        let count = self.count() as u64;
        self.lock_peers().insert(self.id.clone(), count);
        if let Err(e) = self.write(&key, Bytes::from(count.to_string()), None).await {
            tracing::warn!(error = %e, "could not say this coordinator is up");
        }
    }

    /// Renews the leases and the presence every [`RENEW_EVERY`] until `stop`.
    pub(crate) async fn keep(&self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(RENEW_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {
                    self.renew_all().await;
                    self.announce().await;
                }
            }
        }
    }

    /// Follows the other coordinators' presence keys.
    pub(crate) async fn follow_peers(&self, stop: CancellationToken) {
        loop {
            let mut watch = match self
                .kv
                .watch_with_history(subjects::ALL_COORDINATOR_PRESENCE_KEYS)
                .await
            {
                Ok(watch) => watch,
                Err(e) => {
                    tracing::warn!(error = %e, "could not watch the coordinators' presence; retrying");
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(RENEW_EVERY) => continue,
                    }
                }
            };
            loop {
                let entry = tokio::select! {
                    () = stop.cancelled() => return,
                    entry = watch.next() => entry,
                };
                let Some(Ok(entry)) = entry else { break };
                let Some(id) = entry.key.strip_prefix("coordinator.") else {
                    continue;
                };
                let mut peers = self.lock_peers();
                match entry.operation {
                    Operation::Put => {
                        let n = String::from_utf8_lossy(&entry.value).parse().unwrap_or(0);
                        peers.insert(id.to_owned(), n);
                    }
                    Operation::Delete | Operation::Purge => {
                        peers.remove(id);
                    }
                }
            }
        }
    }

    /// Sessions whose lease ran out or was handed over: each is sent on
    /// `free` with the revision a take is fenced on.
    pub(crate) async fn watch_free(
        &self,
        free: tokio::sync::mpsc::Sender<(String, u64)>,
        stop: CancellationToken,
    ) {
        loop {
            let mut watch = match self.kv.watch(subjects::ALL_SESSION_LEASE_KEYS).await {
                Ok(watch) => watch,
                Err(e) => {
                    tracing::warn!(error = %e, "could not watch the session leases; retrying");
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(RENEW_EVERY) => continue,
                    }
                }
            };
            loop {
                let entry = tokio::select! {
                    () = stop.cancelled() => return,
                    entry = watch.next() => entry,
                };
                let Some(Ok(entry)) = entry else { break };
                if entry.operation == Operation::Put {
                    continue;
                }
                let Some(session_id) = entry.key.strip_prefix("session.") else {
                    continue;
                };
                if free
                    .send((session_id.to_owned(), entry.revision))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }

    /// At a graceful stop: says this coordinator is gone.
    pub(crate) async fn withdraw(&self) {
        let key = subjects::coordinator_presence_key(&self.id);
        if let Err(e) = self.kv.delete(&key).await {
            tracing::warn!(error = %e, "could not withdraw this coordinator's presence; it runs out on its own");
        }
    }
}
