//! What the coordinator knows of the worker fleet: whether any worker of a
//! pool is up, asked through the workers' NATS micro service
//! (`$SRV.PING.arbiter-worker`; each answer names its pool in its metadata).
//! A summons to a pool nobody serves waits in the queue, silently; the
//! session tells the human instead of leaving them to guess.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_nats::Client;
use futures::StreamExt as _;
use serde::Deserialize;

/// The micro service name every worker registers under.
const WORKER_SERVICE: &str = "arbiter-worker";
/// How long the answers to one ping are gathered.
const PING_WINDOW: Duration = Duration::from_millis(750);
/// A pool seen served within this long is not asked about again.
const SEEN_FRESH: Duration = Duration::from_secs(10);

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
        match ping(client, pool).await {
            Ok(true) => {
                self.lock().insert(pool.to_owned(), Instant::now());
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::debug!(error = %e, "could not ping the workers");
                true
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

/// Pings the worker service; true as soon as a worker of `pool` answers.
async fn ping(client: &Client, pool: &str) -> Result<bool, async_nats::Error> {
    let inbox = client.new_inbox();
    let mut replies = client.subscribe(inbox.clone()).await?;
    client
        .publish_with_reply(format!("$SRV.PING.{WORKER_SERVICE}"), inbox, "".into())
        .await?;
    let window = tokio::time::sleep(PING_WINDOW);
    tokio::pin!(window);
    loop {
        tokio::select! {
            _ = &mut window => return Ok(false),
            reply = replies.next() => match reply {
                Some(reply) => {
                    let serves = serde_json::from_slice::<PingReply>(&reply.payload)
                        .is_ok_and(|r| r.metadata.get("pool").is_some_and(|p| p == pool));
                    if serves {
                        return Ok(true);
                    }
                }
                None => return Ok(false),
            },
        }
    }
}
