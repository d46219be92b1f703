//! Where summonses come from: the pool's two consumers on `ARBITER_SUMMONS`,
//! `urgent-<pool>` (emergencies, taken first) and `pool-<pool>` (the queue),
//! fetched one at a time for a slot that is free and left unacknowledged: a
//! summons is its Orchestrator's lease (`lease.rs`). A consumer deleted under
//! the worker is made again; a fetch failing through a NATS election is
//! retried quietly for [`arbiter_bus::RIDE_OUT`]; a stream deleted under the
//! worker stops it, saying which.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use arbiter_bus::{Bus, BusError};
use arbiter_protocol::roles::NatsRole;
use arbiter_protocol::{Summon, subjects};
use async_nats::Subscriber;
use async_nats::jetstream::consumer::{PullConsumer, pull};
use async_nats::jetstream::{AckKind, Message};
use futures::StreamExt;
use tokio::sync::OwnedSemaphorePermit;

use crate::slots::Slots;
use crate::{Result, Shared, js_error, lease};

/// How long a fetch waits for a summons before asking again.
const FETCH_EXPIRY: Duration = Duration::from_secs(5);
/// How long a look in the emergency lane made on a wake-up waits for the
/// emergency to be stored: a core subscriber gets a message before the
/// server has stored it, and a look that asks for no wait may find the lane
/// empty and leave the emergency to the next pool fetch's end (up to
/// [`FETCH_EXPIRY`]). The wait ends as soon as the emergency is there.
const URGENT_STORE_WAIT: Duration = Duration::from_millis(250);

/// A pool's two summons consumers: `pool-<pool>` for the queue,
/// `urgent-<pool>` for emergencies, which are taken first.
#[derive(Debug, Clone, Copy)]
enum Lane {
    Queued,
    Urgent,
}

/// A summons to claim into the slot it was fetched for.
pub(crate) struct Claim {
    pub summon: Summon,
    /// Left unacknowledged: the Orchestrator's lease.
    pub msg: Message,
    pub permit: OwnedSemaphorePermit,
}

/// What [`Summonses::next`] came back with.
pub(crate) enum Next {
    Claim(Box<Claim>),
    /// The slot went to a parked Orchestrator that has input.
    HandedOver,
    /// Shut down.
    Shutdown,
    /// A stream this worker uses was deleted.
    Gone(BusError),
}

/// The pool's consumers and what the worker knows of its emergency lane.
pub(crate) struct Summonses {
    queued: PullConsumer,
    /// `None` when this worker's credential may not read the lane.
    urgent: Option<PullConsumer>,
    /// Core messages on the lane's subject: an emergency was published.
    urgent_wake: Subscriber,
    /// Whether the lane may hold an emergency: at start (a backlog), after a
    /// wake-up or a quiet fetch; not after the lane was found empty, so that
    /// a claim costs no extra round trip.
    urgent_maybe: bool,
    /// Whether that look follows a wake-up (it then waits for the store).
    urgent_woken: bool,
    /// Since when fetches fail: quiet for `RIDE_OUT` (a NATS leader election
    /// fails them for 4–9 s), loud after.
    failing_since: Option<Instant>,
}

impl Summonses {
    /// Opens the pool's consumers (the queue's `ack_wait` set to `lease`)
    /// and returns them with the lease in force.
    pub(crate) async fn open(bus: &Bus, pool: &str, lease: Duration) -> Result<(Self, Duration)> {
        let (queued, lease) = arbiter_bus::setup::guarded(
            &bus.alarms,
            NatsRole::Worker,
            pool_consumer(bus, pool, lease, Lane::Queued),
        )
        .await?;
        // Emergencies: their own consumer, taken from before the queue, and
        // a core subscription on their subject that wakes a worker waiting
        // on it. A credential issued before the lane existed may not read
        // it: the worker then serves the queue alone and does not announce
        // the lane, so emergencies reach it in turn.
        let urgent = match arbiter_bus::setup::guarded(
            &bus.alarms,
            NatsRole::Worker,
            pool_consumer(bus, pool, lease, Lane::Urgent),
        )
        .await
        {
            Ok((urgent, _)) => Some(urgent),
            Err(e) => {
                tracing::warn!(error = %e, pool, "the emergency lane cannot be read (a credential issued before it existed?): emergencies reach this worker in turn; issue the worker's credential again (arbiter-admin issue worker NAME) to serve them first");
                None
            }
        };
        let urgent_wake = bus
            .client
            .subscribe(subjects::summon_urgent(pool))
            .await
            .map_err(|e| js_error("subscribing to the emergency lane", e))?;
        let summonses = Self {
            queued,
            urgent,
            urgent_wake,
            urgent_maybe: true,
            urgent_woken: false,
            failing_since: None,
        };
        Ok((summonses, lease))
    }

    /// Whether this worker serves the emergency lane (its presence says so).
    pub(crate) fn serves_urgent(&self) -> bool {
        self.urgent.is_some()
    }

    /// Holding a free slot: exactly one summons for it, an emergency first;
    /// or the slot handed to a parked Orchestrator that has input. Summonses
    /// this worker must not claim (a duplicate, another runtime's) are dealt
    /// with here; one delivered again to the worker that runs its
    /// Orchestrator renews that Orchestrator's lease.
    pub(crate) async fn next<F: Future<Output = ()>>(
        &mut self,
        shared: &Shared,
        slots: &Slots,
        leases: &lease::Registry,
        mut permit: OwnedSemaphorePermit,
        shutdown: &mut Pin<&mut F>,
    ) -> Next {
        let pool = shared.config.pool.as_str();
        loop {
            let lane_first = match &self.urgent {
                Some(urgent) if self.urgent_maybe => {
                    let wait = std::mem::take(&mut self.urgent_woken).then_some(URGENT_STORE_WAIT);
                    fetch_one(urgent, wait).await
                }
                _ => Ok(None),
            };
            let fetched = match lane_first {
                Ok(Some(found)) => Ok(Some(found)),
                other => {
                    self.urgent_maybe = false;
                    if let Err(e) = other {
                        tracing::debug!(error = %e, "fetching from the emergency lane failed; the queue is served");
                        self.remake(shared, Lane::Urgent).await;
                    }
                    tokio::select! {
                        () = shutdown.as_mut() => return Next::Shutdown,
                        // An emergency published meanwhile: ask again, lane
                        // first. (A summons the server was sending to this
                        // fetch just then comes again after the lease.)
                        Some(_) = self.urgent_wake.next() => {
                            self.urgent_maybe = true;
                            self.urgent_woken = true;
                            continue;
                        }
                        // A summons the server was sending just then comes
                        // again after the lease; a parked Orchestrator would
                        // wait up to a whole fetch otherwise.
                        () = slots.wanted() => match slots.hand_over(permit) {
                            Some(kept) => {
                                permit = kept;
                                continue;
                            }
                            None => return Next::HandedOver,
                        },
                        fetched = fetch_one(&self.queued, Some(FETCH_EXPIRY)) => fetched,
                    }
                }
            };
            if arbiter_bus::metrics::on()
                && let Ok(info) = self.queued.get_info().await
            {
                // What waits in the pool after this fetch (exported only).
                arbiter_bus::metrics::summons_pending(pool, info.num_pending);
            }
            match fetched {
                Ok(Some((summon, msg))) => {
                    if let Some(msg) = claimable(shared, leases, &summon, msg).await {
                        return Next::Claim(Box::new(Claim {
                            summon,
                            msg,
                            permit,
                        }));
                    }
                }
                Ok(None) => {
                    self.failing_since = None;
                    // A quiet fetch: look in the lane again, in case a
                    // wake-up was missed (a reconnect).
                    self.urgent_maybe = true;
                }
                Err(e) => {
                    let since = *self.failing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() < arbiter_bus::RIDE_OUT {
                        tracing::debug!(error = %e, "fetching summons failed (a NATS leader election?); retrying");
                    } else {
                        tracing::warn!(error = %e, failing_for = ?since.elapsed(), "fetching summons failed; retrying");
                    }
                    // Deleted under us: never spin on it.
                    match arbiter_bus::setup::missing_stream(&shared.bus, NatsRole::Worker).await {
                        Ok(Some(stream)) => {
                            tracing::error!(%stream, "a stream this worker uses was deleted; stopping");
                            return Next::Gone(BusError::Deleted { stream });
                        }
                        Ok(None) => self.remake(shared, Lane::Queued).await,
                        Err(_) => {}
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Makes the lane's consumer again if it was deleted (the stream being
    /// there); keeps the one it has otherwise.
    async fn remake(&mut self, shared: &Shared, lane: Lane) {
        let pool = shared.config.pool.as_str();
        let name = match lane {
            Lane::Queued => subjects::pool_consumer(pool),
            Lane::Urgent => subjects::urgent_consumer(pool),
        };
        if !pool_consumer_missing(&shared.bus, &name).await {
            return;
        }
        match (
            lane,
            pool_consumer(&shared.bus, pool, shared.lease, lane).await,
        ) {
            (Lane::Queued, Ok((again, _))) => {
                tracing::warn!(
                    pool,
                    "the pool's summons consumer was deleted; made it again"
                );
                self.queued = again;
            }
            (Lane::Urgent, Ok((again, _))) => {
                tracing::warn!(
                    pool,
                    "the pool's emergency consumer was deleted; made it again"
                );
                self.urgent = Some(again);
            }
            (Lane::Queued, Err(e)) => {
                tracing::warn!(error = %e, "could not make the pool's summons consumer again")
            }
            (Lane::Urgent, Err(_)) => {}
        }
    }
}

/// The fetched summons back when it is one for this worker to claim. One delivered
/// again to the worker that runs its Orchestrator (its lease ran out: a
/// server restart, a stall) renews that lease; another summons of an
/// Orchestrator this worker runs is a duplicate (see `state::claim`), acked;
/// one for another runtime, or needing an MCP server this worker does not
/// declare, is handed back for a worker that has it.
async fn claimable(
    shared: &Shared,
    leases: &lease::Registry,
    summon: &Summon,
    msg: Message,
) -> Option<Message> {
    match leases.get(&summon.orch_id) {
        Some(held) if held.seq() == lease::stream_seq(&msg) => {
            tracing::info!(orch.id = %summon.orch_id, "summons delivered again to its holder; lease renewed");
            held.adopt(msg);
            None
        }
        Some(_) => {
            tracing::warn!(orch.id = %summon.orch_id, "a second summons of an Orchestrator this worker runs; dropped as a duplicate");
            if let Err(e) = msg.double_ack().await {
                tracing::warn!(error = %e, "could not acknowledge the duplicate summons; it comes back and is dropped again");
            }
            None
        }
        None if !shared.config.runtime.offers(summon.runtime.as_deref()) => {
            tracing::warn!(orch.id = %summon.orch_id, wanted = summon.runtime.as_deref().unwrap_or_default(), runtime = %shared.config.runtime, "a summons for another runtime; not claimed, handed back");
            let _ = msg.ack_with(AckKind::Nak(Some(shared.lease))).await;
            None
        }
        None if let Some(missing) = summon
            .needs
            .iter()
            .find(|n| !shared.config.mcp_servers.iter().any(|s| &s.name == *n)) =>
        {
            tracing::warn!(orch.id = %summon.orch_id, %missing, "a summons needing an MCP server this worker does not have; not claimed, handed back");
            let _ = msg.ack_with(AckKind::Nak(Some(shared.lease))).await;
            None
        }
        None => Some(msg),
    }
}

/// The pool's shared consumer, with `ack_wait` set to the lease; returns it
/// with the lease actually in force. A consumer made by an older worker (or
/// with another lease) is updated; if that fails, its own `ack_wait` is used.
async fn pool_consumer(
    bus: &Bus,
    pool: &str,
    lease: Duration,
    lane: Lane,
) -> Result<(PullConsumer, Duration)> {
    let (name, config) = match lane {
        Lane::Queued => (
            subjects::pool_consumer(pool),
            arbiter_bus::setup::pool_consumer_config(pool, lease),
        ),
        Lane::Urgent => (
            subjects::urgent_consumer(pool),
            arbiter_bus::setup::urgent_consumer_config(pool, lease),
        ),
    };
    let stream = bus
        .js
        .get_stream(subjects::SUMMONS_STREAM)
        .await
        .map_err(|e| js_error("opening the summons stream", e))?;
    let consumer: PullConsumer = match stream.get_consumer::<pull::Config>(&name).await {
        Ok(existing) => {
            let have = &existing.cached_info().config;
            if have.ack_wait == lease
                && have.max_ack_pending == arbiter_bus::setup::POOL_MAX_ACK_PENDING
            {
                existing
            } else {
                match stream.update_consumer(config).await {
                    Ok(updated) => {
                        tracing::info!(?lease, "pool consumer updated to this worker's lease");
                        updated
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not update the pool consumer; using its lease as it is");
                        existing
                    }
                }
            }
        }
        Err(_) => stream
            .get_or_create_consumer(&name, config)
            .await
            .map_err(|e| js_error("creating the pool consumer", e))?,
    };
    let in_force = match consumer.cached_info().config.ack_wait {
        // Unset means the server's default.
        d if d.is_zero() => Duration::from_secs(30),
        d => d,
    };
    Ok((consumer, in_force))
}

/// Whether the summons consumer `name` is gone (the stream being there).
async fn pool_consumer_missing(bus: &Bus, name: &str) -> bool {
    let Ok(stream) = bus.js.get_stream(subjects::SUMMONS_STREAM).await else {
        return false;
    };
    stream
        .get_consumer::<pull::Config>(name)
        .await
        .is_err_and(|e| e.to_string().to_lowercase().contains("not found"))
}

/// One fetch of at most one summons, left unacknowledged: it becomes the
/// Orchestrator's lease. A malformed one is logged, terminated (never
/// redelivered) and skipped. `wait`: how long to wait for one; `None`:
/// only what is there now.
async fn fetch_one(
    consumer: &PullConsumer,
    wait: Option<Duration>,
) -> Result<Option<(Summon, Message)>> {
    let fetch = consumer.fetch().max_messages(1);
    let fetch = match wait {
        Some(wait) => fetch.expires(wait),
        None => fetch,
    };
    let mut batch = fetch
        .messages()
        .await
        .map_err(|e| js_error("fetching a summons", e))?;
    while let Some(next) = batch.next().await {
        let msg = next.map_err(|e| js_error("fetching a summons", e))?;
        let subject = msg.subject.to_string();
        if let Some(stream) = arbiter_bus::relayed(msg.headers.as_ref()) {
            tracing::error!(
                subject,
                stream,
                "summons stored by a direct get's answer, not published by a coordinator, rejected"
            );
            let _ = msg.ack_with(AckKind::Term).await;
            continue;
        }
        match arbiter_bus::decode::<Summon>(&subject, &msg.payload) {
            Ok(summon)
                if subjects::is_valid_token(&summon.orch_id)
                    && subjects::is_valid_token(&summon.session_id) =>
            {
                return Ok(Some((summon, msg)));
            }
            Ok(_) => {
                tracing::error!(
                    subject,
                    "summons with an invalid orch or session id rejected"
                );
                let _ = msg.ack_with(AckKind::Term).await;
            }
            Err(error) => {
                tracing::error!(subject, %error, "malformed summons rejected");
                let _ = msg.ack_with(AckKind::Term).await;
            }
        }
    }
    Ok(None)
}
