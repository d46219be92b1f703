//! What the coordinator knows of the worker fleet: whether any worker of a
//! pool is up, asked through the workers' NATS micro service
//! (`$SRV.PING.arbiter-worker`; each answer names its pool in its metadata).
//! A summons to a pool nobody serves waits in the queue, silently; the
//! session tells the human instead of leaving them to guess. A summons the
//! Arbiter directs (a pool or a runtime it names) is checked against the
//! workers that answer (their `pool` and `runtime` metadata) before it is
//! routed: [`Fleet::offers`].

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use arbiter_protocol::subjects;
use async_nats::Client;
use futures::StreamExt as _;
use serde::Deserialize;

/// How long the answers to one ping are gathered.
const PING_WINDOW: Duration = Duration::from_millis(750);
/// A pool seen served within this long is not asked about again.
const SEEN_FRESH: Duration = Duration::from_secs(10);
/// How long a ping nobody of the pool answered waits before it asks again:
/// a worker busy starting an Orchestrator, or reconnecting after a node of
/// the cluster died, can miss one window; a notice that no worker is up
/// is only given when two pings this far apart both found none.
const PING_AGAIN: Duration = Duration::from_secs(2);

/// Pools seen served, and when.
#[derive(Default)]
pub(crate) struct Fleet {
    seen: Mutex<HashMap<String, Instant>>,
}

impl Fleet {
    /// Whether a worker of `pool` answers. An error to ask counts as yes: a
    /// notice is only worth giving when it is known to be true.
    pub(crate) async fn pool_served(&self, client: &Client, pool: &str) -> bool {
        let fresh = self
            .lock()
            .get(pool)
            .is_some_and(|at| at.elapsed() < SEEN_FRESH);
        if fresh {
            return true;
        }
        for attempt in 0..2 {
            if attempt > 0 {
                tokio::time::sleep(PING_AGAIN).await;
            }
            match ping(client, pool).await {
                Ok(true) => {
                    self.lock().insert(pool.to_owned(), Instant::now());
                    return true;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "could not ping the workers");
                    return true;
                }
            }
        }
        false
    }

    /// What the workers that are up offer, enough to tell whether one
    /// serves `pool` with `runtime` (`None`: any): the answers stop being
    /// gathered once one does. `None` when the workers could not be asked.
    pub(crate) async fn offers(
        &self,
        client: &Client,
        pool: &str,
        runtime: Option<&str>,
        urgent: bool,
    ) -> Option<Vec<Offer>> {
        let wanted = |o: &Offer| {
            o.pool == pool && runtime.is_none_or(|r| r == o.runtime) && (o.urgent || !urgent)
        };
        match gather(client, wanted).await {
            Ok(offers) => Some(offers),
            Err(e) => {
                tracing::debug!(error = %e, "could not ping the workers");
                None
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Deserialize)]
struct PingReply {
    #[serde(default)]
    metadata: HashMap<String, String>,
}

/// What one worker that answered offers: its pool and its runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Offer {
    pub pool: String,
    /// `native` for a worker that does not say (older workers ran only it).
    pub runtime: String,
    /// It serves its pool's emergency lane (`summon.<pool>.urgent`): its
    /// `lanes` metadata names `urgent`. False for a worker that does not say.
    pub urgent: bool,
}

/// Pings the worker service and gathers what the answers offer, until one
/// is `enough` or the window closes.
async fn gather(
    client: &Client,
    enough: impl Fn(&Offer) -> bool,
) -> Result<Vec<Offer>, async_nats::Error> {
    let inbox = client.new_inbox();
    let mut replies = client.subscribe(inbox.clone()).await?;
    client
        .publish_with_reply(subjects::worker_service_ping(), inbox, "".into())
        .await?;
    let window = tokio::time::sleep(PING_WINDOW);
    tokio::pin!(window);
    let mut offers = Vec::new();
    loop {
        tokio::select! {
            _ = &mut window => return Ok(offers),
            reply = replies.next() => match reply {
                Some(reply) => {
                    let Ok(mut reply) = serde_json::from_slice::<PingReply>(&reply.payload) else {
                        continue;
                    };
                    let Some(pool) = reply.metadata.remove("pool") else {
                        continue;
                    };
                    let runtime = reply
                        .metadata
                        .remove("runtime")
                        .unwrap_or_else(|| "native".to_owned());
                    let urgent = reply
                        .metadata
                        .get("lanes")
                        .is_some_and(|lanes| lanes.split(',').any(|l| l.trim() == "urgent"));
                    let offer = Offer { pool, runtime, urgent };
                    let done = enough(&offer);
                    offers.push(offer);
                    if done {
                        return Ok(offers);
                    }
                }
                None => return Ok(offers),
            },
        }
    }
}

/// Pings the worker service; true as soon as a worker of `pool` answers.
async fn ping(client: &Client, pool: &str) -> Result<bool, async_nats::Error> {
    let offers = gather(client, |o| o.pool == pool).await?;
    Ok(offers.iter().any(|o| o.pool == pool))
}
