//! What the coordinator knows of the worker fleet: whether any worker of a
//! pool is up, asked through the workers' NATS micro service
//! (`$SRV.PING.arbiter-worker`; each answer names its pool in its metadata).
//! A summons to a pool nobody serves waits in the queue, silently; the
//! session tells the human instead of leaving them to guess. A summons the
//! Arbiter directs (a pool or a runtime it names) is checked against the
//! workers that answer (their `pool` and `runtime` metadata) before it is
//! routed: [`Fleet::offers`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
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
    /// serves `pool` with `runtime` (`None`: any) and the MCP servers
    /// `needs`: the answers stop being gathered once one does. `None` when
    /// the workers could not be asked.
    pub(crate) async fn offers(
        &self,
        client: &Client,
        pool: &str,
        runtime: Option<&str>,
        needs: &[String],
        urgent: bool,
    ) -> Option<Vec<Offer>> {
        let wanted = |o: &Offer| {
            o.pool == pool
                && runtime.is_none_or(|r| r == o.runtime)
                && (o.urgent || !urgent)
                && needs.iter().all(|n| o.mcp.contains(n))
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

/// How often the Arbiter's form is brought up to date with the fleet...
const FORM_REFRESH: Duration = Duration::from_secs(15);
/// ... and how often until a first worker answered (a coordinator usually
/// starts before its workers).
const FORM_FIRST: Duration = Duration::from_secs(1);
/// A pool and runtime seen this recently are still offered: a worker that
/// restarts, or misses one ping, does not take its pool out of the form.
const FORM_MEMORY: Duration = Duration::from_secs(600);

/// The Arbiter's reply form as the fleet last showed it (`rules/form.rs`):
/// the pools and runtimes a summons may name are those the workers offer,
/// asked every [`FORM_REFRESH`]. Each turn takes the current one.
pub(crate) struct Form {
    current: RwLock<Arc<serde_json::Value>>,
    /// `(pool, runtime)` pairs seen, and when last.
    seen: Mutex<HashMap<(String, String), Instant>>,
}

impl Form {
    pub(crate) fn new(schema: serde_json::Value) -> Self {
        Self {
            current: RwLock::new(Arc::new(schema)),
            seen: Mutex::default(),
        }
    }

    /// The form a turn sends.
    pub(crate) fn current(&self) -> Arc<serde_json::Value> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Takes what the workers that answered offer now; the form changes
    /// when what was seen within [`FORM_MEMORY`] does. True when it did.
    pub(crate) fn refresh(&self, config: &crate::Config, offers: &[Offer], now: Instant) -> bool {
        let seen: Vec<(String, String)> = {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            for offer in offers {
                seen.insert((offer.pool.clone(), offer.runtime.clone()), now);
            }
            seen.retain(|_, at| now.saturating_duration_since(*at) < FORM_MEMORY);
            seen.keys().cloned().collect()
        };
        let offer = crate::rules::form::Offer::of(config).with_fleet(config, &seen);
        let schema = Arc::new(crate::rules::form::arbiter_schema(&offer));
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if *current == schema {
            return false;
        }
        tracing::info!(
            pools = ?offer.pools,
            runtimes = ?offer.runtimes,
            "the Arbiter's form now offers what the workers do"
        );
        *current = schema;
        true
    }
}

/// Keeps `shared.form` up to date with the fleet, until aborted.
pub(crate) async fn keep_form(shared: Arc<crate::Shared>) {
    if shared.config.model.profile == arbiter_llm::Profile::Small {
        // The small form names no pool or runtime.
        return;
    }
    let mut answered = false;
    loop {
        match gather(&shared.bus.client, |_| false).await {
            Ok(offers) => {
                answered |= !offers.is_empty();
                shared.form.refresh(&shared.config, &offers, Instant::now());
            }
            Err(e) => tracing::debug!(error = %e, "could not ping the workers"),
        }
        tokio::time::sleep(if answered { FORM_REFRESH } else { FORM_FIRST }).await;
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
    /// The MCP servers it offers its Orchestrators (its `mcp` metadata, by
    /// name, comma-separated). None for a worker that does not say.
    pub mcp: Vec<String>,
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
                    let mcp = reply
                        .metadata
                        .get("mcp")
                        .map(|names| {
                            names
                                .split(',')
                                .map(str::trim)
                                .filter(|n| !n.is_empty())
                                .map(str::to_owned)
                                .collect()
                        })
                        .unwrap_or_default();
                    let offer = Offer { pool, runtime, urgent, mcp };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(pool: &str, runtime: &str) -> Offer {
        Offer {
            pool: pool.into(),
            runtime: runtime.into(),
            urgent: false,
            mcp: Vec::new(),
        }
    }

    fn pools(form: &Form) -> Option<Vec<String>> {
        form.current()["anyOf"]
            .as_array()?
            .iter()
            .find_map(|m| m["properties"]["pool"]["enum"].as_array().cloned())
            .map(|e| {
                e.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
    }

    /// The form follows what the workers offer: a pool seen stays offered
    /// for ten minutes after its last answer, then goes.
    #[test]
    fn the_form_follows_the_fleet_and_forgets_a_pool_gone_ten_minutes() {
        let config = crate::Config::default();
        let form = Form::new(crate::rules::form::arbiter_schema(
            &crate::rules::form::Offer::of(&config),
        ));
        let t0 = Instant::now();
        // Nobody answered yet: the form is the config's.
        assert!(!form.refresh(&config, &[], t0));
        assert!(form.refresh(
            &config,
            &[offer("default", "native"), offer("gpu", "native")],
            t0
        ));
        assert_eq!(pools(&form), Some(vec!["default".into(), "gpu".into()]));
        // The same again: no change.
        assert!(!form.refresh(&config, &[offer("gpu", "native")], t0));
        // The gpu worker misses pings for nine minutes: still offered.
        let default = [offer("default", "native")];
        assert!(!form.refresh(&config, &default, t0 + Duration::from_secs(540)));
        // Past ten minutes since it last answered: gone, and with one pool
        // left a summons has no `pool` to fill.
        assert!(form.refresh(&config, &default, t0 + Duration::from_secs(601)));
        assert_eq!(pools(&form), None);
        assert!(!form.current().to_string().contains("\"pool\""));
        // Every worker gone that long: the config's form again (any pool).
        assert!(form.refresh(&config, &[], t0 + Duration::from_secs(1_300)));
        assert!(form.current().to_string().contains("\"pool\""));
    }
}
